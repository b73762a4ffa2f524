//! The releases Redis confirmed lately: a failover to a replica that had
//! not received them brings their leases back (held by nobody), so a
//! recovery sends them again. "Lately" counts back from the last release
//! the same node confirmed, not from the recovery: what a failover loses is
//! the old primary's last writes, however long the client takes to find
//! the new one (a stale sentinel, a handshake cut off by a second switch).

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;

/// The most confirmed releases remembered for a recovery: the newest ones.
/// Bounds the memory (about 150 bytes each, 5 MB at most) at any release
/// rate. A failover loses the writes its old primary took after the
/// promotion (a Sentinel failover announces the switch a second or more
/// after it): this covers that at 10,000 releases a second per limiter. A
/// release lost beyond it leaves its lease until the TTL: fewer slots for a
/// while, never more.
pub(super) const MAX_REMEMBERED_RELEASES: usize = 32_768;

#[derive(Debug, Default)]
pub(super) struct RecentReleases {
    /// In the order callers' releases were confirmed; a recovery's repeat
    /// renews its entry where it is (one entry per lease, however often it
    /// is sent again). Every release pays one push and the pops of what
    /// went stale before it: O(1), nothing hashed.
    released: VecDeque<Released>,
    /// Per node, when it last confirmed a caller's release: the end of the
    /// writes a failover of that node may have lost.
    last_release: Vec<Option<Instant>>,
    /// An injected bug for the simulator: "lately" counts back from now.
    aged_from_now: bool,
}

/// A release Redis confirmed: when (last), on which node, what, and until
/// when it can matter (the lease has expired by then).
#[derive(Debug)]
struct Released {
    at: Instant,
    node: usize,
    lease: LeaseId,
    keys: SubjectKeys,
    until: Instant,
}

impl RecentReleases {
    /// `node` confirmed a caller's release of `lease` (of `keys`, live at
    /// most until `until`) at `now`. The oldest are forgotten once they
    /// came more than `horizon` before their node's last release (a replica
    /// that lags more than that is not covered) or their lease has expired,
    /// and beyond the cap. (Those behind an older one still wanted wait for
    /// it, within the cap; `on` leaves them out.)
    pub(super) fn confirmed(
        &mut self,
        now: Instant,
        horizon: Duration,
        node: usize,
        lease: LeaseId,
        keys: &SubjectKeys,
        until: Instant,
    ) {
        if self.last_release.len() <= node {
            self.last_release.resize(node + 1, None);
        }
        self.last_release[node] = Some(now);
        while let Some(oldest) = self.released.front() {
            let gone = self.stale(now, oldest, horizon) || oldest.until <= now;
            if !gone && self.released.len() < MAX_REMEMBERED_RELEASES {
                break;
            }
            self.released.pop_front();
        }
        self.released.push_back(Released {
            at: now,
            node,
            lease,
            keys: keys.clone(),
            until,
        });
    }

    /// A recovery sent `leases` again and `node` confirmed them at `now`:
    /// they are remembered from now, for a server that may fail over in
    /// turn. Not the node's last release: a recovery cut off half way must
    /// still find the rest. (One pass over the list per batch: recoveries
    /// are rare, releases are not.)
    pub(super) fn confirmed_again(&mut self, now: Instant, node: usize, leases: &[LeaseId]) {
        let counters: HashSet<u64> = leases.iter().map(|lease| lease.parts().1).collect();
        for release in self.released.iter_mut() {
            if counters.contains(&release.lease.parts().1) {
                release.at = now;
                release.node = node;
            }
        }
    }

    /// Whether `release` came more than `horizon` before its node's last
    /// (or, `aged_from_now`, before now).
    fn stale(&self, now: Instant, release: &Released, horizon: Duration) -> bool {
        let last = match self.aged_from_now {
            true => Some(now),
            false => self.last_release.get(release.node).copied().flatten(),
        };
        last.is_some_and(|last| last.saturating_duration_since(release.at) > horizon)
    }

    /// Releases confirmed within `horizon` of their node's last (and whose
    /// leases may still live) that `owns` says belong on one server,
    /// oldest first, grouped by subject.
    pub(super) fn on(
        &self,
        now: Instant,
        horizon: Duration,
        owns: impl Fn(&SubjectKeys) -> bool,
    ) -> Vec<(SubjectKeys, Vec<LeaseId>)> {
        let mut recent: Vec<&Released> = self
            .released
            .iter()
            .filter(|r| !self.stale(now, r, horizon) && r.until > now && owns(&r.keys))
            .collect();
        // Repeats renewed in place are out of order; this order is reproducible.
        recent.sort_by_key(|release| (release.at, release.lease.parts().1));
        let mut groups: Vec<(SubjectKeys, Vec<LeaseId>)> = Vec::new();
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

    /// An injected bug for the simulator: releases are repeated only within
    /// the horizon of the recovery itself, so one lost by a failover found
    /// late stays (as before the horizon counted from the node's last).
    #[cfg(feature = "fault-injection")]
    pub(super) fn age_from_now(&mut self) {
        self.aged_from_now = true;
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.released.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One subject's keys, and an arbitrary starting instant.
    fn subject_and_start() -> (SubjectKeys, Instant) {
        let keys = SubjectKeys::new("t", &crate::key::Key::new("ns", "s").unwrap());
        #[allow(clippy::disallowed_methods)] // an arbitrary starting instant
        let start = Instant::now();
        (keys, start)
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
        let (keys, start) = subject_and_start();
        let horizon = Duration::from_millis(500);
        let ms = |n| start + Duration::from_millis(n);
        let until = ms(600_000);
        let mut recent = RecentReleases::default();
        let id = |n| LeaseId::from_parts(0x7a3, n);
        recent.confirmed(ms(0), horizon, 0, id(1), &keys, until);
        recent.confirmed(ms(300), horizon, 0, id(2), &keys, until);
        // Another node's releases do not age node 0's.
        recent.confirmed(ms(2_000), horizon, 1, id(3), &keys, until);
        assert_eq!(ids(&recent.on(ms(2_200), horizon, |_| true)), [1, 2, 3]);
        // A recovery's repeat does not move the node's last release either,
        // and the lease is remembered once, from the repeat.
        recent.confirmed_again(ms(2_100), 0, &[id(2)]);
        assert_eq!(ids(&recent.on(ms(2_200), horizon, |_| true)), [1, 3, 2]);
        // A caller's release on node 0 does: what came before it by more
        // than the horizon is left out.
        recent.confirmed(ms(2_200), horizon, 0, id(4), &keys, until);
        assert_eq!(ids(&recent.on(ms(2_200), horizon, |_| true)), [3, 2, 4]);
        // A lease past its expiry is not released again.
        assert_eq!(ids(&recent.on(until, horizon, |_| true)), Vec::<u64>::new());
    }

    #[test]
    fn memory_is_bounded_by_the_cap_whatever_a_quiet_node_keeps() {
        let (keys, start) = subject_and_start();
        let horizon = Duration::from_secs(3_600);
        let until = start + Duration::from_secs(7_200);
        let mut recent = RecentReleases::default();
        // One release on a node that then goes quiet, and many on another,
        // all within the horizon.
        recent.confirmed(start, horizon, 1, LeaseId::from_parts(1, 0), &keys, until);
        for n in 1..(3 * MAX_REMEMBERED_RELEASES as u64) {
            let at = start + Duration::from_micros(n);
            recent.confirmed(at, horizon, 0, LeaseId::from_parts(1, n), &keys, until);
            assert!(recent.len() <= MAX_REMEMBERED_RELEASES, "{} at {n}", recent.len());
        }
        // The newest are kept.
        let newest = 3 * MAX_REMEMBERED_RELEASES as u64 - 1;
        let now = start + Duration::from_micros(newest);
        assert!(ids(&recent.on(now, horizon, |_| true)).contains(&newest));
    }
}
