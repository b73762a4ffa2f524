-- The members a lease is made of, and its weight (needs `weight`).
local function units(id)
  local w = weight(id)
  local all = {id}
  for i = 2, w do
    all[i] = id .. '#' .. i
  end
  return all, w
end
