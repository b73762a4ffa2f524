//! The kinds of settings a [`Config`](super::Config) holds beyond durations
//! and counts: which servers, what to do when Redis cannot answer, how hard
//! a release tries, the credentials, replica acknowledgements and recovery.

use std::time::Duration;

use crate::address::Endpoint;

/// Which Redis the client talks to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Servers {
    /// One Redis (or Valkey) server, not in cluster mode.
    Standalone(Endpoint),
    /// A Redis Cluster, found through any of `seeds`: the client learns the
    /// slot table from the first that answers and routes every request to
    /// the primary that owns its subject's slot.
    Cluster {
        /// Nodes to learn the topology from, tried in order.
        seeds: Vec<Endpoint>,
        /// Connections are TLS: nodes are reached at their `tls-port`.
        tls: bool,
    },
    /// A primary managed by Redis Sentinel: the client asks the sentinels
    /// where the primary `master` is, checks with `ROLE` that it is one,
    /// and follows every switch they announce (`+switch-master`).
    Sentinel {
        /// The sentinels, asked in turn; those they name are added.
        sentinels: Vec<Endpoint>,
        /// The name the sentinels monitor the primary under.
        master: String,
        /// `AUTH` credentials for the sentinels (the data nodes' are
        /// [`Config::credentials`](super::Config::credentials)).
        credentials: Option<crate::address::Credentials>,
    },
}

impl Servers {
    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Servers::Cluster { .. })
    }

    /// Whether the primary is found through Redis Sentinel.
    pub fn is_sentinel(&self) -> bool {
        matches!(self, Servers::Sentinel { .. })
    }
}

impl Default for Servers {
    fn default() -> Self {
        Servers::Standalone(Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 6379,
        })
    }
}

/// What to do when Redis cannot give a trustworthy answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnavailablePolicy {
    /// Refuse the request (`Unavailable`). Protects the backend; the default.
    #[default]
    Deny,
    /// Let the request through without a lease (fail open) and count it.
    Allow,
}

/// How hard a release tries before it gives up and lets the lease expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleasePolicy {
    /// Attempts per release, the first included.
    pub max_attempts: u32,
    /// Delay before the first retry; doubled after each failure...
    pub initial_backoff: Duration,
    /// ...up to this.
    pub max_backoff: Duration,
    /// Releases waiting for a retry at once; beyond that a failing release is
    /// abandoned (reported) rather than queued without bound.
    pub max_retrying: usize,
}

impl Default for ReleasePolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            initial_backoff: Duration::from_millis(25),
            max_backoff: Duration::from_secs(1),
            max_retrying: 4096,
        }
    }
}

/// Synchronous replication of grants: after each write of acquires the
/// client sends `WAIT replicas timeout`, and delivers the grants it covers
/// only if at least `replicas` replicas acknowledged them in time. A `WAIT`
/// that falls short releases those grants (their callers get
/// `Unavailable::NotReplicated`). It costs one more round trip per write
/// (pipelined: one `WAIT` per batch), and while replicas lag it holds that
/// connection's replies for up to `timeout`. It narrows, and does not close,
/// the window in which a failover loses a grant: Redis's own documentation
/// says `WAIT` does not make Redis strongly consistent (a replica that
/// acknowledged may still not be the one promoted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaAcks {
    /// Replicas that must acknowledge a grant (at least 1).
    pub replicas: u32,
    /// How long `WAIT` may block for them (at least 1 ms, less than the
    /// acquire timeout).
    pub timeout: Duration,
}

/// What the client does when a handshake finds that the server may have
/// lost lease data (an empty restart, a failover, a flush).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Write back every lease this client holds there before the connection
    /// takes anything new, and hold new grants for `window` (`None`: the
    /// default, [`Config::default_recovery_window`](super::Config::default_recovery_window)): on the server, through
    /// a hold key every client's acquire honours (standalone), and in this
    /// client, for that node.
    Reassert {
        /// How long new grants are held after a loss is found.
        window: Option<Duration>,
    },
    /// Do nothing: the loss is still reported, and leases lost stay lost (a
    /// fleet may over-admit until they are released). For tests of the
    /// recovery itself.
    Off,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery::Reassert { window: None }
    }
}
