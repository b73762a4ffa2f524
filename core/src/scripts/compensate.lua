-- COMPENSATE: release a lease no caller got and, while the request that may
-- have made it can still run, leave a tombstone so that it takes nothing
-- when it does.
--
-- KEYS[1] lease set   KEYS[4] waiters' expiries
-- KEYS[2] tombstone   KEYS[5] wake channel
-- KEYS[3] wait queue  KEYS[6] held hash (waiters' limits)
-- ARGV[1] until when that request may run, server ms (0: it has run, its
--         reply was read, so no tombstone)
-- ARGV[2] lease id
--
-- Returns the id. The tombstone lives until that request turns stale (or
-- a later one of the same id, if another compensation named it): after
-- that its script refuses it anyway, so no tombstone outlives its use. The
-- id also leaves the wait queue (a waiter whose caller left may be queued
-- rather than granted), and when that freed anything and the subject has a
-- queue, the waiters that fit now are woken by name.
local leases, tombstone, queue, waiters, wake, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local valid_until = integer(ARGV[1], 'valid-until', 0)
local id = ARGV[2]
local members = units(id)
local removed = redis.call('ZREM', leases, unpack(members))
local now = server_time()
-- A tombstone is never shortened: the same id may be compensated twice
-- (its acquire, then a write-back of its lease) with different
-- valid-untils, and the later one must hold.
if now <= valid_until and redis.call('PTTL', tombstone) < valid_until - now + 1 then
  redis.call('SET', tombstone, '1', 'PX', valid_until - now + 1)
end
if redis.call('EXISTS', queue) == 1 then
  if redis.call('ZSCORE', queue, id) then
    removed = removed + 1
    leave_queue(queue, waiters, holds, id)
  end
  if removed > 0 then
    forget_expired(queue, waiters, holds, leases, now)
    wake_who_fits(queue, waiters, holds, leases, wake, #members)
  end
end
return id
