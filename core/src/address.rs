//! Where the server is: the URL forms a user gives, parsed into an endpoint
//! and credentials, and redacted wherever they are shown.

use crate::config::error::ConfigError;

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

/// Why a `protocol=` query option is refused.
const NO_RESP3: &str = "protocol=… is not supported: inflight speaks RESP2, which every Redis and Valkey serves";

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
        let url = url::Url::parse(text).map_err(|e| match e {
            // `127.0.0.1:6379`, `localhost`: the scheme is what is missing.
            url::ParseError::RelativeUrlWithoutBase => error(&format!(
                "missing scheme, e.g. redis://127.0.0.1:6379; supported: {SUPPORTED_URLS}"
            )),
            e => error(&format!("{e}; supported: {SUPPORTED_URLS}")),
        })?;
        if url.fragment().is_some() {
            return Err(error("a URL fragment (#…) means nothing here"));
        }
        match url.scheme() {
            "redis" | "valkey" => Self::tcp(&url, false, &error),
            "rediss" | "valkeys" => Self::tcp(&url, true, &error),
            "redis+unix" | "unix" | "valkey+unix" => Self::unix(&url, &error),
            // `localhost:6379` reads as scheme `localhost`: no scheme was given.
            _ if url.cannot_be_a_base() => Err(error(&format!(
                "missing scheme, e.g. redis://127.0.0.1:6379; supported: {SUPPORTED_URLS}"
            ))),
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
                Some((name, _)) if name == "protocol" => NO_RESP3.to_string(),
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
                "protocol" => return Err(error(NO_RESP3)),
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
    // What stands in for a secret while the URL is rebuilt (the URL
    // encoder would escape `<` and `>`), then is written as `<redacted>`.
    const PLACEHOLDER: &str = "inflight-redacted-7a3f0c";
    let mut url = match url::Url::parse(text) {
        // `user:password@host` parses with `user` as its scheme.
        Ok(url) if !url.cannot_be_a_base() => url,
        _ => return redact_unparsable(text),
    };
    if url.password().is_some() {
        let _ = url.set_password(Some(PLACEHOLDER));
    }
    // Unix socket URLs carry the password as `?pass=`.
    if url.query_pairs().any(|(name, _)| name == "pass" || name == "password") {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(name, value)| {
                let value = match &*name {
                    "pass" | "password" => PLACEHOLDER.to_string(),
                    _ => value.into_owned(),
                };
                (name.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string().replace(PLACEHOLDER, "<redacted>")
}

/// Text that is not a URL: shown when it is a bare `host:port` (the usual
/// mistake: the scheme left out), else `<unparsable>`: a word pasted by
/// mistake may be a password, and `user:password@host` surely holds one,
/// whose host alone is shown.
fn redact_unparsable(text: &str) -> String {
    let host_port = |text: &str| {
        text.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty()
                && host.chars().all(|c| c.is_ascii_alphanumeric() || ".-[]:".contains(c))
                && (1..=5).contains(&port.len())
                && port.chars().all(|c| c.is_ascii_digit())
        })
    };
    match text.rsplit_once('@') {
        Some((_, host)) if host_port(host) => format!("<redacted>@{host}"),
        Some(_) => "<unparsable>".to_string(),
        None if host_port(text) => text.to_string(),
        None => "<unparsable>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_shown_as_redacted_and_a_missing_scheme_is_named() {
        assert_eq!(
            redact_url("redis://app:s3cret@127.0.0.1:6379/2"),
            "redis://app:<redacted>@127.0.0.1:6379/2"
        );
        assert_eq!(
            redact_url("unix:///run/redis.sock?pass=s3cret&db=1"),
            "unix:///run/redis.sock?pass=<redacted>&db=1"
        );
        // Not a URL at all: what could be a secret is not shown.
        assert_eq!(redact_url("app:s3cret@127.0.0.1:6379"), "<redacted>@127.0.0.1:6379");
        let error = ServerAddress::parse("127.0.0.1:17301").unwrap_err().to_string();
        assert!(error.contains("missing scheme, e.g. redis://127.0.0.1:6379"), "{error}");
        assert!(error.contains("\"127.0.0.1:17301\""), "{error}");
        let error = ServerAddress::parse("app:s3cret@localhost:6379")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains("missing scheme"), "{error}");
        let error = ServerAddress::parse("localhost:6379").unwrap_err().to_string();
        assert!(error.contains("missing scheme"), "{error}");
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
