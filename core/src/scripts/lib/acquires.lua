-- The arguments of a call over several fail-fast acquires (`ACQUIRE_ACROSS`,
-- `ACQUIRE_ALL`): six keys and six arguments each, as `ACQUIRE` takes them,
-- every one checked before anything is written (a call refused halfway
-- would leave grants no reply names). `shape` names the call in the error
-- for a wrong count. Returns how many, then each one's expiry, limit,
-- valid-until and fencing flag. Needs `args` and `weight`.
local function read_acquires(shape)
  local n = #ARGV / 6
  if n < 1 or n ~= math.floor(n) or #KEYS ~= 6 * n then
    error({err = 'ERR inflight: ' .. shape})
  end
  local expiries, limits, valid, fenced = {}, {}, {}, {}
  for i = 1, n do
    local a = 6 * (i - 1)
    expiries[i] = integer(ARGV[a + 1], 'expiry', 1)
    limits[i] = integer(ARGV[a + 2], 'limit', 1)
    valid[i] = integer(ARGV[a + 4], 'valid-until', 0)
    fenced[i] = flag(ARGV[a + 6], 'fencing')
    weight(ARGV[a + 3])
  end
  return n, expiries, limits, valid, fenced
end
