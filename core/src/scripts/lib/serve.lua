-- Who a release hands freed units to: of the first `count` waiters, those
-- the rule lets through, each within its own limit (`used` units being
-- held). A waiter that holds
-- a lease already (a failover can restore the queue entry of a waiter served
-- since) gets nothing: a second grant would rewrite the expiry its holder
-- believes in. A waiter whose limit is unknown (neither its own nor a
-- recorded one) is named, not served (it checks on its own), and blocks
-- those behind it. Returns the ids served,
-- named and found holding.
local function serve(queue, holds, leases, used, count)
  local served, named, holding = {}, {}, {}
  local ids = redis.call('ZRANGE', queue, 0, count - 1)
  if #ids == 0 then
    return served, named, holding
  end
  local limits = redis.call('HMGET', holds, 'limit', unpack(ids))
  local scores = redis.call('ZMSCORE', leases, unpack(ids))
  local blocked = 0
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
  return served, named, holding
end
