-- MARK: the lease-data marker, a key this library keeps on the server so
-- that "restarted with its data" and "restarted empty" (or flushed) are told
-- apart. Every handshake reads it, and writes it if it is missing.
--
-- KEYS[1] the marker
-- ARGV[1] a value to write if it is missing (no other client or connection
--         writes the same)
-- ARGV[2] how long it lives after the last handshake (ms)
--
-- Returns {created, value}: 1 and ARGV[1] if it was missing, else 0 and its
-- value. It expires like every key the library writes: a server no client
-- has connected to for that long is found "emptied" by the next one, which
-- then writes back what it holds (nothing is lost by that).
local marker = KEYS[1]
local ttl = integer(ARGV[2], 'marker lifetime', 1)
local value = redis.call('GET', marker)
if value then
  redis.call('PEXPIRE', marker, ttl)
  return {0, value}
end
redis.call('SET', marker, ARGV[1], 'PX', ttl)
return {1, ARGV[1]}
