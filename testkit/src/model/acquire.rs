//! The acquire scripts, as the model runs them (see `scripts.rs`).

use bytes::Bytes;

use super::release::freed_by;
use super::scripts::{bulk, flag, int, integer, lua_number, text, weight, Stop};
use super::store::ZaddFlags;
use super::RedisModel;
use inflight_core::resp::Frame;
use inflight_core::scripts::{RECOVERING, STALE, WITHHELD};

/// One fail-fast acquire's six keys and six arguments, checked.
#[derive(Clone, Copy)]
struct Part<'a> {
    leases: &'a Bytes,
    tombstone: &'a Bytes,
    fence: &'a Bytes,
    queue: &'a Bytes,
    waiters: &'a Bytes,
    holds: &'a Bytes,
    expiry: u64,
    limit: u64,
    id: &'a Bytes,
    valid_until: u64,
    hold: &'a Bytes,
    fenced: bool,
    w: u64,
}

impl<'a> Part<'a> {
    fn read(keys: &'a [Bytes], argv: &'a [Bytes]) -> Result<Self, Stop> {
        Ok(Self {
            leases: &keys[0],
            tombstone: &keys[1],
            fence: &keys[2],
            queue: &keys[3],
            waiters: &keys[4],
            holds: &keys[5],
            expiry: integer(&argv[0], "expiry", 1)?,
            limit: integer(&argv[1], "limit", 1)?,
            id: &argv[2],
            valid_until: integer(&argv[3], "valid-until", 0)?,
            hold: &argv[4],
            fenced: flag(&argv[5], "fencing")?,
            w: weight(&argv[2])?,
        })
    }
}

/// What `admit_one` answers.
struct Admitted {
    status: i64,
    reclaimed: usize,
    /// The id holds no lease yet: the grant writes one.
    fresh: bool,
    /// Units owed to waiters that fit, and what a newcomer may take (the
    /// record's).
    ahead: u64,
    free: u64,
}

impl RedisModel {
    pub(super) fn acquire(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let part = Part::read(keys, argv)?;
        let now = self.time();
        let admitted = self.admit(&part, now);
        let (status, token) = match admitted.status {
            1 => (1, self.grant(&part, &admitted, now)),
            status => (status, 0),
        };
        Ok(Frame::Array(vec![
            int(status),
            bulk(part.id),
            int(token as i64),
            int(admitted.reclaimed as i64),
        ]))
    }

    /// `ACQUIRE_ALL` (`scripts/acquire_all.lua`): every subject admitted
    /// before any is granted; all granted or none.
    pub(super) fn acquire_all(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let n = argv.len() / 6;
        if n == 0 || argv.len() != 6 * n || keys.len() != 6 * n {
            return Err(Frame::Error(
                "ERR inflight: ACQUIRE_ALL takes six keys and six arguments per subject".into(),
            ));
        }
        let mut parts = Vec::with_capacity(n);
        for (keys, args) in keys.chunks_exact(6).zip(argv.chunks_exact(6)) {
            let part = Part::read(keys, args)?;
            if parts.iter().any(|p: &Part| p.leases == part.leases) {
                return Err(Frame::Error("ERR inflight: ACQUIRE_ALL takes each subject once".into()));
            }
            parts.push(part);
        }
        self.batches += 1;
        self.in_call = Some(self.batches);
        let now = self.time();
        let admitted: Vec<Admitted> = parts.iter().map(|part| self.admit(part, now)).collect();
        // The injected bug grants what was admitted, refused or not.
        let refused = admitted.iter().any(|a| a.status != 1) && !self.grant_all_unchecked;
        let mut reply = Vec::with_capacity(3 * n + 1);
        let mut reclaimed = 0;
        for (part, admitted) in parts.iter().zip(&admitted) {
            reclaimed += admitted.reclaimed;
            let (status, token) = match admitted.status {
                1 if refused => {
                    self.record(part.leases, part.id, WITHHELD, 0, (0, 0));
                    (WITHHELD, 0)
                }
                1 => (1, self.grant(part, admitted, now)),
                status => (status, 0),
            };
            reply.extend([int(status), bulk(part.id), int(token as i64)]);
        }
        self.in_call = None;
        reply.push(int(reclaimed as i64));
        Ok(Frame::Array(reply))
    }

    /// `admit_one` (`lib/acquire_one.lua`): whether one fail-fast acquire
    /// may take its units, writing nothing but prunes. A refusal is
    /// recorded here, a grant by [`RedisModel::grant`].
    fn admit(&mut self, part: &Part, now: u64) -> Admitted {
        let Part {
            leases,
            tombstone,
            queue,
            waiters,
            holds,
            expiry,
            limit,
            id,
            valid_until,
            hold,
            w,
            ..
        } = *part;
        let refused = |status, reclaimed| Admitted {
            status,
            reclaimed,
            fresh: false,
            ahead: 0,
            free: 0,
        };
        if now > valid_until || expiry <= now {
            self.record(leases, id, STALE, 0, (0, 0));
            return refused(STALE, 0);
        }
        if self.store.exists(tombstone) {
            self.record(leases, id, -1, 0, (0, 0));
            return refused(-1, 0);
        }
        // With no queue and no hold, expired units are pruned only when,
        // counted as held, they leave no room (`lib/acquire_one.lua`).
        // (An id whose own lease expired unpruned is pruned and granted
        // afresh, as the slow path does.)
        let plain = !self.store.exists(queue) && (hold.is_empty() || !self.store.exists(hold));
        let expired_own = self.store.zscore(leases, id).is_some_and(|score| score <= now);
        let roomy = plain && !expired_own && self.store.zcard(leases) as u64 + w <= limit;
        let reclaimed = if roomy {
            0
        } else {
            self.store.zremrangebyscore(leases, now)
        };
        let (mut ahead, mut free) = (0, 0);
        let fresh = self.store.zscore(leases, id).is_none();
        if fresh {
            if !hold.is_empty() && self.store.exists(hold) {
                self.record(leases, id, RECOVERING, 0, (0, 0));
                return refused(RECOVERING, reclaimed);
            }
            let live = self.store.zcard(leases) as u64;
            if live + w > limit {
                self.record(leases, id, 0, 0, (0, 0));
                return refused(0, reclaimed);
            }
            free = limit - live;
            if self.store.exists(queue) {
                let queued = self.prune_waiters(queue, waiters, holds);
                let (fits, used, _, room) = self.claim(queue, holds, live, queued, w, limit);
                ahead = used - live;
                // What a newcomer may take: the free units not owed to the
                // waiters that fit, nor needed to keep each of them fitting.
                free = free.min(ahead.saturating_add(room));
                // The injected bug grants over the waiters (and is seen
                // doing so: the record keeps what they were owed).
                if !fits && !self.ignore_queue {
                    self.record(leases, id, 0, 0, (0, 0));
                    return refused(0, reclaimed);
                }
                if !fits {
                    ahead = ahead.max(free);
                }
            }
        }
        Admitted {
            status: 1,
            reclaimed,
            fresh,
            ahead,
            free,
        }
    }

    /// `grant_one`: writes what [`RedisModel::admit`] admitted; returns
    /// the token (0 unless fenced).
    fn grant(&mut self, part: &Part, admitted: &Admitted, now: u64) -> u64 {
        let Part {
            leases,
            fence,
            expiry,
            id,
            fenced,
            ..
        } = *part;
        if admitted.fresh {
            self.add_units(leases, expiry, id, ZaddFlags::default());
            self.cover(leases, (expiry - now) as i64);
        }
        let token = if fenced {
            self.next_tokens(fence, expiry - now, 1)
        } else {
            0
        };
        self.record(leases, id, 1, token, (admitted.ahead, admitted.free));
        token
    }

    #[allow(clippy::too_many_lines)] // the script, line by line
    pub(super) fn acquire_waiting(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let (leases, tombstone, fence, queue, waiters, holds, wake) =
            (&keys[0], &keys[1], &keys[2], &keys[3], &keys[4], &keys[5], &keys[6]);
        let expiry = integer(&argv[0], "expiry", 1)?;
        let limit = integer(&argv[1], "limit", 1)?;
        let id = &argv[2];
        let valid_until = integer(&argv[3], "valid-until", 0)?;
        let hold = &argv[4];
        let lifetime = integer(&argv[5], "lifetime", 1)?;
        let patience = integer(&argv[6], "patience", 0)?;
        let previous = argv.get(7).filter(|p| !p.is_empty());
        let w = weight(id)?;
        // Lua's `%s`: space, \t, \n, \v, \f, \r.
        let white = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
        if id.iter().any(white) || id.as_ref() == b"avg" || id.as_ref() == b"limit" {
            let detail = format!(
                "ERR inflight: lease id {} is not one a client makes",
                String::from_utf8_lossy(id)
            );
            return Err(Frame::Error(detail.into()));
        }
        if let Some(previous) = previous {
            if previous == id || weight(previous)? != w {
                let id = String::from_utf8_lossy(id);
                let detail = format!("ERR inflight: the previous id must differ from {id} and weigh as much");
                return Err(Frame::Error(detail.into()));
            }
        }
        let now = self.time();
        let reply = |status: i64, token: u64, ahead: u64, expected: u64, reclaimed: usize| {
            Ok(Frame::Array(vec![
                int(status),
                bulk(id),
                int(token as i64),
                int(ahead as i64),
                int(expected as i64),
                int(reclaimed as i64),
            ]))
        };
        if now > valid_until || expiry <= now {
            return reply(STALE, 0, 0, 0, 0);
        }
        if self.store.exists(tombstone) {
            return reply(-1, 0, 0, 0, 0);
        }
        let reclaimed = self.store.zremrangebyscore(leases, now);
        if let Some(previous) = previous {
            self.take_over([leases, queue, waiters, holds], previous, id, limit, lifetime);
        }
        let one = std::slice::from_ref(id);
        if self.store.zscore(leases, id).is_some() {
            let flags = ZaddFlags { xx: true, gt: true };
            self.add_units(leases, expiry, id, flags);
            self.cover(leases, (expiry - now) as i64);
            self.leave_queue(queue, waiters, holds, one);
            let token = self.next_tokens(fence, expiry - now, 1);
            self.record(leases, id, 1, token, (0, 0));
            return reply(1, token, 0, 0, reclaimed);
        }
        if !hold.is_empty() && self.store.exists(hold) {
            self.leave_queue(queue, waiters, holds, one);
            self.record(leases, id, RECOVERING, 0, (0, 0));
            return reply(RECOVERING, 0, 0, 0, reclaimed);
        }
        if w > limit {
            let was_queued = self.store.zscore(queue, id).is_some();
            self.leave_queue(queue, waiters, holds, one);
            if was_queued {
                self.prune_waiters(queue, waiters, holds);
                self.wake_who_fits([queue, waiters, holds, leases, wake], freed_by(id));
            }
            self.record(leases, id, 0, 0, (0, 0));
            return reply(0, 0, w - limit, 0, reclaimed);
        }
        let live = self.store.zcard(leases) as u64;
        let (mut rank, mut count) = (None, 0);
        if self.store.exists(queue) {
            count = self.prune_waiters(queue, waiters, holds);
            rank = self.store.zrank(queue, id);
        }
        let queued = rank.is_some();
        let rank = rank.unwrap_or_else(|| self.store.zcard(queue));
        let (fits, used, owed, room) = self.claim(queue, holds, live, rank, w, limit);
        if fits {
            if queued {
                self.leave_queue(queue, waiters, holds, one);
            }
            self.add_units(leases, expiry, id, ZaddFlags::default());
            self.cover(leases, (expiry - now) as i64);
            let token = self.next_tokens(fence, expiry - now, 1);
            if queued && count > 1 {
                self.wake_who_fits([queue, waiters, holds, leases, wake], 1);
            }
            let (ahead, free) = (used - live, limit - live);
            self.record(leases, id, 1, token, (ahead, free.min(ahead.saturating_add(room))));
            return reply(1, token, 0, 0, reclaimed);
        }
        let ahead = (live + owed + w).saturating_sub(limit).max(1);
        let average = self
            .store
            .hget(holds, b"avg")
            .and_then(|a| lua_number(&a))
            .unwrap_or(0.0);
        let expected = (ahead as f64 * average / limit as f64).ceil() as u64;
        if average > 0.0 && expected > patience {
            if queued {
                self.leave_queue(queue, waiters, holds, one);
                self.wake_who_fits([queue, waiters, holds, leases, wake], freed_by(id));
            }
            self.record(leases, id, 0, 0, (0, 0));
            return reply(0, 0, ahead, expected, reclaimed);
        }
        self.enqueue([queue, waiters, holds], id, limit, lifetime, !queued);
        self.record(leases, id, 2, 0, (0, 0));
        // The token's place says whether it entered the queue now.
        reply(2, u64::from(!queued), ahead, expected, reclaimed)
    }

    /// A waiter keeps (or, `arriving`, takes) its place at the end of the
    /// queue, alive for `lifetime` ms more, under its own `limit`.
    pub(super) fn enqueue(
        &mut self,
        [queue, waiters, holds]: [&Bytes; 3],
        id: &Bytes,
        limit: u64,
        lifetime: u64,
        arriving: bool,
    ) {
        let now = self.now_ms;
        if arriving {
            let ticket = match self.store.zlast(queue) {
                Some((last, _)) if last >= now => last + 1,
                _ => now,
            };
            self.store.zadd(queue, ZaddFlags::default(), &[(ticket, id.clone())]);
        }
        self.store
            .zadd(waiters, ZaddFlags::default(), &[(now + lifetime, id.clone())]);
        self.store.hset(
            holds,
            &[(Bytes::from_static(b"limit"), text(limit)), (id.clone(), text(limit))],
        );
        for key in [queue, waiters, holds] {
            self.cover_to(key, lifetime as i64, 2 * lifetime as i64);
        }
    }

    /// `ACQUIRE_ACROSS`: each acquire as `ACQUIRE` takes it, in order, every
    /// argument checked before anything is written.
    pub(super) fn acquire_across(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let n = argv.len() / 6;
        if n == 0 || argv.len() != 6 * n || keys.len() != 6 * n {
            return Err(Frame::Error(
                "ERR inflight: ACQUIRE_ACROSS takes six keys and six arguments per acquire".into(),
            ));
        }
        for args in argv.chunks_exact(6) {
            integer(&args[0], "expiry", 1)?;
            integer(&args[1], "limit", 1)?;
            integer(&args[3], "valid-until", 0)?;
            flag(&args[5], "fencing")?;
            weight(&args[2])?;
        }
        self.batches += 1;
        let (mut reply, mut reclaimed) = (Vec::with_capacity(3 * n + 1), 0);
        for (keys, args) in keys.chunks_exact(6).zip(argv.chunks_exact(6)) {
            let mut args = args.to_vec();
            if self.across_first_limit {
                args[1] = argv[1].clone();
            }
            match self.acquire(keys, &args)? {
                Frame::Array(items) => match <[Frame; 4]>::try_from(items) {
                    Ok([status, id, token, Frame::Integer(freed)]) => {
                        reply.extend([status, id, token]);
                        reclaimed += freed;
                    }
                    Ok(other) => unreachable!("ACQUIRE answers four items: {other:?}"),
                    Err(items) => unreachable!("ACQUIRE answers four items: {items:?}"),
                },
                other => unreachable!("ACQUIRE answers an array: {other:?}"),
            }
        }
        reply.push(int(reclaimed));
        Ok(Frame::Array(reply))
    }

    pub(super) fn acquire_many(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let (leases, fence, queue, waiters, holds) = (&keys[0], &keys[1], &keys[2], &keys[3], &keys[4]);
        let expiry = integer(&argv[0], "expiry", 1)?;
        let limit = integer(&argv[1], "limit", 1)?;
        let valid_until = integer(&argv[2], "valid-until", 0)?;
        let hold = &argv[3];
        if keys.len() != argv.len() + 1 {
            return Err(Frame::Error(
                "ERR inflight: ACQUIRE_MANY takes one tombstone per id".into(),
            ));
        }
        if argv.len() - 4 > 1000 {
            return Err(Frame::Error("ERR inflight: ACQUIRE_MANY takes at most 1000 ids".into()));
        }
        let ids = &argv[4..];
        for id in ids {
            weight(id)?;
        }
        self.batches += 1;
        let now = self.time();
        if now > valid_until || expiry <= now {
            for id in ids {
                self.record(leases, id, STALE, 0, (0, 0));
            }
            let mut reply: Vec<Frame> = ids.iter().flat_map(|id| [int(STALE), bulk(id), int(0)]).collect();
            reply.push(int(0));
            return Ok(Frame::Array(reply));
        }
        let reclaimed = self.store.zremrangebyscore(leases, now);
        let live0 = self.store.zcard(leases) as u64;
        let (mut open, mut live, mut room) = (true, live0, u64::MAX);
        if self.store.exists(queue) {
            let queued = self.prune_waiters(queue, waiters, holds);
            (open, live, _, room) = self.claim(queue, holds, live0, queued, 1, limit);
        }
        let held = !hold.is_empty() && self.store.exists(hold);
        let mut statuses: Vec<i64> = Vec::with_capacity(ids.len());
        let mut fairness = Vec::with_capacity(ids.len());
        let (mut granted, mut plain, mut grew) = (0u64, Vec::new(), false);
        for (i, id) in ids.iter().enumerate() {
            let first = ids[..i].iter().position(|earlier| earlier == id);
            let status = if let Some(first) = first {
                statuses[first]
            } else if self.store.exists(&keys[5 + i]) {
                -1
            } else if self.store.zscore(leases, id).is_some() {
                1
            } else if held {
                RECOVERING
            } else {
                let w = weight(id).unwrap_or(1);
                if !open || live + w > limit || (w > room && !self.ignore_room) {
                    0
                } else {
                    let ahead = live - live0;
                    fairness.push((i, (ahead, (limit - live0).min(ahead.saturating_add(room)))));
                    live += w;
                    room = room.saturating_sub(w);
                    grew = true;
                    if w == 1 {
                        plain.push((expiry, id.clone()));
                    } else {
                        self.add_units(leases, expiry, id, ZaddFlags::default());
                    }
                    1
                }
            };
            if first.is_none() && status == 1 {
                granted += 1;
            }
            statuses.push(status);
        }
        if !plain.is_empty() {
            self.store.zadd(leases, ZaddFlags::default(), &plain);
        }
        if grew {
            self.cover(leases, (expiry - now) as i64);
        }
        let mut token = if granted > 0 {
            self.next_tokens(fence, expiry - now, granted)
        } else {
            0
        };
        let mut given: Vec<(&Bytes, u64)> = Vec::new();
        let mut reply = Vec::with_capacity(3 * ids.len() + 1);
        for (i, (id, status)) in ids.iter().zip(&statuses).enumerate() {
            let this = match (status, given.iter().find(|(g, _)| *g == id)) {
                (1, Some((_, t))) => *t,
                (1, None) => {
                    given.push((id, token));
                    token += 1;
                    token - 1
                }
                _ => 0,
            };
            if ids[..i].iter().all(|earlier| earlier != id) {
                let fair = fairness.iter().find(|(at, _)| *at == i).map_or((0, 0), |(_, f)| *f);
                self.record(leases, id, *status, this, fair);
            }
            reply.extend([int(*status), bulk(id), int(this as i64)]);
        }
        reply.push(int(reclaimed as i64));
        Ok(Frame::Array(reply))
    }
}
