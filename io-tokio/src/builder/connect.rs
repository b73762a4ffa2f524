//! Connecting a [`Builder`]: the URL read and checked, the core's settings
//! resolved, the driver started (and, unless lazy, its first connection
//! awaited).

use inflight_core::{Client, Config, ConfigError, Endpoint, Label, ServerAddress, Servers};

use super::{Builder, Start};
use crate::connector::Connector;
use crate::driver::Driver;
use crate::error::ConnectError;
use crate::limiter::{Limiter, RetryHints, Settings};
use crate::telemetry;

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

    /// The URL, parsed, with the servers it names: one, or a cluster's seeds
    /// (all URLs must agree on TLS and credentials).
    pub(super) fn address(&self) -> Result<(ServerAddress, Servers), ConfigError> {
        if self.cluster && self.url.is_empty() && self.more_seeds.is_empty() {
            return Err(ConfigError::Zero { field: "servers.seeds" });
        }
        let address = ServerAddress::parse(&self.url)?;
        if !self.cluster {
            let endpoint = address.endpoint.clone();
            return Ok((address, Servers::Standalone(endpoint)));
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
        Ok((address, Servers::Cluster { seeds, tls }))
    }

    /// What `connect` will use: the settings, with the server, credentials
    /// and database of the URL, and the request liveness (given, or derived
    /// from the acquire timeout).
    pub(super) fn resolve(&self, config: &mut Config, address: &ServerAddress, servers: Servers) {
        config.credentials = address.credentials.clone();
        config.database = address.database;
        config.servers = servers;
        config.request_liveness = self
            .liveness
            .unwrap_or_else(|| Config::default_request_liveness(config.acquire_timeout));
    }

    /// Picks the connector the URL asks for.
    async fn start(self, start: Start) -> Result<Limiter, ConnectError> {
        let address = self.address()?;
        if let Endpoint::Unix(_) = address.0.endpoint {
            #[cfg(all(unix, not(madsim)))]
            return self.start_with(address, crate::connector::UnixConnector, start).await;
            #[cfg(not(all(unix, not(madsim))))]
            return Err(ConnectError::Unreachable {
                addr: address.0.endpoint.to_string(),
                reason: "Unix sockets are not available on this platform".into(),
            });
        }
        if address.0.tls {
            #[cfg(all(feature = "tls", not(madsim)))]
            {
                let connector = crate::tls::TlsConnector::new(&self.tls, self.tcp)?;
                return self.start_with(address, connector, start).await;
            }
            #[cfg(not(all(feature = "tls", not(madsim))))]
            return Err(ConnectError::TlsNotEnabled);
        }
        let tcp = self.tcp;
        self.start_with(address, tcp, start).await
    }

    async fn start_with<C: Connector>(
        self,
        (address, servers): (ServerAddress, Servers),
        connector: C,
        start: Start,
    ) -> Result<Limiter, ConnectError> {
        let default_limit = inflight_core::config::limit(self.default_limit)?;
        let mut config = self.config.clone();
        self.resolve(&mut config, &address, servers);
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
                    addr: address.endpoint.to_string(),
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
        };
        Ok(Limiter::new(spawned.commands, spawned.stats, settings))
    }
}
