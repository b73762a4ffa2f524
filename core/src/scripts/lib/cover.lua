-- A key lives at least `ms` more (and 1 ms past it): the lease set outlives
-- its longest lease, so an idle subject leaves nothing behind, and no lease
-- outlives its key. `PTTL` + `PEXPIRE` (O(1)) never shortens it.
local function cover(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms + 1)
  end
end

-- `cover` for the queue's keys, which every waiting call covers for the
-- waiter's lifetime: once less than that is left, the key's expiry goes to
-- twice it, so most calls read the expiry and write nothing (each
-- `PEXPIRE` is a write, sent to replicas and the AOF too). Never shortens
-- it either.
local function cover_twice(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, 2 * ms + 1)
  end
end
