-- Weighted leases. A lease of weight `w` is `w` members of its lease set:
-- its own id, which names the weight (`...*w...`, see `lease_id.rs`), and
-- `id#2` ... `id#w`, all with the lease's expiry. So `ZCARD` counts the units
-- held, the expiry prune drops a dead holder's units together, and a
-- release removes exactly the units its id names. An id that names a weight
-- outside 1..1000, or holds a `#` (it could name another lease's extra
-- unit), is refused before anything is written.
local function weight(id)
  if string.find(id, '#', 1, true) then
    error({err = 'ERR inflight: lease id ' .. id .. ' holds a #'})
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
