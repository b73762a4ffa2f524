//! The scripts, as the model runs them: each one the same Redis commands in
//! the same order as its Lua file (`src/scripts/`), on the model's keyspace,
//! so that every answer and every key (its value and its expiry) comes out
//! as Redis's. The helpers mirror `src/scripts/lib/`.

use bytes::Bytes;

use super::store::ZaddFlags;
use super::RedisModel;
use inflight_core::resp::Frame;
use inflight_core::scripts::ScriptKind;

/// A script that stopped with an error reply (before writing anything).
pub(super) type Stop = Frame;

/// `lib/queue.lua`'s `WALK`.
pub(super) const WALK: usize = 128;

pub(super) fn int(n: i64) -> Frame {
    Frame::Integer(n)
}

pub(super) fn bulk(b: &Bytes) -> Frame {
    Frame::BulkString(b.clone())
}

pub(super) fn text(n: u64) -> Bytes {
    Bytes::from(n.to_string())
}

/// `lib/args.lua`'s `integer`: a whole number of at least `least`, in plain
/// decimal (no sign, no leading zero, no exponent).
pub(super) fn integer(value: &[u8], name: &str, least: u64) -> Result<u64, Stop> {
    let plain = value == b"0" || (value.first() != Some(&b'0') && value.iter().all(u8::is_ascii_digit));
    let n = plain
        .then(|| std::str::from_utf8(value).ok()?.parse::<u64>().ok())
        .flatten();
    match n {
        Some(n) if n >= least && n < 1 << 53 => Ok(n),
        _ => Err(Frame::Error(
            format!(
                "ERR inflight: {name} must be a whole number of at least {least}, not {}",
                String::from_utf8_lossy(value)
            )
            .into(),
        )),
    }
}

/// The scripts' yes-or-no argument: `1` or `0`.
pub(super) fn flag(value: &[u8], name: &str) -> Result<bool, Stop> {
    match value {
        b"1" => Ok(true),
        b"0" => Ok(false),
        _ => Err(Frame::Error(
            format!(
                "ERR inflight: {name} must be 1 or 0, not {}",
                String::from_utf8_lossy(value)
            )
            .into(),
        )),
    }
}

/// Lua's `tonumber` of a string (decimal or hex, spaces around allowed).
pub(super) fn lua_number(value: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(|n| n as f64);
    }
    text.parse::<f64>().ok()
}

/// `lib/weight.lua`.
pub(super) fn weight(id: &[u8]) -> Result<u64, Stop> {
    if id.contains(&b'#') {
        return Err(Frame::Error(
            format!("ERR inflight: lease id {} holds a #", String::from_utf8_lossy(id)).into(),
        ));
    }
    let Some(star) = id.iter().position(|&b| b == b'*') else {
        return Ok(1);
    };
    let digits = id[star + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
    let w = std::str::from_utf8(&id[star + 1..star + 1 + digits])
        .ok()
        .and_then(|d| d.parse::<f64>().ok());
    match w {
        Some(w) if (1.0..=1000.0).contains(&w) => Ok(w as u64),
        _ => Err(Frame::Error(
            format!(
                "ERR inflight: lease id {} names no weight between 1 and 1000",
                String::from_utf8_lossy(id)
            )
            .into(),
        )),
    }
}

/// `lib/units.lua` (for an id `weight` accepted).
pub(super) fn units(id: &Bytes) -> Vec<Bytes> {
    let w = weight(id).unwrap_or(1);
    let mut all = vec![id.clone()];
    for i in 2..=w {
        let mut unit = id.to_vec();
        unit.extend_from_slice(format!("#{i}").as_bytes());
        all.push(Bytes::from(unit));
    }
    all
}

impl RedisModel {
    /// Runs script `kind` with `keys` and `argv`.
    pub(super) fn run(&mut self, kind: ScriptKind, keys: &[Bytes], argv: &[Bytes]) -> Frame {
        let arity = match kind {
            ScriptKind::Acquire => (6, 6),
            ScriptKind::AcquireWaiting => (7, 7),
            ScriptKind::Release => (6, 2),
            ScriptKind::Compensate => (6, 2),
            ScriptKind::Leave => (5, 1),
            ScriptKind::Renew => (1, 3),
            ScriptKind::Reassert => (5, 4),
            ScriptKind::Mark => (1, 2),
            ScriptKind::Hold => (1, 1),
            ScriptKind::Inspect => (3, 1),
            ScriptKind::AcquireMany => (5, 4),
            ScriptKind::AcquireAcross | ScriptKind::AcquireAll => (6, 6),
        };
        let at_least = matches!(
            kind,
            ScriptKind::Release
                | ScriptKind::AcquireMany
                | ScriptKind::AcquireAcross
                | ScriptKind::AcquireAll
                | ScriptKind::AcquireWaiting
        );
        if keys.len() < arity.0 || argv.len() < arity.1 || (!at_least && (keys.len(), argv.len()) != arity) {
            // The scripts index past what they were given: nil arguments,
            // which `integer` refuses first.
            return Frame::Error("ERR inflight: wrong number of keys or arguments".into());
        }
        let named = match kind {
            ScriptKind::Renew => argv.get(1),
            ScriptKind::AcquireWaiting => argv.get(2),
            ScriptKind::Leave => argv.first(),
            _ => None,
        };
        if let Some(id) = named {
            self.named.push(id.clone());
        }
        let ran = match kind {
            ScriptKind::Acquire => self.acquire(keys, argv),
            ScriptKind::AcquireWaiting => self.acquire_waiting(keys, argv),
            ScriptKind::AcquireMany => self.acquire_many(keys, argv),
            ScriptKind::AcquireAcross => self.acquire_across(keys, argv),
            ScriptKind::AcquireAll => self.acquire_all(keys, argv),
            ScriptKind::Release => self.release(keys, argv),
            ScriptKind::Compensate => self.compensate(keys, argv),
            ScriptKind::Leave => self.leave(keys, argv),
            ScriptKind::Renew => self.renew(keys, argv),
            ScriptKind::Reassert => self.reassert(keys, argv),
            ScriptKind::Mark => self.mark(keys, argv),
            ScriptKind::Hold => self.hold(keys, argv),
            ScriptKind::Inspect => self.inspect(keys, argv),
        };
        ran.unwrap_or_else(|stop| stop)
    }

    // ---- lib/ -------------------------------------------------------------

    pub(super) fn now(&self) -> u64 {
        self.store.now
    }

    pub(super) fn add_units(&mut self, key: &Bytes, score: u64, id: &Bytes, flags: ZaddFlags) -> usize {
        let pairs: Vec<(u64, Bytes)> = units(id).into_iter().map(|unit| (score, unit)).collect();
        self.store.zadd(key, flags, &pairs)
    }

    pub(super) fn cover(&mut self, key: &Bytes, ms: i64) {
        self.cover_to(key, ms, ms);
    }

    /// `cover(key, ms, to)` of `lib/cover.lua`: a key with less than `ms`
    /// left is given `to` (the queue's keys: twice a waiter's lifetime).
    pub(super) fn cover_to(&mut self, key: &Bytes, ms: i64, to: i64) {
        if self.store.pttl(key) < ms {
            self.store.pexpire(key, to + 1);
        }
    }

    pub(super) fn next_tokens(&mut self, fence: &Bytes, ttl: u64, n: u64) -> u64 {
        let mut token = self.now() * 1000;
        let last = self.store.set(fence, text(token + n - 1), Some(ttl));
        if let Some(last) = last.and_then(|l| lua_number(&l)).map(|l| l as u64) {
            if last >= token {
                token = last + 1;
                self.store.set(fence, text(token + n - 1), Some(ttl));
            }
        }
        token
    }

    pub(super) fn leave_queue(&mut self, queue: &Bytes, waiters: &Bytes, holds: &Bytes, ids: &[Bytes]) {
        self.store.zrem(queue, ids);
        self.store.zrem(waiters, ids);
        self.store.hdel(holds, ids);
    }

    /// A waiter gone on under `id` from `previous` takes what `previous` has
    /// now: a slot handed to it, or its place in the queue if its waiter is
    /// still live (nothing if `id` holds a lease already).
    pub(super) fn take_over(
        &mut self,
        [leases, queue, waiters, holds]: [&Bytes; 4],
        previous: &Bytes,
        id: &Bytes,
        limit: u64,
        lifetime: u64,
    ) {
        if self.store.zscore(leases, id).is_some() {
            return;
        }
        // Only a reservation (within a lifetime of now) moves.
        let now = self.now();
        let reserved = self
            .store
            .zscore(leases, previous)
            .filter(|until| *until <= now + lifetime);
        if let Some(until) = reserved {
            self.store.zrem(leases, &units(previous));
            self.add_units(leases, until, id, ZaddFlags::default());
        }
        if let Some(ticket) = self.store.zscore(queue, previous) {
            // Only a live waiter's place moves.
            let alive = self.store.zscore(waiters, previous).is_some_and(|until| until > now);
            self.leave_queue(queue, waiters, holds, std::slice::from_ref(previous));
            if alive && reserved.is_none() {
                self.store.zadd(queue, ZaddFlags::default(), &[(ticket, id.clone())]);
                self.store
                    .zadd(waiters, ZaddFlags::default(), &[(now + lifetime, id.clone())]);
                self.store.hset(holds, &[(id.clone(), text(limit))]);
            }
        }
    }

    pub(super) fn prune_waiters(&mut self, queue: &Bytes, waiters: &Bytes, holds: &Bytes) -> usize {
        let dead = self.store.zrangebyscore(waiters, self.now(), 256);
        if !dead.is_empty() {
            self.leave_queue(queue, waiters, holds, &dead);
        }
        self.store.zcard(queue)
    }

    /// A limit kept in the held hash under `field` (a waiter's id, or
    /// `limit`: the last recorded).
    pub(super) fn limit_of(&mut self, holds: &Bytes, field: &[u8]) -> Option<u64> {
        if self.last_limit_for_all && field != b"limit" {
            return None;
        }
        self.own_limit(holds, field)
    }

    /// The limit kept under `field`, bugs aside.
    pub(super) fn own_limit(&mut self, holds: &Bytes, field: &[u8]) -> Option<u64> {
        self.store
            .hget(holds, field)
            .and_then(|l| lua_number(&l))
            .map(|l| l as u64)
    }

    /// `lib/queue.lua`'s `claim`: (fits, used, owed, room); `room` is
    /// `u64::MAX` when no waiter walked fits.
    pub(super) fn claim(
        &mut self,
        queue: &Bytes,
        holds: &Bytes,
        mut used: u64,
        count: usize,
        w: u64,
        limit: u64,
    ) -> (bool, u64, u64, u64) {
        if used + w > limit {
            return (false, used, count as u64, 0);
        }
        let (mut blocked, mut start, mut owed, mut room) = (0u64, 0usize, 0u64, u64::MAX);
        while start < count {
            if start >= WALK {
                return (false, used, owed + (count - start) as u64, room);
            }
            let window = limit.saturating_sub(used).max(1) as usize;
            let stop = count.min(WALK).min(start + window + 1) - 1;
            let ids = self.store.zrange(queue, start, stop);
            if ids.is_empty() {
                break;
            }
            let recorded = self.limit_of(holds, b"limit");
            for (i, id) in ids.iter().enumerate() {
                let own = self.limit_of(holds, id).or(recorded).unwrap_or(limit);
                let units = weight(id).unwrap_or(1);
                owed += units;
                let rest = (count - start - i - 1) as u64;
                if own > blocked && used + units <= own {
                    used += units;
                    room = room.min(own - used);
                    if used + w > limit || (w > room && !self.ignore_room) {
                        return (false, used, owed + rest, room);
                    }
                } else {
                    blocked = blocked.max(own);
                    if blocked >= limit {
                        return (false, used, owed + rest, room);
                    }
                }
            }
            start += ids.len();
        }
        (true, used, owed, room)
    }
}
