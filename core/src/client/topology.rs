//! Where requests go: one server, the primary the sentinels name (Redis
//! Sentinel), or the primary that owns a subject's slot in a Redis Cluster. The slot table is learned from `CLUSTER SHARDS` (or
//! `CLUSTER SLOTS`) at every handshake and corrected by `MOVED` redirects;
//! a refresh after a redirect is rate limited, so a migration answered by
//! thousands of `MOVED` costs one table read.

use std::time::{Duration, Instant};

use crate::cluster::Shard;
use crate::slot::SLOTS;

/// The least time between two topology refreshes asked for by redirects.
pub(super) const REFRESH_INTERVAL: Duration = Duration::from_millis(100);

/// Where a request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// This node (an index into the client's nodes).
    Node(usize),
    /// Cluster mode before any slot table is known: wait for one.
    AwaitTopology,
    /// The slot table names no primary for the slot (the cluster is
    /// re-forming): unavailable for now.
    NoOwner,
}

#[derive(Debug)]
pub(super) struct Topology {
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    Standalone,
    /// One primary, node 0, once the sentinels have named it.
    Sentinel {
        named: bool,
    },
    Cluster(Cluster),
}

#[derive(Debug)]
struct Cluster {
    /// The owning node per slot, `NONE` where unknown; empty until learned.
    owners: Vec<u16>,
    /// Per node: whether it owns a slot (kept with `owners`, so that asking
    /// costs no scan of 16384 slots).
    owning: Vec<bool>,
    /// Nodes 0..seeds are the seeds, tried in order until a table is known.
    seeds: usize,
    /// Seeds that failed in a row while no table is known.
    seed_failures: usize,
    /// Connections are TLS: nodes are reached at their `tls-port`.
    tls: bool,
    /// A `CLUSTER SHARDS` asked for by a redirect is on its way.
    refreshing: bool,
    /// When the last redirect-driven refresh went out.
    last_refresh: Option<Instant>,
    /// A refresh is owed once the rate limit allows it.
    refresh_owed: bool,
}

const NONE: u16 = u16::MAX;

impl Topology {
    pub(super) fn standalone() -> Self {
        Self { mode: Mode::Standalone }
    }

    pub(super) fn sentinel() -> Self {
        Self {
            mode: Mode::Sentinel { named: false },
        }
    }

    pub(super) fn cluster(seeds: usize, tls: bool) -> Self {
        Self {
            mode: Mode::Cluster(Cluster {
                owners: Vec::new(),
                owning: Vec::new(),
                seeds,
                seed_failures: 0,
                tls,
                refreshing: false,
                last_refresh: None,
                refresh_owed: false,
            }),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.mode, Mode::Cluster(_))
    }

    pub(super) fn is_sentinel(&self) -> bool {
        matches!(self.mode, Mode::Sentinel { .. })
    }

    /// The sentinels named the primary: node 0 serves every subject.
    pub(super) fn primary_named(&mut self) {
        if let Mode::Sentinel { named } = &mut self.mode {
            *named = true;
        }
    }

    /// The primary the sentinels named was not one: requests wait for
    /// their next answer.
    pub(super) fn primary_unnamed(&mut self) {
        if let Mode::Sentinel { named } = &mut self.mode {
            *named = false;
        }
    }

    pub(super) fn tls(&self) -> bool {
        matches!(&self.mode, Mode::Cluster(cluster) if cluster.tls)
    }

    /// Whether a slot table has been learned (always, standalone).
    pub(super) fn known(&self) -> bool {
        match &self.mode {
            Mode::Standalone => true,
            Mode::Sentinel { named } => *named,
            Mode::Cluster(cluster) => !cluster.owners.is_empty(),
        }
    }

    /// Where a request for `slot` goes.
    pub(super) fn route(&self, slot: u16) -> Route {
        match &self.mode {
            Mode::Standalone | Mode::Sentinel { named: true } => Route::Node(0),
            Mode::Sentinel { named: false } => Route::AwaitTopology,
            Mode::Cluster(cluster) if cluster.owners.is_empty() => Route::AwaitTopology,
            Mode::Cluster(cluster) => match cluster.owners[usize::from(slot)] {
                NONE => Route::NoOwner,
                node => Route::Node(usize::from(node)),
            },
        }
    }

    /// The node a request of `slot` goes to now, if any: an `ASK` target
    /// (once), else the slot's owner when one is known.
    pub(super) fn node_for(&self, slot: u16, ask: Option<usize>) -> Option<usize> {
        if ask.is_some() {
            return ask;
        }
        match self.route(slot) {
            Route::Node(node) => Some(node),
            Route::AwaitTopology | Route::NoOwner => None,
        }
    }

    /// Whether `node` owns a slot (standalone: the one node always does).
    /// Nodes that own none are not reconnected; seeds are, until a table is known.
    pub(super) fn wanted(&self, node: usize) -> bool {
        match &self.mode {
            Mode::Standalone | Mode::Sentinel { .. } => true,
            Mode::Cluster(cluster) if cluster.owners.is_empty() => node < cluster.seeds,
            Mode::Cluster(cluster) => cluster.owning.get(node).copied().unwrap_or(false),
        }
    }

    /// One slot of each primary the table names, in slot order (one slot,
    /// 0, for a standalone server; none while no table is known).
    pub(super) fn slot_per_primary(&self) -> Vec<u16> {
        match &self.mode {
            Mode::Standalone | Mode::Sentinel { named: true } => vec![0],
            Mode::Sentinel { named: false } => Vec::new(),
            Mode::Cluster(cluster) => {
                let mut seen = std::collections::HashSet::new();
                (0..SLOTS)
                    .filter(|&slot| {
                        let owner = cluster.owners[usize::from(slot)];
                        owner != NONE && seen.insert(owner)
                    })
                    .collect()
            }
        }
    }

    /// Replaces the table with `shards`, whose primaries are the nodes `owners`.
    pub(super) fn learn(&mut self, shards: &[Shard], owners_by_shard: &[usize]) {
        let Mode::Cluster(cluster) = &mut self.mode else {
            return;
        };
        let mut owners = vec![NONE; usize::from(SLOTS)];
        for (shard, node) in shards.iter().zip(owners_by_shard) {
            let node = u16::try_from(*node).unwrap_or(NONE);
            for &(first, last) in &shard.ranges {
                owners[usize::from(first)..=usize::from(last)].fill(node);
            }
        }
        cluster.owning = vec![false; owners_by_shard.iter().max().map_or(0, |n| n + 1)];
        for &owner in &owners {
            if let Some(owning) = cluster.owning.get_mut(usize::from(owner)) {
                *owning = true;
            }
        }
        cluster.owners = owners;
        cluster.seed_failures = 0;
    }

    /// A `MOVED` said `slot` now lives on `node`.
    pub(super) fn moved(&mut self, slot: u16, node: usize) {
        if let Mode::Cluster(cluster) = &mut self.mode {
            if !cluster.owners.is_empty() {
                cluster.owners[usize::from(slot)] = u16::try_from(node).unwrap_or(NONE);
                // The old owner may have lost its last slot; it stays
                // `owning` until the next table, which only keeps it connected.
                if cluster.owning.len() <= node {
                    cluster.owning.resize(node + 1, false);
                }
                cluster.owning[node] = true;
            }
        }
    }

    /// A seed failed before any table was known: the next seed to try now,
    /// or `None` once every seed has failed in a row (then back off).
    pub(super) fn next_seed(&mut self, failed: usize) -> Option<usize> {
        let Mode::Cluster(cluster) = &mut self.mode else {
            return None;
        };
        if !cluster.owners.is_empty() {
            return None;
        }
        cluster.seed_failures += 1;
        if cluster.seed_failures >= cluster.seeds {
            cluster.seed_failures = 0;
            return None;
        }
        Some((failed + 1) % cluster.seeds)
    }

    /// A refresh is wanted (a redirect, a lost node): whether one may go out
    /// at `now`; if not, it is owed for later.
    pub(super) fn want_refresh(&mut self, now: Instant) -> bool {
        let Mode::Cluster(cluster) = &mut self.mode else {
            return false;
        };
        if cluster.refreshing {
            return false;
        }
        if cluster.last_refresh.is_some_and(|last| now < last + REFRESH_INTERVAL) {
            cluster.refresh_owed = true;
            return false;
        }
        cluster.refreshing = true;
        cluster.refresh_owed = false;
        cluster.last_refresh = Some(now);
        true
    }

    /// The refresh that was on its way is answered (or lost).
    pub(super) fn refreshed(&mut self) {
        if let Mode::Cluster(cluster) = &mut self.mode {
            cluster.refreshing = false;
        }
    }

    /// When an owed refresh may go out.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match &self.mode {
            Mode::Cluster(cluster) if cluster.refresh_owed && !cluster.refreshing => {
                cluster.last_refresh.map(|last| last + REFRESH_INTERVAL)
            }
            _ => None,
        }
    }
}
