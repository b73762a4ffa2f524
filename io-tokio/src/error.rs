//! Errors a user of the limiter sees, each saying what can be done about it.

use std::time::Duration;

use inflight_core::{ClaimError, ConfigError, ConnectionError, LabelError, ReleaseFailure, Unavailable};

/// Why an acquire did not return a permit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key already has `limit` requests in flight across the fleet
    /// (for a waiting acquire: no slot came before its deadline, or none is
    /// expected to). Shed the request (e.g. HTTP 429).
    #[error("the in-flight limit for this key is reached")]
    Exceeded {
        /// A waiting acquire refused at once: the server's estimate of the
        /// wait for a slot (the queue ahead at the subject's recent hold
        /// time), which was longer than the caller could wait. `None` for a
        /// plain denial or a deadline that passed.
        retry_after: Option<Duration>,
    },
    /// Redis gave no trustworthy answer in time, and the policy is `Deny`.
    /// Shed the request (e.g. HTTP 503); the limiter recovers on its own.
    #[error("the limiter is unavailable: {reason}")]
    Unavailable {
        /// Why there was no trustworthy answer.
        reason: Unavailable,
    },
    /// The limiter's driver task has stopped (its runtime shut down).
    #[error("the limiter's driver has stopped")]
    Stopped,
    /// A per-call limit of zero.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A weight of zero, above `MAX_WEIGHT` or above the key's limit.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// A holder label that cannot be stored (empty, too long, a character
    /// outside the accepted set).
    #[error(transparent)]
    Label(#[from] LabelError),
}

/// Why `connect` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// A setting that cannot work; the message names the field. (Its text is
    /// the cause's own, so an error chain prints it once.)
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The holder label cannot be stored (see `Builder::holder_label`).
    #[error(transparent)]
    Label(#[from] LabelError),
    /// Nothing answered there (refused, no route, no such socket, TLS refused).
    #[error("could not reach Redis at {addr}: {reason}")]
    Unreachable {
        /// Where we tried.
        addr: String,
        /// What the operating system (or TLS) said.
        reason: String,
    },
    /// Connecting and the handshake took longer than the connect timeout.
    #[error("Redis at {addr} did not answer within the connect timeout of {after:?}")]
    Timeout {
        /// Where we tried.
        addr: String,
        /// The connect timeout.
        after: Duration,
    },
    /// A missing or wrong password or user: fix the URL's credentials.
    #[error("Redis at {addr} refused to authenticate the connection: {reason}")]
    Auth {
        /// The server.
        addr: String,
        /// Redis's own words (`NOAUTH …`, `WRONGPASS …`).
        reason: String,
    },
    /// The server is a Redis Cluster node, and the limiter was built for a
    /// standalone server: requests would be refused with `MOVED` wherever
    /// the subject's slot lives elsewhere. Build it with
    /// [`Builder::cluster`](crate::Builder::cluster) or
    /// [`Limiter::cluster_builder`](crate::Limiter::cluster_builder).
    #[error("Redis at {addr} runs in cluster mode: build the limiter with .cluster() (or Limiter::cluster_builder with the seed URLs)")]
    ClusterMode {
        /// The server.
        addr: String,
    },
    /// The limiter was built for a Redis Cluster, and the server is not in
    /// cluster mode (`cluster_enabled:0`): drop `.cluster()`.
    #[error("Redis at {addr} is not in cluster mode (cluster_enabled:0): build the limiter without .cluster()")]
    NotCluster {
        /// The server.
        addr: String,
    },
    /// The server is a replica (`ROLE`): it cannot take the library's
    /// writes, and a lease written to a writable replica would not count
    /// across the fleet. Point the limiter at the primary.
    #[error("Redis at {addr} is a replica (ROLE: {role}): point the limiter at the primary")]
    Replica {
        /// The server.
        addr: String,
        /// The role it reported.
        role: String,
    },
    /// The server may evict keys (`maxmemory` set, `maxmemory-policy` not
    /// `noeviction`): lease data would be the first to go (every key the
    /// library writes has an expiry), and an evicted lease set over-admits
    /// without anyone noticing. Set `maxmemory-policy noeviction` on it, or
    /// accept the risk with [`Builder::allow_eviction`](crate::Builder::allow_eviction).
    #[error("Redis at {addr} may evict lease data (maxmemory-policy {policy} with maxmemory set): set maxmemory-policy noeviction, or accept the risk with Builder::allow_eviction")]
    Eviction {
        /// The server.
        addr: String,
        /// Its `maxmemory-policy`.
        policy: String,
    },
    /// Another handshake step failed (`SELECT`, `SCRIPT LOAD`…).
    #[error("the connection handshake with Redis at {addr} failed: {reason}")]
    Handshake {
        /// The server.
        addr: String,
        /// What failed, in the server's words where it gave any.
        reason: String,
    },
    /// The TLS settings given to the builder cannot be used (bad PEM, a key
    /// that does not match its certificate). Failures of the handshake itself
    /// are `Unreachable`, with the reason rustls gave.
    #[error("invalid TLS settings: {reason}")]
    Tls {
        /// What is wrong with them.
        reason: String,
    },
    /// A `rediss://` URL, and this build has no TLS: enable the `tls` feature.
    #[error("rediss:// needs TLS, which this build lacks: enable the `tls` feature of inflight-tokio")]
    TlsNotEnabled,
    /// The driver task stopped before the first connection (runtime shut down).
    #[error("the limiter's driver stopped before connecting")]
    Stopped,
}

impl ConnectError {
    /// Why the first connection failed, from the core's reason, the socket's
    /// last error (if it had one) and the connect timeout.
    pub(crate) fn at_start(
        addr: String,
        error: ConnectionError,
        io_error: Option<String>,
        connect_timeout: Duration,
    ) -> Self {
        match error {
            ConnectionError::Closed => ConnectError::Unreachable {
                addr,
                reason: io_error.unwrap_or_else(|| "connection closed".into()),
            },
            ConnectionError::ConnectTimeout => ConnectError::Timeout {
                addr,
                after: connect_timeout,
            },
            ConnectionError::Auth(reason) => ConnectError::Auth { addr, reason },
            ConnectionError::ClusterMode => ConnectError::ClusterMode { addr },
            ConnectionError::NotCluster => ConnectError::NotCluster { addr },
            ConnectionError::Replica(role) => ConnectError::Replica { addr, role },
            ConnectionError::Eviction(policy) => ConnectError::Eviction { addr, policy },
            // Redis's own words; the variant already says it was the handshake.
            ConnectionError::Handshake(reason) => ConnectError::Handshake { addr, reason },
            other => ConnectError::Handshake {
                addr,
                reason: other.to_string(),
            },
        }
    }
}

/// Why `Permit::renew` did not extend the lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RenewError {
    /// Redis no longer holds the lease (its TTL ran out before the renewal,
    /// or it was released): the request no longer counts against the limit.
    /// Stop the work, or acquire again.
    #[error("the lease is gone (expired or released); the slot is no longer held")]
    Lost,
    /// No trustworthy answer; the lease keeps its previous expiry. Retry
    /// before it runs out.
    #[error("the renewal got no answer: {reason}")]
    Unavailable {
        /// Why there was no trustworthy answer.
        reason: Unavailable,
    },
    /// The limiter's driver has stopped.
    #[error("the limiter's driver has stopped")]
    Stopped,
}

/// Why `Permit::release` could not confirm the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// Every attempt failed; the lease expires at its TTL.
    #[error("the release gave up ({0}); the lease expires at its TTL")]
    Abandoned(ReleaseFailure),
    /// The driver has stopped; the lease expires at its TTL.
    #[error("the limiter's driver has stopped; the lease expires at its TTL")]
    Stopped,
}
