//! Why a connection was given up.

use crate::resp::ProtocolError;
use crate::server_error::ServerError;

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
    /// The sentinels named no primary (each failed, in its own way).
    #[error("the sentinels named no primary: {0}")]
    Sentinel(SentinelError),
    /// The sentinels named another primary: the connection to the old one
    /// is given up (what it left unanswered is compensated on the new one).
    #[error("the sentinels named a new primary")]
    Switched,
}

/// Why a sentinel could not name the primary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SentinelError {
    /// It could not be reached, or its connection broke.
    #[error("the sentinel at {sentinel} could not be reached: {reason}")]
    Unreachable {
        /// The sentinel.
        sentinel: String,
        /// The operating system's (or TLS's) words.
        reason: String,
    },
    /// It did not answer within the connect timeout (or, once connected,
    /// within the request liveness budget).
    #[error("the sentinel at {sentinel} did not answer in time")]
    Timeout {
        /// The sentinel.
        sentinel: String,
    },
    /// It refused the sentinel credentials.
    #[error("the sentinel at {sentinel} refused to authenticate: {reason}")]
    Auth {
        /// The sentinel.
        sentinel: String,
        /// Its own words.
        reason: String,
    },
    /// It monitors no master of that name.
    #[error(
        "the sentinel at {sentinel} monitors no master named {master:?}: check the name after the hosts in the URL"
    )]
    UnknownMaster {
        /// The sentinel.
        sentinel: String,
        /// The name asked for.
        master: String,
    },
    /// It does not know the `SENTINEL` command: a data node given where a
    /// sentinel belongs.
    #[error("{sentinel} is not a sentinel (it does not know the SENTINEL command): give the sentinels' addresses (port 26379 by default), not the data nodes'")]
    NotASentinel {
        /// Where it listens.
        sentinel: String,
    },
    /// It named as the primary a node whose `ROLE` says replica (a stale
    /// answer): nothing was written there.
    #[error("a sentinel named {node} as the primary, and it is a replica (ROLE: {role})")]
    NamedReplica {
        /// The node named.
        node: String,
        /// The role it reported.
        role: String,
    },
    /// It answered something a sentinel does not say.
    #[error("the sentinel at {sentinel} answered {reply}")]
    Unexpected {
        /// The sentinel.
        sentinel: String,
        /// The reply, cut short.
        reply: String,
    },
}

impl SentinelError {
    /// How much this error says about the deployment, for the one error a
    /// failed round reports: what a user must fix (a wrong name, a data
    /// node given as a sentinel, a password) outranks what passes.
    pub(crate) fn telling(&self) -> u8 {
        match self {
            SentinelError::Unreachable { .. } | SentinelError::Timeout { .. } => 0,
            SentinelError::Unexpected { .. } | SentinelError::NamedReplica { .. } => 1,
            SentinelError::Auth { .. } | SentinelError::UnknownMaster { .. } | SentinelError::NotASentinel { .. } => 2,
        }
    }
}
