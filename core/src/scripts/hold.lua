-- HOLD: sets the recovery hold for at least ARGV[1] ms (never shortens it):
-- the acquire scripts grant nothing new while it exists, and RELEASE hands
-- over no more than it frees.
--
-- KEYS[1] the hold key
-- ARGV[1] the recovery window (ms)
--
-- Returns the hold's remaining milliseconds.
local window = integer(ARGV[1], 'window', 1)
local left = redis.call('PTTL', KEYS[1])
if left < window then
  redis.call('SET', KEYS[1], '1', 'PX', window)
  return window
end
return left
