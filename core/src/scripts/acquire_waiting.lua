-- ACQUIRE_WAITING: take a lease, or wait for one in the subject's queue:
-- first come, first served across the fleet, each waiter under its own
-- limit (see `lib/queue.lua`).
--
-- KEYS[1] lease set       KEYS[4] wait queue
-- KEYS[2] this tombstone  KEYS[5] waiters' expiries
-- KEYS[3] fencing counter KEYS[6] held hash: `avg` hold (ms, kept by
--                         RELEASE), `limit` (the last waiter's, for
--                         INSPECT), and each waiter's limit under its id
--                         KEYS[7] wake channel
-- ARGV[1] expiry, server ms   ARGV[5] recovery hold key ('' for none)
-- ARGV[2] limit               ARGV[6] how long the waiter lives without
-- ARGV[3] lease id                    another call (ms)
-- ARGV[4] valid-until         ARGV[7] how long its caller may still wait (ms)
-- ARGV[8] (optional) the id this waiter went on from: see below
--
-- The queue holds ids scored by arrival (a ticket: the server's clock in
-- ms, or one past the last ticket); a waiter keeps its place by calling
-- again with the same id. Returns {status, id, token, ahead, expected,
-- reclaimed}: statuses as ACQUIRE (1 granted, -1, -2, -3 refused, and the
-- waiter leaves the queue on -3), 2 queued (`ahead` units must free before
-- it is served, `expected` ms is the estimate of that, 0 when no hold time
-- is known yet; `token` is 1 when it entered the queue with this call, 0
-- when it kept its place: one that enters again has lost its place and
-- any slot a release handed it), 0 shed (the estimate is longer than the
-- caller may still wait: it left the queue at once instead of waiting for
-- a certain failure). A waiter that entered again goes on under a new id
-- (a hand-over's message naming the old one may be stale) and names the old
-- one once, as ARGV[8]: whatever the old id has now, a slot a release
-- handed it or its new place in the queue, becomes the new id's, so going
-- on under a new name costs the waiter nothing. Every key it writes expires. A queued waiter that
-- leaves without a slot (shed, or heavier than its limit) may have blocked
-- those behind it, and one granted may leave room behind it: the ones that
-- fit now are woken by name.
local leases, tombstone, fence, queue, waiters, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local wake = KEYS[7]
local expiry = integer(ARGV[1], 'expiry', 1)
local limit = integer(ARGV[2], 'limit', 1)
local id = ARGV[3]
local valid_until = integer(ARGV[4], 'valid-until', 0)
local hold = ARGV[5]
local lifetime = integer(ARGV[6], 'lifetime', 1)
local patience = integer(ARGV[7], 'patience', 0)
local previous = ARGV[8] or ''
local w = weight(id)
-- A waiter's id goes into wake-up messages (ids and tokens between spaces)
-- and into the held hash, beside its own fields `avg` and `limit`. The
-- client never makes an id with white space or either name; a hand-made
-- call with one is refused, not left to corrupt what the fleet shares.
if string.find(id, '%s') or id == 'avg' or id == 'limit' then
  error({err = 'ERR inflight: lease id ' .. id .. ' is not one a client makes'})
end
if previous ~= '' and (previous == id or weight(previous) ~= w) then
  error({err = 'ERR inflight: the previous id must differ from ' .. id .. ' and weigh as much'})
end
local now, time = server_time()
if now > valid_until or expiry <= now then
  return {-2, id, 0, 0, 0, 0}
end
-- Neither a tombstone nor the recovery hold, almost always: one `EXISTS`
-- says so for both.
local marked
if hold ~= '' then
  marked = redis.call('EXISTS', tombstone, hold) > 0
else
  marked = redis.call('EXISTS', tombstone) > 0
end
if marked and redis.call('EXISTS', tombstone) == 1 then
  return {-1, id, 0, 0, 0, 0}
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local held = redis.call('ZSCORE', leases, id)
if previous ~= '' and not held then
  -- Only a reservation moves: one ends when its waiter's entry would
  -- have, within a lifetime of now, where a lease confirmed under the old
  -- id would run a TTL (the client never confirms one it went on from).
  local reserved = redis.call('ZSCORE', leases, previous)
  if reserved and tonumber(reserved) > now + lifetime then
    reserved = false
  end
  if reserved then
    -- A slot handed to the old id: held by the new one now, and confirmed
    -- below as any reservation is.
    local members = units(previous)
    redis.call('ZREM', leases, unpack(members))
    add_units(leases, reserved, id)
    held = reserved
  end
  local ticket = redis.call('ZSCORE', queue, previous)
  if ticket then
    -- Only a live waiter's place moves: one whose entry expired (not
    -- pruned yet) would put the new id ahead of the live waiters behind it.
    local alive = tonumber(redis.call('ZSCORE', waiters, previous) or '0') > now
    leave_queue(queue, waiters, holds, previous)
    if alive and not reserved then
      redis.call('ZADD', queue, ticket, id)
      redis.call('ZADD', waiters, now + lifetime, id)
      redis.call('HSET', holds, id, limit)
    end
  end
end
if held then
  -- Held already: a slot a release handed over (reserved for the waiter's
  -- lifetime), confirmed here until the expiry; or a repeated call. Its
  -- queue entry, if a failover brought one back, waits for nothing.
  local token = next_tokens(fence, time, expiry - now, 1)
  add_units(leases, expiry, id, 'XX', 'GT')
  cover(leases, expiry - now)
  leave_queue(queue, waiters, holds, id)
  return {1, id, token, 0, 0, reclaimed}
end
if marked and hold ~= '' and redis.call('EXISTS', hold) == 1 then
  leave_queue(queue, waiters, holds, id)
  return {-3, id, 0, 0, 0, reclaimed}
end
if w > limit then
  -- It could never be served, and would block the queue behind it.
  local was_queued = redis.call('ZSCORE', queue, id)
  leave_queue(queue, waiters, holds, id)
  if was_queued then
    forget_dead(queue, waiters, holds, now)
    wake_who_fits(queue, waiters, holds, leases, wake, w)
  end
  return {0, id, 0, w - limit, 0, reclaimed}
end
local rank, count = false, 0
local live = redis.call('ZCARD', leases)
if redis.call('EXISTS', queue) == 1 then
  count = prune_waiters(queue, waiters, holds, now)
  rank = redis.call('ZRANK', queue, id)
end
local queued = rank ~= false
if not queued then
  rank = count
end
local fits, _, owed = claim(queue, holds, live, rank, w, limit)
if fits then
  -- The token first (as every grant draws it): a fence key of a foreign
  -- type fails the call before anything else is written (but a take-over
  -- of a previous id's place, which the client cleans up as after any
  -- failed call: its waiter ends, and the old id is left).
  local token = next_tokens(fence, time, expiry - now, 1)
  if queued then
    leave_queue(queue, waiters, holds, id)
  end
  add_units(leases, expiry, id)
  cover(leases, expiry - now)
  -- Waiters woken together may check in any order, and one under a higher
  -- limit that checked first was refused for the units this one was owed:
  -- what is still free goes to those that fit now (nothing came free
  -- here: the window of one unit).
  if queued and count > 1 then
    wake_who_fits(queue, waiters, holds, leases, wake, 1)
  end
  return {1, id, token, 0, 0, reclaimed}
end
local ahead = math.max(1, live + owed + w - limit)
local average = tonumber(redis.call('HGET', holds, 'avg') or '0')
local expected = math.ceil(ahead * average / limit)
if average > 0 and expected > patience then
  if queued then
    leave_queue(queue, waiters, holds, id)
    wake_who_fits(queue, waiters, holds, leases, wake, w)
  end
  return {0, id, 0, ahead, expected, reclaimed}
end
if not queued then
  local ticket = now
  local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= ticket then
    ticket = tonumber(last[2]) + 1
  end
  redis.call('ZADD', queue, ticket, id)
end
redis.call('ZADD', waiters, now + lifetime, id)
redis.call('HSET', holds, 'limit', limit, id, limit)
cover(queue, lifetime, 2 * lifetime)
cover(waiters, lifetime, 2 * lifetime)
cover(holds, lifetime, 2 * lifetime)
return {2, id, queued and 0 or 1, ahead, expected, reclaimed}
