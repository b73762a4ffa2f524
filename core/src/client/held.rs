//! The leases this client's callers hold now: what a server that lost its
//! data is given back. A grant enters when its outcome is delivered; a
//! release, a lost renewal or a withdrawn grant takes it out, and one whose
//! expiry has passed is dropped on the next sweep.
//!
//! Also the releases Redis confirmed lately: a failover to a replica that
//! had not received them brings their leases back (held by nobody), so a
//! recovery sends them again. "Lately" counts back from the last release
//! the same node confirmed, not from the recovery: what a failover loses is
//! the old primary's last writes, however long the client takes to find
//! the new one (a stale sentinel, a handshake cut off by a second switch).

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::event::Lease;
use crate::key::SubjectKeys;
use crate::lease_id::{Label, LeaseId};

#[derive(Debug, Default)]
pub(super) struct HeldLeases {
    /// The instance bits every id of this client shares (see `lease_id`):
    /// the table is keyed by the counter alone, 24 bytes less per entry.
    instance: u128,
    leases: HashMap<u64, Held>,
    /// The size at the last sweep: the next sweep comes once it has doubled,
    /// so that leases dropped without a release (outside a runtime) cannot
    /// pile up, at an amortised O(1) per grant.
    swept_at: usize,
    /// Releases confirmed lately, oldest first: when, and what.
    released: VecDeque<Released>,
    /// Per node, when it last confirmed a caller's release: the end of the
    /// writes a failover of that node may have lost.
    last_release: HashMap<usize, Instant>,
    /// An injected bug for the simulator: "lately" counts back from now.
    aged_from_now: bool,
    /// Held leases written back after a loss: the latest valid-until
    /// (server ms) of those write-backs, and our instant by which the
    /// server has surely passed it. Until then one of them may still run
    /// (a reply read says nothing of an earlier one cut off with its
    /// connection), so a release meanwhile leaves a tombstone against them.
    reasserting: HashMap<u64, (u64, Instant)>,
}

/// The most confirmed releases remembered for a recovery: the newest ones.
/// Bounds the memory (about 120 bytes each, 4 MB at most) at any release
/// rate. A failover loses the writes its old primary took after the
/// promotion (a Sentinel failover announces the switch a second or more
/// after it): this covers that at 10,000 releases a second per limiter. A
/// release lost beyond it leaves its lease until the TTL: fewer slots for a
/// while, never more.
pub(super) const MAX_REMEMBERED_RELEASES: usize = 32_768;

/// A release Redis confirmed: when, on which node, and what.
#[derive(Debug)]
struct Released {
    at: Instant,
    node: usize,
    lease: LeaseId,
    keys: SubjectKeys,
}

/// Whether a confirmed release was a caller's, or a recovery's sending
/// again of one (which must not move the node's last release on: a
/// recovery cut off half way would then forget the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Confirmed {
    ByCaller,
    Again,
}

/// One held lease: enough to write it back.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) keys: SubjectKeys,
    pub(super) limit: NonZeroU32,
    pub(super) expires_at: Instant,
    /// The id's weight and label (the table keeps only its counter).
    weight: u32,
    label: Option<Label>,
}

impl HeldLeases {
    pub(super) fn insert(&mut self, now: Instant, lease: &Lease, limit: NonZeroU32) {
        if self.leases.len() >= 2 * self.swept_at.max(32) {
            self.leases.retain(|_, held| held.expires_at > now);
            self.reasserting.retain(|_, (_, runnable_until)| *runnable_until > now);
            self.swept_at = self.leases.len();
        }
        let held = Held {
            keys: lease.keys.clone(),
            limit,
            expires_at: lease.expires_at,
            weight: lease.id.weight(),
            label: lease.id.label().cloned(),
        };
        let (instance, counter) = lease.id.parts();
        debug_assert!(self.leases.is_empty() || instance == self.instance, "one client's ids");
        self.instance = instance;
        self.leases.insert(counter, held);
    }

    /// A renewal moved `lease`'s expiry.
    pub(super) fn renewed(&mut self, lease: &Lease) {
        if let Some(held) = self.leases.get_mut(&lease.id.parts().1) {
            held.expires_at = lease.expires_at;
        }
    }

    /// Whether `lease` is held (granted and not let go).
    pub(super) fn contains(&self, lease: &LeaseId) -> bool {
        let (instance, counter) = lease.parts();
        instance == self.instance && self.leases.contains_key(&counter)
    }

    pub(super) fn remove(&mut self, lease: &LeaseId) {
        let (instance, counter) = lease.parts();
        if instance == self.instance {
            self.leases.remove(&counter);
            self.reasserting.remove(&counter);
        }
    }

    /// A write-back of `lease` is on its way, valid until `valid_until_ms`
    /// (the server's), which the server has surely passed at our
    /// `runnable_until`.
    pub(super) fn reasserting(&mut self, lease: &LeaseId, valid_until_ms: u64, runnable_until: Instant) {
        let latest = self
            .reasserting
            .entry(lease.parts().1)
            .or_insert((valid_until_ms, runnable_until));
        *latest = (latest.0.max(valid_until_ms), latest.1.max(runnable_until));
    }

    /// Takes `lease` out of the table for good (its holder gave it back):
    /// the valid-until of a write-back of it that may still run at `now`,
    /// which its release must then outlast with a tombstone.
    pub(super) fn give_back(&mut self, now: Instant, lease: &LeaseId) -> Option<u64> {
        self.remove(lease);
        let (valid_until_ms, runnable_until) = self.reasserting.remove(&lease.parts().1)?;
        (runnable_until > now).then_some(valid_until_ms)
    }

    /// Redis confirmed the release of `lease` on `node` at `now`. Those
    /// older than `horizon` before their node's last release are forgotten
    /// (a replica that lags more than that is not covered), and the oldest
    /// beyond the cap.
    pub(super) fn released(
        &mut self,
        now: Instant,
        horizon: Duration,
        node: usize,
        confirmed: Confirmed,
        lease: LeaseId,
        keys: &SubjectKeys,
    ) {
        if confirmed == Confirmed::ByCaller {
            self.last_release.insert(node, now);
        }
        while let Some(oldest) = self.released.front() {
            if !self.stale(now, oldest, horizon) && self.released.len() < MAX_REMEMBERED_RELEASES {
                break;
            }
            self.released.pop_front();
        }
        self.released.push_back(Released {
            at: now,
            node,
            lease,
            keys: keys.clone(),
        });
    }

    /// Whether `release` came more than `horizon` before its node's last.
    fn stale(&self, now: Instant, release: &Released, horizon: Duration) -> bool {
        let last = match self.aged_from_now {
            true => Some(&now),
            false => self.last_release.get(&release.node),
        };
        last.is_some_and(|last| last.saturating_duration_since(release.at) > horizon)
    }

    /// An injected bug for the simulator: releases are repeated only within
    /// the horizon of the recovery itself, so one lost by a failover found
    /// late stays (as before the horizon counted from the node's last).
    #[cfg(feature = "fault-injection")]
    pub(super) fn age_releases_from_now(&mut self) {
        self.aged_from_now = true;
    }

    /// Releases confirmed within `horizon` of their node's last that `owns`
    /// says belong on one server, grouped by subject.
    pub(super) fn released_on(
        &self,
        now: Instant,
        horizon: Duration,
        owns: impl Fn(&SubjectKeys) -> bool,
    ) -> Vec<(SubjectKeys, Vec<LeaseId>)> {
        let mut groups: Vec<(SubjectKeys, Vec<LeaseId>)> = Vec::new();
        let recent = self
            .released
            .iter()
            .filter(|release| !self.stale(now, release, horizon) && owns(&release.keys));
        for Released { lease, keys, .. } in recent {
            match groups
                .iter_mut()
                .find(|(k, ids)| k.leases() == keys.leases() && ids.len() < crate::scripts::MAX_RELEASE_BATCH)
            {
                Some((_, ids)) => ids.push(lease.clone()),
                None => groups.push((keys.clone(), vec![lease.clone()])),
            }
        }
        groups
    }

    pub(super) fn len(&self) -> usize {
        self.leases.len()
    }

    /// The live leases `owns` says belong on one server, oldest first (the
    /// order does not matter to Redis; it keeps runs reproducible).
    pub(super) fn on(&self, now: Instant, owns: impl Fn(&SubjectKeys) -> bool) -> Vec<(LeaseId, &Held)> {
        let mut found: Vec<(LeaseId, &Held)> = self
            .leases
            .iter()
            .filter(|(_, held)| held.expires_at > now && owns(&held.keys))
            .map(|(counter, held)| {
                let id = LeaseId::from_parts(self.instance, *counter).with_claim(held.weight, held.label.clone());
                (id, held)
            })
            .collect();
        found.sort_by(|(a, _), (b, _)| a.cmp(b));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_stays_small() {
        // What one held lease costs the registry's table (plus hashbrown's one
        // control byte and its spare capacity): printed for docs/performance.md.
        let entry = std::mem::size_of::<(u64, Held)>();
        println!("registry entry: {entry} bytes");
        assert!(entry <= 104, "{entry}");
    }

    fn ids(groups: &[(SubjectKeys, Vec<LeaseId>)]) -> Vec<u64> {
        groups
            .iter()
            .flat_map(|(_, ids)| ids.iter().map(|id| id.parts().1))
            .collect()
    }

    #[test]
    fn a_release_is_repeated_however_late_its_node_fails_over_is_found() {
        // A failover loses the old primary's last writes, found whenever the
        // client reaches the new primary: a stale sentinel, or a handshake
        // cut off by a second switch, may make that later than the horizon.
        let keys = SubjectKeys::new("t", &crate::key::Key::new("ns", "s").unwrap());
        let horizon = Duration::from_millis(500);
        #[allow(clippy::disallowed_methods)] // an arbitrary starting instant
        let start = Instant::now();
        let ms = |n| start + Duration::from_millis(n);
        let mut held = HeldLeases::default();
        let id = |n| LeaseId::from_parts(0x7a3, n);
        held.released(ms(0), horizon, 0, Confirmed::ByCaller, id(1), &keys);
        held.released(ms(300), horizon, 0, Confirmed::ByCaller, id(2), &keys);
        // Another node's releases do not age node 0's.
        held.released(ms(2_000), horizon, 1, Confirmed::ByCaller, id(3), &keys);
        assert_eq!(ids(&held.released_on(ms(2_200), horizon, |_| true)), [1, 2, 3]);
        // A recovery's repeats do not move the node's last release either.
        held.released(ms(2_100), horizon, 0, Confirmed::Again, id(2), &keys);
        assert_eq!(ids(&held.released_on(ms(2_200), horizon, |_| true)), [1, 2, 3, 2]);
        // A caller's release on node 0 does: what came before it by more
        // than the horizon is forgotten.
        held.released(ms(2_200), horizon, 0, Confirmed::ByCaller, id(4), &keys);
        assert_eq!(ids(&held.released_on(ms(2_200), horizon, |_| true)), [3, 2, 4]);
    }
}
