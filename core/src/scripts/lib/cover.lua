-- A key lives at least `ms` more (and 1 ms past it): the lease set outlives
-- its longest lease, so an idle subject leaves nothing behind, and no lease
-- outlives its key. `PTTL` + `PEXPIRE` (O(1)) never shortens it.
local function cover(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms + 1)
  end
end
