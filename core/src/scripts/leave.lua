-- LEAVE: a waiter leaves the queue (its caller gave up, or its deadline
-- passed), and the waiters that fit now are woken by name: it may have
-- given back a slot, or blocked them.
--
-- KEYS[1] wait queue         KEYS[4] lease set
-- KEYS[2] waiters' expiries  KEYS[5] held hash (waiters' limits)
-- KEYS[3] wake channel
-- ARGV[1] the waiter's id
--
-- Returns 1 if it was queued or held a slot a release handed it (its caller
-- left before the message came), else 0.
local queue, waiters, wake, leases, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
local members = units(id)
local removed = redis.call('ZREM', queue, id) + redis.call('ZREM', leases, unpack(members))
redis.call('ZREM', waiters, id)
redis.call('HDEL', holds, id)
if removed > 0 and redis.call('EXISTS', queue) == 1 then
  forget_expired(queue, waiters, holds, leases, server_time())
  wake_who_fits(queue, waiters, holds, leases, wake, #members)
end
return math.min(removed, 1)
