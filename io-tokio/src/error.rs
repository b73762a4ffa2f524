//! Errors a user of the limiter sees, each saying what can be done about it.

use std::fmt;
use std::time::Duration;

use inflight_core::{
    ClaimError, CompositeError, ConfigError, ConnectionError, LabelError, ReleaseFailure, SentinelError, Unavailable,
};

/// Why an acquire did not return a permit.
///
/// Its `Display` says what happened and why, one level deep ("the limiter
/// is unavailable: not connected to Redis"); [`source`](std::error::Error::source)
/// goes on from there ("Connection refused (os error 111)"), so an error
/// reporter that walks the chain prints each cause once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The key already has `limit` requests in flight across the fleet
    /// (for a waiting acquire: no slot came before its deadline, or none is
    /// expected to). Shed the request (e.g. HTTP 429 with `retry_after` as
    /// its `Retry-After`).
    Exceeded {
        /// When trying again may succeed. For a shed wait, Redis's estimate
        /// of the wait (the units queued ahead at the subject's average
        /// hold, fleet-wide); otherwise how long this limiter's permits
        /// have held their slots on average (a slot of a full key frees
        /// about that soon), or one second before any was given back.
        retry_after: Duration,
        /// A waiting acquire left its queue before its deadline because
        /// Redis expected the wait to outlast it: at once, or at a later
        /// check when the queue ahead moved slower than expected.
        shed: bool,
        /// For [`Limiter::acquire_all`](crate::Limiter::acquire_all): which
        /// of its keys was full (its index in the order given), so a
        /// gateway can say "tenant over its limit" or "service busy";
        /// `None` for an acquire of one key.
        key: Option<usize>,
    },
    /// Redis gave no trustworthy answer in time, and the policy is `Deny`.
    /// Shed the request (e.g. HTTP 503); the limiter recovers on its own.
    Unavailable {
        /// Why there was no trustworthy answer.
        reason: Unavailable,
    },
    /// The limiter's driver task has stopped (its runtime shut down).
    Stopped,
    /// A per-call limit of zero.
    Config(ConfigError),
    /// A weight of zero, above `MAX_WEIGHT` or above the key's limit.
    Claim(ClaimError),
    /// A holder label that cannot be stored (empty, too long, a character
    /// outside the accepted set).
    Label(LabelError),
    /// Keys [`Limiter::acquire_all`](crate::Limiter::acquire_all) cannot
    /// take together (none, too many, one repeated).
    Composite(CompositeError),
}

impl Error {
    /// Whether the key was full (`Exceeded`): the limit doing its job, as
    /// opposed to the limiter failing to decide.
    pub fn is_exceeded(&self) -> bool {
        matches!(self, Error::Exceeded { .. })
    }

    /// When an `Exceeded` request may succeed if tried again (see
    /// [`Error::Exceeded`]); `None` for other errors, whose hints come from
    /// the limiter's settings: [`Limiter::retry_after`](crate::Limiter::retry_after).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Exceeded { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Exceeded { shed: false, .. } => f.write_str("the in-flight limit for this key is reached"),
            Error::Exceeded { shed: true, .. } => {
                f.write_str("the in-flight limit for this key is reached, and the wait for a slot is expected to outlast the deadline")
            }
            Error::Unavailable { reason } => write!(f, "the limiter is unavailable: {reason}"),
            Error::Stopped => f.write_str("the limiter's driver has stopped"),
            Error::Config(error) => error.fmt(f),
            Error::Claim(error) => error.fmt(f),
            Error::Label(error) => error.fmt(f),
            Error::Composite(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The reason's own words are in this message: its cause comes next.
        match self {
            Error::Unavailable { reason } => reason.source(),
            Error::Config(error) => error.source(),
            Error::Claim(error) => error.source(),
            Error::Label(error) => error.source(),
            Error::Composite(error) => error.source(),
            Error::Exceeded { .. } | Error::Stopped => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(error: ConfigError) -> Self {
        Error::Config(error)
    }
}

impl From<ClaimError> for Error {
    fn from(error: ClaimError) -> Self {
        Error::Claim(error)
    }
}

impl From<LabelError> for Error {
    fn from(error: LabelError) -> Self {
        Error::Label(error)
    }
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
    /// Redis Sentinel: every sentinel was asked and none named the primary.
    /// The error is the most telling of theirs: a master name they do not
    /// monitor, a data node given as a sentinel, refused credentials, or
    /// (when that is all there was) the last one's connection failure.
    #[error("no sentinel named the primary ({servers}): {error}")]
    Sentinel {
        /// The sentinels and the master name.
        servers: String,
        /// What the sentinels said.
        error: SentinelError,
    },
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
            ConnectionError::Io(reason) => ConnectError::Unreachable { addr, reason },
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
            ConnectionError::Sentinel(error) => ConnectError::Sentinel { servers: addr, error },
            other => ConnectError::Handshake {
                addr,
                reason: other.to_string(),
            },
        }
    }
}

/// Why `Permit::renew` did not extend the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RenewError {
    /// Redis no longer holds the lease (its TTL ran out before the renewal,
    /// or it was released): the request no longer counts against the limit.
    /// Stop the work, or acquire again.
    Lost,
    /// No trustworthy answer; the lease keeps its previous expiry. Retry
    /// before it runs out.
    Unavailable {
        /// Why there was no trustworthy answer.
        reason: Unavailable,
    },
    /// The limiter's driver has stopped.
    Stopped,
}

impl fmt::Display for RenewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RenewError::Lost => f.write_str("the lease is gone (expired or released); the slot is no longer held"),
            RenewError::Unavailable { reason } => write!(f, "the renewal got no answer: {reason}"),
            RenewError::Stopped => f.write_str("the limiter's driver has stopped"),
        }
    }
}

impl std::error::Error for RenewError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RenewError::Unavailable { reason } => reason.source(),
            RenewError::Lost | RenewError::Stopped => None,
        }
    }
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

/// An error and its causes on one line, for a log: `a: b: c`.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        line.push_str(": ");
        line.push_str(&next.to_string());
        cause = next.source();
    }
    line
}
