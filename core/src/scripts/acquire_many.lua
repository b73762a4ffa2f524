-- ACQUIRE_MANY: several acquires of one subject and limit in one call, each
-- as ACQUIRE would take it, at one server instant. Redis's thread pays
-- mostly per command, so a batch costs a fraction of as many single calls.
--
-- KEYS[1] lease set          KEYS[4] waiters' expiries
-- KEYS[2] fencing counter    KEYS[5] held hash (waiters' limits)
-- KEYS[3] wait queue         KEYS[6...] each id's tombstone, in the ids' order
-- ARGV[1] expiry, server ms  ARGV[3] valid-until, server ms
-- ARGV[2] limit              ARGV[4] recovery hold key ('' for none)
-- ARGV[5...] the lease ids (ARGV[i]'s tombstone is KEYS[i + 1])
--
-- Returns {status, id, token, ...}, one triple per id, with ACQUIRE's
-- statuses and fairness to queued waiters, then the units reclaimed. Grants
-- take increasing tokens in the order of the ids. An id given twice is one
-- acquire: the repeat answers as the first did, and takes nothing more.
local leases, fence, queue, waiters, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local expiry = integer(ARGV[1], 'expiry', 1)
local limit = integer(ARGV[2], 'limit', 1)
local valid_until = integer(ARGV[3], 'valid-until', 0)
local hold = ARGV[4]
if #KEYS ~= #ARGV + 1 then
  error({err = 'ERR inflight: ACQUIRE_MANY takes one tombstone per id'})
end
-- The grants go out in one `ZADD`, whose arguments Lua unpacks: a batch
-- past what `unpack` takes would fail after the first writes. The client
-- sends at most 16.
if #ARGV - 4 > 1000 then
  error({err = 'ERR inflight: ACQUIRE_MANY takes at most 1000 ids'})
end
for i = 5, #ARGV do
  weight(ARGV[i])
end
local now, time = server_time()
local reply = {}
if now > valid_until or expiry <= now then
  for i = 5, #ARGV do
    reply[#reply + 1] = -2
    reply[#reply + 1] = ARGV[i]
    reply[#reply + 1] = 0
  end
  reply[#reply + 1] = 0
  return reply
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local live = redis.call('ZCARD', leases)
-- The queue's claim is walked once for the batch (one limit): `open` says
-- whether any newcomer may pass the waiters, `live` then counts what those
-- served before them would hold, and `room` how many units newcomers may
-- take before one of those waiters would no longer fit under its own limit.
local open, room = true, math.huge
if redis.call('EXISTS', queue) == 1 then
  local _
  open, live, _, room = claim(queue, holds, live, prune_waiters(queue, waiters, holds, now), 1, limit)
end
local held = hold ~= '' and redis.call('EXISTS', hold) == 1
local first, granted, plain, heavy, grew = {}, 0, {}, {}, false
for i = 5, #ARGV do
  local id, status = ARGV[i], 1
  if first[id] then
    status = reply[first[id]]
  elseif redis.call('EXISTS', KEYS[i + 1]) == 1 then
    status = -1
  elseif redis.call('ZSCORE', leases, id) then
    status = 1
  elseif held then
    status = -3
  else
    local w = weight(id)
    if not open or live + w > limit or w > room then
      status = 0
    else
      -- Written once every answer is known and the tokens are drawn:
      -- weight-1 leases in one `ZADD`.
      live, grew, room = live + w, true, room - w
      if w == 1 then
        -- The expiry as given (checked by `integer`): Lua would format
        -- the number anew for each command.
        plain[#plain + 1] = ARGV[1]
        plain[#plain + 1] = id
      else
        heavy[#heavy + 1] = id
      end
    end
  end
  if not first[id] then
    first[id] = #reply + 1
    if status == 1 then
      granted = granted + 1
    end
  end
  reply[#reply + 1] = status
  reply[#reply + 1] = id
  reply[#reply + 1] = 0
end
-- The tokens before the leases: a fence key of a foreign type fails the
-- call before anything else is written.
local token = granted > 0 and next_tokens(fence, time, expiry - now, granted)
for _, id in ipairs(heavy) do
  add_units(leases, ARGV[1], id)
end
if #plain > 0 then
  redis.call('ZADD', leases, unpack(plain))
end
if grew then
  cover(leases, expiry - now)
end
if granted > 0 then
  local given = {}
  for i = 1, #reply, 3 do
    if reply[i] == 1 then
      local id = reply[i + 1]
      if not given[id] then
        given[id] = token
        token = token + 1
      end
      reply[i + 2] = given[id]
    end
  end
end
reply[#reply + 1] = reclaimed
return reply
