//! Configuration of the core, its validation, and the server URL.
//!
//! Everything a user can get wrong is refused here with a [`ConfigError`]
//! that names the field, so a bad deployment fails at start-up instead of
//! misbehaving under load.

use std::time::Duration;

use crate::resp::ReplyLimits;

mod checks;
pub(crate) mod error;
pub(crate) mod policies;

pub use crate::address::Credentials;
pub use error::{limit, ConfigError, MAX_DURATION};
pub use policies::{Recovery, ReleasePolicy, ReplicaAcks, Servers, UnavailablePolicy};

/// The core's settings. Build with `Config::default()` and adjust fields, then
/// [`Config::validate`] (the `Client` does so on construction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// First component of every key. May not contain `{` or `}` (it would add a
    /// hash tag) and must be non-empty.
    pub key_prefix: String,
    /// How long a lease lives if it is never released (a crashed replica's slots
    /// come back after this).
    pub lease_ttl: Duration,
    /// The caller's latency budget for one acquire.
    pub acquire_timeout: Duration,
    /// How long a request may wait for its reply before the connection is
    /// considered stalled and replaced. Longer than `acquire_timeout`, so a
    /// caller that stops waiting does not condemn a slow but healthy connection.
    pub request_liveness: Duration,
    /// Budget for opening a connection: TCP connect plus the handshake.
    pub connect_timeout: Duration,
    /// Acquires waiting or in flight at once; more fail fast as unavailable.
    pub max_in_flight: usize,
    /// What an acquire without a trustworthy answer becomes.
    pub unavailable_policy: UnavailablePolicy,
    /// How hard a release tries before it gives up.
    pub release: ReleasePolicy,
    /// Delay before reconnecting after a failed attempt; doubled per failure...
    pub reconnect_initial_backoff: Duration,
    /// ...up to this.
    pub reconnect_max_backoff: Duration,
    /// Sent with `AUTH` at every handshake, if any.
    pub credentials: Option<Credentials>,
    /// Logical database (`SELECT`), 0 by default.
    pub database: u32,
    /// Bounds on the replies accepted from the server. In cluster mode they
    /// are raised to at least [`ReplyLimits::TOPOLOGY`], which a slot table
    /// reply needs.
    pub reply_limits: ReplyLimits,
    /// The server, or the cluster's seed nodes.
    pub servers: Servers,
    /// What a handshake does when it finds lease data lost.
    pub recovery: Recovery,
    /// Deliver a grant only once this many replicas have it (`WAIT`); off
    /// (`None`) by default. See [`ReplicaAcks`].
    pub replica_acks: Option<ReplicaAcks>,
    /// How long a waiting acquire keeps its place in its subject's queue
    /// without calling again. The client checks again every third of it
    /// (the fallback for a lost wake-up), so a waiter whose replica crashed
    /// stops blocking the queue within this. 1 s by default; at most the
    /// lease TTL (a longer one is cut to it: see [`Config::waiter_lifetime()`]).
    pub waiter_lifetime: Duration,
    /// Who holds this client's leases, as `holders` shows them (a host or
    /// pod name): written into every lease id unless an acquire gives its
    /// own label. None by default.
    pub holder_label: Option<crate::lease_id::Label>,
    /// How long a ready connection may carry nothing before a `PING` checks
    /// it (1 s by default). A server whose host dies without closing the
    /// connection (no FIN, no RST) is found within this plus
    /// `request_liveness`, even by a limiter that only holds leases: the
    /// recovery window counts on every limiter reconnecting within it.
    pub idle_probe: Duration,
    /// Use a server that may evict keys (`maxmemory` set with a
    /// `maxmemory-policy` other than `noeviction`), with a warning at each
    /// handshake, instead of refusing it (`ConnectionError::Eviction`).
    /// Off by default: an evicted lease set over-admits unnoticed.
    pub allow_eviction: bool,
    /// Give every grant a fencing token ([`Lease::fencing_token`](crate::Lease::fencing_token)).
    /// Off by default: drawing one is a write of the subject's counter on
    /// every fail-fast grant, the dearest command of an acquire (about a
    /// fifth of Redis's CPU per cycle), paid only by those who read tokens.
    pub fencing_tokens: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            key_prefix: "inflight".into(),
            lease_ttl: Duration::from_secs(60),
            acquire_timeout: Duration::from_millis(250),
            request_liveness: Config::default_request_liveness(Duration::from_millis(250)),
            connect_timeout: Duration::from_secs(2),
            max_in_flight: 1024,
            unavailable_policy: UnavailablePolicy::Deny,
            release: ReleasePolicy::default(),
            reconnect_initial_backoff: Duration::from_millis(10),
            reconnect_max_backoff: Duration::from_secs(1),
            credentials: None,
            database: 0,
            reply_limits: ReplyLimits::default(),
            servers: Servers::default(),
            recovery: Recovery::default(),
            replica_acks: None,
            waiter_lifetime: Duration::from_secs(1),
            holder_label: None,
            idle_probe: Duration::from_secs(1),
            allow_eviction: false,
            fencing_tokens: false,
        }
    }
}

impl Config {
    /// The liveness budget that goes with an acquire timeout when none is
    /// chosen: 2 s, or 4 timeouts if that is longer. Long enough that a
    /// caller who stops waiting does not condemn a slow but healthy
    /// connection; it is also how long a held-back request stays valid.
    pub fn default_request_liveness(acquire_timeout: Duration) -> Duration {
        Duration::from_secs(2).max(acquire_timeout.saturating_mul(4))
    }

    /// The recovery window when none is chosen: how long it takes every
    /// replica to notice, reconnect and write back. A replica's connection
    /// to a server that restarts or fails over breaks with it, or, if the
    /// host died without a word, is found dead by its idle probe within
    /// `idle_probe + request_liveness`; it tries again within the backoff
    /// cap, and its handshake (writing back what it holds) ends within the
    /// connect timeout, or fails. So by the end of this window, counted from
    /// the first replica's handshake, every replica with the same settings
    /// has written its leases back.
    pub fn default_recovery_window(&self) -> Duration {
        self.idle_probe
            .saturating_add(self.request_liveness)
            .saturating_add(self.reconnect_max_backoff)
            .saturating_add(self.connect_timeout)
    }

    /// How long a waiter keeps its place without calling again: the
    /// `waiter_lifetime` set, cut to the lease TTL. A release hands a freed
    /// slot to a waiter until its queue entry would expire; a longer
    /// lifetime would let a slot stand reserved for a waiter that died
    /// longer than any lease lives.
    pub fn waiter_lifetime(&self) -> Duration {
        self.waiter_lifetime.min(self.lease_ttl)
    }

    /// How often a waiting acquire checks again with no wake-up: a third of
    /// its lifetime, so two checks can be lost before it is forgotten.
    pub fn waiter_recheck(&self) -> Duration {
        self.waiter_lifetime() / 3
    }

    /// How long new grants are held after a loss; `None` with recovery off.
    pub fn recovery_window(&self) -> Option<Duration> {
        match self.recovery {
            Recovery::Reassert { window } => Some(window.unwrap_or_else(|| self.default_recovery_window())),
            Recovery::Off => None,
        }
    }
}
