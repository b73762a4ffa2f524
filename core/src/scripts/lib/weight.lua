-- Weighted leases. A lease of weight `w` is `w` members of its lease set:
-- its own id, which names the weight (`...*w...`, see `lease_id.rs`), and
-- `id#2` ... `id#w`, all with the lease's expiry. So `ZCARD` counts the units
-- held, the expiry prune drops a dead holder's units together, and a
-- release removes exactly the units its id names. An id that names a weight
-- outside 1..1000, or holds a `#` (it could name another lease's extra
-- unit), is refused before anything is written; so is one that holds
-- white space (wake-up messages are ids and tokens between spaces) or is
-- `avg` or `limit` (the held hash's own fields, beside each waiter's limit
-- under its id). The client never makes such ids; these checks keep a
-- hand-made call from corrupting what the fleet shares.
local function weight(id)
  if string.find(id, '#', 1, true) then
    error({err = 'ERR inflight: lease id ' .. id .. ' holds a #'})
  end
  if string.find(id, '%s') or id == 'avg' or id == 'limit' then
    error({err = 'ERR inflight: lease id ' .. id .. ' is not one a client makes'})
  end
  local star = string.find(id, '*', 1, true)
  if not star then
    return 1
  end
  local w = tonumber(string.match(id, '^%d+', star + 1))
  if not w or w < 1 or w > 1000 then
    error({err = 'ERR inflight: lease id ' .. id .. ' names no weight between 1 and 1000'})
  end
  return w
end
