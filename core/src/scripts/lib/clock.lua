-- The server's clock: milliseconds for expiries, and the raw `TIME` reply
-- (seconds, microseconds) for fencing tokens.
local function server_time()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), time
end
