-- Checks a numeric argument before anything is written: a script that
-- stopped halfway on a bad argument would leave a half-done write behind
-- (a lease without its key's expiry, say). Whole numbers only, written in
-- decimal as Redis writes them (no sign, no leading zero, no exponent):
-- so an argument a script hands on to a command as given (an expiry, which
-- then costs no number formatting) means to Redis what it meant here.
local function integer(value, name, least)
  local n = type(value) == 'string' and (value == '0' or string.find(value, '^[1-9]%d*$')) and tonumber(value)
  if not n or n < least or n >= 9007199254740992 then
    error({err = 'ERR inflight: ' .. name .. ' must be a whole number of at least ' .. least .. ', not ' .. tostring(value)})
  end
  return n
end
-- A yes-or-no argument: '1' or '0', nothing else.
local function flag(value, name)
  if value == '1' then
    return true
  elseif value == '0' then
    return false
  end
  error({err = 'ERR inflight: ' .. name .. ' must be 1 or 0, not ' .. tostring(value)})
end
