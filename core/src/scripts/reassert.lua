-- REASSERT: write back a lease its holder still has, after the server may
-- have lost it (an empty restart, a failover, a flush). Idempotent: a lease
-- that survived keeps its units, and gets its holder's expiry back if the
-- loss took a renewal. It ignores the recovery hold, which exists for it.
--
-- KEYS[1] lease set       KEYS[4] waiters' expiries
-- KEYS[2] this tombstone  KEYS[5] held hash (waiters' limits)
-- KEYS[3] wait queue
-- ARGV[1] lease id
-- ARGV[2] its expiry as its holder counts it, server ms (absolute: a
--         write-back that reaches Redis late does not outlive the lease)
-- ARGV[3] the limit it was granted under
-- ARGV[4] valid-until, server ms
--
-- Returns {status, id}: 1 it survived, 2 written back, 3 written back and
-- the subject now holds more units than the limit (an over-admission during
-- the loss, detected), -1 refused (its holder gave it back since, with a
-- tombstone, because this very write-back might still arrive), -2 stale (ran
-- after valid-until or after the expiry; nothing written). A holder's lease
-- waits for nothing, so a queue entry the loss brought back for its id goes.
local leases, tombstone, queue, waiters, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
local expiry = integer(ARGV[2], 'expiry', 1)
local limit = integer(ARGV[3], 'limit', 1)
local valid_until = integer(ARGV[4], 'valid-until', 0)
weight(id)
local now = server_time()
if now > valid_until or expiry <= now then
  return {-2, id}
end
if redis.call('EXISTS', tombstone) == 1 then
  return {-1, id}
end
leave_queue(queue, waiters, holds, id)
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if redis.call('ZSCORE', leases, id) then
  add_units(leases, expiry, id, 'XX', 'GT')
  cover(leases, expiry - now)
  return {1, id}
end
add_units(leases, expiry, id)
cover(leases, expiry - now)
if redis.call('ZCARD', leases) > limit then
  return {3, id}
end
return {2, id}
