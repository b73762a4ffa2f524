//! What the client tells its driver: events, actions and transmits.
//!
//! The error enums are `#[non_exhaustive]`: later releases add variants. The
//! enums a driver must act on (`Event`, `Action`, `Outcome`, `Renewal`) are
//! not, on purpose: a new variant there is work a driver must do (a lease to
//! release, a socket to open), so a driver that does not know it should fail
//! to compile rather than drop it on a wildcard arm.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::resp::ProtocolError;
use crate::server_error::ServerError;

/// Names one acquire from `Client::acquire` to its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub(crate) u64);

impl RequestId {
    /// The number, for logs: requests are numbered from 1 per client.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// One connection generation. Never reused: once retired, nothing it carries is
/// trusted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub(crate) u64);

impl ConnectionId {
    /// The number, for logs: generations are numbered from 1 per client.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// A granted lease. Give it back with `Client::release`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub(crate) id: LeaseId,
    pub(crate) keys: SubjectKeys,
    pub(crate) expires_at: Instant,
    pub(crate) fencing_token: u64,
    /// When its grant was read: releases report how long it was held.
    pub(crate) granted_at: Instant,
    /// Until when Redis may still hold it: a release keeps trying until
    /// then. `expires_at` for most; later for a slot handed over, whose
    /// short reservation a renewal on its way extends to a whole TTL.
    pub(crate) release_until: Instant,
}

impl Lease {
    /// The lease's id, the member of the Redis sorted set.
    pub fn id(&self) -> &LeaseId {
        &self.id
    }

    /// How many units of its key's limit it takes.
    pub fn weight(&self) -> u32 {
        self.id.weight()
    }

    /// The Redis key of the lease set this lease lives in.
    pub fn redis_key(&self) -> &Bytes {
        self.keys.leases()
    }

    /// The lease's TTL counted from when its acquire (or last renewal) was
    /// sent: Redis holds it at least until about here, and forgets it on its
    /// own soon after. Releases stop retrying here; renew before it.
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }

    /// The grant's fencing token: strictly greater than every token granted
    /// before it for the same subject (see `docs/operations.md`, "Restarts
    /// and failovers", for what holds across a failover). A resource that
    /// remembers the highest token it has seen can refuse a holder that was
    /// paused past its lease and still believes it holds it.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }
}

/// Why lease data on a server may be gone, as a handshake found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DataLoss {
    /// Our lease-data marker is missing or was written anew: the server
    /// restarted without its data, or was flushed.
    Emptied,
    /// Another run of the server (new `run_id`) with our marker intact: it
    /// restarted from a snapshot, and writes since the last save may be gone.
    Restarted,
    /// A new replication id: a replica was promoted (or the server rejoined
    /// replication), and writes it had not received are gone.
    FailedOver,
}

/// What writing back one held lease after a data loss found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reassertion {
    /// The lease was still there.
    Survived,
    /// It was gone and is written back.
    Restored,
    /// It was gone and is written back, and its subject now holds more
    /// leases than its limit: others were granted while it was missing. An
    /// over-admission, detected; it lasts until enough holders let go.
    OverLimit,
    /// It could not be written back (no answer in time, a refusal, or it
    /// ran too late to act): it may be missing.
    Unconfirmed,
    /// Its holder had given it back by the time the write-back ran (a
    /// tombstone said so): nothing was written.
    GivenBack,
}

/// How one acquire ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Redis recorded the lease: the caller holds a slot until it releases.
    Granted(Lease),
    /// Redis, over a trusted connection, counted `limit` live leases (for a
    /// waiting acquire: no slot came before its deadline).
    Exceeded,
    /// A waiting acquire was refused at once: the server expects the wait
    /// for a slot (the queue ahead of it, at the subject's average hold) to
    /// be about this long, longer than the caller may wait.
    Shed(Duration),
    /// No trustworthy answer (policy `Deny`).
    Unavailable(Unavailable),
    /// No trustworthy answer, let through without a lease (policy `Allow`).
    FailOpen(Unavailable),
}

/// How one renewal (`Client::renew`) ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Redis extended the lease; this is it with its new expiry.
    Extended(Lease),
    /// Redis no longer holds the lease (it expired, or was released): the slot
    /// is not held any more, and the lease needs no release.
    Lost,
    /// No trustworthy answer; the lease keeps the expiry it had. Whatever the
    /// unavailable policy, a renewal never fails open: only the holder knows
    /// whether to go on.
    Unavailable(Unavailable),
}

/// Why an acquire got no trustworthy answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// No reply within the acquire timeout.
    #[error("no reply within the acquire timeout")]
    Timeout,
    /// `max_in_flight` acquires were already waiting: failed fast.
    #[error("too many acquires in flight on the connection")]
    Overloaded,
    /// No connection, and the last attempt to make one failed for this
    /// reason (its `source`).
    #[error("not connected to Redis")]
    NotConnected(#[source] ConnectionError),
    /// The connection was lost (for this reason, its `source`) before the
    /// reply came.
    #[error("the connection was lost before the reply")]
    ConnectionLost(#[source] ConnectionError),
    /// Redis refused the command (its `source`); [`ServerError::kind`] says
    /// why.
    #[error("Redis answered with an error")]
    Server(#[source] ServerError),
    /// No cluster primary serves the subject's slot for now (the cluster is
    /// failing over or being resharded).
    #[error("no Redis Cluster primary serves the key's slot for now")]
    NoPrimary,
    /// The script found the lease id tombstoned (already compensated).
    #[error("Redis refused the lease id as already released")]
    Refused,
    /// The request reached Redis after its valid-until (held up by a stall,
    /// a slow proxy or a paused server) and was refused: it took nothing.
    #[error("the request reached Redis too late and was refused")]
    Stale,
    /// The server lost lease data (restarted empty, failed over, flushed)
    /// and the fleet is writing back the leases it holds: new grants wait
    /// until the recovery window ends. Retry after it.
    #[error("Redis lost lease data and is being recovered: no new grants until the fleet has written back its leases")]
    Recovering,
    /// The grant was made, but fewer replicas than `replica_acks` asked for
    /// acknowledged it in time (`WAIT`): it was released again.
    #[error("the grant reached {acked} of {wanted} replicas in time and was released")]
    NotReplicated {
        /// Replicas that acknowledged it.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
}

/// Why a connection was given up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The socket closed (or could not be opened).
    #[error("the connection closed")]
    Closed,
    /// The socket failed (or could not be opened), in the operating
    /// system's (or TLS's) words: `Connection refused (os error 111)`.
    #[error("{0}")]
    Io(String),
    /// Connecting and the handshake took longer than `connect_timeout`.
    #[error("connecting and the handshake took longer than the connect timeout")]
    ConnectTimeout,
    /// A request waited longer than `request_liveness` for its reply.
    #[error("a request waited longer than its liveness budget")]
    Stalled,
    /// The server sent something that is not RESP, or too much of it.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// A reply named another lease than its request: replies cannot be trusted.
    #[error("a reply echoed a different lease id")]
    EchoMismatch,
    /// A reply of a shape the request cannot have.
    #[error("a reply of an unexpected shape: {0}")]
    UnexpectedReply(String),
    /// The server is a Redis Cluster node, and the client was not set up for
    /// a cluster (it would send most subjects to the wrong node).
    #[error("the server is a Redis Cluster node: connect in cluster mode (`Builder::cluster`, or several seed URLs)")]
    ClusterMode,
    /// The server is a replica (`ROLE` says so): it cannot take writes, and
    /// a lease written to it (with `replica-read-only no`) would not count
    /// fleet-wide. Point the limiter at the primary.
    #[error("the server is a replica (ROLE: {0}): point the limiter at the primary")]
    Replica(String),
    /// The server may evict keys (`maxmemory` is set and `maxmemory-policy`
    /// is not `noeviction`): lease data could vanish under memory pressure,
    /// with nothing to tell a client it happened, and the limit would be
    /// over-run. Every key the library writes has an expiry, so any
    /// `volatile-*` policy evicts lease data first.
    #[error("the server may evict lease data (maxmemory-policy {0} with maxmemory set): set maxmemory-policy noeviction, or accept the risk with Builder::allow_eviction")]
    Eviction(String),
    /// Cluster mode was asked for, and the server is not a cluster node.
    #[error("the server is not in cluster mode (cluster_enabled:0): connect to it as a standalone server")]
    NotCluster,
    /// The server refused the login (`NOAUTH`, `WRONGPASS`), in its words.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// Another handshake step failed, in the server's words.
    #[error("the connection handshake failed: {0}")]
    Handshake(String),
    /// The server was a replica at this connection's handshake and is a
    /// primary now (a failover promoted it): the handshake neither checked
    /// it for lost lease data nor wrote back what is held there, so a fresh
    /// connection does.
    #[error("the server was promoted from replica to primary after the connection's handshake")]
    Promoted,
    /// The server refused a command in a way that makes this connection useless.
    #[error("Redis answered with an error that ends the connection: {0}")]
    Server(ServerError),
}

/// Why a release gave up (the lease will expire at its TTL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseFailure {
    /// Every attempt failed.
    #[error("every attempt failed")]
    AttemptsExhausted,
    /// The lease expired before a release got through.
    #[error("the lease expired before a release got through")]
    Expired,
    /// `max_retrying` releases were already waiting for a retry.
    #[error("too many releases already waiting for a retry")]
    Overloaded,
}

/// What the client tells its driver, through `poll_event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A connection finished its handshake and carries requests.
    Connected(ConnectionId),
    /// A connection failed before it was ready (refused, timed out, bad password).
    ConnectFailed(ConnectionId, ConnectionError),
    /// A ready connection was retired; a replacement is on its way.
    Retired(ConnectionId, ConnectionError),
    /// The acquire's one and only outcome. Never sent after `abandon`.
    Acquired(RequestId, Outcome),
    /// The renewal's one and only outcome. Never sent after `abandon`.
    Renewed(RequestId, Renewal),
    /// The inspection's one and only outcome. Never sent after `abandon`.
    Inspected(RequestId, Result<Inspection, Unavailable>),
    /// A page of keys's one and only outcome (see `Client::scan_keys`).
    /// Never sent after `abandon`.
    Scanned(RequestId, Result<KeysPage, Unavailable>),
    /// A release is done: of a lease its holder gave back, or of one no
    /// caller ever got (a compensation).
    Released {
        /// The lease given back.
        lease: LeaseId,
        /// Whose it was.
        of: ReleaseOf,
    },
    /// A handshake found that `connection`'s server may have lost lease
    /// data; `held` leases this client holds there are being written back,
    /// and no new grant goes out on that server until they are.
    DataLoss {
        /// The new connection that found it.
        connection: ConnectionId,
        /// How the data was lost.
        loss: DataLoss,
        /// Leases this client holds there, being written back.
        held: usize,
    },
    /// A held lease was written back after a data loss.
    Reasserted {
        /// The lease.
        lease: LeaseId,
        /// What the server said.
        outcome: Reassertion,
    },
    /// The client renewed a kept-alive lease (see `Client::keep_alive`):
    /// Redis holds it until about `expires_at`.
    KeptAlive {
        /// The lease.
        lease: LeaseId,
        /// Its new expiry.
        expires_at: Instant,
    },
    /// A kept-alive lease its holder still has is gone: its holder should
    /// stop the work it guards (the slot may be someone else's now).
    LeaseLost {
        /// The lease.
        lease: LeaseId,
        /// How it was lost.
        reason: LeaseLost,
    },
    /// A handshake found something that weakens what the client can
    /// guarantee on this server; the connection is used all the same.
    Warning(ConnectionId, Warning),
    /// A release gave up; its lease stays until its TTL.
    ReleaseAbandoned {
        /// The lease that stays.
        lease: LeaseId,
        /// Whose it was.
        of: ReleaseOf,
        /// Why the release gave up.
        reason: ReleaseFailure,
    },
}

/// Whose lease a release gives back (see [`Event::Released`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseOf {
    /// Its holder's: a permit given back.
    Holder,
    /// Nobody's: an acquire whose caller never got the lease (it left, or
    /// the reply was lost), released by the client on its own.
    Compensation,
}

/// What a handshake found that weakens a guarantee (see [`Event::Warning`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Warning {
    /// The server may evict keys (`maxmemory-policy` named), and the client
    /// was told to accept that (`Config::allow_eviction`): an evicted lease
    /// set over-admits without anyone noticing.
    Eviction(String),
    /// `INFO` was refused (an ACL, say): a restart or a failover to a
    /// lagging replica that keeps the lease-data marker goes unnoticed, so
    /// leases it lost are not written back.
    InfoRefused,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::Eviction(policy) => write!(
                f,
                "the server may evict lease data (maxmemory-policy {policy}): evicted leases over-admit unnoticed"
            ),
            Warning::InfoRefused => write!(
                f,
                "INFO is refused (ACL?): restarts and failovers to a lagging replica cannot be detected"
            ),
        }
    }
}

/// What a subject holds, as `Client::inspect` read it from Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// Units held by live leases now (a weight-`w` lease is `w` units).
    pub units: u64,
    /// The limit the subject's waiters last recorded in Redis, if any did
    /// (fail-fast acquires record none: each call brings its own limit).
    pub limit_recorded: Option<u32>,
    /// Waiting acquires queued for a slot whose clients still call.
    pub waiting: u64,
    /// The live leases, in expiry order (up to the number asked for).
    pub holders: Vec<Holder>,
}

/// One page of the keys one node holds leases for (see `Client::scan_keys`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeysPage {
    /// Where the next page starts; 0 when this was the last.
    pub cursor: u64,
    /// The keys whose lease sets this page found (expired or not: the set
    /// goes with its last lease's expiry). A key may show on two pages.
    pub keys: Vec<crate::Key>,
}

/// One live lease, as Redis holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Its id as Redis stores it and [`LeaseId`] displays
    /// it: `instance-counter`, then `*weight` above 1 and `@label` if it
    /// has one (one rendering in the API, the CLI and Redis).
    pub lease_id: String,
    /// Units it takes.
    pub weight: u32,
    /// Its holder's label, if it has one.
    pub label: Option<String>,
    /// When Redis forgets it unless renewed (server time turned into this
    /// client's clock when the reply was read).
    pub expires_at: Instant,
}

impl Holder {
    /// A lease-set member and its expiry, `expires_in` from `now`.
    pub(crate) fn from_member(member: &[u8], now: Instant, expires_in: Duration) -> Self {
        let text = String::from_utf8_lossy(member);
        let label = text.split_once('@').map(|(_, label)| label.to_string());
        Self {
            lease_id: text.into_owned(),
            weight: crate::lease_id::weight_of(member),
            label,
            expires_at: now + expires_in,
        }
    }
}

/// How a kept-alive lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLost {
    /// A renewal found it gone from Redis: it expired there (the holder's
    /// process stalled past its TTL), it was released by someone else, or
    /// the server lost it.
    Gone,
    /// No renewal was confirmed before its expiry (Redis unreachable for
    /// longer than the renewal margin): it may be gone.
    Expired,
}

/// Work for the driver's sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a connection to the endpoint and report `handle_connected` or
    /// `handle_closed` for it.
    Connect(ConnectionId, crate::Endpoint),
    /// Close it; ignore anything it still delivers.
    Close(ConnectionId),
}

/// Bytes to write on a connection, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The connection to write on.
    pub connection: ConnectionId,
    /// What to write.
    pub data: Bytes,
}

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
    /// Waiters served by a release handing its slot over (their permit came
    /// with the wake-up message).
    pub handed_over: u64,
    /// Units of expired leases the scripts pruned from lease sets before
    /// counting (a weight-1 lease is one unit): leases whose holders stopped
    /// renewing and never released them. Crashed replicas, leaked permits,
    /// or holders paused past their TTL; reported by the acquire and renew
    /// scripts at no extra round trip, summed over every call's reply.
    pub reclaimed: u64,
    /// Renewals the client made on its own for kept-alive leases.
    pub kept_alive: u64,
    /// Kept-alive leases lost (found gone, or not renewed in time).
    pub keep_alive_lost: u64,
    /// Handshakes that found something weakening a guarantee
    /// ([`Event::Warning`]).
    pub server_warnings: u64,
}
