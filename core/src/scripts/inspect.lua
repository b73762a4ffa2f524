-- INSPECT: what a subject holds now, for operators. Read only: it prunes
-- nothing.
--
-- KEYS[1] lease set
-- KEYS[2] held hash
-- KEYS[3] waiters' expiries
-- ARGV[1] the most holders to list (0: only the counts)
--
-- Returns {now ms, live units, limit or -1, live waiters, id, expiry ms, id,
-- expiry ms, ...}: the units whose expiry is after now, the limit the
-- subject's waiters last recorded (-1 if none did), the waiters whose
-- clients still call, then the live leases (their own ids, not their extra
-- units) with their expiries, in expiry order. O(log n) for the counts;
-- listing reads every live member.
local most = integer(ARGV[1], 'holders', 0)
local now = server_time()
local after = '(' .. now
local reply = {now, redis.call('ZCOUNT', KEYS[1], after, '+inf')}
reply[3] = tonumber(redis.call('HGET', KEYS[2], 'limit') or '-1')
reply[4] = redis.call('ZCOUNT', KEYS[3], after, '+inf')
if most > 0 then
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], after, '+inf', 'WITHSCORES')
  local listed = 0
  for i = 1, #members, 2 do
    if listed >= most then
      break
    end
    if not string.find(members[i], '#', 1, true) then
      reply[#reply + 1] = members[i]
      reply[#reply + 1] = tonumber(members[i + 1])
      listed = listed + 1
    end
  end
end
return reply
