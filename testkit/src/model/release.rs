//! The scripts that give back, renew, write back and read, as the model
//! runs them (see `scripts.rs`).

use bytes::Bytes;

use super::scripts::{bulk, int, integer, lua_number, units, weight, Stop, WALK};
use super::store::ZaddFlags;
use super::RedisModel;
use inflight_core::resp::Frame;
use inflight_core::scripts::STALE;

impl RedisModel {
    pub(super) fn release(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let (leases, queue, waiters, holds, wake, fence) = (&keys[0], &keys[1], &keys[2], &keys[3], &keys[4], &keys[5]);
        let held_ms = match argv[0].is_empty() {
            true => None,
            false => Some(integer(&argv[0], "hold time", 0)?),
        };
        let hold = &argv[1];
        let ids = &argv[2..];
        let (mut weighted, mut freed) = (false, 0);
        for id in ids {
            let w = weight(id)?;
            weighted |= w > 1;
            freed += w as usize;
        }
        self.zrems += 1;
        if ids.is_empty() {
            return Ok(int(0));
        }
        let removed = if weighted {
            ids.iter().map(|id| self.store.zrem(leases, &units(id))).sum()
        } else {
            self.store.zrem(leases, ids)
        };
        if !self.store.exists(queue) && !self.store.exists(holds) {
            return Ok(int(removed as i64));
        }
        if let Some(held_ms) = held_ms {
            let average = match self.store.hget(holds, b"avg").and_then(|a| lua_number(&a)) {
                Some(average) => average + (held_ms as f64 - average) / 8.0,
                None => held_ms as f64,
            };
            self.store.hset(
                holds,
                &[(Bytes::from_static(b"avg"), Bytes::from(format!("{average:.3}")))],
            );
        }
        let queued_for = self.store.pttl(queue);
        if queued_for == -2 {
            return Ok(int(removed as i64));
        }
        self.cover(holds, queued_for.max(1));
        self.leave_queue(queue, waiters, holds, ids);
        if !self.store.exists(queue) {
            return Ok(int(removed as i64));
        }
        let now = self.time();
        self.prune_waiters(queue, waiters, holds);
        self.store.zremrangebyscore(leases, now);
        if !hold.is_empty() && self.store.exists(hold) {
            return Ok(int(removed as i64));
        }
        let used = self.store.zcard(leases) as u64;
        let (served, named, holding) = self.serve(queue, holds, leases, used, freed);
        if !holding.is_empty() {
            self.leave_queue(queue, waiters, holds, &holding);
        }
        let (served, reserved): (Vec<_>, Vec<_>) =
            self.with_expiries([queue, waiters, holds], served).into_iter().unzip();
        if !served.is_empty() {
            let longest = reserved.iter().map(|r| r.saturating_sub(now)).max().unwrap_or(0).max(1);
            let token = self.next_tokens(fence, longest, served.len() as u64);
            let mut message = b"H".to_vec();
            for (i, ((id, fair), at)) in served.iter().zip(&reserved).enumerate() {
                self.add_units(leases, *at, id, ZaddFlags::default());
                message.extend_from_slice(format!(" {} {}", String::from_utf8_lossy(id), token + i as u64).as_bytes());
                self.record_hand_over(leases, id, token + i as u64, *fair);
            }
            let ids: Vec<Bytes> = served.into_iter().map(|(id, _)| id).collect();
            self.leave_queue(queue, waiters, holds, &ids);
            self.cover(leases, longest as i64);
            self.published.push((wake.clone(), Bytes::from(message)));
        }
        self.name_on(wake, &named);
        Ok(int(removed as i64))
    }

    /// `lib/serve.lua`: the ids served (each with the units owed before it
    /// and the free units, for the fairness record), named, and found holding.
    #[allow(clippy::type_complexity)]
    fn serve(
        &mut self,
        queue: &Bytes,
        holds: &Bytes,
        leases: &Bytes,
        mut used: u64,
        freed: usize,
    ) -> (Vec<(Bytes, (u64, u64))>, Vec<Bytes>, Vec<Bytes>) {
        let (mut served, mut named, mut holding) = (Vec::new(), Vec::new(), Vec::new());
        let window = (freed + 15).min(64);
        let start = used;
        let (mut read, mut blocked) = (0usize, 0u64);
        let recorded = self.limit_of(holds, b"limit");
        loop {
            let ids = self.store.zrange(queue, read, read + window - 1);
            let count = ids.len();
            for id in ids {
                let own = self.limit_of(holds, &id).or(recorded);
                if self.store.zscore(leases, &id).is_some() {
                    holding.push(id);
                } else if let Some(own) = own {
                    let units = weight(&id).unwrap_or(1);
                    if own > blocked && used + units <= own {
                        // Recorded under the waiter's own limit, whatever the
                        // (injected) bug judged it by.
                        let true_own = self.own_limit(holds, &id).unwrap_or(own);
                        served.push((id, (used - start, true_own.saturating_sub(start))));
                        used += units;
                    } else {
                        blocked = blocked.max(own);
                    }
                } else {
                    named.push(id);
                    blocked = u64::MAX;
                }
            }
            read += count;
            // `lib/serve.lua`: on only while nobody was let through, up to
            // `WALK` waiters in all.
            if !served.is_empty() || !named.is_empty() || count < window || read >= WALK {
                return (served, named, holding);
            }
        }
    }

    /// `lib/serve.lua`'s `wake_who_fits`: the waiters that fit in what is
    /// free now (those with an expiry beside their entry; orphans leave the
    /// queue, as entries of ids that hold do), and those it cannot judge,
    /// named on the wake channel. The state is pruned already.
    pub(super) fn wake_who_fits(&mut self, [queue, waiters, holds, leases, wake]: [&Bytes; 5], freed: usize) {
        let used = self.store.zcard(leases) as u64;
        let (served, named, holding) = self.serve(queue, holds, leases, used, freed);
        if !holding.is_empty() {
            self.leave_queue(queue, waiters, holds, &holding);
        }
        let served = self.with_expiries([queue, waiters, holds], served);
        let woken: Vec<Bytes> = served.into_iter().map(|((id, _), _)| id).chain(named).collect();
        self.name_on(wake, &woken);
    }

    /// `lib/serve.lua`'s `with_expiries`: of `served`, those with an expiry
    /// beside their queue entry, with it; the others leave the queue.
    fn with_expiries<T>(
        &mut self,
        [queue, waiters, holds]: [&Bytes; 3],
        served: Vec<(Bytes, T)>,
    ) -> Vec<((Bytes, T), u64)> {
        let (mut alive, mut orphans) = (Vec::new(), Vec::new());
        for (id, with) in served {
            match self.store.zscore(waiters, &id) {
                Some(until) => alive.push(((id, with), until)),
                None => orphans.push(id),
            }
        }
        if !orphans.is_empty() {
            self.leave_queue(queue, waiters, holds, &orphans);
        }
        alive
    }

    /// Publishes `N id…` on `wake`, unless `ids` is empty.
    fn name_on(&mut self, wake: &Bytes, ids: &[Bytes]) {
        if ids.is_empty() {
            return;
        }
        let mut message = b"N".to_vec();
        for id in ids {
            message.push(b' ');
            message.extend_from_slice(id);
        }
        self.published.push((wake.clone(), Bytes::from(message)));
    }

    /// `lib/serve.lua`'s `forget_expired`: dead waiters and expired leases
    /// out, at the server's clock.
    pub(super) fn forget_expired(&mut self, [queue, waiters, holds, leases]: [&Bytes; 4]) {
        let now = self.time();
        self.prune_waiters(queue, waiters, holds);
        self.store.zremrangebyscore(leases, now);
    }

    pub(super) fn compensate(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let (leases, tombstone, queue, waiters, wake, holds) =
            (&keys[0], &keys[1], &keys[2], &keys[3], &keys[4], &keys[5]);
        let valid_until = integer(&argv[0], "valid-until", 0)?;
        let id = &argv[1];
        weight(id)?;
        let mut removed = self.store.zrem(leases, &units(id));
        let now = self.time();
        if now <= valid_until && self.store.pttl(tombstone) < (valid_until - now + 1) as i64 {
            self.store
                .set(tombstone, Bytes::from_static(b"1"), Some(valid_until - now + 1));
        }
        if self.store.exists(queue) {
            if self.store.zscore(queue, id).is_some() {
                removed += 1;
                self.leave_queue(queue, waiters, holds, std::slice::from_ref(id));
            }
            if removed > 0 {
                self.forget_expired([queue, waiters, holds, leases]);
                self.wake_who_fits([queue, waiters, holds, leases, wake], freed_by(id));
            }
        }
        Ok(bulk(id))
    }

    pub(super) fn leave(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let (queue, waiters, wake, leases, holds) = (&keys[0], &keys[1], &keys[2], &keys[3], &keys[4]);
        let id = &argv[0];
        weight(id)?;
        self.leaves += 1;
        let one = std::slice::from_ref(id);
        let removed = self.store.zrem(queue, one) + self.store.zrem(leases, &units(id));
        self.store.zrem(waiters, one);
        self.store.hdel(holds, one);
        if removed > 0 && self.store.exists(queue) {
            self.forget_expired([queue, waiters, holds, leases]);
            self.wake_who_fits([queue, waiters, holds, leases, wake], freed_by(id));
        }
        Ok(int(removed.min(1) as i64))
    }

    pub(super) fn renew(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let leases = &keys[0];
        let expiry = integer(&argv[0], "expiry", 1)?;
        let id = &argv[1];
        let valid_until = integer(&argv[2], "valid-until", 0)?;
        weight(id)?;
        let now = self.time();
        if now > valid_until || expiry <= now {
            self.renewals.push(STALE);
            return Ok(Frame::Array(vec![int(STALE), bulk(id), int(0)]));
        }
        let reclaimed = self.store.zremrangebyscore(leases, now);
        let status = if self.store.zscore(leases, id).is_none() {
            0
        } else {
            self.add_units(leases, expiry, id, ZaddFlags { xx: true, gt: true });
            self.cover(leases, (expiry - now) as i64);
            1
        };
        self.renewals.push(status);
        Ok(Frame::Array(vec![int(status), bulk(id), int(reclaimed as i64)]))
    }

    pub(super) fn reassert(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let (leases, tombstone, queue, waiters, holds) = (&keys[0], &keys[1], &keys[2], &keys[3], &keys[4]);
        let id = &argv[0];
        let expiry = integer(&argv[1], "expiry", 1)?;
        let limit = integer(&argv[2], "limit", 1)?;
        let valid_until = integer(&argv[3], "valid-until", 0)?;
        weight(id)?;
        let now = self.time();
        let status = if now > valid_until || expiry <= now {
            STALE
        } else if self.store.exists(tombstone) {
            -1
        } else {
            self.leave_queue(queue, waiters, holds, std::slice::from_ref(id));
            self.store.zremrangebyscore(leases, now);
            if self.store.zscore(leases, id).is_some() {
                self.add_units(leases, expiry, id, ZaddFlags { xx: true, gt: true });
                self.cover(leases, (expiry - now) as i64);
                1
            } else {
                self.add_units(leases, expiry, id, ZaddFlags::default());
                self.cover(leases, (expiry - now) as i64);
                if self.store.zcard(leases) as u64 > limit {
                    3
                } else {
                    2
                }
            }
        };
        self.reasserts.push((leases.clone(), id.clone(), status));
        Ok(Frame::Array(vec![int(status), bulk(id)]))
    }

    pub(super) fn mark(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let ttl = integer(&argv[1], "marker lifetime", 1)?;
        match self.store.get(&keys[0]) {
            Some(value) => {
                self.store.pexpire(&keys[0], ttl as i64);
                Ok(Frame::Array(vec![int(0), Frame::BulkString(value)]))
            }
            None => {
                self.store.set(&keys[0], argv[0].clone(), Some(ttl));
                Ok(Frame::Array(vec![int(1), bulk(&argv[0])]))
            }
        }
    }

    pub(super) fn hold(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let window = integer(&argv[0], "window", 1)?;
        let left = self.store.pttl(&keys[0]);
        if left < window as i64 {
            self.store.set(&keys[0], Bytes::from_static(b"1"), Some(window));
            return Ok(int(window as i64));
        }
        Ok(int(left))
    }

    pub(super) fn inspect(&mut self, keys: &[Bytes], argv: &[Bytes]) -> Result<Frame, Stop> {
        let most = integer(&argv[0], "holders", 0)?;
        let now = self.time();
        let live = self.store.zabove(&keys[0], now);
        let limit = self
            .store
            .hget(&keys[1], b"limit")
            .and_then(|l| lua_number(&l))
            .map_or(-1, |l| l as i64);
        let waiting = self.store.zabove(&keys[2], now).len();
        let mut reply = vec![int(now as i64), int(live.len() as i64), int(limit), int(waiting as i64)];
        for (expiry, id) in live
            .into_iter()
            .filter(|(_, id)| !id.contains(&b'#'))
            .take(most as usize)
        {
            reply.extend([Frame::BulkString(id), int(expiry as i64)]);
        }
        Ok(Frame::Array(reply))
    }
}

/// The units a leaving id gives back: its weight.
pub(super) fn freed_by(id: &[u8]) -> usize {
    weight(id).unwrap_or(1) as usize
}
