//! The Lua scripts and the commands that carry them.
//!
//! Leases of one subject are a sorted set whose members are lease ids and whose
//! scores are expiry times in the *server's* milliseconds (`TIME`), so replicas
//! with skewed clocks agree on when a lease ends. Acquire is
//! `ZREMRANGEBYSCORE` + `ZCARD`, O(log n) in the number of live leases.

use bytes::BytesMut;

use crate::key::SubjectKeys;
use crate::resp::encode_command;

/// The fencing tokens of grants (Lua, shared by every script that grants):
/// the subject's counter's next values, never below the server's clock in
/// microseconds (see [`ACQUIRE`]). Needs `time`, `fence` and `ttl`; leaves
/// the first token in `token`. `next_fencing_token!()` takes one token;
/// `next_fencing_token!("n")` takes `n` consecutive ones (`n` a Lua
/// expression), `token` … `token + n - 1`, with the counter left at the last.
macro_rules! next_fencing_token {
    () => {
        next_fencing_token!(@ "token")
    };
    ($count:literal) => {
        next_fencing_token!(@ "token + ", $count, " - 1")
    };
    (@ $($last:literal),+) => {
        concat!(
            "local token = tonumber(time[1]) * 1000000 + tonumber(time[2])
local last, written = nil, false
if redis.REDIS_VERSION_NUM then
  last = redis.call('SET', fence, string.format('%.0f', ", $($last),+, "), 'PX', ttl, 'GET')
  written = true
else
  last = redis.call('GET', fence)
end
if last and tonumber(last) >= token then
  token, written = tonumber(last) + 1, false
end
if not written then
  redis.call('SET', fence, string.format('%.0f', ", $($last),+, "), 'PX', ttl)
end
"
        )
    };
}

/// Weighted leases (Lua, shared by every script that touches a lease set).
///
/// A lease of weight `w` is `w` members of its lease set: its own id (which
/// names the weight, `…*w…`, see `lease_id`) and `id#2` … `id#w`, all with
/// the lease's expiry. So `ZCARD` still counts the units held in O(1), the
/// expiry prune drops a dead holder's units together, and a release removes
/// exactly the units its id names: never another holder's, never more than
/// it took. The cost is O(w log n) per call for a weight-`w` lease, nothing
/// for weight 1 (measured: `docs/performance.md`).
///
/// `weight(id)`, `units(id)` (its members, and its weight), `add_units(key,
/// score, id, flag)` (one `ZADD` of its members, `flag` `'XX'` or `nil`), and
/// `owed(queue, n)`: the units the first `n` waiters of a queue wait for.
/// Each script takes only those it calls (`weight` first), and defines the
/// others in the branch that needs them: a Lua closure is made each time a
/// definition runs, which weight-1 calls would pay for nothing (measured:
/// 3-4% of `ACQUIRE`'s cost, `docs/performance.md`).
macro_rules! unit_helpers {
    ($($helper:ident),*) => {
        concat!($(unit_helpers!(@ $helper)),*)
    };
    (@ weight) => {
        r#"local function weight(id)
  local star = string.find(id, '*', 1, true)
  if not star then
    return 1
  end
  return tonumber(string.match(id, '^%d+', star + 1))
end
"#
    };
    (@ units) => {
        r#"local function units(id)
  local w = weight(id)
  local all = {id}
  for i = 2, w do
    all[i] = id .. '#' .. i
  end
  return all, w
end
"#
    };
    (@ add_units) => {
        r#"local function add_units(key, score, id, flag)
  local w = weight(id)
  if w == 1 then
    if flag then
      return redis.call('ZADD', key, flag, score, id)
    end
    return redis.call('ZADD', key, score, id)
  end
  local args, n = {}, 0
  if flag then
    args[1], n = flag, 1
  end
  args[n + 1], args[n + 2] = score, id
  n = n + 2
  for i = 2, w do
    args[n + 1], args[n + 2] = score, id .. '#' .. i
    n = n + 2
  end
  return redis.call('ZADD', key, unpack(args))
end
"#
    };
    (@ owed) => {
        r#"local function owed(queue, n)
  local sum = 0
  if n > 0 then
    for _, waiter in ipairs(redis.call('ZRANGE', queue, 0, n - 1)) do
      sum = sum + weight(waiter)
    end
  end
  return sum
end
"#
    };
}

/// Acquire a lease, failing fast.
///
/// KEYS: lease set, this lease's tombstone, the subject's fencing counter,
/// the subject's wait queue and its waiters' expiries (see
/// [`ACQUIRE_WAITING`]). ARGV: ttl ms, limit, lease id, valid-until (server
/// ms), the recovery hold key (empty for none). Returns `{status, lease id,
/// fencing token}`: 1 granted, 0 denied, -1 refused because the id was
/// already compensated (its bytes reached Redis after its own release), -2
/// refused because it ran after its valid-until: bytes held back by a stall
/// or a proxy must not take a slot after the client stopped accounting for
/// them (see [`STALE`]), -3 refused because the server is recovering lost
/// lease data (see [`RECOVERING`]). The token is 0 unless granted.
/// An id that already holds a live lease is granted again without a second slot.
///
/// Fairness: a fail-fast acquire is a newcomer, so it is granted only if the
/// free slots outnumber the live waiters queued for the subject (each of them
/// arrived first and is owed a slot before it). With no queue this is one
/// `EXISTS`.
///
/// The key expires (1 ms) after its longest-lived lease, so idle subjects vanish:
/// every lease is added here, and each addition extends the key's TTL to cover
/// it (`PTTL` + `PEXPIRE`, O(1); 20% cheaper per call than reading the highest
/// score back, measured with redis-benchmark), so no lease outlives its key.
///
/// Fencing tokens: every grant takes the next value of the subject's counter,
/// never below the server's clock in microseconds. The counter lives a TTL
/// past the subject's last grant. On Redis 7 (`redis.REDIS_VERSION_NUM`) one
/// `SET … PX … GET` writes the clock and reads the last token (a second `SET`
/// only when the clock has not passed it); before, a `GET` and a `SET`.
/// (Cost on Redis's thread: `docs/performance.md`, session 5.) While the counter lives
/// the tokens of a subject strictly increase; when it is gone (idle subject,
/// or a server that lost its data) the clock floor keeps them above every
/// token handed out before, as long as the server's clock moved forward by
/// more than the grants made in excess of one per microsecond.
pub const ACQUIRE: &str = concat!(
    r#"
if redis.replicate_commands then redis.replicate_commands() end
"#,
    unit_helpers!(weight),
    r#"local leases, tombstone, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ttl, limit, id, valid_until = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local hold = ARGV[5]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now > valid_until then
  return {-2, id, 0, 0}
end
if redis.call('EXISTS', tombstone) == 1 then
  return {-1, id, 0, 0}
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if not redis.call('ZSCORE', leases, id) then
  if hold ~= '' and redis.call('EXISTS', hold) == 1 then
    return {-3, id, 0, reclaimed}
  end
  local w = weight(id)
  local live = redis.call('ZCARD', leases)
  if redis.call('EXISTS', queue) == 1 then
    local dead = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
    if #dead > 0 then
      redis.call('ZREM', queue, unpack(dead))
      redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
    end
    local queued = redis.call('ZCARD', queue)
    -- Every waiter is owed at least one unit: only when that still fits
    -- are their weights read.
    if live + queued + w <= limit then
"#,
    unit_helpers!(owed),
    r#"      queued = owed(queue, queued)
    end
    live = live + queued
  end
  if live + w > limit then
    return {0, id, 0, reclaimed}
  end
  if w == 1 then
    redis.call('ZADD', leases, now + ttl, id)
  else
"#,
    unit_helpers!(add_units),
    r#"    add_units(leases, now + ttl, id)
  end
  if redis.call('PTTL', leases) < ttl then
    redis.call('PEXPIRE', leases, ttl + 1)
  end
end
"#,
    next_fencing_token!(),
    "return {1, id, token, reclaimed}\n"
);

/// Acquire a lease, or wait for one in the subject's queue: first come, first
/// served across the fleet.
///
/// The queue is a sorted set of waiter ids (the lease ids they will hold)
/// scored by arrival (a ticket: the server's clock in ms, or one past the
/// last ticket), beside a second sorted set of the same ids scored by when
/// each waiter expires unless its client calls again. A waiter at rank `r`
/// (0-based, live waiters only) is granted when `r < free`: every waiter
/// ahead of it can still be served from the free slots. So a free slot always
/// goes to the head of the queue, never to a later arrival; O(log n) per call
/// in queue length and live leases.
///
/// KEYS: lease set, tombstone, fencing counter, queue, waiters' expiries,
/// the subject's hold statistics (a hash: `avg` hold in ms, kept by
/// [`RELEASE`]; `limit` and `ttl`, written here for it). ARGV: ttl ms,
/// limit, lease id, valid-until (server ms), recovery hold key, how long the
/// waiter lives without another call (ms), how long its caller may still
/// wait (ms). Returns `{status, id, token, ahead, expected}`: statuses as
/// [`ACQUIRE`] (1 granted, -1, -2, -3 refused; the waiter leaves the queue
/// on -3), 2 queued: `ahead` slots must free before it is served, and
/// `expected` ms is the estimate of that (0 when none is known yet); 0 shed:
/// the estimate is longer than the caller may still wait, so it left the
/// queue at once instead of waiting for a certain failure.
pub const ACQUIRE_WAITING: &str = concat!(
    r#"
if redis.replicate_commands then redis.replicate_commands() end
"#,
    unit_helpers!(weight, add_units, owed),
    r#"local leases, tombstone, fence, queue, waiters, holds = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ttl, limit, id, valid_until = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local hold, lifetime, patience = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now > valid_until then
  return {-2, id, 0, 0, 0, 0}
end
if redis.call('EXISTS', tombstone) == 1 then
  return {-1, id, 0, 0, 0, 0}
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local w = weight(id)
if not redis.call('ZSCORE', leases, id) then
  if hold ~= '' and redis.call('EXISTS', hold) == 1 then
    redis.call('ZREM', queue, id)
    redis.call('ZREM', waiters, id)
    return {-3, id, 0, 0, 0, reclaimed}
  end
  if w > limit then
    -- It could never be served, and would block the queue behind it.
    redis.call('ZREM', queue, id)
    redis.call('ZREM', waiters, id)
    return {0, id, 0, w - limit, 0, reclaimed}
  end
  local dead = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
  if #dead > 0 then
    redis.call('ZREM', queue, unpack(dead))
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
  end
  local rank = redis.call('ZRANK', queue, id)
  local queued = rank ~= false
  if not queued then
    rank = redis.call('ZCARD', queue)
  end
  local free = limit - redis.call('ZCARD', leases)
  -- The units the waiters ahead wait for: at least one each, so their
  -- weights are read only when the rank alone leaves room.
  local before = rank
  if rank + w <= free then
    before = owed(queue, rank)
  end
  if before + w > free then
    local ahead = before + w - free
    local average = tonumber(redis.call('HGET', holds, 'avg') or '0')
    local expected = math.ceil(ahead * average / limit)
    if average > 0 and expected > patience then
      if queued then
        redis.call('ZREM', queue, id)
        redis.call('ZREM', waiters, id)
      end
      return {0, id, 0, ahead, expected, reclaimed}
    end
    if not queued then
      local ticket = now
      local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
      if last[2] and tonumber(last[2]) >= ticket then
        ticket = tonumber(last[2]) + 1
      end
      redis.call('ZADD', queue, ticket, id)
    end
    redis.call('ZADD', waiters, now + lifetime, id)
    redis.call('HSET', holds, 'limit', limit, 'ttl', ttl)
    if redis.call('PTTL', queue) < 2 * lifetime then
      redis.call('PEXPIRE', queue, 2 * lifetime)
      redis.call('PEXPIRE', waiters, 2 * lifetime)
    end
    return {2, id, 0, ahead, expected, reclaimed}
  end
  if queued then
    redis.call('ZREM', queue, id)
    redis.call('ZREM', waiters, id)
  end
  add_units(leases, now + ttl, id)
  if redis.call('PTTL', leases) < ttl then
    redis.call('PEXPIRE', leases, ttl + 1)
  end
else
  -- Held already: a slot a release handed over (reserved for the waiter's
  -- lifetime), confirmed here for a whole TTL; or a repeated call.
  add_units(leases, now + ttl, id, 'XX')
  if redis.call('PTTL', leases) < ttl then
    redis.call('PEXPIRE', leases, ttl + 1)
  end
end
"#,
    next_fencing_token!(),
    "return {1, id, token, 0, 0, reclaimed}\n"
);

/// Give leases back (all of one subject), and hand the freed slots to the
/// subject's waiters.
///
/// KEYS: lease set, wait queue, waiters' expiries, hold statistics, wake
/// channel, fencing counter. ARGV: how long the leases were held on average
/// (ms), then the ids. Returns how many were removed. Only when the subject
/// has a queue does it do more than `ZREM`. Then it drops the ids from the
/// queue (a failover can bring back the entry of a waiter served since),
/// folds the hold time into
/// the subject's average (each release weighing 1/8: the waiting script's
/// estimate), and hands every free slot to the live waiter first in line
/// for it: out of the queue, into the lease set until the waiter's entry
/// would have expired (a reservation its client confirms for a whole TTL at
/// once), with the next fencing token. The slot never stands free between two holders. It
/// publishes on the subject's shard channel (`SPUBLISH`, Redis 7) `H id
/// token id token…`, one pair per waiter served; the waiter's client hands
/// the permit to its caller on that message, without another round trip. A
/// waiter whose client died holds its reservation for its lifetime at most.
/// Without the waiters' settings (`limit` and `ttl` in the hash, written
/// when they queue) it names them instead (`N id…`), and they check again.
pub const RELEASE: &str = concat!(
    unit_helpers!(weight),
    r#"local removed = 0
local weighted = false
for i = 2, #ARGV do
  if string.find(ARGV[i], '*', 1, true) then
    weighted = true
  end
end
if weighted then
"#,
    unit_helpers!(units),
    r#"  for i = 2, #ARGV do
    removed = removed + redis.call('ZREM', KEYS[1], unpack((units(ARGV[i]))))
  end
else
  removed = redis.call('ZREM', KEYS[1], unpack(ARGV, 2))
end
local queued = redis.call('EXISTS', KEYS[2]) == 1
if queued then
  -- An id given back waits for nothing: a failover to a lagging replica
  -- can bring back the queue entry of a waiter served since, and handing
  -- that entry a slot would leave the slot to nobody.
  redis.call('ZREM', KEYS[2], unpack(ARGV, 2))
  redis.call('ZREM', KEYS[3], unpack(ARGV, 2))
  queued = redis.call('EXISTS', KEYS[2]) == 1
end
if removed > 0 and queued then
  local held = tonumber(ARGV[1])
  local average = tonumber(redis.call('HGET', KEYS[4], 'avg') or '')
  if average then
    average = average + (held - average) / 8
  else
    average = held
  end
  redis.call('HSET', KEYS[4], 'avg', string.format('%.3f', average))
  redis.call('PEXPIRE', KEYS[4], 3600000)
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #dead > 0 then
    redis.call('ZREM', KEYS[2], unpack(dead))
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  end
  local settings = redis.call('HMGET', KEYS[4], 'limit', 'ttl')
  local limit, ttl = tonumber(settings[1]), tonumber(settings[2])
  local free = removed
  if limit then
    free = math.max(removed, limit - redis.call('ZCARD', KEYS[1]))
  end
  -- First come, first served: the waiters first in line whose units fit,
  -- stopping at the first that does not (a heavy waiter is not overtaken).
  local first = {}
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, math.min(free, 64) - 1)) do
    local w = weight(id)
    if w > free then
      break
    end
    free = free - w
    first[#first + 1] = id
  end
  if #first > 0 and not ttl then
    if redis.REDIS_VERSION_NUM and redis.REDIS_VERSION_NUM >= 0x070000 then
      redis.call('SPUBLISH', KEYS[5], 'N ' .. table.concat(first, ' '))
    end
  elseif #first > 0 then
"#,
    unit_helpers!(add_units),
    r#"    local fence = KEYS[6]
"#,
    next_fencing_token!("#first"),
    r#"    local message = {'H'}
    local longest = 0
    for i, id in ipairs(first) do
      -- Reserved until the waiter's entry would have expired: its client
      -- checked within its lifetime, and confirms at once.
      local reserved = tonumber(redis.call('ZSCORE', KEYS[3], id))
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      add_units(KEYS[1], reserved, id)
      longest = math.max(longest, reserved - now)
      message[#message + 1] = id
      message[#message + 1] = string.format('%.0f', token + i - 1)
    end
    if redis.call('PTTL', KEYS[1]) < longest then
      redis.call('PEXPIRE', KEYS[1], longest + 1)
    end
    if redis.REDIS_VERSION_NUM and redis.REDIS_VERSION_NUM >= 0x070000 then
      redis.call('SPUBLISH', KEYS[5], table.concat(message, ' '))
    end
  end
end
return removed
"#
);

/// A waiter leaves the queue (its caller gave up, or its deadline passed),
/// and the waiters behind it are woken: they may now fit in free slots.
///
/// KEYS: queue, waiters' expiries, wake channel, lease set. ARGV: the
/// waiter's id. Returns 1 if it was queued or held a slot a release handed
/// it (its caller left before the message came), else 0.
pub const LEAVE: &str = concat!(
    unit_helpers!(weight, units),
    r#"local removed = redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('ZREM', KEYS[4], unpack((units(ARGV[1]))))
redis.call('ZREM', KEYS[2], ARGV[1])
if removed > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.REDIS_VERSION_NUM and redis.REDIS_VERSION_NUM >= 0x070000 then
    redis.call('SPUBLISH', KEYS[3], 0)
  end
end
return math.min(removed, 1)
"#
);

/// Acquire several leases of one subject in one call: `ACQUIRE` for each id
/// in turn, at one server instant. Redis's thread pays mostly per command, so
/// a batch costs a fraction of as many single calls.
///
/// KEYS: lease set, fencing counter, wait queue, waiters' expiries, then
/// each id's tombstone. ARGV: ttl ms, limit, valid-until (server ms),
/// recovery hold key (empty for none), then the ids, in the order of the
/// tombstones (`ARGV[i]`'s tombstone is `KEYS[i]`). Returns `{status, id,
/// token, ...}`, one triple per id, with `ACQUIRE`'s statuses (and its
/// fairness to queued waiters); grants take increasing tokens in the order
/// of the ids.
pub const ACQUIRE_MANY: &str = concat!(
    r#"
if redis.replicate_commands then redis.replicate_commands() end
"#,
    unit_helpers!(weight, add_units, owed),
    r#"local leases, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, limit, valid_until, hold = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local reply, added, granted, grew = {}, {}, 0, false
if now > valid_until then
  for i = 5, #ARGV do
    reply[#reply + 1] = -2
    reply[#reply + 1] = ARGV[i]
    reply[#reply + 1] = 0
  end
  reply[#reply + 1] = 0
  return reply
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local live = redis.call('ZCARD', leases)
if redis.call('EXISTS', queue) == 1 then
  local dead = redis.call('ZRANGEBYSCORE', waiters, '-inf', now)
  if #dead > 0 then
    redis.call('ZREM', queue, unpack(dead))
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
  end
  local queued = redis.call('ZCARD', queue)
  if live + queued < limit then
    queued = owed(queue, queued)
  end
  live = live + queued
end
local held = hold ~= '' and redis.call('EXISTS', hold) == 1
for i = 5, #ARGV do
  local id, status = ARGV[i], 1
  if redis.call('EXISTS', KEYS[i]) == 1 then
    status = -1
  elseif redis.call('ZSCORE', leases, id) then
    status = 1
  elseif held then
    status = -3
  else
    local w = weight(id)
    if live + w > limit then
      status = 0
    elseif w == 1 then
      live = live + 1
      added[#added + 1] = now + ttl
      added[#added + 1] = id
    else
      live = live + w
      add_units(leases, now + ttl, id)
      grew = true
    end
  end
  if status == 1 then
    granted = granted + 1
  end
  reply[#reply + 1] = status
  reply[#reply + 1] = id
  reply[#reply + 1] = 0
end
if #added > 0 then
  redis.call('ZADD', leases, unpack(added))
  grew = true
end
if grew and redis.call('PTTL', leases) < ttl then
  redis.call('PEXPIRE', leases, ttl + 1)
end
if granted > 0 then
"#,
    next_fencing_token!("granted"),
    r#"  for i = 1, #reply, 3 do
    if reply[i] == 1 then
      reply[i + 2] = token
      token = token + 1
    end
  end
end
reply[#reply + 1] = reclaimed
return reply
"#
);

/// The most leases one `ACQUIRE_MANY` asks for: its reply (two items per
/// lease) stays within the default reply limits.
pub const MAX_BATCH: usize = 16;

/// The most leases one `ZREM` gives back.
pub const MAX_RELEASE_BATCH: usize = 64;

/// Compensating release: drop the lease and, while the acquire it answers
/// may still run, leave a tombstone so that it takes no slot when it does.
///
/// KEYS: lease set, tombstone, wait queue, waiters' expiries, wake channel.
/// ARGV: the acquire's valid-until (server ms; 0 when its reply was read, so
/// it has run), lease id. Returns the id. The tombstone lives exactly until
/// that acquire turns stale: after that the acquire script refuses it
/// anyway, so no tombstone outlives its use. The id also leaves the wait
/// queue (a waiter whose caller left may be queued rather than granted), and
/// when the subject has a queue its waiters are woken: a slot may be free.
pub const COMPENSATE: &str = concat!(
    r#"
if redis.replicate_commands then redis.replicate_commands() end
"#,
    unit_helpers!(weight, units),
    r#"local valid_until, id = tonumber(ARGV[1]), ARGV[2]
redis.call('ZREM', KEYS[1], unpack((units(id))))
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now <= valid_until then
  redis.call('SET', KEYS[2], '1', 'PX', valid_until - now + 1)
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  if redis.REDIS_VERSION_NUM and redis.REDIS_VERSION_NUM >= 0x070000 then
    redis.call('SPUBLISH', KEYS[5], 0)
  end
end
return id
"#
);

/// The status the acquire and renew scripts answer when they run after the
/// request's valid-until: nothing was done, so nothing needs undoing.
pub const STALE: i64 = -2;

/// The status the acquire scripts answer while the server's recovery hold is
/// set (lease data was lost, and the fleet is writing back what it holds):
/// no new lease was taken.
pub const RECOVERING: i64 = -3;

/// Write back a lease its holder still has, after the server may have lost
/// it (an empty restart, a failover, a flush). Idempotent: a lease that
/// survived is untouched. It ignores the recovery hold, which exists for it.
///
/// KEYS: lease set. ARGV: lease id, its remaining lifetime (ms), the limit it
/// was granted under. Returns `{status, lease id}`: 1 it survived, 2 written
/// back, 3 written back and the subject now holds more leases than the limit
/// (an over-admission during the loss, detected). A lease that survived with
/// an older expiry (a renewal the failover lost) gets its holder's expiry back.
pub const REASSERT: &str = concat!(
    unit_helpers!(weight, add_units),
    r#"local leases, id = KEYS[1], ARGV[1]
local remaining, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
local expiry = redis.call('ZSCORE', leases, id)
if expiry then
  if tonumber(expiry) < now + remaining then
    add_units(leases, now + remaining, id, 'XX')
    if redis.call('PTTL', leases) < remaining then
      redis.call('PEXPIRE', leases, remaining + 1)
    end
  end
  return {1, id}
end
add_units(leases, now + remaining, id)
if redis.call('PTTL', leases) < remaining then
  redis.call('PEXPIRE', leases, remaining + 1)
end
if redis.call('ZCARD', leases) > limit then
  return {3, id}
end
return {2, id}
"#
);

/// The lease-data marker: a key this library keeps on the server so that
/// "restarted with its data" and "restarted empty" (or flushed) are told
/// apart. KEYS: the marker. ARGV: a value to write if it is missing. Returns
/// `{created, value}`: 1 and `ARGV[1]` if it was missing, else 0 and its value.
pub const MARK: &str = r#"
local value = redis.call('GET', KEYS[1])
if value then
  return {0, value}
end
redis.call('SET', KEYS[1], ARGV[1])
return {1, ARGV[1]}
"#;

/// Sets the recovery hold for at least `ARGV[1]` ms (never shortens it): the
/// acquire scripts grant nothing new while it exists. KEYS: the hold key.
/// Returns the hold's remaining milliseconds.
pub const HOLD: &str = r#"
local window = tonumber(ARGV[1])
local left = redis.call('PTTL', KEYS[1])
if left < window then
  redis.call('SET', KEYS[1], '1', 'PX', window)
  return window
end
return left
"#;

/// Extend a lease its holder still has: a long request renews before the TTL
/// runs out, so the TTL can stay short (a crashed replica's slots come back
/// soon) while a request runs as long as it needs.
///
/// KEYS: lease set. ARGV: ttl ms, lease id, valid-until (server ms). Returns
/// `{status, lease id}`: 1 extended to `now + ttl`, 0 the lease is gone
/// (expired or released), -2 stale (ran after valid-until, changed nothing). It
/// never creates a lease (`ZADD XX`), so a renewal whose bytes reach Redis late,
/// after the lease was released, cannot bring it back.
pub const RENEW: &str = concat!(
    r#"
if redis.replicate_commands then redis.replicate_commands() end
"#,
    unit_helpers!(weight, add_units),
    r#"local leases = KEYS[1]
local ttl, id, valid_until = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now > valid_until then
  return {-2, id, 0}
end
local reclaimed = redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if not redis.call('ZSCORE', leases, id) then
  return {0, id, reclaimed}
end
add_units(leases, now + ttl, id, 'XX')
if redis.call('PTTL', leases) < ttl then
  redis.call('PEXPIRE', leases, ttl + 1)
end
return {1, id, reclaimed}
"#
);

/// What a subject holds now, for operators (read only: it prunes nothing).
///
/// KEYS: lease set, hold statistics. ARGV: the most holders to list (0:
/// only the count). Returns `{now ms, live units, limit or -1, id, expiry
/// ms, id, expiry ms, …}`: the units whose expiry is after now, the limit
/// the subject's waiters last recorded (-1 if none did), then the live
/// leases (their own ids, not their extra units) with their expiries, in
/// expiry order. O(log n) for the count; listing reads every live member.
pub const INSPECT: &str = r#"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local after = '(' .. now
local reply = {now, redis.call('ZCOUNT', KEYS[1], after, '+inf')}
reply[3] = tonumber(redis.call('HGET', KEYS[2], 'limit') or '-1')
local most = tonumber(ARGV[1])
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
"#;

/// A script's text and its SHA1, the name `EVALSHA` knows it by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// The Lua source.
    pub text: &'static str,
    /// Its SHA1 in hex.
    pub sha: String,
}

impl Script {
    /// `text` with its SHA1.
    pub fn new(text: &'static str) -> Self {
        Self {
            text,
            sha: sha1_smol::Sha1::from(text).digest().to_string(),
        }
    }
}

/// Which of our scripts a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptKind {
    // Those the handshake loads come first (`ALL`): a connection's reload
    // flags are indexed by kind.
    /// Takes one lease if the limit allows.
    Acquire,
    /// Releases a lease no caller got and tombstones its id.
    Compensate,
    /// Extends a live lease; never creates one.
    Renew,
    /// Several acquires of one subject and limit in one call.
    AcquireMany,
    /// Takes a lease or waits for one in the subject's queue.
    AcquireWaiting,
    /// Gives leases back and wakes the subject's waiters.
    Release,
    /// Takes a waiter out of its queue.
    Leave,
    /// Writes back a held lease after lost data (sent as `EVAL`: rare).
    Reassert,
    /// Reads (or creates) the lease-data marker at each handshake (`EVAL`).
    Mark,
    /// Sets the recovery hold after lost data (`EVAL`).
    Hold,
    /// Reads what a subject holds, for operators (`EVAL`).
    Inspect,
}

impl ScriptKind {
    /// The scripts the handshake loads, in its order (the others run rarely,
    /// by text).
    pub const ALL: [ScriptKind; 7] = [
        ScriptKind::Acquire,
        ScriptKind::Compensate,
        ScriptKind::Renew,
        ScriptKind::AcquireMany,
        ScriptKind::AcquireWaiting,
        ScriptKind::Release,
        ScriptKind::Leave,
    ];
}

/// Our scripts, hashed once per client.
#[derive(Debug, Clone)]
pub struct Scripts {
    /// [`ScriptKind::Acquire`].
    pub acquire: Script,
    /// [`ScriptKind::Compensate`].
    pub compensate: Script,
    /// [`ScriptKind::Renew`].
    pub renew: Script,
    /// [`ScriptKind::AcquireMany`].
    pub acquire_many: Script,
    /// [`ScriptKind::Reassert`].
    pub reassert: Script,
    /// [`ScriptKind::Mark`].
    pub mark: Script,
    /// [`ScriptKind::Hold`].
    pub hold: Script,
    /// [`ScriptKind::AcquireWaiting`].
    pub acquire_waiting: Script,
    /// [`ScriptKind::Release`].
    pub release: Script,
    /// [`ScriptKind::Leave`].
    pub leave: Script,
    /// [`ScriptKind::Inspect`].
    pub inspect: Script,
}

impl Default for Scripts {
    fn default() -> Self {
        Self {
            acquire: Script::new(ACQUIRE),
            compensate: Script::new(COMPENSATE),
            renew: Script::new(RENEW),
            acquire_many: Script::new(ACQUIRE_MANY),
            reassert: Script::new(REASSERT),
            mark: Script::new(MARK),
            hold: Script::new(HOLD),
            acquire_waiting: Script::new(ACQUIRE_WAITING),
            release: Script::new(RELEASE),
            leave: Script::new(LEAVE),
            inspect: Script::new(INSPECT),
        }
    }
}

impl Scripts {
    /// The script of `kind`.
    pub fn get(&self, kind: ScriptKind) -> &Script {
        match kind {
            ScriptKind::Acquire => &self.acquire,
            ScriptKind::Compensate => &self.compensate,
            ScriptKind::Renew => &self.renew,
            ScriptKind::AcquireMany => &self.acquire_many,
            ScriptKind::Reassert => &self.reassert,
            ScriptKind::Mark => &self.mark,
            ScriptKind::Hold => &self.hold,
            ScriptKind::AcquireWaiting => &self.acquire_waiting,
            ScriptKind::Release => &self.release,
            ScriptKind::Leave => &self.leave,
            ScriptKind::Inspect => &self.inspect,
        }
    }

    /// `EVALSHA sha numkeys keys.. args..`, or `EVAL text ..` when `by_text`.
    pub fn encode_call(&self, out: &mut BytesMut, kind: ScriptKind, by_text: bool, keys: &[&[u8]], args: &[&[u8]]) {
        let script = self.get(kind);
        let (verb, body): (&[u8], &[u8]) = if by_text {
            (b"EVAL", script.text.as_bytes())
        } else {
            (b"EVALSHA", script.sha.as_bytes())
        };
        let numkeys = [b'0' + keys.len() as u8];
        debug_assert!(keys.len() < 10 && 3 + keys.len() + args.len() <= 16);
        let mut command: [&[u8]; 16] = [b""; 16];
        command[..3].copy_from_slice(&[verb, body, &numkeys]);
        command[3..3 + keys.len()].copy_from_slice(keys);
        let used = 3 + keys.len();
        command[used..used + args.len()].copy_from_slice(args);
        encode_command(out, &command[..used + args.len()]);
    }

    /// `EVALSHA` of `ACQUIRE_MANY`: the lease set, fencing counter, wait
    /// queue and waiters' expiries, one tombstone per id, the TTL, limit,
    /// valid-until and hold key, then the ids (in the tombstones' order).
    #[allow(clippy::too_many_arguments)] // the script's arguments, named
    pub fn encode_acquire_many(
        &self,
        out: &mut BytesMut,
        subject: [&[u8]; 4],
        tombstones: &[&[u8]],
        ttl_ms: &[u8],
        limit: &[u8],
        valid_until: &[u8],
        hold: &[u8],
        ids: &[&[u8]],
    ) {
        let numkeys = (4 + tombstones.len()).to_string();
        let mut command: Vec<&[u8]> = Vec::with_capacity(10 + tombstones.len() + ids.len());
        command.extend([
            b"EVALSHA".as_slice(),
            self.acquire_many.sha.as_bytes(),
            numkeys.as_bytes(),
        ]);
        command.extend(subject);
        command.extend_from_slice(tombstones);
        command.extend([ttl_ms, limit, valid_until, hold]);
        command.extend_from_slice(ids);
        encode_command(out, &command);
    }

    /// `RELEASE` of leases of one subject (`EVALSHA`, or `EVAL` with the
    /// text when `by_text`): the subject's six keys, how long the leases were
    /// held on average (ms), the ids.
    pub fn encode_release<'a>(
        &self,
        out: &mut BytesMut,
        keys: &SubjectKeys,
        by_text: bool,
        held_ms: u64,
        ids: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let ids: Vec<&[u8]> = ids.into_iter().collect();
        let (queue, waiters, holds, wake) = (keys.queue(), keys.waiters(), keys.holds(), keys.wake_channel());
        let fence = keys.fence();
        let held = held_ms.to_string();
        let (verb, body): (&[u8], &[u8]) = if by_text {
            (b"EVAL", self.release.text.as_bytes())
        } else {
            (b"EVALSHA", self.release.sha.as_bytes())
        };
        let mut command: Vec<&[u8]> = vec![
            verb,
            body,
            b"6",
            keys.leases(),
            &queue,
            &waiters,
            &holds,
            &wake,
            &fence,
            held.as_bytes(),
        ];
        command.extend_from_slice(&ids);
        encode_command(out, &command);
    }

    /// Appends `SCRIPT LOAD` of the script of `kind` to `out`.
    pub fn encode_load(&self, out: &mut BytesMut, kind: ScriptKind) {
        encode_command(out, &[b"SCRIPT", b"LOAD", self.get(kind).text.as_bytes()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_is_the_sha1_redis_computes() {
        // The SHA1 of "return 1", as `SCRIPT LOAD "return 1"` answers.
        assert_eq!(Script::new("return 1").sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }

    #[test]
    fn acquire_and_compensate_calls_encode_literally() {
        let scripts = Scripts::default();
        let mut out = BytesMut::new();
        scripts.encode_call(
            &mut out,
            ScriptKind::Acquire,
            false,
            &[b"L", b"T"],
            &[b"1000", b"5", b"id"],
        );
        let sha = &scripts.acquire.sha;
        let expected = format!(
            "*8\r\n$7\r\nEVALSHA\r\n$40\r\n{sha}\r\n$1\r\n2\r\n$1\r\nL\r\n$1\r\nT\r\n$4\r\n1000\r\n$1\r\n5\r\n$2\r\nid\r\n"
        );
        assert_eq!(out, expected.as_bytes());

        out.clear();
        scripts.encode_call(&mut out, ScriptKind::Compensate, true, &[b"L", b"T"], &[b"9", b"id"]);
        let text = COMPENSATE;
        let expected = format!(
            "*7\r\n$4\r\nEVAL\r\n${}\r\n{text}\r\n$1\r\n2\r\n$1\r\nL\r\n$1\r\nT\r\n$1\r\n9\r\n$2\r\nid\r\n",
            text.len()
        );
        assert_eq!(out, expected.as_bytes());
    }

    #[test]
    fn renew_call_encodes_literally_with_one_key() {
        let scripts = Scripts::default();
        let mut out = BytesMut::new();
        scripts.encode_call(&mut out, ScriptKind::Renew, false, &[b"L"], &[b"1000", b"id"]);
        let sha = &scripts.renew.sha;
        let expected =
            format!("*6\r\n$7\r\nEVALSHA\r\n$40\r\n{sha}\r\n$1\r\n1\r\n$1\r\nL\r\n$4\r\n1000\r\n$2\r\nid\r\n");
        assert_eq!(out, expected.as_bytes());
    }

    #[test]
    fn acquire_many_encodes_literally() {
        let scripts = Scripts::default();
        let mut out = BytesMut::new();
        scripts.encode_acquire_many(
            &mut out,
            [b"L", b"F", b"Q", b"W"],
            &[b"T1", b"T2"],
            b"1000",
            b"5",
            b"99",
            b"",
            &[b"a", b"b"],
        );
        let sha = &scripts.acquire_many.sha;
        let expected = format!(
            "*15\r\n$7\r\nEVALSHA\r\n$40\r\n{sha}\r\n$1\r\n6\r\n$1\r\nL\r\n$1\r\nF\r\n$1\r\nQ\r\n$1\r\nW\r\n$2\r\nT1\r\n$2\r\nT2\r\n$4\r\n1000\r\n$1\r\n5\r\n$2\r\n99\r\n$0\r\n\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(out, expected.as_bytes());
    }

    #[test]
    fn script_load_carries_the_text() {
        let scripts = Scripts::default();
        let mut out = BytesMut::new();
        scripts.encode_load(&mut out, ScriptKind::Compensate);
        let expected = format!(
            "*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n${}\r\n{COMPENSATE}\r\n",
            COMPENSATE.len()
        );
        assert_eq!(out, expected.as_bytes());
    }
}
