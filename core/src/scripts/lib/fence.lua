-- Fencing tokens for `n` grants of a subject: the counter's next values,
-- never below the server's clock in microseconds, so that they keep rising
-- when the counter is gone (an idle subject, or a server that lost its
-- data) as long as the clock moved forward by more than the grants made in
-- excess of one per microsecond. One `SET ... GET` writes the clock and
-- reads the last token; a second `SET` only when the clock has not passed
-- it. The counter lives `ttl` ms past the subject's last grant. Returns the
-- first token; the grants take `token` ... `token + n - 1`.
local function next_tokens(fence, time, ttl, n)
  local token = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local last = redis.call('SET', fence, string.format('%.0f', token + n - 1), 'PX', ttl, 'GET')
  if last and tonumber(last) >= token then
    token = tonumber(last) + 1
    redis.call('SET', fence, string.format('%.0f', token + n - 1), 'PX', ttl)
  end
  return token
end
