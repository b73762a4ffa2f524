//! `Builder`: every setting of a [`Limiter`], validated when it connects.

use std::time::Duration;

use inflight_core::{Config, Recovery, ReleasePolicy, ReplicaAcks, UnavailablePolicy};
use inflight_core::{Credentials, Label, SentinelAddress};

use crate::connector::TcpConnector;
use crate::limiter::Limiter;

mod connect;

/// How long `Limiter::drain` waits by default: within a usual shutdown
/// grace period, with room for the process's other work.
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether `connect` waits for the first connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    WhenReady,
    Lazy,
}

impl Limiter {
    /// Starts a builder for `redis://[user:password@]host:port[/db]`, or
    /// `rediss://…` for TLS (feature `tls`).
    pub fn builder(url: impl Into<String>) -> Builder {
        Builder::new(url.into())
    }

    /// A builder for a Redis Cluster reached through any of `seed_urls`
    /// (tried in order until one answers; all with the same scheme and
    /// credentials): the same as `builder(first).cluster()` with more seeds.
    /// An empty list is refused at `connect`.
    pub fn cluster_builder<I, S>(seed_urls: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut urls = seed_urls.into_iter().map(Into::into);
        let first = urls.next().unwrap_or_default();
        Builder::new(first).with_seeds(urls.collect())
    }

    /// A builder for a primary managed by Redis Sentinel: `sentinel_urls`
    /// are the sentinels (`redis://[user:password@]host:26379`, their
    /// credentials the sentinels' own; `rediss://` for TLS everywhere),
    /// `master` the name they monitor it under. The data nodes'
    /// credentials and database go to [`Builder::node_credentials`] and
    /// [`Builder::database`]. The same as
    /// `builder("redis+sentinel://s1,s2,s3/master")`.
    pub fn sentinel_builder<I, S>(sentinel_urls: I, master: impl Into<String>) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = sentinel_urls.into_iter().map(Into::into).collect();
        let mut builder = Builder::new(urls.first().cloned().unwrap_or_default());
        builder.sentinels = Some(SentinelUrls {
            urls,
            master: master.into(),
        });
        builder
    }
}

/// The sentinels of [`Limiter::sentinel_builder`].
#[derive(Clone)]
struct SentinelUrls {
    urls: Vec<String>,
    master: String,
}

/// Configures and connects a [`Limiter`]. Every setting is validated by `connect`.
///
/// Its `Debug` print hides secrets: the URL's password and the TLS private key.
///
/// Lease ids come from the OS's randomness, fresh for every limiter. Fixed
/// entropy (which would let two limiters share lease ids and break the limit)
/// is a simulation-only switch, absent from a normal build:
///
#[cfg_attr(not(feature = "simulation"), doc = "```compile_fail")]
// (With the feature on, as in a workspace build the simulator joins, it
// would compile: there the block is only text. CI checks the crate alone.)
#[cfg_attr(feature = "simulation", doc = "```text")]
/// let builder = inflight_tokio::Limiter::builder("redis://127.0.0.1:6379").simulation_entropy([7; 16]);
/// ```
#[derive(Clone)]
pub struct Builder {
    url: String,
    /// More seed URLs of a cluster (`Limiter::cluster_builder`).
    more_seeds: Vec<String>,
    /// The sentinels and master name of `Limiter::sentinel_builder`.
    sentinels: Option<SentinelUrls>,
    /// The data nodes' credentials, given apart from the URL.
    node_credentials: Option<Credentials>,
    /// The data nodes' database, given apart from the URL.
    database: Option<u32>,
    /// TLS to the data nodes, when it differs from the sentinels'.
    node_tls: Option<bool>,
    /// Route by slot across a Redis Cluster.
    cluster: bool,
    config: Config,
    default_limit: u32,
    liveness: Option<Duration>,
    entropy: Option<[u8; 16]>,
    metrics_namespace: Option<String>,
    /// Checked at connect (`ConnectError::Label`).
    holder_label: Option<String>,
    /// Keep every permit alive unless its acquire says otherwise.
    keep_alive: bool,
    /// How long `Limiter::drain` waits for what is owed.
    drain_timeout: Duration,
    tcp: TcpConnector,
    #[cfg(all(feature = "tls", not(madsim)))]
    tls: crate::tls::TlsOptions,
    #[cfg(feature = "fault-injection")]
    bugs: inflight_core::InjectedBugs,
}

/// What `connect` will use, as configured: the URL's server, database and
/// credentials (the password as `<redacted>`), every setting with the
/// request liveness it derives; a URL that cannot be parsed shows why.
impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("Builder");
        match SentinelAddress::is_sentinel_url(&self.url) {
            true => debug.field("url", &inflight_core::redact_sentinel_url(&self.url)),
            false => debug.field("url", &inflight_core::redact_url(&self.url)),
        };
        if !self.more_seeds.is_empty() {
            let seeds: Vec<String> = self
                .more_seeds
                .iter()
                .map(|url| inflight_core::redact_url(url))
                .collect();
            debug.field("more_seeds", &seeds);
        }
        match self.address() {
            Ok(target) => {
                let mut config = self.config.clone();
                self.resolve(&mut config, &target);
                config.holder_label = self.holder_label.as_deref().and_then(|label| Label::new(label).ok());
                debug.field("config", &config);
            }
            Err(error) => {
                debug.field("url_error", &error.to_string());
            }
        }
        debug
            .field("default_limit", &self.default_limit)
            .field("metrics_namespace", &self.metrics_namespace)
            .field("holder_label", &self.holder_label)
            .field("keep_alive", &self.keep_alive)
            .field("drain_timeout", &self.drain_timeout)
            .field("entropy", &self.entropy.map(|_| "<set>"))
            .field("tcp", &self.tcp);
        #[cfg(all(feature = "tls", not(madsim)))]
        debug.field("tls", &self.tls);
        debug.finish()
    }
}

impl Builder {
    pub(crate) fn new(url: String) -> Self {
        Self {
            url,
            more_seeds: Vec::new(),
            sentinels: None,
            node_credentials: None,
            database: None,
            node_tls: None,
            cluster: false,
            config: Config::default(),
            default_limit: 100,
            liveness: None,
            entropy: None,
            metrics_namespace: None,
            holder_label: None,
            keep_alive: false,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            tcp: TcpConnector::new(),
            #[cfg(feature = "fault-injection")]
            bugs: Default::default(),
            #[cfg(all(feature = "tls", not(madsim)))]
            tls: Default::default(),
        }
    }

    /// A Redis Cluster: the URL is a seed node, from which the limiter learns
    /// which primary owns which slot (`CLUSTER SHARDS`), then sends every
    /// request to the primary of its key's slot, following `MOVED` and `ASK`
    /// when slots move. Credentials and TLS of the URL apply to every node;
    /// the URL may not name a database other than 0. Without this, a
    /// cluster node is refused at `connect` ([`ConnectError::ClusterMode`](crate::ConnectError::ClusterMode)).
    pub fn cluster(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// The data nodes' `AUTH` credentials (`username` `None`: the legacy
    /// single-password form), in place of any the URL gives. With
    /// [`Limiter::sentinel_builder`], whose URLs carry the sentinels' own
    /// credentials, this is where the primary's go. Never printed.
    pub fn node_credentials(mut self, username: Option<&str>, password: impl Into<String>) -> Self {
        self.node_credentials = Some(Credentials {
            username: username.map(str::to_string),
            password: password.into(),
        });
        self
    }

    /// Behind Redis Sentinel, whether the data nodes are reached over TLS,
    /// if not as the sentinels' scheme says (the TLS settings are shared).
    /// Elsewhere the URL's scheme decides (a `ConnectError::Config` if not).
    pub fn node_tls(mut self, tls: bool) -> Self {
        self.node_tls = Some(tls);
        self
    }

    /// The data nodes' logical database (`SELECT`), in place of the URL's.
    pub fn database(mut self, database: u32) -> Self {
        self.database = Some(database);
        self
    }

    pub(crate) fn with_seeds(mut self, more: Vec<String>) -> Self {
        self.more_seeds = more;
        self.cluster = true;
        self
    }

    /// First component of every Redis key (default `inflight`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Limit used by [`Limiter::acquire`] (default 100).
    pub fn default_limit(mut self, limit: u32) -> Self {
        self.default_limit = limit;
        self
    }

    /// How long an unreleased lease lives (default 60 s).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.lease_ttl = ttl;
        self
    }

    /// The caller's latency budget for one acquire (default 250 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.acquire_timeout = timeout;
        self
    }

    /// How long a request may go unanswered before its connection is replaced
    /// (default: the larger of 2 s and 4 × the timeout).
    pub fn request_liveness(mut self, liveness: Duration) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// `TCP_NODELAY` on the connections (default `true`). `false` lets the
    /// kernel coalesce pipelined writes (Nagle): measured on loopback with 64
    /// tasks on 64 keys, about a fifth less client CPU per acquire and
    /// release (`docs/performance.md`), at the price of up to a round trip
    /// more latency for a request sent while others are in flight.
    pub fn tcp_nodelay(mut self, nodelay: bool) -> Self {
        self.tcp = if nodelay {
            TcpConnector::new()
        } else {
            TcpConnector::coalescing()
        };
        self
    }

    /// Budget for TCP connect plus handshake (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// What to do when Redis cannot answer (default `Deny`).
    pub fn on_unavailable(mut self, policy: UnavailablePolicy) -> Self {
        self.config.unavailable_policy = policy;
        self
    }

    /// Acquires in flight at once before new ones fail fast (default 1024).
    pub fn max_in_flight(mut self, max: usize) -> Self {
        self.config.max_in_flight = max;
        self
    }

    /// Delay before reconnecting after a failed attempt, doubled per failure
    /// up to `max` (defaults 10 ms and 1 s); each delay is jittered down to
    /// as little as half, so a fleet does not reconnect in lockstep.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.config.reconnect_initial_backoff = initial;
        self.config.reconnect_max_backoff = max;
        self
    }

    /// What happens when a handshake finds that Redis lost lease data (an
    /// empty restart, a failover, a flush). By default
    /// (`Recovery::Reassert { window: None }`) the leases this limiter holds
    /// there are written back before the connection takes anything new, and
    /// new grants are held for the recovery window (the idle probe, the
    /// request liveness, the reconnect backoff cap and the connect timeout:
    /// the longest a limiter may take to notice, reconnect and write back;
    /// see `docs/operations.md`, "Restarts and failovers"). `Recovery::Off`
    /// only reports the loss.
    pub fn recovery(mut self, recovery: Recovery) -> Self {
        self.config.recovery = recovery;
        self
    }

    /// Delivers a grant only once `replicas` replicas acknowledged it
    /// (`WAIT replicas timeout` after each write of acquires); a `WAIT` that
    /// falls short releases the grants it covers and their callers get
    /// `Unavailable::NotReplicated`. Off by default. Costs a round trip per
    /// write, and can hold a connection's replies for up to `timeout` while
    /// replicas lag; it narrows, and does not close, the window in which a
    /// failover loses a grant (see `docs/operations.md`).
    pub fn min_replicas_acked(mut self, replicas: u32, timeout: Duration) -> Self {
        self.config.replica_acks = Some(ReplicaAcks { replicas, timeout });
        self
    }

    /// Who this limiter's leases belong to, as `Limiter::holders` and the
    /// `inflight holders` command show it: a host or pod name, say. Written
    /// into every lease (unless an acquire gives its own label), so it
    /// expires with it. 1 to 64 bytes of ASCII letters, digits and
    /// `. _ : / + = -`; anything else fails `connect` with
    /// `ConnectError::Label`.
    pub fn holder_label(mut self, label: impl Into<String>) -> Self {
        self.holder_label = Some(label.into());
        self
    }

    /// Keep every permit's lease alive while it is held (off by default;
    /// `Acquire::keep_alive` decides per call): see [`Permit::keep_alive`](crate::Permit::keep_alive).
    pub fn keep_alive(mut self, keep_alive: bool) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// How long [`Limiter::drain`](crate::Limiter::drain) waits for the
    /// releases it owes before it returns with what is left (default 5 s;
    /// at most a year, or `connect` refuses it). With Redis down, the
    /// releases it gives up on come back at their lease TTL.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// How long a waiting acquire keeps its place in its key's queue
    /// without checking in (default 1 s; it checks every third of it). A
    /// replica that crashes while its callers wait stops blocking the queue
    /// within this.
    pub fn waiter_lifetime(mut self, lifetime: Duration) -> Self {
        self.config.waiter_lifetime = lifetime;
        self
    }

    /// How long a connection may carry nothing, while this limiter holds
    /// leases or has waiters, before a `PING` checks it (default 1 s). A
    /// Redis host that dies without closing the connection is found within
    /// this plus the request liveness, so that the limiter reconnects (and
    /// writes back what it holds) within the recovery window, which counts
    /// it: see [`Recovery`].
    pub fn idle_probe(mut self, interval: Duration) -> Self {
        self.config.idle_probe = interval;
        self
    }

    /// Use a server that may evict keys (`maxmemory` set with a
    /// `maxmemory-policy` other than `noeviction`), logging a warning at
    /// each handshake, instead of refusing it. Off by default: Redis evicts
    /// keys with an expiry first under every `volatile-*` policy, and every
    /// key this library writes has one, so lease data would be the first to
    /// go, and an evicted lease set over-admits without anyone noticing.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.config.allow_eviction = allow;
        self
    }

    /// Give every permit a fencing token ([`Permit::fencing_token`](crate::Permit::fencing_token)),
    /// strictly increasing per key across the fleet. Off by default: a
    /// token is a write of the key's counter on every grant, the dearest
    /// command of an acquire (about a fifth of Redis's CPU per cycle), so
    /// only a limiter whose callers pass tokens on should pay for it.
    /// Limiters with and without tokens may share keys: the tokens given
    /// still rise.
    pub fn fencing_tokens(mut self, on: bool) -> Self {
        self.config.fencing_tokens = on;
        self
    }

    /// Labels every metric of this limiter `namespace="…"`, to tell apart
    /// limiters of one process on a dashboard (say, one per protected
    /// backend). Off by default. The subject never becomes a label: its
    /// values are unbounded.
    pub fn metrics_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.metrics_namespace = Some(namespace.into());
        self
    }

    /// How hard a release tries before it gives up (see [`ReleasePolicy`]).
    pub fn release_policy(mut self, policy: ReleasePolicy) -> Self {
        self.config.release = policy;
        self
    }

    /// Entropy for lease ids, so that a simulated run replays exactly. Two
    /// limiters given the same entropy hand out the same lease ids and break
    /// the limit between them; production code leaves this unset (the OS
    /// provides fresh entropy), which is why it exists only with the
    /// `simulation` feature.
    #[cfg(feature = "simulation")]
    pub fn simulation_entropy(mut self, entropy: [u8; 16]) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// For `rediss://`: trust exactly the CA certificates in `pem` (one or
    /// more PEM blocks) instead of Mozilla's root set, e.g. a private CA.
    #[cfg(all(feature = "tls", not(madsim)))]
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.roots_pem = Some(pem.into());
        self
    }

    /// For `rediss://` servers that require client certificates
    /// (`tls-auth-clients yes`): the PEM certificate chain and private key.
    #[cfg(all(feature = "tls", not(madsim)))]
    pub fn tls_client_certificate(mut self, chain_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.tls.client_auth = Some((chain_pem.into(), key_pem.into()));
        self
    }

    /// Switches on deliberate bugs: for the simulator's self-test only.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn inject_bugs(mut self, bugs: inflight_core::InjectedBugs) -> Self {
        self.bugs = bugs;
        self
    }
}
