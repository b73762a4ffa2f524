//! Running totals of what the client did.

/// Running totals, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Permits granted.
    pub granted: u64,
    /// Trusted denials (`Exceeded`).
    pub denied: u64,
    /// Acquires and renewals without a trustworthy answer.
    pub unavailable: u64,
    /// Acquires let through unenforced (policy `Allow`).
    pub fail_open: u64,
    /// Compensating releases started (late grants, ambiguous acquires).
    pub compensations: u64,
    /// Releases (and compensations) done.
    pub releases: u64,
    /// Failed releases queued for another attempt.
    pub release_retries: u64,
    /// Releases given up (their leases expire at TTL).
    pub releases_abandoned: u64,
    /// Ready connections retired.
    pub connections_replaced: u64,
    /// Renewals that extended their lease.
    pub renewals: u64,
    /// Renewals that found their lease gone.
    pub leases_lost: u64,
    /// `MOVED` redirects followed (Redis Cluster: a slot lives elsewhere).
    pub moved: u64,
    /// `ASK` redirects followed (Redis Cluster: a slot is migrating).
    pub asked: u64,
    /// `TRYAGAIN` replies waited out (a subject split by a migration).
    pub try_again: u64,
    /// Slot table reads after a redirect or a lost node.
    pub topology_refreshes: u64,
    /// Handshakes that found lease data lost (restart, failover, flush).
    pub data_losses: u64,
    /// Held leases written back after a loss (missing, then restored).
    pub leases_restored: u64,
    /// Held leases found intact after a loss.
    pub leases_survived: u64,
    /// Restored leases that found their subject over its limit: detected
    /// over-admissions.
    pub over_admissions: u64,
    /// Acquires refused while a recovery hold was on.
    pub recovering: u64,
    /// Leases released again after a failover had brought them back (their
    /// release was confirmed, and lost with the old primary).
    pub releases_repeated: u64,
    /// Grants released because `WAIT` confirmed too few replicas.
    pub not_replicated: u64,
    /// Waiting acquires refused at once: the expected wait was longer than
    /// the caller's deadline.
    pub shed: u64,
    /// Wake-ups received (messages on a subject's channel, subscriptions
    /// confirmed).
    pub wake_ups: u64,
    /// Waiters taken out of their queue (`LEAVE`) after their callers left.
    pub waiters_left: u64,
    /// Waiters served by a release handing its slot over, taken from the
    /// wake-up message (one heard with less than half its reservation left
    /// checks again instead, and is counted in `handed_late`, not here).
    pub handed_over: u64,
    /// Hand-overs heard with under half their reservation left (a stalled
    /// driver, a slow or held wake-up connection): checked again rather
    /// than delivered from the message. Many of them say the wake-up
    /// connection lags.
    pub handed_late: u64,
    /// Units of expired leases the scripts pruned from lease sets before
    /// counting (a weight-1 lease is one unit): leases whose holders stopped
    /// renewing and never released them. Crashed replicas, leaked permits,
    /// or holders paused past their TTL; reported by the acquire and renew
    /// scripts at no extra round trip, summed over every call's reply.
    pub reclaimed: u64,
    /// Renewals the client made on its own for kept-alive leases.
    pub kept_alive: u64,
    /// Leases the client renewed on its own (kept alive, or a hand-over
    /// to confirm) lost: found gone, or not renewed in time.
    pub keep_alive_lost: u64,
    /// Handshakes that found something weakening a guarantee
    /// ([`Event::Warning`](super::Event::Warning)).
    pub server_warnings: u64,
    /// Switches to another primary named by the sentinels (Redis Sentinel).
    pub primary_switches: u64,
    /// Sentinels that could not be used (unreachable, refused, wrong answer).
    pub sentinel_errors: u64,
}
