-- RELEASE: give leases back (all of one subject), and hand the freed units
-- to the subject's waiters.
--
-- KEYS[1] lease set         KEYS[4] held hash (`avg` hold, waiters' limits)
-- KEYS[2] wait queue        KEYS[5] wake channel
-- KEYS[3] waiters' expiries KEYS[6] fencing counter
-- ARGV[1] how long the leases were held on average (ms); '' when unknown (a
--         recovery sending lost releases again: no hold time to learn from)
-- ARGV[2] the recovery hold key ('' for none; standalone only)
-- ARGV[3...] the lease ids
--
-- Returns how many members (units) were removed. Idempotent. A client
-- with waiters on the subject gives its leases back by this script alone;
-- elsewhere by a plain `ZREM` and `EXISTS` of the queue, running this
-- script on the same ids only when the queue exists (it then removes
-- nothing, and hands over what is free). While the subject has had
-- waiters lately, the hold time is folded into its average (each release
-- weighing 1/8: the waiting script's estimate). Only when the subject has
-- a queue does it do more. Then the ids given back leave the queue
-- (a failover to a lagging replica can bring back the entry of a waiter
-- served since), and the free units
-- go to the waiters the fairness rule lets through (`lib/queue.lua`): out of
-- the queue, into the lease set until the waiter's entry would have expired
-- (a reservation its client confirms at once), with the next fencing
-- tokens. The slot never stands free between two holders. It publishes on
-- the subject's shard channel `H id token id token...`, one pair per waiter
-- served, so each waiter's client hands the permit to its caller without
-- another round trip; and `N id...` for waiters it could not judge (they
-- check on their own). A waiter whose client died holds its reservation
-- for its lifetime at most (at most the lease TTL: the client refuses a
-- longer lifetime). While the recovery hold is set (the fleet is writing
-- back leases a loss took) it hands over nothing (see below).
local leases, queue, waiters, holds, wake, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local held_ms = ARGV[1] ~= '' and integer(ARGV[1], 'hold time', 0) or nil
local hold = ARGV[2]
local ids = {}
local weighted = false
-- The units the ids held: how many waiters are worth a look.
local freed = 0
for i = 3, #ARGV do
  ids[#ids + 1] = ARGV[i]
  local w = weight(ARGV[i])
  freed = freed + w
  if w > 1 then
    weighted = true
  end
end
if #ids == 0 then
  return 0
end
local removed = 0
if weighted then
  for _, id in ipairs(ids) do
    removed = removed + redis.call('ZREM', leases, unpack((units(id))))
  end
else
  removed = redis.call('ZREM', leases, unpack(ids))
end
-- The subject has had waiters lately while its held hash lives (as long
-- as any of them may): the hold time counts for their estimate then, even
-- when they were served before this call (by their own check).
if redis.call('EXISTS', queue, holds) == 0 then
  return removed
end
if held_ms then
  local average = tonumber(redis.call('HGET', holds, 'avg') or '')
  redis.call('HSET', holds, 'avg', string.format('%.3f', average and average + (held_ms - average) / 8 or held_ms))
end
local queued_for = redis.call('PTTL', queue)
if queued_for == -2 then
  return removed
end
-- The held hash lives as long as the queue (it may be new here), and
-- expires even beside a queue in its last millisecond (a PTTL of 0) or
-- one without an expiry.
cover(holds, math.max(queued_for, 1))
-- An id given back waits for nothing (one found in the queue is an entry
-- a failover brought back).
local back = redis.call('ZMSCORE', queue, unpack(ids))
local stale = {}
for i, id in ipairs(ids) do
  if back[i] then
    stale[#stale + 1] = id
  end
end
if #stale > 0 then
  leave_queue(queue, waiters, holds, unpack(stale))
  if redis.call('EXISTS', queue) == 0 then
    return removed
  end
end
local now, time = server_time()
forget_dead(queue, waiters, holds, now)
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
-- While the recovery hold is set, nothing is handed over: the lease set
-- may still miss leases that count against the limit, and a hand-over is a
-- grant like any other. (Handing over only the units removed would keep the
-- count for waiters of the released leases' limit, but not for one with a
-- lower limit, which the missing leases may already fill.) The waiters
-- check on their own, and are refused as every acquire is until it lifts.
if hold ~= '' and redis.call('EXISTS', hold) == 1 then
  return removed
end
local served, named, holding = serve(queue, holds, leases, redis.call('ZCARD', leases), freed)
if #holding > 0 then
  leave_queue(queue, waiters, holds, unpack(holding))
end
local reserved
served, reserved = with_expiries(queue, waiters, holds, served)
if #served > 0 then
  local longest = 1
  for i, id in ipairs(served) do
    longest = math.max(longest, reserved[i] - now)
  end
  local token = next_tokens(fence, time, longest, #served)
  local message = {'H'}
  for i, id in ipairs(served) do
    add_units(leases, reserved[i], id)
    message[#message + 1] = id
    message[#message + 1] = string.format('%.0f', token + i - 1)
  end
  leave_queue(queue, waiters, holds, unpack(served))
  cover(leases, longest)
  redis.call('SPUBLISH', wake, table.concat(message, ' '))
end
if #named > 0 then
  redis.call('SPUBLISH', wake, 'N ' .. table.concat(named, ' '))
end
return removed
