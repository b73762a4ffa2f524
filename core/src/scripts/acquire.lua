-- ACQUIRE: take a lease, failing fast.
--
-- KEYS[1] lease set       KEYS[4] wait queue
-- KEYS[2] this tombstone  KEYS[5] waiters' expiries
-- KEYS[3] fencing counter KEYS[6] held hash (waiters' limits)
-- ARGV[1] expiry: the lease's end, server ms (absolute: a request that
--         reaches Redis late does not live longer for it)
-- ARGV[2] limit
-- ARGV[3] lease id
-- ARGV[4] valid-until, server ms: after it the call does nothing
-- ARGV[5] the recovery hold key ('' for none; standalone only)
--
-- Returns {status, id, token, reclaimed}: 1 granted, 0 denied, -1 refused
-- (the id was compensated: these bytes reached Redis after their own
-- release), -2 stale (ran after valid-until, or after the expiry), -3
-- refused while the server recovers lost lease data. The token is 0 unless
-- granted; `reclaimed` counts the expired units the prune removed. An id
-- that already holds a live lease is granted again without a second slot.
--
-- Fairness: a fail-fast acquire is a newcomer behind every live waiter of
-- the subject (see `lib/queue.lua`). A subject with no queue, no tombstone
-- and no recovery hold pays one `EXISTS` for all three: a grant is then
-- `TIME`, `EXISTS`, `ZREMRANGEBYSCORE`, `ZCARD`, `ZADD`, `PEXPIRE`, `SET`.
local leases, tombstone, fence, queue, waiters, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local expiry = integer(ARGV[1], 'expiry', 1)
local limit = integer(ARGV[2], 'limit', 1)
local id = ARGV[3]
local valid_until = integer(ARGV[4], 'valid-until', 0)
local hold = ARGV[5]
local w = weight(id)
local now, time = server_time()
if now > valid_until or expiry <= now then
  return {-2, id, 0, 0}
end
-- The common case costs one `EXISTS`: no tombstone, no recovery hold, no
-- queue. Then the limit is checked first, and `ZSCORE` runs only when the
-- subject is full (an id granted again holds its lease already).
local plain
if hold ~= '' then
  plain = redis.call('EXISTS', tombstone, queue, hold) == 0
else
  plain = redis.call('EXISTS', tombstone, queue) == 0
end
if plain then
  local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  local live = redis.call('ZCARD', leases)
  if live + w > limit and not redis.call('ZSCORE', leases, id) then
    return {0, id, 0, reclaimed}
  end
  -- `NX`: an id that holds its lease already keeps its expiry.
  if add_units(leases, expiry, id, 'NX') > 0 then
    if live == 0 then
      -- The set was empty, so it is new: no expiry to compare with.
      redis.call('PEXPIRE', leases, expiry - now + 1)
    else
      -- Every lease set our scripts write has an expiry: `GT` extends
      -- it, never shortens it, in one command.
      redis.call('PEXPIRE', leases, expiry - now + 1, 'GT')
    end
  end
  return {1, id, next_tokens(fence, time, expiry - now, 1), reclaimed}
end
if redis.call('EXISTS', tombstone) == 1 then
  return {-1, id, 0, 0}
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if not redis.call('ZSCORE', leases, id) then
  if hold ~= '' and redis.call('EXISTS', hold) == 1 then
    return {-3, id, 0, reclaimed}
  end
  local live = redis.call('ZCARD', leases)
  if live + w > limit then
    return {0, id, 0, reclaimed}
  end
  if redis.call('EXISTS', queue) == 1 then
    local queued = prune_waiters(queue, waiters, holds, now)
    if not claim(queue, holds, live, queued, w, limit) then
      return {0, id, 0, reclaimed}
    end
  end
  add_units(leases, expiry, id)
  cover(leases, expiry - now)
end
return {1, id, next_tokens(fence, time, expiry - now, 1), reclaimed}
