//! What the client tells its driver: events, actions and transmits.
//!
//! The error enums are `#[non_exhaustive]`: later releases add variants. The
//! enums a driver must act on (`Event`, `Action`, `Outcome`, `Renewal`) are
//! not, on purpose: a new variant there is work a driver must do (a lease to
//! release, a socket to open), so a driver that does not know it should fail
//! to compile rather than drop it on a wildcard arm.

use std::time::Instant;

use bytes::Bytes;

use crate::address::Endpoint;
use crate::lease_id::LeaseId;
pub use crate::request_ids::RequestId;

mod errors;
mod outcome;
mod reading;
mod recovery;
mod stats;

pub use errors::{ConnectionError, SentinelError};
pub use outcome::{Lease, LeaseLost, Outcome, ReleaseFailure, Renewal, Unavailable};
pub use reading::{Holder, Inspection, KeysPage};
pub use recovery::{DataLoss, Reassertion};
pub use stats::Stats;

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
    /// The client renewed a lease on its own: kept alive (see
    /// `Client::keep_alive`), or a slot handed to a waiter confirmed to a
    /// whole lease. Redis holds it until about `expires_at`.
    KeptAlive {
        /// The lease.
        lease: LeaseId,
        /// Its new expiry.
        expires_at: Instant,
    },
    /// A lease the client renews on its own (kept alive, or a hand-over to
    /// confirm) is gone while its holder still has it: its holder should
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
    /// The sentinels named the primary: the first time (`previous` is
    /// `None`), or a switch to another (Redis Sentinel only). Requests go
    /// there once its handshake confirms it is a primary.
    Primary {
        /// Where requests went until now.
        previous: Option<Endpoint>,
        /// Where they go now.
        primary: Endpoint,
    },
    /// A sentinel could not be used (`connection` was its connection); the
    /// next one is asked (Redis Sentinel only).
    SentinelFailed(ConnectionId, SentinelError),
    /// A sentinel found the primary down (`true`: `+odown`) or up again
    /// (`false`: `-odown`). A switch, if any, comes as [`Event::Primary`].
    PrimaryDown(bool),
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

/// Work for the driver's sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open a connection to the endpoint and report `handle_connected` or
    /// `handle_closed` for it.
    Connect(ConnectionId, crate::Endpoint),
    /// The same, to a sentinel (Redis Sentinel): a driver may reach the
    /// sentinels otherwise than the data nodes (TLS to one and not the other).
    ConnectSentinel(ConnectionId, crate::Endpoint),
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
