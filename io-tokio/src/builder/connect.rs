//! Connecting a [`Builder`]: the URL read and checked, the core's settings
//! resolved, the driver started (and, unless lazy, its first connection
//! awaited).

use inflight_core::{
    redact_sentinel_url, Client, Config, ConfigError, Credentials, Endpoint, Label, SentinelAddress, ServerAddress,
    Servers,
};

use super::{Builder, Start};
#[cfg(all(feature = "tls", not(madsim)))]
use crate::apart::SentinelsApart;
use crate::connector::Connector;
use crate::driver::Driver;
use crate::error::ConnectError;
use crate::limiter::{Limiter, RetryHints, Settings};
use crate::telemetry;

/// Where the builder connects, read from its URLs and settings.
pub(super) struct Target {
    /// TLS to the data nodes.
    pub(super) tls: bool,
    /// TLS to the sentinels (the data nodes' elsewhere).
    pub(super) sentinel_tls: bool,
    /// A Unix socket.
    pub(super) unix: bool,
    /// Where, for messages (no secrets).
    pub(super) shown: String,
    /// The data nodes' credentials.
    pub(super) credentials: Option<Credentials>,
    /// The data nodes' database.
    pub(super) database: u32,
    pub(super) servers: Servers,
}

impl Builder {
    /// Validates the settings, connects (TCP, TLS for `rediss://`, or a Unix
    /// socket), authenticates, selects the database, loads the scripts and
    /// returns once Redis has answered. An unreachable server is an error here.
    pub async fn connect(self) -> Result<Limiter, ConnectError> {
        self.start(Start::WhenReady).await
    }

    /// Validates the settings and returns the limiter at once, without
    /// waiting for Redis: it connects in the background and retries with
    /// backoff until Redis answers. Meanwhile acquires follow the
    /// unavailable policy (`on_unavailable(Allow)`: unenforced permits), so a
    /// fail-open service can start while Redis is down and enforce its
    /// limits as soon as Redis is back.
    pub async fn connect_lazy(self) -> Result<Limiter, ConnectError> {
        self.start(Start::Lazy).await
    }

    /// As [`Builder::connect`], over any [`Connector`]. The connector alone
    /// decides the transport: it is handed the URL's endpoint, and a
    /// `rediss://` scheme does not wrap it in TLS.
    pub async fn connect_with<C: Connector>(self, connector: C) -> Result<Limiter, ConnectError> {
        let address = self.address()?;
        self.start_with(address, connector, Start::WhenReady).await
    }

    /// As [`Builder::connect_lazy`], over any [`Connector`].
    pub async fn connect_lazy_with<C: Connector>(self, connector: C) -> Result<Limiter, ConnectError> {
        let address = self.address()?;
        self.start_with(address, connector, Start::Lazy).await
    }

    /// The URL, parsed, with the servers it names: one, a cluster's seeds
    /// (all URLs must agree on TLS and credentials), or the sentinels of a
    /// Sentinel-managed primary.
    pub(super) fn address(&self) -> Result<Target, ConfigError> {
        if let Some(sentinels) = &self.sentinels {
            return self.sentinel_target(&sentinels.urls, &sentinels.master);
        }
        if SentinelAddress::is_sentinel_url(&self.url) {
            let address = SentinelAddress::parse(&self.url)?;
            return Ok(Target {
                tls: self.node_tls.unwrap_or(address.tls),
                sentinel_tls: address.tls,
                unix: false,
                shown: redact_sentinel_url(&self.url),
                credentials: self.node_credentials.clone().or(address.credentials),
                database: self.database.unwrap_or(address.database),
                servers: Servers::Sentinel {
                    sentinels: address.sentinels,
                    master: address.master,
                    credentials: address.sentinel_credentials,
                },
            });
        }
        if self.cluster && self.url.is_empty() && self.more_seeds.is_empty() {
            return Err(ConfigError::Zero { field: "servers.seeds" });
        }
        let address = ServerAddress::parse(&self.url)?;
        if self.node_tls.is_some_and(|tls| tls != address.tls) {
            return Err(ConfigError::Url {
                url: inflight_core::redact_url(&self.url),
                reason: "Builder::node_tls is for Redis Sentinel; here the scheme decides (rediss:// for TLS)".into(),
            });
        }
        let target = |servers| Target {
            tls: address.tls,
            sentinel_tls: address.tls,
            unix: matches!(address.endpoint, Endpoint::Unix(_)),
            shown: address.endpoint.to_string(),
            credentials: self.node_credentials.clone().or(address.credentials.clone()),
            database: self.database.unwrap_or(address.database),
            servers,
        };
        if !self.cluster {
            return Ok(target(Servers::Standalone(address.endpoint.clone())));
        }
        let mut seeds = vec![address.endpoint.clone()];
        for url in &self.more_seeds {
            let seed = ServerAddress::parse(url)?;
            if seed.tls != address.tls || seed.credentials != address.credentials || seed.database != address.database {
                return Err(ConfigError::Url {
                    url: inflight_core::redact_url(url),
                    reason: "every seed URL of a cluster needs the same scheme, credentials and database as the first"
                        .into(),
                });
            }
            seeds.push(seed.endpoint);
        }
        let tls = address.tls;
        Ok(target(Servers::Cluster { seeds, tls }))
    }

    /// `Limiter::sentinel_builder`'s sentinels: each a `redis://` (or
    /// `rediss://`) URL whose credentials are the sentinels' own; all with
    /// the same scheme and credentials.
    fn sentinel_target(&self, urls: &[String], master: &str) -> Result<Target, ConfigError> {
        let mut sentinels = Vec::new();
        let mut first: Option<ServerAddress> = None;
        for url in urls {
            let sentinel = ServerAddress::parse(url)?;
            let error = |reason: &str| ConfigError::Url {
                url: inflight_core::redact_url(url),
                reason: reason.into(),
            };
            if sentinel.endpoint.as_tcp().is_none() {
                return Err(error("sentinels are reached over TCP, not Unix sockets"));
            }
            if sentinel.database != 0 {
                return Err(error(
                    "a sentinel has no database: give the data nodes' with Builder::database",
                ));
            }
            match &first {
                Some(first) if first.tls != sentinel.tls || first.credentials != sentinel.credentials => {
                    return Err(error(
                        "every sentinel URL needs the same scheme and credentials as the first",
                    ));
                }
                Some(_) => {}
                None => first = Some(sentinel.clone()),
            }
            sentinels.push(sentinel.endpoint);
        }
        let Some(first) = first else {
            return Err(ConfigError::Zero {
                field: "servers.sentinels",
            });
        };
        let shown: Vec<String> = sentinels.iter().map(ToString::to_string).collect();
        Ok(Target {
            tls: self.node_tls.unwrap_or(first.tls),
            sentinel_tls: first.tls,
            unix: false,
            shown: format!("sentinels {} (master {master})", shown.join(", ")),
            credentials: self.node_credentials.clone(),
            database: self.database.unwrap_or(0),
            servers: Servers::Sentinel {
                sentinels,
                master: master.to_string(),
                credentials: first.credentials,
            },
        })
    }

    /// What `connect` will use: the settings, with the servers, credentials
    /// and database of the URL, and the request liveness (given, or derived
    /// from the acquire timeout).
    pub(super) fn resolve(&self, config: &mut Config, target: &Target) {
        config.credentials = target.credentials.clone();
        config.database = target.database;
        config.servers = target.servers.clone();
        config.request_liveness = self
            .liveness
            .unwrap_or_else(|| Config::default_request_liveness(config.acquire_timeout));
    }

    /// Picks the connector the URL asks for.
    async fn start(self, start: Start) -> Result<Limiter, ConnectError> {
        let address = self.address()?;
        if address.unix {
            #[cfg(all(unix, not(madsim)))]
            return self.start_with(address, crate::connector::UnixConnector, start).await;
            #[cfg(not(all(unix, not(madsim))))]
            return Err(ConnectError::Unreachable {
                addr: address.shown,
                reason: "Unix sockets are not available on this platform".into(),
            });
        }
        let tcp = self.tcp;
        match (address.sentinel_tls, address.tls) {
            (false, false) => self.start_with(address, tcp, start).await,
            #[cfg(all(feature = "tls", not(madsim)))]
            (sentinels, nodes) => {
                let tls = crate::tls::TlsConnector::new(&self.tls, tcp)?;
                match (sentinels, nodes) {
                    (true, true) => self.start_with(address, tls, start).await,
                    (true, false) => self.start_with(address, SentinelsApart::new(tls, tcp), start).await,
                    _ => self.start_with(address, SentinelsApart::new(tcp, tls), start).await,
                }
            }
            #[cfg(not(all(feature = "tls", not(madsim))))]
            _ => Err(ConnectError::TlsNotEnabled),
        }
    }

    async fn start_with<C: Connector>(
        self,
        address: Target,
        connector: C,
        start: Start,
    ) -> Result<Limiter, ConnectError> {
        let default_limit = inflight_core::config::limit(self.default_limit)?;
        let mut config = self.config.clone();
        self.resolve(&mut config, &address);
        config.validate()?;
        if self.drain_timeout > inflight_core::config::MAX_DURATION {
            return Err(inflight_core::ConfigError::OutOfRange {
                field: "drain_timeout",
                reason: "longer than a year",
            }
            .into());
        }
        config.holder_label = self.holder_label.as_deref().map(Label::new).transpose()?;
        let entropy = match self.entropy {
            Some(entropy) => entropy,
            None => {
                let mut entropy = [0u8; 16];
                getrandom::fill(&mut entropy).map_err(|e| ConnectError::Unreachable {
                    addr: address.shown.clone(),
                    reason: format!("no OS randomness for lease ids: {e}"),
                })?;
                entropy
            }
        };
        let policy = config.unavailable_policy;
        let hints = RetryHints {
            recovery_window: config.recovery_window(),
            reconnect_max_backoff: config.reconnect_max_backoff,
        };
        let key_prefix = config.key_prefix.clone();
        let cluster = matches!(config.servers, inflight_core::Servers::Cluster { .. });
        telemetry::describe();
        let metric_labels = telemetry::labels(self.metrics_namespace.as_deref());
        #[allow(unused_mut)] // deliberate bugs are set only in simulator builds
        let mut client = Client::new(config, entropy, crate::clock::now())?;
        #[cfg(feature = "fault-injection")]
        client.inject_bugs(self.bugs);
        let spawned = Driver::spawn(client, connector, start == Start::Lazy, metric_labels.clone())?;
        if start == Start::WhenReady {
            spawned.started.await.unwrap_or(Err(ConnectError::Stopped))?;
        }
        let settings = Settings {
            default_limit,
            policy,
            key_prefix,
            metric_labels,
            hints,
            keep_alive: self.keep_alive,
            drain_timeout: self.drain_timeout,
            cluster,
            #[cfg(feature = "fault-injection")]
            bugs: self.bugs,
        };
        Ok(Limiter::new(spawned.commands, spawned.stats, settings))
    }
}
