-- One fail-fast acquire as `ACQUIRE` takes it (the contract and the
-- fairness rule are in `acquire.lua`), at the server instant `now` (`time`
-- is the raw `TIME` reply the token is drawn from), its arguments checked
-- already. Returns the status, the token (0 unless granted and `fenced`)
-- and the units the prune reclaimed. Needs `weight`, `add_units`, `cover`,
-- `queue` and `fence`.
local function acquire_one(leases, tombstone, fence, queue, waiters, holds, expiry, limit, id, valid_until, hold, fenced, now, time)
  local w = weight(id)
  if now > valid_until or expiry <= now then
    return -2, 0, 0
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
        return 0, 0, reclaimed
      end
    end
    -- The token first: a fence key of a foreign type fails the call before
    -- anything else is written.
    local token = fenced and next_tokens(fence, time, expiry - now, 1) or 0
    -- `NX`: an id that holds its lease already keeps its expiry.
    local added = add_units(leases, expiry, id, 'NX')
    if added == 0 and tonumber(redis.call('ZSCORE', leases, id)) <= now then
      -- The id's own earlier lease, expired and not pruned yet (its units
      -- were counted as held, so there is room without them): pruned, and
      -- the id takes a fresh lease.
      local pruned = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
      reclaimed, live = reclaimed + pruned, live - pruned
      added = add_units(leases, expiry, id, 'NX')
    end
    if added > 0 then
      if live == 0 then
        -- The set was empty, so it is new: no expiry to compare with.
        redis.call('PEXPIRE', leases, expiry - now + 1)
      else
        -- Every lease set our scripts write has an expiry: `GT` extends
        -- it, never shortens it, in one command.
        redis.call('PEXPIRE', leases, expiry - now + 1, 'GT')
      end
    end
    return 1, token, reclaimed
  end
  if redis.call('EXISTS', tombstone) == 1 then
    return -1, 0, 0
  end
  local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  local fresh = not redis.call('ZSCORE', leases, id)
  if fresh then
    if hold ~= '' and redis.call('EXISTS', hold) == 1 then
      return -3, 0, reclaimed
    end
    local live = redis.call('ZCARD', leases)
    if live + w > limit then
      return 0, 0, reclaimed
    end
    if redis.call('EXISTS', queue) == 1 then
      local queued = prune_waiters(queue, waiters, holds, now)
      if not claim(queue, holds, live, queued, w, limit) then
        return 0, 0, reclaimed
      end
    end
  end
  -- The token before the lease, as on the fast path.
  local token = fenced and next_tokens(fence, time, expiry - now, 1) or 0
  if fresh then
    add_units(leases, expiry, id)
    cover(leases, expiry - now)
  end
  return 1, token, reclaimed
end
