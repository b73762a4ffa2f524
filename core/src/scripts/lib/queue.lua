-- A subject's wait queue: waiter ids (the lease ids they will hold) scored
-- by arrival, beside the waiters' expiries (the same ids scored by when each
-- expires unless its client calls again) and, in the subject's `held` hash,
-- each waiter's own limit under its id. A waiter whose own limit is missing
-- (queued by an older version of the library, during a rolling upgrade) is
-- taken to have the limit last recorded in the hash (`limit`).
--
-- The fairness rule. Waiters are served in arrival order, each under its own
-- limit, and a waiter is never passed by one whose limit is no higher than
-- its own: waiters of one limit are served first come, first served, and a
-- heavy one is not overtaken by lighter ones behind it. A waiter held back
-- only by its own lower limit does not hold back one with a higher limit: a
-- rolling change of a limit, or kinds of requests that share a key under
-- different limits, never stall the higher one behind the lower. With one
-- limit for everyone this is plain first come, first served.

-- Takes waiters out of the queue (all three places they are kept).
local function leave_queue(queue, waiters, holds, ...)
  redis.call('ZREM', queue, ...)
  redis.call('ZREM', waiters, ...)
  redis.call('HDEL', holds, ...)
end

-- Drops waiters whose clients stopped calling (at most 256 at a time; the
-- rest go on later calls and are counted as waiting meanwhile: never fewer
-- waiters than there are).
local function forget_dead(queue, waiters, holds, now)
  local dead = redis.call('ZRANGEBYSCORE', waiters, '-inf', now, 'LIMIT', 0, 256)
  if #dead > 0 then
    leave_queue(queue, waiters, holds, unpack(dead))
  end
end

-- `forget_dead`, then how many are queued.
local function prune_waiters(queue, waiters, holds, now)
  forget_dead(queue, waiters, holds, now)
  return redis.call('ZCARD', queue)
end

-- The most waiters a decision reads. A claim behind more than this many is
-- refused (they are not read); with one limit for everyone the first
-- `limit` waiters always decide.
local WALK = 128

-- Whether `w` units under `limit` can be granted behind the first `count`
-- waiters, `used` units being held now: the waiters are walked as if each
-- were served in turn (one that fits under its own limit takes its units
-- first; one that does not waits, and blocks every later one whose limit is
-- no higher), reading only as far as the answer needs. The grant comes
-- before those waiters are really served, so it must leave each one that
-- fits still fitting: `room` is the least spare any of them has under its
-- own limit (a caller under a higher limit never takes a unit a waiter
-- under a lower one is owed). Returns the answer, the units held once the
-- waiters walked that fit are served, the units all `count` waiters wait
-- for (those not read count one each: the estimate of a wait), and `room`.
local function claim(queue, holds, used, count, w, limit)
  if used + w > limit then
    return false, used, count, 0
  end
  local blocked, start, owed, room = 0, 0, 0, math.huge
  while start < count do
    if start >= WALK then
      return false, used, owed + count - start, room
    end
    -- With one limit for everyone, the first `limit - used` waiters decide.
    local stop = math.min(count, WALK, start + math.max(limit - used, 1) + 1) - 1
    local ids = redis.call('ZRANGE', queue, start, stop)
    if #ids == 0 then
      break
    end
    local limits = redis.call('HMGET', holds, 'limit', unpack(ids))
    for i, id in ipairs(ids) do
      local own = tonumber(limits[i + 1]) or tonumber(limits[1]) or limit
      local units = weight(id)
      owed = owed + units
      if own > blocked and used + units <= own then
        used = used + units
        room = math.min(room, own - used)
        if used + w > limit or w > room then
          return false, used, owed + count - start - i, room
        end
      else
        blocked = math.max(blocked, own)
        if blocked >= limit then
          return false, used, owed + count - start - i, room
        end
      end
    end
    start = start + #ids
  end
  return true, used, owed, room
end
