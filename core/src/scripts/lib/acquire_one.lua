-- One fail-fast acquire as `ACQUIRE` takes it (the contract and the
-- fairness rule are in `acquire.lua`), at the server instant `now` (`time`
-- is the raw `TIME` reply the token is drawn from), its arguments checked
-- already, in two steps: `admit_one` decides, writing nothing but the
-- prunes of what has expired; `grant_one` writes the lease it admitted.
-- `ACQUIRE_ALL` admits every subject before it grants any. Needs `weight`,
-- `add_units`, `cover`, `queue` and `fence`.

-- Returns the status (1: admitted; else the refusal, as `ACQUIRE` answers
-- it), the units the prune reclaimed, and how the grant writes: the live
-- units counted on the fast path (-1 on the slow one) and, on the slow
-- one, whether the id is fresh (not holding a lease already).
local function admit_one(leases, tombstone, queue, waiters, holds, limit, id, valid_until, expiry, hold, now)
  local w = weight(id)
  if now > valid_until or expiry <= now then
    return -2, 0, -1, false
  end
  -- The common case costs one `EXISTS`: no tombstone, no recovery hold, no
  -- queue. Then the limit is checked first, and `ZSCORE` runs only when
  -- the subject is full (an id granted again holds its lease already).
  local plain
  if hold ~= '' then
    plain = redis.call('EXISTS', tombstone, queue, hold) == 0
  else
    plain = redis.call('EXISTS', tombstone, queue) == 0
  end
  if plain then
    -- Expired units are pruned only when they could matter: `ZCARD` counts
    -- them as held, so a subject with room even so grants without the
    -- `ZREMRANGEBYSCORE` (they stay until the subject fills up or its key
    -- expires, never more than the limit's worth).
    local live, reclaimed = redis.call('ZCARD', leases), 0
    if live + w > limit then
      reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
      live = live - reclaimed
      if live + w > limit and not redis.call('ZSCORE', leases, id) then
        return 0, reclaimed, -1, false
      end
    end
    return 1, reclaimed, live, false
  end
  if redis.call('EXISTS', tombstone) == 1 then
    return -1, 0, -1, false
  end
  local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  local fresh = not redis.call('ZSCORE', leases, id)
  if fresh then
    if hold ~= '' and redis.call('EXISTS', hold) == 1 then
      return -3, reclaimed, -1, false
    end
    local live = redis.call('ZCARD', leases)
    if live + w > limit then
      return 0, reclaimed, -1, false
    end
    if redis.call('EXISTS', queue) == 1 then
      local queued = prune_waiters(queue, waiters, holds, now)
      if not claim(queue, holds, live, queued, w, limit) then
        return 0, reclaimed, -1, false
      end
    end
  end
  return 1, reclaimed, -1, fresh
end

-- Writes what `admit_one` admitted (`live` and `fresh` are its answers).
-- `at` is `expiry` as the caller wrote it (checked by `integer`): the lease
-- is written with it, not with the number, which Lua would format anew.
-- Returns the token (0 unless `fenced`) and the units a prune reclaimed
-- here.
local function grant_one(leases, fence, expiry, at, id, fenced, now, time, live, fresh)
  -- The token first: a fence key of a foreign type fails the call before
  -- anything else is written.
  local token = fenced and next_tokens(fence, time, expiry - now, 1) or 0
  if live < 0 then
    if fresh then
      add_units(leases, at, id)
      cover(leases, expiry - now)
    end
    return token, 0
  end
  -- `NX`: an id that holds its lease already keeps its expiry.
  local reclaimed = 0
  local added = add_units(leases, at, id, 'NX')
  if added == 0 and tonumber(redis.call('ZSCORE', leases, id)) <= now then
    -- The id's own earlier lease, expired and not pruned yet (its units
    -- were counted as held, so there is room without them): pruned, and
    -- the id takes a fresh lease.
    reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    live = live - reclaimed
    added = add_units(leases, at, id, 'NX')
  end
  if added > 0 then
    -- Relative, not `PEXPIREAT at`: Redis 7.0 deletes a key at once when
    -- the instant given has passed on its clock, which runs on while a
    -- long script does (a lease ending within the call would take its set
    -- with it, and the call's later acquires would find room).
    if live == 0 then
      -- The set was empty, so it is new: no expiry to compare with.
      redis.call('PEXPIRE', leases, expiry - now + 1)
    else
      -- Every lease set our scripts write has an expiry: `GT` extends
      -- it, never shortens it, in one command.
      redis.call('PEXPIRE', leases, expiry - now + 1, 'GT')
    end
  end
  return token, reclaimed
end

-- Both steps: returns the status, the token (0 unless granted and
-- `fenced`) and the units the prunes reclaimed.
local function acquire_one(leases, tombstone, fence, queue, waiters, holds, expiry, at, limit, id, valid_until, hold, fenced, now, time)
  local status, reclaimed, live, fresh =
    admit_one(leases, tombstone, queue, waiters, holds, limit, id, valid_until, expiry, hold, now)
  if status ~= 1 then
    return status, 0, reclaimed
  end
  local token, pruned = grant_one(leases, fence, expiry, at, id, fenced, now, time, live, fresh)
  return 1, token, reclaimed + pruned
end
