-- RENEW: extend a lease its holder still has. A long request renews before
-- the lease runs out, so the TTL can stay short (a crashed replica's slots
-- come back soon) while a request runs as long as it needs.
--
-- KEYS[1] lease set
-- ARGV[1] the new expiry, server ms (absolute: a renewal that reaches Redis
--         late does not extend the lease further for it)
-- ARGV[2] lease id
-- ARGV[3] valid-until, server ms
--
-- Returns {status, id, reclaimed}: 1 extended (never shortened), 0 the lease
-- is gone (expired or released), -2 stale (ran after valid-until or after
-- the expiry; changed nothing). It never creates a lease (`ZADD XX`), so a
-- renewal whose bytes reach Redis after the lease was released cannot bring
-- it back.
local leases = KEYS[1]
local expiry = integer(ARGV[1], 'expiry', 1)
local id = ARGV[2]
local valid_until = integer(ARGV[3], 'valid-until', 0)
weight(id)
local now = server_time()
if now > valid_until or expiry <= now then
  return {-2, id, 0}
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if not redis.call('ZSCORE', leases, id) then
  return {0, id, reclaimed}
end
add_units(leases, expiry, id, 'XX', 'GT')
cover(leases, expiry - now)
return {1, id, reclaimed}
