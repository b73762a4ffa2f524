//! Configuration of the core, its validation, and the server URL.
//!
//! Everything a user can get wrong is refused here with a [`ConfigError`]
//! that names the field, so a bad deployment fails at start-up instead of
//! misbehaving under load.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::resp::ReplyLimits;

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
    /// Bounds on the replies accepted from the server.
    pub reply_limits: ReplyLimits,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            key_prefix: "inflight".into(),
            lease_ttl: Duration::from_secs(60),
            acquire_timeout: Duration::from_millis(250),
            request_liveness: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            max_in_flight: 1024,
            unavailable_policy: UnavailablePolicy::Deny,
            release: ReleasePolicy::default(),
            reconnect_initial_backoff: Duration::from_millis(10),
            reconnect_max_backoff: Duration::from_secs(1),
            credentials: None,
            database: 0,
            reply_limits: ReplyLimits::default(),
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
    #[error("{field} must be at least {min_ms} ms (it is {actual_ms} ms)")]
    TooShort {
        /// The setting, as named in [`Config`].
        field: &'static str,
        /// The least it may be, in milliseconds.
        min_ms: u128,
        /// What it is, in milliseconds.
        actual_ms: u128,
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
    /// Refuses a setting that cannot work, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("lease_ttl", self.lease_ttl),
            ("acquire_timeout", self.acquire_timeout),
            ("request_liveness", self.request_liveness),
            ("connect_timeout", self.connect_timeout),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
            ("release.initial_backoff", self.release.initial_backoff),
        ];
        for (field, value) in positive {
            if value.is_zero() {
                return Err(ConfigError::Zero { field });
            }
        }
        // Redis expiries are whole milliseconds; a sub-millisecond TTL is zero there.
        if self.lease_ttl < Duration::from_millis(1) {
            return Err(ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: 1,
                actual_ms: self.lease_ttl.as_millis(),
            });
        }
        if self.lease_ttl > Duration::from_secs(365 * 24 * 3600) {
            return Err(ConfigError::OutOfRange {
                field: "lease_ttl",
                reason: "longer than a year",
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
            });
        }
        if self.request_liveness < self.acquire_timeout {
            return Err(ConfigError::TooShort {
                field: "request_liveness",
                min_ms: self.acquire_timeout.as_millis(),
                actual_ms: self.request_liveness.as_millis(),
            });
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

/// A limit as given by a user: refused when zero.
pub fn limit(value: u32) -> Result<NonZeroU32, ConfigError> {
    NonZeroU32::new(value).ok_or(ConfigError::Zero { field: "limit" })
}

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Endpoint {
    /// A host name or IP address and a port.
    Tcp {
        /// A host name or an IP address.
        host: String,
        /// The TCP port.
        port: u16,
    },
    /// A Unix domain socket (`redis-server --unixsocket`).
    Unix(std::path::PathBuf),
}

impl Endpoint {
    /// Host and port, for a TCP endpoint.
    pub fn as_tcp(&self) -> Option<(&str, u16)> {
        match self {
            Endpoint::Tcp { host, port } => Some((host, *port)),
            Endpoint::Unix(_) => None,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Endpoint::Tcp { host, port } => write!(f, "{host}:{port}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// The URL forms [`ServerAddress::parse`] takes, for error messages.
const SUPPORTED_URLS: &str = "redis://[user:password@]host[:port][/db], rediss://… (TLS), valkey:// and valkeys:// \
     (the same), or redis+unix:///path/to/socket[?db=N&user=U&pass=P] (also unix://)";

/// Where the server is, how to reach it and how to log in, from one of:
///
/// - `redis://[user:password@]host[:port][/db]`, or `valkey://…`;
/// - `rediss://…` or `valkeys://…` for TLS;
/// - `redis+unix:///path/to/redis.sock[?db=N&user=U&pass=P]`, or `unix://…`
///   (the query form is the one other Redis clients use for sockets).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerAddress {
    /// `rediss://`: the stream is TLS, verified against the host.
    pub tls: bool,
    /// Where the server listens.
    pub endpoint: Endpoint,
    /// `AUTH` credentials from the URL, if any.
    pub credentials: Option<Credentials>,
    /// Logical database (`SELECT`), 0 unless the URL names one.
    pub database: u32,
}

impl ServerAddress {
    /// Parses one of the URL forms above; a bad one is a `ConfigError::Url`
    /// that names what is supported (and never shows the password).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let error = |reason: &str| ConfigError::Url {
            url: redact_url(text),
            reason: reason.to_string(),
        };
        let url = url::Url::parse(text).map_err(|e| error(&format!("{e}; supported: {SUPPORTED_URLS}")))?;
        if url.fragment().is_some() {
            return Err(error("a URL fragment (#…) means nothing here"));
        }
        match url.scheme() {
            "redis" | "valkey" => Self::tcp(&url, false, &error),
            "rediss" | "valkeys" => Self::tcp(&url, true, &error),
            "redis+unix" | "unix" | "valkey+unix" => Self::unix(&url, &error),
            other => Err(error(&format!(
                "unsupported scheme {other:?}; supported: {SUPPORTED_URLS}"
            ))),
        }
    }

    fn tcp(url: &url::Url, tls: bool, error: &dyn Fn(&str) -> ConfigError) -> Result<Self, ConfigError> {
        let host = match url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(host) => host.to_string(),
            None => return Err(error("no host")),
        };
        if host.is_empty() {
            return Err(error("no host"));
        }
        let port = url.port().unwrap_or(6379);
        if port == 0 {
            return Err(error("port 0"));
        }
        let decode = |part: &str| decode(part).ok_or_else(|| error("credentials are not valid UTF-8"));
        let username = decode(url.username())?;
        let credentials = match url.password() {
            Some(password) => Some(Credentials {
                username: (!username.is_empty()).then_some(username),
                password: decode(password)?,
            }),
            None if !username.is_empty() => return Err(error("a user name without a password")),
            None => None,
        };
        let database = match url.path().trim_start_matches('/') {
            "" => 0,
            db => db
                .parse::<u32>()
                .map_err(|_| error("the path must be a database number"))?,
        };
        if let Some(query) = url.query() {
            let reason = match url.query_pairs().next() {
                Some((name, _)) if name == "protocol" => {
                    "protocol=… is not supported: inflight speaks RESP2, which every Redis and Valkey serves"
                        .to_string()
                }
                _ => format!("query parameters ({query:?}) are not supported here; supported: {SUPPORTED_URLS}"),
            };
            return Err(error(&reason));
        }
        Ok(Self {
            tls,
            endpoint: Endpoint::Tcp { host, port },
            credentials,
            database,
        })
    }

    fn unix(url: &url::Url, error: &dyn Fn(&str) -> ConfigError) -> Result<Self, ConfigError> {
        if url.host_str().is_some_and(|host| !host.is_empty()) || url.password().is_some() || !url.username().is_empty()
        {
            return Err(error(
                "a Unix socket URL has no host or credentials before the path: redis+unix:///path?user=U&pass=P",
            ));
        }
        let path = decode(url.path()).ok_or_else(|| error("the socket path is not valid UTF-8"))?;
        if !path.starts_with('/') || path.len() < 2 {
            return Err(error(
                "the socket path must be absolute: redis+unix:///path/to/redis.sock",
            ));
        }
        let (mut database, mut username, mut password) = (0, None, None);
        for (name, value) in url.query_pairs() {
            match &*name {
                "db" => {
                    database = value
                        .parse::<u32>()
                        .map_err(|_| error("db must be a database number"))?
                }
                "user" => username = Some(value.into_owned()),
                "pass" | "password" => password = Some(value.into_owned()),
                "protocol" => {
                    return Err(error(
                        "protocol=… is not supported: inflight speaks RESP2, which every Redis and Valkey serves",
                    ))
                }
                other => {
                    return Err(error(&format!(
                        "unsupported query parameter {other:?}: a Unix socket URL takes db, user and pass"
                    )))
                }
            }
        }
        let credentials = match (username, password) {
            (username, Some(password)) => Some(Credentials { username, password }),
            (Some(_), None) => return Err(error("a user name without a password")),
            (None, None) => None,
        };
        Ok(Self {
            tls: false,
            endpoint: Endpoint::Unix(path.into()),
            credentials,
            database,
        })
    }
}

/// A percent-encoded URL part, decoded; `None` if it is not UTF-8.
fn decode(part: &str) -> Option<String> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .ok()
        .map(|text| text.into_owned())
}

/// `text` with any password replaced, fit for an error message, a log or a
/// `Debug` print. Text that is not a URL at all is not shown (it may be a
/// secret pasted in the wrong place).
pub fn redact_url(text: &str) -> String {
    let Ok(mut url) = url::Url::parse(text) else {
        return "<unparsable>".to_string();
    };
    if url.password().is_some() {
        let _ = url.set_password(Some("<redacted>"));
    }
    // Unix socket URLs carry the password as `?pass=`.
    if url.query_pairs().any(|(name, _)| name == "pass" || name == "password") {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = match &*name {
                    "pass" | "password" => "<redacted>".to_string(),
                    _ => value.into_owned(),
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
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
        assert_eq!(
            bad(|c| c.lease_ttl = c.acquire_timeout),
            ConfigError::TooShort {
                field: "lease_ttl",
                min_ms: 251,
                actual_ms: 250
            }
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
        assert_eq!(limit(3).unwrap().get(), 3);
    }

    #[test]
    fn urls_parse_with_credentials_and_database() {
        let plain = ServerAddress::parse("redis://127.0.0.1:7000").unwrap();
        assert_eq!(
            (plain.endpoint.to_string(), plain.database, plain.credentials),
            ("127.0.0.1:7000".to_string(), 0, None)
        );

        let full = ServerAddress::parse("redis://alice:p%40ss@localhost:6380/3").unwrap();
        assert_eq!(full.database, 3);
        assert_eq!(
            full.credentials,
            Some(Credentials {
                username: Some("alice".into()),
                password: "p@ss".into()
            })
        );
        let legacy = ServerAddress::parse("redis://:secret@[::1]/").unwrap();
        assert_eq!(
            legacy.endpoint,
            Endpoint::Tcp {
                host: "::1".into(),
                port: 6379
            }
        );
        assert_eq!(legacy.endpoint.to_string(), "[::1]:6379");
        assert_eq!(legacy.credentials.unwrap().username, None);
    }

    #[test]
    fn valkey_schemes_and_unix_sockets_parse() {
        let valkey = ServerAddress::parse("valkey://h:7000/1").unwrap();
        assert_eq!(valkey, ServerAddress::parse("redis://h:7000/1").unwrap());
        assert!(ServerAddress::parse("valkeys://h").unwrap().tls);
        for form in [
            "redis+unix:///run/redis/redis.sock",
            "unix:///run/redis/redis.sock",
            "unix:/run/redis/redis.sock",
            "valkey+unix:///run/redis/redis.sock",
        ] {
            let address = ServerAddress::parse(form).unwrap();
            assert_eq!(
                address.endpoint,
                Endpoint::Unix("/run/redis/redis.sock".into()),
                "{form}"
            );
            assert_eq!((address.tls, address.database, address.credentials), (false, 0, None));
        }
        let full = ServerAddress::parse("redis+unix:///tmp/my%20redis.sock?db=4&user=svc&pass=p%40ss").unwrap();
        assert_eq!(full.endpoint, Endpoint::Unix("/tmp/my redis.sock".into()));
        assert_eq!(full.database, 4);
        assert_eq!(
            full.credentials,
            Some(Credentials {
                username: Some("svc".into()),
                password: "p@ss".into()
            })
        );
        assert_eq!(full.endpoint.to_string(), "unix:/tmp/my redis.sock");
        let secret = ServerAddress::parse("redis+unix:///tmp/r.sock?pass=hunter2&db=x")
            .unwrap_err()
            .to_string();
        assert!(!secret.contains("hunter2"), "{secret}");
    }

    #[test]
    fn bad_urls_are_refused_without_leaking_the_password() {
        let tls = ServerAddress::parse("rediss://:pw@redis.example:6380/2").unwrap();
        assert!(tls.tls && tls.endpoint.to_string() == "redis.example:6380" && tls.database == 2);
        assert!(!ServerAddress::parse("redis://h:1").unwrap().tls);
        for bad in [
            "",
            "not a url",
            "http://h:1",
            "redis://h:1/x",
            "redis://h:0",
            "redis://u@h:1",
            "redis://h:1/?a=b",
            "redis:///",
            "memcached://h:1",
            "redis://h:1/?protocol=resp3",
            "redis+unix://",
            "redis+unix:///",
            "redis+unix://host/tmp/r.sock",
            "unix:relative.sock",
            "redis+unix:///tmp/r.sock?db=x",
            "redis+unix:///tmp/r.sock?user=u",
            "redis+unix:///tmp/r.sock?protocol=3",
            "redis+unix:///tmp/r.sock?timeout=1",
            "redis://h:1#frag",
        ] {
            assert!(ServerAddress::parse(bad).is_err(), "{bad:?} accepted");
        }
        let resp3 = ServerAddress::parse("redis://h:1?protocol=resp3")
            .unwrap_err()
            .to_string();
        assert!(resp3.contains("RESP2"), "{resp3}");
        let scheme = ServerAddress::parse("http://h:1").unwrap_err().to_string();
        assert!(
            scheme.contains("redis+unix://") && scheme.contains("valkey://"),
            "{scheme}"
        );
        let unknown = ServerAddress::parse("redis+unix:///tmp/r.sock?timeout=1")
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("db, user and pass"), "{unknown}");
        let message = ServerAddress::parse("redis://u:hunter2@h:1/nope")
            .unwrap_err()
            .to_string();
        assert!(!message.contains("hunter2"), "{message}");
    }
}
