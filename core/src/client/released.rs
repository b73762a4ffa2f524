//! The releases Redis confirmed lately: a failover to a replica that had
//! not received them brings their leases back (held by nobody), so a
//! recovery sends them again. "Lately" counts back from the last release
//! the same node confirmed, not from the recovery: what a failover loses is
//! the old primary's last writes, however long the client takes to find
//! the new one (a stale sentinel, a handshake cut off by a second switch).

use std::collections::HashMap;
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
    /// By lease counter (one client's ids share the rest): one entry per
    /// lease, however often a recovery sends it again.
    by_counter: HashMap<u64, Released>,
    /// Per node, when it last confirmed a caller's release: the end of the
    /// writes a failover of that node may have lost.
    last_release: HashMap<usize, Instant>,
    /// The size after the last sweep: the next comes once it has doubled
    /// (amortised O(1) per release).
    swept_at: usize,
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
    /// most until `until`) at `now`. Those older than `horizon` before
    /// their node's last release, or past their `until`, are forgotten (a
    /// replica that lags more than that is not covered), and the oldest
    /// beyond the cap.
    pub(super) fn confirmed(
        &mut self,
        now: Instant,
        horizon: Duration,
        node: usize,
        lease: LeaseId,
        keys: &SubjectKeys,
        until: Instant,
    ) {
        self.last_release.insert(node, now);
        let keys = keys.clone();
        let release = Released {
            at: now,
            node,
            lease,
            keys,
            until,
        };
        self.by_counter.insert(release.lease.parts().1, release);
        self.sweep(now, horizon);
    }

    /// A recovery sent `lease` again and `node` confirmed it at `now`: it is
    /// remembered from now, for a server that may fail over in turn. Not
    /// the node's last release: a recovery cut off half way must still
    /// find the rest.
    pub(super) fn confirmed_again(&mut self, now: Instant, node: usize, lease: &LeaseId) {
        if let Some(release) = self.by_counter.get_mut(&lease.parts().1) {
            release.at = now;
            release.node = node;
        }
    }

    fn sweep(&mut self, now: Instant, horizon: Duration) {
        let len = self.by_counter.len();
        if len < (2 * self.swept_at).max(64) && len <= MAX_REMEMBERED_RELEASES {
            return;
        }
        let (last, aged) = (&self.last_release, self.aged_from_now);
        self.by_counter
            .retain(|_, release| !stale(last, aged, now, release, horizon) && release.until > now);
        if self.by_counter.len() > MAX_REMEMBERED_RELEASES {
            let mut order: Vec<(Instant, u64)> = self.by_counter.iter().map(|(c, r)| (r.at, *c)).collect();
            order.sort_unstable();
            let oldest = order.len() - MAX_REMEMBERED_RELEASES / 2;
            for (_, counter) in &order[..oldest] {
                self.by_counter.remove(counter);
            }
        }
        self.swept_at = self.by_counter.len();
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
        let (last, aged) = (&self.last_release, self.aged_from_now);
        let mut recent: Vec<(&u64, &Released)> = self
            .by_counter
            .iter()
            .filter(|(_, r)| !stale(last, aged, now, r, horizon) && r.until > now && owns(&r.keys))
            .collect();
        // The map's order is not reproducible; this is.
        recent.sort_unstable_by_key(|(counter, release)| (release.at, **counter));
        let mut groups: Vec<(SubjectKeys, Vec<LeaseId>)> = Vec::new();
        for (_, Released { lease, keys, .. }) in recent {
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
        self.by_counter.len()
    }
}

/// Whether `release` came more than `horizon` before its node's last (or,
/// `aged_from_now`, before now).
fn stale(
    last: &HashMap<usize, Instant>,
    aged_from_now: bool,
    now: Instant,
    release: &Released,
    horizon: Duration,
) -> bool {
    let last = if aged_from_now {
        Some(&now)
    } else {
        last.get(&release.node)
    };
    last.is_some_and(|last| last.saturating_duration_since(release.at) > horizon)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        recent.confirmed_again(ms(2_100), 0, &id(2));
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
        let keys = SubjectKeys::new("t", &crate::key::Key::new("ns", "s").unwrap());
        let horizon = Duration::from_secs(3_600);
        #[allow(clippy::disallowed_methods)] // an arbitrary starting instant
        let start = Instant::now();
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
