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
-- ARGV[6] '1' to draw a fencing token for a grant, '0' for none (the
--         `SET` of the counter is the dearest command of a grant: a limiter
--         whose callers never read tokens does not pay for it)
--
-- Returns {status, id, token, reclaimed}: 1 granted, 0 denied, -1 refused
-- (the id was compensated: these bytes reached Redis after their own
-- release), -2 stale (ran after valid-until, or after the expiry), -3
-- refused while the server recovers lost lease data. The token is 0 unless
-- granted with ARGV[6] '1'; `reclaimed` counts the expired units the prune
-- removed. An id that already holds a live lease is granted again without a
-- second slot.
--
-- Fairness: a fail-fast acquire is a newcomer behind every live waiter of
-- the subject (see `lib/queue.lua`). A subject with no queue, no tombstone
-- and no recovery hold pays one `EXISTS` for all three: a grant is then
-- `TIME`, `EXISTS`, `ZCARD`, `ZADD`, `PEXPIRE` (and the counter's `SET`
-- when it draws a token; the prune of expired units, `ZREMRANGEBYSCORE`,
-- only when they fill the subject).
-- The work is `lib/acquire_one.lua`'s, shared with `ACQUIRE_ACROSS`.
-- Every argument is checked before anything is written.
local expiry = integer(ARGV[1], 'expiry', 1)
local limit = integer(ARGV[2], 'limit', 1)
local valid_until = integer(ARGV[4], 'valid-until', 0)
local id = ARGV[3]
local fenced = flag(ARGV[6], 'fencing')
weight(id)
local now, time = server_time()
local status, token, reclaimed = acquire_one(
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
  expiry, ARGV[1], limit, id, valid_until, ARGV[5], fenced, now, time)
return {status, id, token, reclaimed}
