//! What tests read of the model's data, outside any command: live leases
//! and units, waiters, keys and their expiries; and the hands-on changes a
//! scenario makes (a restore, a flush, a delete).

use bytes::Bytes;
use inflight_core::key::SubjectKeys;
use inflight_core::lease_id::is_extra_unit;

use super::scripts::weight;
use super::RedisModel;

impl RedisModel {
    /// The messages published since the last call, as (channel, payload),
    /// in order (a simulated server delivers them to its subscribed
    /// connections).
    pub fn take_published(&mut self) -> Vec<(Bytes, Bytes)> {
        std::mem::take(&mut self.published)
    }

    /// Live waiters of a queue key (`…:queue`), in arrival order: those
    /// whose entry in the waiters' expiries (`…:waiters`) has not passed.
    pub fn waiters(&mut self, queue: &[u8]) -> Vec<Bytes> {
        self.store.now = self.now_ms;
        let Some(base) = queue.strip_suffix(b":queue") else {
            return Vec::new();
        };
        let expiries = Bytes::from([base, b":waiters"].concat());
        let all = self.store.zrange(queue, 0, usize::MAX - 1);
        all.into_iter()
            .filter(|id| self.store.zscore(&expiries, id).is_some_and(|at| at > self.now_ms))
            .collect()
    }

    /// Whether a live waiter of `keys`'s subject could be granted now, the
    /// queue walked as the fairness rule walks it (`lib/queue.lua`'s
    /// `claim`): each waiter under its own limit (else the last recorded,
    /// else `limit`), one whose limit is no
    /// higher than a blocked one's ahead blocked too. The simulator's
    /// oracle for lost wake-ups: while this holds, a release's hand-over
    /// or a wake-up should end it within a round trip or two. It changes
    /// nothing (dead entries are skipped, not pruned).
    pub fn waiter_could_go(&mut self, keys: &SubjectKeys, limit: u64) -> bool {
        self.store.now = self.now_ms;
        let holds = keys.holds();
        let used = self.live(keys.leases()).len() as u64;
        let recorded = self.limit_of(&holds, b"limit");
        let mut blocked = 0;
        for id in self.waiters(&keys.queue()) {
            let own = self.limit_of(&holds, &id).or(recorded).unwrap_or(limit);
            let units = weight(&id).unwrap_or(1);
            if own > blocked && used + units <= own {
                return true;
            }
            blocked = blocked.max(own);
        }
        false
    }

    /// Every key alive now, sorted, with its value rendered and its absolute
    /// expiry (see `store.rs`): what the differential tests compare with a
    /// real server's keys.
    pub fn dump(&mut self) -> Vec<(Bytes, String, Option<u64>)> {
        self.store.now = self.now_ms;
        self.store.dump()
    }

    /// Sets the keys' absolute expiries to a real server's: within a script
    /// Redis dates each expiry it sets by its clock as that command runs,
    /// which may have passed the millisecond the script's `TIME` read; a
    /// differential test that found the two within a millisecond takes the
    /// server's, so that no difference builds up.
    pub fn align_expiries(&mut self, expiries: &[(Bytes, Option<u64>)]) {
        for (key, when) in expiries {
            self.store.set_expiry(key, *when);
        }
    }

    /// Takes `from`'s data as this server's own (a failover to a replica
    /// that had received the writes up to then): the data only, not the
    /// identity or the counters.
    pub fn restore_data(&mut self, from: &RedisModel) {
        self.store = from.store.clone();
    }

    /// Deletes these keys (`DEL`): a subject's data lost on its own.
    pub fn delete(&mut self, keys: &[Bytes]) {
        for key in keys {
            self.store.del(key);
        }
    }

    /// Puts a waiter of another client at the end of a subject's queue
    /// (`queue` is its `…:queue` key), alive for `lifetime_ms`, as a waiting
    /// acquire denied under `limit` would.
    pub fn queue_waiter(&mut self, queue: &Bytes, id: &[u8], limit: u32, lifetime_ms: u64) {
        self.store.now = self.now_ms;
        let Some(base) = queue.strip_suffix(b":queue") else {
            return;
        };
        let waiters = Bytes::from([base, b":waiters"].concat());
        let holds = Bytes::from([base, b":held"].concat());
        let id = Bytes::copy_from_slice(id);
        self.enqueue([queue, &waiters, &holds], &id, u64::from(limit), lifetime_ms, true);
    }

    /// Empties the data set (`FLUSHALL`).
    pub fn flush_all(&mut self) {
        self.store.flush();
    }

    /// Every live member of a lease-set key with its score.
    fn live(&mut self, key: &[u8]) -> Vec<(u64, Bytes)> {
        self.store.now = self.now_ms;
        self.store.zabove(key, self.now_ms)
    }

    /// Live lease ids of one lease-set key (one per lease, whatever its
    /// weight), in expiry order.
    pub fn live_leases(&mut self, key: &[u8]) -> Vec<Bytes> {
        let mut ids: Vec<Bytes> = self
            .live(key)
            .into_iter()
            .map(|(_, id)| id)
            .filter(|id| !is_extra_unit(id))
            .collect();
        ids.sort();
        ids
    }

    /// Live units of one lease-set key: what its limit counts.
    pub fn live_units(&mut self, key: &[u8]) -> u64 {
        self.live(key).len() as u64
    }

    /// Every live member of one lease-set key, units included, sorted by
    /// their bytes.
    pub fn live_members(&mut self, key: &[u8]) -> Vec<Bytes> {
        let mut ids: Vec<Bytes> = self.live(key).into_iter().map(|(_, id)| id).collect();
        ids.sort();
        ids
    }

    /// Every live lease as (key, id), sorted: one entry per lease.
    pub fn all_live_leases(&mut self) -> Vec<(Bytes, Bytes)> {
        let keys: Vec<Bytes> = self.lease_sets();
        let mut all: Vec<(Bytes, Bytes)> = keys
            .into_iter()
            .flat_map(|key| {
                self.live_leases(&key)
                    .into_iter()
                    .map(move |id| (key.clone(), id))
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        all
    }

    fn lease_sets(&mut self) -> Vec<Bytes> {
        self.store.now = self.now_ms;
        self.store
            .keys()
            .into_iter()
            .filter(|key| key.ends_with(b":leases"))
            .collect()
    }

    /// Whether `key` exists now (as `EXISTS` says).
    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.store.now = self.now_ms;
        self.store.exists(key)
    }

    /// Lease sets with a live lease, and tombstones, alive now.
    pub fn key_count(&mut self) -> usize {
        let sets = self.lease_sets();
        let live = sets.iter().filter(|key| !self.live(key).is_empty()).count();
        let tombstones = self
            .store
            .keys()
            .into_iter()
            .filter(|key| key.windows(6).any(|w| w == b":gone:"))
            .count();
        live + tombstones
    }

    /// Every key alive now, with its `PTTL` (-1: no expiry): what the
    /// "every key expires" invariant reads.
    pub fn keys_with_ttl(&mut self) -> Vec<(Bytes, i64)> {
        self.store.now = self.now_ms;
        let mut keys = self.store.keys();
        keys.sort();
        keys.into_iter()
            .map(|key| (key.clone(), self.store.pttl(&key)))
            .collect()
    }
}
