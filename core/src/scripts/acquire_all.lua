-- ACQUIRE_ALL: one lease on each of several subjects, all or nothing (a
-- request that falls under a tenant's, a route's and the service's limit
-- holds a slot of each). Every subject is admitted as ACQUIRE admits it,
-- at one server instant, before any is written: if one refuses, none is
-- taken, and there is no moment in which a slot is held on one subject and
-- refused on another.
--
-- KEYS: six per subject, ACQUIRE's (lease set, tombstone, fencing counter,
--       wait queue, waiters' expiries, held hash): KEYS[6i-5] ... KEYS[6i]
--       for the i-th. In a cluster all of them share one slot. Each lease
--       set at most once (two leases of one subject would each be admitted
--       against the same room).
-- ARGV: six per subject, ACQUIRE's (expiry, limit, lease id, valid-until,
--       recovery hold key or '', fencing '1' or '0'): ARGV[6i-5] ... ARGV[6i].
--
-- Returns {status, id, token, ...}, one triple per subject in the order
-- given, then the units the prunes reclaimed (ACQUIRE_ACROSS's shape). All
-- statuses are 1 (granted) or none is: a subject that refused answers as
-- ACQUIRE would (0 full, -1 tombstoned, -2 stale, -3 recovering), the
-- others -4 (withheld: admitted, not taken because another refused).
-- Every argument is checked before anything is written.
local n, expiries, limits, valid, fenced =
  read_acquires('ACQUIRE_ALL takes six keys and six arguments per subject')
for i = 2, n do
  for j = 1, i - 1 do
    if KEYS[6 * (i - 1) + 1] == KEYS[6 * (j - 1) + 1] then
      -- Returned, not raised: nothing is written yet, and the caller
      -- reads the reason as it is.
      return redis.error_reply('ERR inflight: ACQUIRE_ALL takes each subject once')
    end
  end
end
local now, time = server_time()
local statuses, lives, fresh, reclaimed, refused = {}, {}, {}, 0, false
for i = 1, n do
  local k = 6 * (i - 1)
  local status, freed
  status, freed, lives[i], fresh[i] = admit_one(
    KEYS[k + 1], KEYS[k + 2], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6],
    limits[i], ARGV[k + 3], valid[i], expiries[i], ARGV[k + 5], now)
  statuses[i] = status
  reclaimed = reclaimed + freed
  refused = refused or status ~= 1
end
-- Every token before any lease: a fence key of a foreign type fails the
-- call while nothing but counters is written (a counter that moved on
-- without a grant costs nothing: tokens need only rise).
local tokens = {}
for i = 1, n do
  local k = 6 * (i - 1)
  tokens[i] = (not refused and fenced[i]) and next_tokens(KEYS[k + 3], time, expiries[i] - now, 1) or 0
end
local reply = {}
for i = 1, n do
  local k = 6 * (i - 1)
  local id, status, token = ARGV[k + 3], statuses[i], tokens[i]
  if refused then
    if status == 1 then
      status = -4
    end
  else
    local _, pruned = grant_one(KEYS[k + 1], KEYS[k + 3], expiries[i], ARGV[k + 1], id, false, now, time, lives[i], fresh[i])
    reclaimed = reclaimed + pruned
  end
  reply[#reply + 1] = status
  reply[#reply + 1] = id
  reply[#reply + 1] = token
end
reply[#reply + 1] = reclaimed
return reply
