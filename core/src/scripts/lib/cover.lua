-- A key lives at least `ms` more (and 1 ms past it): the lease set outlives
-- its longest lease, so an idle subject leaves nothing behind, and no lease
-- outlives its key. `PTTL` + `PEXPIRE` (O(1)) never shortens it. With `to`,
-- a key found short gets `to` ms instead: the queue's keys, which every
-- waiting call covers for the waiter's lifetime, get twice that, so most
-- calls read the expiry and write nothing (each `PEXPIRE` is a write, sent
-- to replicas and the AOF too).
local function cover(key, ms, to)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, (to or ms) + 1)
  end
end
