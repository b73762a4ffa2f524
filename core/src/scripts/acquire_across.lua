-- ACQUIRE_ACROSS: fail-fast acquires of different subjects (or of one
-- subject under different limits) in one call, each exactly as ACQUIRE
-- takes it, one after another, at one server instant. Redis's thread pays
-- for every script call (its dispatch, the Lua VM, the reply) as much as
-- for the work inside, so tenants whose acquires meet in one write share
-- that cost, as acquires of one subject share it in ACQUIRE_MANY.
--
-- KEYS: six per acquire, ACQUIRE's (lease set, tombstone, fencing counter,
--       wait queue, waiters' expiries, held hash): KEYS[6i-5] ... KEYS[6i]
--       for the i-th acquire. In a cluster all of them share one slot.
-- ARGV: six per acquire, ACQUIRE's (expiry, limit, lease id, valid-until,
--       recovery hold key or '', fencing '1' or '0'): ARGV[6i-5] ... ARGV[6i].
--
-- Returns {status, id, token, ...}, one triple per acquire in the order
-- given, with ACQUIRE's statuses, then the units the prunes reclaimed in
-- all (ACQUIRE_MANY's shape). Every argument of every acquire is checked
-- before anything is written: a call refused halfway would leave grants
-- no reply names.
local n, expiries, limits, valid, fenced =
  read_acquires('ACQUIRE_ACROSS takes six keys and six arguments per acquire')
local now, time = server_time()
local reply, reclaimed = {}, 0
for i = 1, n do
  -- Six keys and six arguments per acquire: one offset for both.
  local k = 6 * (i - 1)
  local id = ARGV[k + 3]
  local status, token, freed = acquire_one(
    KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6],
    expiries[i], ARGV[k + 1], limits[i], id, valid[i], ARGV[k + 5], fenced[i], now, time)
  reply[#reply + 1] = status
  reply[#reply + 1] = id
  reply[#reply + 1] = token
  reclaimed = reclaimed + freed
end
reply[#reply + 1] = reclaimed
return reply
