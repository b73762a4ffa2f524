-- Writes a lease's members with one expiry, in one `ZADD` (needs `weight`).
-- Flags (`'XX'`, `'GT'`) come before the scores, as `ZADD` takes them.
local function add_units(key, score, id, ...)
  local w = weight(id)
  local args = {...}
  if w == 1 and #args == 0 then
    return redis.call('ZADD', key, score, id)
  end
  local n = #args
  args[n + 1], args[n + 2] = score, id
  n = n + 2
  for i = 2, w do
    args[n + 1], args[n + 2] = score, id .. '#' .. i
    n = n + 2
  end
  return redis.call('ZADD', key, unpack(args))
end
