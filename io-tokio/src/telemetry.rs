//! What the driver publishes through the `metrics` facade: names, units and
//! help texts in one place, deltas of the core's counters, and two gauges.
//!
//! Every metric carries the limiter's labels: none by default, or
//! `namespace="…"` when the builder was given one. Never the subject: its
//! values are unbounded, and so would be the series.

use std::collections::HashMap;
use std::sync::Mutex;

use inflight_core::Stats;
use metrics::{Label, Unit};

/// The names under which the driver publishes metrics.
pub mod names {
    /// Counter: permits granted (enforced).
    pub const GRANTED: &str = "inflight_acquire_granted_total";
    /// Counter: trusted denials (`Exceeded`).
    pub const DENIED: &str = "inflight_acquire_denied_total";
    /// Counter: acquires and renewals without a trustworthy answer.
    pub const UNAVAILABLE: &str = "inflight_acquire_unavailable_total";
    /// Counter: requests let through unenforced (policy `Allow`).
    pub const FAIL_OPEN: &str = "inflight_acquire_fail_open_total";
    /// Counter: releases of leases no caller received.
    pub const COMPENSATED: &str = "inflight_compensations_total";
    /// Counter: failed releases queued for another attempt.
    pub const RELEASE_RETRIED: &str = "inflight_release_retries_total";
    /// Counter: releases given up (their slots return at TTL).
    pub const RELEASE_ABANDONED: &str = "inflight_releases_abandoned_total";
    /// Counter: ready connections retired.
    pub const CONNECTION_REPLACED: &str = "inflight_connections_replaced_total";
    /// Counter: renewals that extended their lease.
    pub const RENEWED: &str = "inflight_renewals_total";
    /// Counter: renewals that found their lease gone.
    pub const LEASE_LOST: &str = "inflight_leases_lost_total";
    /// Counter: `MOVED` redirects followed (Redis Cluster).
    pub const MOVED: &str = "inflight_cluster_moved_total";
    /// Counter: `ASK` redirects followed (Redis Cluster, slot migrating).
    pub const ASKED: &str = "inflight_cluster_ask_total";
    /// Counter: `TRYAGAIN` replies waited out (Redis Cluster, slot migrating).
    pub const TRY_AGAIN: &str = "inflight_cluster_try_again_total";
    /// Counter: slot table reads after a redirect or a lost node.
    pub const TOPOLOGY_REFRESHED: &str = "inflight_cluster_topology_refreshes_total";
    /// Counter: switches to another primary the sentinels named (Redis Sentinel).
    pub const PRIMARY_SWITCHES: &str = "inflight_primary_switches_total";
    /// Counter: sentinels that could not be used (unreachable, refused, a
    /// wrong or stale answer).
    pub const SENTINEL_ERRORS: &str = "inflight_sentinel_errors_total";
    /// Counter: handshakes that found a server's lease data lost (restart,
    /// failover, flush).
    pub const DATA_LOSS: &str = "inflight_data_loss_detected_total";
    /// Counter: held leases written back after a data loss.
    pub const LEASES_RESTORED: &str = "inflight_leases_restored_total";
    /// Counter: restored leases that found their key over its limit.
    pub const OVER_ADMISSIONS: &str = "inflight_over_admissions_detected_total";
    /// Counter: grants released because too few replicas acknowledged them.
    pub const NOT_REPLICATED: &str = "inflight_acquire_not_replicated_total";
    /// Counter: acquires refused during a recovery hold.
    pub const RECOVERING: &str = "inflight_acquire_recovering_total";
    /// Counter: waiting acquires refused at once (the expected wait was
    /// longer than their deadline).
    pub const SHED: &str = "inflight_acquire_shed_total";
    /// Counter: wake-ups received for waiting acquires.
    pub const WAKE_UPS: &str = "inflight_wake_ups_total";
    /// Counter: units of expired leases the scripts pruned before counting:
    /// leases whose holders died (crashed replicas, leaked permits) or
    /// stalled past their TTL.
    pub const RECLAIMED: &str = "inflight_reclaimed_units_total";
    /// Counter: renewals the driver made for kept-alive permits.
    pub const KEPT_ALIVE: &str = "inflight_keep_alive_renewals_total";
    /// Counter: kept-alive permits whose lease was lost, and slots handed to
    /// a waiter whose confirmation failed.
    pub const KEEP_ALIVE_LOST: &str = "inflight_keep_alive_lost_total";
    /// Counter: handshakes that found something weakening a guarantee (a
    /// server that may evict keys, `INFO` refused).
    pub const SERVER_WARNINGS: &str = "inflight_server_warnings_total";
    /// Histogram, labelled `outcome` = `granted`, `denied`, `shed`, `unavailable` or `fail_open`.
    pub const ACQUIRE_SECONDS: &str = "inflight_acquire_seconds";
    /// Histogram: how long waiting acquires waited, whatever their outcome.
    pub const WAIT_SECONDS: &str = "inflight_acquire_wait_seconds";
    /// Gauge: waiting acquires queued for a slot (or checking again).
    pub const WAITING: &str = "inflight_acquires_waiting";
    /// Gauge: ready connections to Redis.
    pub const CONNECTIONS_UP: &str = "inflight_connections_up";
    /// Gauge: acquires (and renewals) waiting for a connection or a reply.
    pub const ACQUIRES_IN_FLIGHT: &str = "inflight_acquires_in_flight";

    /// Every counter, in the order `docs/operations.md` lists them.
    pub const COUNTERS: [&str; 27] = [
        GRANTED,
        DENIED,
        UNAVAILABLE,
        FAIL_OPEN,
        SHED,
        RECOVERING,
        NOT_REPLICATED,
        COMPENSATED,
        RELEASE_RETRIED,
        RELEASE_ABANDONED,
        RENEWED,
        LEASE_LOST,
        KEPT_ALIVE,
        KEEP_ALIVE_LOST,
        WAKE_UPS,
        RECLAIMED,
        CONNECTION_REPLACED,
        SERVER_WARNINGS,
        DATA_LOSS,
        LEASES_RESTORED,
        OVER_ADMISSIONS,
        MOVED,
        ASKED,
        TRY_AGAIN,
        TOPOLOGY_REFRESHED,
        PRIMARY_SWITCHES,
        SENTINEL_ERRORS,
    ];
    /// Every gauge.
    pub const GAUGES: [&str; 3] = [CONNECTIONS_UP, ACQUIRES_IN_FLIGHT, WAITING];
    /// Every histogram.
    pub const HISTOGRAMS: [&str; 2] = [ACQUIRE_SECONDS, WAIT_SECONDS];
}

/// A counter: its name, its help text, and its figure in [`Stats`].
type CounterSpec = (&'static str, &'static str, fn(&Stats) -> u64);

const COUNTERS: [CounterSpec; 27] = [
    (names::GRANTED, "Permits granted (enforced).", |s| s.granted),
    (
        names::SERVER_WARNINGS,
        "Handshakes that found something weakening a guarantee (a server that may evict keys, INFO refused).",
        |s| s.server_warnings,
    ),
    (
        names::DENIED,
        "Acquires refused because the key was at its limit (Exceeded).",
        |s| s.denied,
    ),
    (
        names::UNAVAILABLE,
        "Acquires and renewals without a trustworthy answer (timeout, lost connection, server error, in-flight cap).",
        |s| s.unavailable,
    ),
    (
        names::FAIL_OPEN,
        "Requests let through unenforced because Redis was unavailable (policy Allow).",
        |s| s.fail_open,
    ),
    (
        names::COMPENSATED,
        "Releases of leases no caller received (late grants, ambiguous acquires).",
        |s| s.compensations,
    ),
    (
        names::RELEASE_RETRIED,
        "Release attempts queued for another try after a failure.",
        |s| s.release_retries,
    ),
    (
        names::RELEASE_ABANDONED,
        "Releases given up; their slots come back at the lease TTL.",
        |s| s.releases_abandoned,
    ),
    (
        names::CONNECTION_REPLACED,
        "Ready connections retired (stall, close, protocol error, echo mismatch).",
        |s| s.connections_replaced,
    ),
    (names::RENEWED, "Renewals that extended their lease.", |s| s.renewals),
    (
        names::LEASE_LOST,
        "Renewals that found their lease already gone.",
        |s| s.leases_lost,
    ),
    (
        names::MOVED,
        "MOVED redirects followed: a subject's slot lives on another primary (Redis Cluster).",
        |s| s.moved,
    ),
    (
        names::ASKED,
        "ASK redirects followed: a subject's slot is migrating (Redis Cluster).",
        |s| s.asked,
    ),
    (
        names::TRY_AGAIN,
        "TRYAGAIN replies waited out: a subject's keys are split by a slot migration (Redis Cluster).",
        |s| s.try_again,
    ),
    (
        names::TOPOLOGY_REFRESHED,
        "Slot table reads after a redirect or a lost node (Redis Cluster).",
        |s| s.topology_refreshes,
    ),
    (
        names::PRIMARY_SWITCHES,
        "Switches to another primary the sentinels named (Redis Sentinel).",
        |s| s.primary_switches,
    ),
    (
        names::SENTINEL_ERRORS,
        "Sentinels that could not be used: unreachable, refused, or a wrong or stale answer (Redis Sentinel).",
        |s| s.sentinel_errors,
    ),
    (
        names::DATA_LOSS,
        "Handshakes that found a Redis server's lease data lost (empty restart, failover, flush).",
        |s| s.data_losses,
    ),
    (
        names::LEASES_RESTORED,
        "Held leases written back after a data loss.",
        |s| s.leases_restored,
    ),
    (
        names::OVER_ADMISSIONS,
        "Leases written back after a data loss that found their key over its limit (detected over-admission).",
        |s| s.over_admissions,
    ),
    (
        names::RECOVERING,
        "Acquires refused while the fleet wrote back leases after a data loss.",
        |s| s.recovering,
    ),
    (
        names::NOT_REPLICATED,
        "Grants released because WAIT confirmed fewer replicas than min_replicas_acked asked for.",
        |s| s.not_replicated,
    ),
    (
        names::SHED,
        "Waiting acquires refused at once: the expected wait for a slot was longer than their deadline.",
        |s| s.shed,
    ),
    (
        names::WAKE_UPS,
        "Wake-ups received for waiting acquires (a slot of their key may be free).",
        |s| s.wake_ups,
    ),
    (
        names::RECLAIMED,
        "Units of expired leases pruned before counting: holders that died or stalled past their TTL without releasing.",
        |s| s.reclaimed,
    ),
    (
        names::KEPT_ALIVE,
        "Renewals the driver made on its own for kept-alive permits.",
        |s| s.kept_alive,
    ),
    (
        names::KEEP_ALIVE_LOST,
        "Kept-alive permits whose lease was lost (found gone, or not renewed before its expiry).",
        |s| s.keep_alive_lost,
    ),
];

#[cfg(test)]
#[test]
fn the_published_counters_are_the_listed_ones() {
    let mut published: Vec<&str> = COUNTERS.iter().map(|(name, _, _)| *name).collect();
    let mut listed = names::COUNTERS.to_vec();
    published.sort_unstable();
    listed.sort_unstable();
    assert_eq!(published, listed);
}

/// Tells the installed recorder the unit and meaning of every metric. Cheap
/// and idempotent; called at each limiter's start, so a recorder installed
/// before any limiter learns them all.
pub(crate) fn describe() {
    for (name, help, _) in COUNTERS {
        metrics::describe_counter!(name, Unit::Count, help);
    }
    metrics::describe_histogram!(
        names::ACQUIRE_SECONDS,
        Unit::Seconds,
        "Time from an acquire call to its outcome, labelled by outcome."
    );
    metrics::describe_histogram!(
        names::WAIT_SECONDS,
        Unit::Seconds,
        "Time waiting acquires spent from the call to their outcome."
    );
    metrics::describe_gauge!(
        names::WAITING,
        Unit::Count,
        "Waiting acquires queued for a slot of their key."
    );
    metrics::describe_gauge!(names::CONNECTIONS_UP, Unit::Count, "Ready connections to Redis.");
    metrics::describe_gauge!(
        names::ACQUIRES_IN_FLIGHT,
        Unit::Count,
        "Acquires and renewals waiting for a connection or for Redis's reply."
    );
}

/// The labels every metric of one limiter carries.
pub(crate) fn labels(namespace: Option<&str>) -> Vec<Label> {
    namespace
        .map(|namespace| Label::new("namespace", namespace.to_string()))
        .into_iter()
        .collect()
}

/// How one acquire ended, for the latency histogram's `outcome` label.
#[derive(Clone, Copy)]
pub(crate) enum AcquireOutcome {
    Granted,
    Denied,
    Shed,
    Unavailable,
    FailOpen,
}

/// Records one acquire's latency. Without a namespace (the common case) the
/// keys are static: nothing is allocated per acquire.
pub(crate) fn record_acquire(labels: &[Label], outcome: AcquireOutcome, seconds: f64, waited: bool) {
    use AcquireOutcome as O;
    if waited {
        metrics::histogram!(names::WAIT_SECONDS, labels.to_vec()).record(seconds);
    }
    let histogram = match (labels.is_empty(), outcome) {
        (true, O::Granted) => metrics::histogram!(names::ACQUIRE_SECONDS, "outcome" => "granted"),
        (true, O::Denied) => metrics::histogram!(names::ACQUIRE_SECONDS, "outcome" => "denied"),
        (true, O::Shed) => metrics::histogram!(names::ACQUIRE_SECONDS, "outcome" => "shed"),
        (true, O::Unavailable) => metrics::histogram!(names::ACQUIRE_SECONDS, "outcome" => "unavailable"),
        (true, O::FailOpen) => metrics::histogram!(names::ACQUIRE_SECONDS, "outcome" => "fail_open"),
        (false, outcome) => {
            let name = match outcome {
                O::Granted => "granted",
                O::Denied => "denied",
                O::Shed => "shed",
                O::Unavailable => "unavailable",
                O::FailOpen => "fail_open",
            };
            let mut labels = labels.to_vec();
            labels.push(Label::new("outcome", name));
            metrics::histogram!(names::ACQUIRE_SECONDS, labels)
        }
    };
    histogram.record(seconds);
}

/// What one driver has published so far, so that each report sends deltas
/// of the counters and its share of the gauges.
pub(crate) struct Published {
    stats: Stats,
    connections_up: usize,
    in_flight: usize,
    waiting: usize,
}

impl Published {
    /// Registers every counter and gauge of `labels` at its current value
    /// (zero for a fresh process), so that a limiter that never connects
    /// still shows `inflight_connections_up 0`, and a counter is a series
    /// from the start, not from its first increment.
    pub(crate) fn register(labels: &[Label]) -> Self {
        for (name, _, _) in COUNTERS {
            metrics::counter!(name, labels.to_vec()).increment(0);
        }
        for outcome in ["granted", "denied", "shed", "unavailable", "fail_open"] {
            let mut labels = labels.to_vec();
            labels.push(Label::new("outcome", outcome));
            let _ = metrics::histogram!(names::ACQUIRE_SECONDS, labels);
        }
        let _ = metrics::histogram!(names::WAIT_SECONDS, labels.to_vec());
        let mut published = Self {
            stats: Stats::default(),
            connections_up: 0,
            in_flight: 0,
            waiting: 0,
        };
        published.withdraw(labels);
        published
    }

    /// Publishes what changed since the last call; whether the counters did.
    pub(crate) fn report(
        &mut self,
        labels: &[Label],
        stats: Stats,
        connections_up: usize,
        in_flight: usize,
        waiting: usize,
    ) -> bool {
        let changed = stats != self.stats;
        if changed {
            for (name, _, figure) in COUNTERS {
                let delta = figure(&stats).saturating_sub(figure(&self.stats));
                if delta > 0 {
                    metrics::counter!(name, labels.to_vec()).increment(delta);
                }
            }
            self.stats = stats;
        }
        share(names::CONNECTIONS_UP, labels, &mut self.connections_up, connections_up);
        share(names::ACQUIRES_IN_FLIGHT, labels, &mut self.in_flight, in_flight);
        share(names::WAITING, labels, &mut self.waiting, waiting);
        changed
    }

    /// Takes this driver's share out of the gauges (it is stopping).
    pub(crate) fn withdraw(&mut self, labels: &[Label]) {
        share(names::CONNECTIONS_UP, labels, &mut self.connections_up, 0);
        share(names::ACQUIRES_IN_FLIGHT, labels, &mut self.in_flight, 0);
        share(names::WAITING, labels, &mut self.waiting, 0);
    }
}

/// The gauges' totals in this process: each gauge sums the shares of every
/// driver with its labels, and is *set* to that sum, never moved by
/// increments. A recorder installed after a limiter started, or one that
/// resets gauges when it reads them, still reads the true figure at the
/// next report, and a gauge cannot go below zero.
type Totals = HashMap<(&'static str, Vec<Label>), usize>;

static TOTALS: Mutex<Option<Totals>> = Mutex::new(None);

/// Moves one driver's share of a gauge from `*published` to `now`.
fn share(name: &'static str, labels: &[Label], published: &mut usize, now: usize) {
    let mut totals = TOTALS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let total = totals
        .get_or_insert_with(HashMap::new)
        .entry((name, labels.to_vec()))
        .or_insert(0);
    // Shares only this driver moves: `published` is part of `total`.
    *total = total.saturating_sub(*published) + now;
    metrics::gauge!(name, labels.to_vec()).set(*total as f64);
    *published = now;
}
