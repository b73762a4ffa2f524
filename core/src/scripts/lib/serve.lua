-- Who a release hands freed units to: of the first waiters (as many as
-- the `freed` units and 15 more, at most 64: what is worth a look; when
-- the rule lets none of them through, the next as many, up to `WALK` in
-- all, as `claim` reads), those the rule lets through, each within its
-- own limit (`used` units being held). A waiter that holds
-- a lease already (a failover can restore the queue entry of a waiter served
-- since) gets nothing: a second grant would rewrite the expiry its holder
-- believes in. A waiter whose limit is unknown (neither its own nor a
-- recorded one) is named, not served (it checks on its own), and blocks
-- those behind it. Returns the ids served,
-- named and found holding.
local function serve(queue, holds, leases, used, freed)
  local served, named, holding = {}, {}, {}
  local window = math.min(64, freed + 15)
  local start, blocked = 0, 0
  repeat
    local ids = redis.call('ZRANGE', queue, start, start + window - 1)
    if #ids == 0 then
      break
    end
    local limits = redis.call('HMGET', holds, 'limit', unpack(ids))
    local scores = redis.call('ZMSCORE', leases, unpack(ids))
    for i, id in ipairs(ids) do
      local own = tonumber(limits[i + 1]) or tonumber(limits[1])
      if scores[i] then
        holding[#holding + 1] = id
      elseif not own then
        named[#named + 1] = id
        blocked = math.huge
      else
        local units = weight(id)
        if own > blocked and used + units <= own then
          used = used + units
          served[#served + 1] = id
        else
          blocked = math.max(blocked, own)
        end
      end
    end
    start = start + #ids
    -- Reading on only while nobody was let through: a unit owed to a
    -- waiter under a higher limit, behind more waiters held back by their
    -- lower one than a window holds, would otherwise stand free until that
    -- waiter's own check.
  until #served > 0 or #named > 0 or #ids < window or start >= WALK
  return served, named, holding
end

-- Of the waiters `serve` chose, those with an expiry beside their queue
-- entry, with it; the others (only eviction or another writer leaves one)
-- have no waiter behind them: they leave the queue, served nothing,
-- instead of blocking it.
local function with_expiries(queue, waiters, holds, served)
  local alive, expiries = {}, {}
  if #served == 0 then
    return alive, expiries
  end
  local entries = redis.call('ZMSCORE', waiters, unpack(served))
  local orphans = {}
  for i, id in ipairs(served) do
    if entries[i] then
      alive[#alive + 1] = id
      expiries[#alive] = tonumber(entries[i])
    else
      orphans[#orphans + 1] = id
    end
  end
  if #orphans > 0 then
    leave_queue(queue, waiters, holds, unpack(orphans))
  end
  return alive, expiries
end

-- What is free now, told to the waiters that fit in it (and those it cannot
-- judge) by name on `wake` (`N id...`): their clients send exactly them to
-- check. After a waiter leaves or a lease no caller got goes back, a bare
-- wake-up would send one waiter per client, and a second one of the same
-- client that fits would wait for its own periodic check. Nothing is
-- published when none fits. The lease set and the queue must be pruned at
-- the server's clock already (`forget_expired`); entries of ids that hold a
-- lease leave the queue, as in RELEASE. `freed`: the units that came free.
local function wake_who_fits(queue, waiters, holds, leases, wake, freed)
  local served, named, holding = serve(queue, holds, leases, redis.call('ZCARD', leases), freed)
  if #holding > 0 then
    leave_queue(queue, waiters, holds, unpack(holding))
  end
  local woken = with_expiries(queue, waiters, holds, served)
  for _, id in ipairs(named) do
    woken[#woken + 1] = id
  end
  if #woken > 0 then
    redis.call('SPUBLISH', wake, 'N ' .. table.concat(woken, ' '))
  end
end

-- Expired leases and dead waiters out, at `now`: what a count of what is
-- free must not see.
local function forget_expired(queue, waiters, holds, leases, now)
  forget_dead(queue, waiters, holds, now)
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
end
