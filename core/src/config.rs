//! Configuration of the core, its validation, and the server URL.
//!
//! Everything a user can get wrong is refused here with a [`ConfigError`]
//! that names the field, so a bad deployment fails at start-up instead of
//! misbehaving under load.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::address::Endpoint;
use crate::resp::ReplyLimits;

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
}

impl Servers {
    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Servers::Cluster { .. })
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

/// Credentials sent with `AUTH` when a connection opens.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// ACL user; `None` sends the legacy single-password `AUTH`.
    pub username: Option<String>,
    /// The password (never printed: `Debug` redacts it).
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

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
    /// default, [`Config::default_recovery_window`]): on the server, through
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
        }
    }
}

/// A setting that cannot work, with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration or count that must be positive is zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// The setting, as named in [`Config`].
        field: &'static str,
    },
    /// A duration below what the other settings require.
    #[error("{field} must be at least {min_ms} ms ({because}); it is {actual_ms} ms")]
    TooShort {
        /// The setting, as named in [`Config`].
        field: &'static str,
        /// The least it may be, in milliseconds.
        min_ms: u128,
        /// What it is, in milliseconds.
        actual_ms: u128,
        /// Where the bound comes from.
        because: &'static str,
    },
    /// A value outside what can work.
    #[error("{field} is out of range: {reason}")]
    OutOfRange {
        /// The setting, as named in [`Config`].
        field: &'static str,
        /// Why it cannot work.
        reason: &'static str,
    },
    /// The key prefix is empty or would add a second hash tag.
    #[error("key prefix {0:?} is empty or contains '{{' or '}}', which would break the key's single hash tag")]
    KeyPrefix(String),
    /// The server URL cannot be used.
    #[error("invalid Redis URL {url:?}: {reason}")]
    Url {
        /// The URL, its password redacted.
        url: String,
        /// What is wrong, and what is supported.
        reason: String,
    },
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

    /// Refuses a setting that cannot work, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_positive()?;
        self.check_durations()?;
        self.check_counts()?;
        self.check_servers()
    }

    /// A cluster has seeds, reached over TCP, and only database 0.
    fn check_servers(&self) -> Result<(), ConfigError> {
        let Servers::Cluster { seeds, .. } = &self.servers else {
            return Ok(());
        };
        if seeds.is_empty() {
            return Err(ConfigError::Zero { field: "servers.seeds" });
        }
        if seeds.iter().any(|seed| seed.as_tcp().is_none()) {
            return Err(ConfigError::OutOfRange {
                field: "servers.seeds",
                reason: "Redis Cluster nodes are reached over TCP, not Unix sockets",
            });
        }
        if self.database != 0 {
            return Err(ConfigError::OutOfRange {
                field: "database",
                reason: "Redis Cluster has only database 0 (drop the /db from the URL)",
            });
        }
        Ok(())
    }

    /// Durations that must not be zero.
    fn check_positive(&self) -> Result<(), ConfigError> {
        let positive = [
            ("lease_ttl", self.lease_ttl),
            ("acquire_timeout", self.acquire_timeout),
            ("request_liveness", self.request_liveness),
            ("connect_timeout", self.connect_timeout),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
            ("release.initial_backoff", self.release.initial_backoff),
            ("waiter_lifetime", self.waiter_lifetime),
            ("idle_probe", self.idle_probe),
        ];
        for (field, value) in positive {
            if value.is_zero() {
                return Err(ConfigError::Zero { field });
            }
        }
        Ok(())
    }

    /// Durations against each other and against what Redis can express.
    fn check_durations(&self) -> Result<(), ConfigError> {
        // Every deadline is an instant some of these durations from now:
        // bounded, their sums stay far inside what an `Instant` holds.
        let bounded = [
            ("lease_ttl", self.lease_ttl),
            ("acquire_timeout", self.acquire_timeout),
            ("request_liveness", self.request_liveness),
            ("connect_timeout", self.connect_timeout),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
            ("reconnect_max_backoff", self.reconnect_max_backoff),
            ("release.initial_backoff", self.release.initial_backoff),
            ("release.max_backoff", self.release.max_backoff),
            ("waiter_lifetime", self.waiter_lifetime),
            ("idle_probe", self.idle_probe),
        ];
        for (field, value) in bounded {
            if value > MAX_DURATION {
                return Err(ConfigError::OutOfRange {
                    field,
                    reason: "longer than a year",
                });
            }
        }
        if let Recovery::Reassert { window: Some(window) } = self.recovery {
            if window > MAX_DURATION {
                return Err(ConfigError::OutOfRange {
                    field: "recovery.window",
                    reason: "longer than a year",
                });
            }
        }
        // Redis expiries are whole milliseconds; a sub-millisecond TTL is zero there.
        if self.lease_ttl < Duration::from_millis(1) {
            return Err(ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: 1,
                actual_ms: self.lease_ttl.as_millis(),
                because: "Redis counts expiries in whole milliseconds",
            });
        }
        // A grant is delivered within the acquire timeout of its request, so
        // with a longer TTL no caller is ever handed a lease that has already
        // run out in Redis.
        if self.lease_ttl <= self.acquire_timeout {
            return Err(ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: self.acquire_timeout.as_millis() + 1,
                actual_ms: self.lease_ttl.as_millis(),
                because: "longer than the acquire timeout (`timeout`), so that no grant is delivered already expired",
            });
        }
        if self.request_liveness < self.acquire_timeout {
            return Err(ConfigError::TooShort {
                field: "request_liveness",
                min_ms: self.acquire_timeout.as_millis(),
                actual_ms: self.request_liveness.as_millis(),
                because: "at least the acquire timeout (`timeout`): a caller that stops waiting must not condemn a healthy connection",
            });
        }
        if let Some(acks) = self.replica_acks {
            if acks.replicas == 0 {
                return Err(ConfigError::Zero {
                    field: "replica_acks.replicas",
                });
            }
            if acks.timeout < Duration::from_millis(1) || acks.timeout >= self.acquire_timeout {
                return Err(ConfigError::OutOfRange {
                    field: "replica_acks.timeout",
                    reason: "must be at least 1 ms and shorter than the acquire timeout",
                });
            }
        }
        if let Recovery::Reassert { window: Some(window) } = self.recovery {
            if window < Duration::from_millis(1) {
                return Err(ConfigError::TooShort {
                    field: "recovery.window",
                    min_ms: 1,
                    actual_ms: window.as_millis(),
                    because: "the hold key's expiry is in whole milliseconds",
                });
            }
        }
        if self.reconnect_max_backoff < self.reconnect_initial_backoff {
            return Err(ConfigError::OutOfRange {
                field: "reconnect_max_backoff",
                reason: "smaller than reconnect_initial_backoff",
            });
        }
        if self.release.max_backoff < self.release.initial_backoff {
            return Err(ConfigError::OutOfRange {
                field: "release.max_backoff",
                reason: "smaller than release.initial_backoff",
            });
        }
        Ok(())
    }

    /// Counts that must not be zero, and the key prefix.
    fn check_counts(&self) -> Result<(), ConfigError> {
        let counts = [
            ("max_in_flight", self.max_in_flight),
            ("release.max_attempts", self.release.max_attempts as usize),
            ("release.max_retrying", self.release.max_retrying),
            ("reply_limits.max_frame_bytes", self.reply_limits.max_frame_bytes),
            ("reply_limits.max_line_bytes", self.reply_limits.max_line_bytes),
            ("reply_limits.max_array_len", self.reply_limits.max_array_len),
            ("reply_limits.max_depth", self.reply_limits.max_depth),
        ];
        for (field, value) in counts {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        if self.key_prefix.is_empty() || self.key_prefix.contains(['{', '}']) {
            return Err(ConfigError::KeyPrefix(self.key_prefix.clone()));
        }
        Ok(())
    }
}

/// The longest any duration setting may be: a year. Longer ones are refused
/// (`ConfigError::OutOfRange`), so that no deadline computed from them can
/// overflow; a per-call wait longer than this is cut to it.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// A limit as given by a user: refused when zero.
pub fn limit(value: u32) -> Result<NonZeroU32, ConfigError> {
    NonZeroU32::new(value).ok_or(ConfigError::Zero { field: "limit" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_is_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn zero_durations_counts_and_bad_prefixes_are_refused() {
        let bad = |f: fn(&mut Config)| {
            let mut config = Config::default();
            f(&mut config);
            config.validate().unwrap_err()
        };
        assert_eq!(
            bad(|c| c.lease_ttl = Duration::ZERO),
            ConfigError::Zero { field: "lease_ttl" }
        );
        assert!(matches!(
            bad(|c| c.lease_ttl = Duration::from_micros(10)),
            ConfigError::TooShort { .. }
        ));
        assert_eq!(
            bad(|c| c.acquire_timeout = Duration::ZERO),
            ConfigError::Zero {
                field: "acquire_timeout"
            }
        );
        assert_eq!(
            bad(|c| c.max_in_flight = 0),
            ConfigError::Zero { field: "max_in_flight" }
        );
        assert!(matches!(
            bad(|c| c.request_liveness = Duration::from_millis(1)),
            ConfigError::TooShort { .. }
        ));
        // A lease that could run out before its grant is even delivered.
        assert!(matches!(
            bad(|c| c.lease_ttl = c.acquire_timeout),
            ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: 251,
                actual_ms: 250,
                ..
            }
        ));
        assert_eq!(
            bad(|c| c.lease_ttl = c.acquire_timeout).to_string(),
            "lease_ttl must be at least 251 ms (longer than the acquire timeout (`timeout`), so that no grant \
             is delivered already expired); it is 250 ms"
        );
        assert!(matches!(
            bad(|c| c.key_prefix = "a{b".into()),
            ConfigError::KeyPrefix(_)
        ));
        assert!(matches!(
            bad(|c| c.key_prefix = String::new()),
            ConfigError::KeyPrefix(_)
        ));
        assert_eq!(limit(0), Err(ConfigError::Zero { field: "limit" }));
        fn seed() -> Endpoint {
            Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: 7000,
            }
        }
        assert!(matches!(
            bad(|c| {
                c.servers = Servers::Cluster {
                    seeds: vec![seed()],
                    tls: false,
                };
                c.database = 3;
            }),
            ConfigError::OutOfRange { field: "database", .. }
        ));
        assert_eq!(
            bad(|c| c.servers = Servers::Cluster {
                seeds: vec![],
                tls: false
            }),
            ConfigError::Zero { field: "servers.seeds" }
        );
        assert!(matches!(
            bad(|c| c.servers = Servers::Cluster {
                seeds: vec![seed(), Endpoint::Unix("/tmp/r.sock".into())],
                tls: false
            }),
            ConfigError::OutOfRange {
                field: "servers.seeds",
                ..
            }
        ));
        assert_eq!(limit(3).unwrap().get(), 3);
    }
}
