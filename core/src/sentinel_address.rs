//! Where a Sentinel-managed primary is found: the sentinels' URL form, parsed
//! into the sentinels' endpoints, the master name, and the two sets of
//! credentials (the data nodes' and the sentinels' own).

use crate::address::{Credentials, Endpoint, ServerAddress};
use crate::config::error::ConfigError;

/// The port a sentinel listens on unless the URL names another.
pub const SENTINEL_PORT: u16 = 26379;

/// The URL form, for error messages.
const SENTINEL_URL: &str = "redis+sentinel://[user:password@]host[:port][,host[:port]…]/master_name[/db]\
     [?sentinelUsername=U&sentinelPassword=P] (rediss+sentinel:// for TLS)";

/// A Sentinel deployment, from
/// `redis+sentinel://[user:password@]s1[:26379],s2[:26379]/master_name[/db]`
/// (or `rediss+sentinel://…` for TLS to sentinels and data nodes alike;
/// `valkey+sentinel://` and `valkeys+sentinel://` are the same).
///
/// The user and password before the hosts are the data nodes'; the
/// sentinels' own, when they need any, are the query options
/// `sentinelUsername` and `sentinelPassword` (the names other Redis
/// clients use).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentinelAddress {
    /// TLS to every sentinel and data node.
    pub tls: bool,
    /// The sentinels, in the order given (asked in turn).
    pub sentinels: Vec<Endpoint>,
    /// The name the sentinels monitor the primary under.
    pub master: String,
    /// `AUTH` credentials for the data nodes.
    pub credentials: Option<Credentials>,
    /// `AUTH` credentials for the sentinels.
    pub sentinel_credentials: Option<Credentials>,
    /// Logical database on the data nodes.
    pub database: u32,
}

impl SentinelAddress {
    /// Whether `text` uses a sentinel scheme (and so is for [`SentinelAddress::parse`]).
    pub fn is_sentinel_url(text: &str) -> bool {
        sentinel_scheme(text).is_some()
    }

    /// Parses the form above; a bad URL is a `ConfigError::Url` that says
    /// what is wrong and never shows a password.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let error = |reason: &str| ConfigError::Url {
            url: redact_sentinel_url(text),
            reason: format!("{reason}; the form is {SENTINEL_URL}"),
        };
        let (tls, rest) = sentinel_scheme(text).ok_or_else(|| error("not a sentinel URL"))?;
        if rest.contains('#') {
            return Err(error("a URL fragment (#…) means nothing here"));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(error("an empty sentinel address"));
            }
            // (Echoed only when no credentials could have spilled into it.)
            let shown = if text.contains('@') { "a host" } else { host };
            let sentinel = parse_host(host).ok_or_else(|| error(&format!("{shown:?} is not host[:port]")))?;
            if !sentinels.contains(&sentinel) {
                sentinels.push(sentinel);
            }
        }
        let mut parts = path.splitn(2, '/');
        let master = parts.next().unwrap_or("");
        let master = percent_encoding::percent_decode_str(master)
            .decode_utf8()
            .map_err(|_| error("the master name is not valid UTF-8"))?
            .into_owned();
        check_master_name(&master).map_err(&error)?;
        let database = match parts.next().unwrap_or("").trim_end_matches('/') {
            "" => 0,
            db => db
                .parse::<u32>()
                .map_err(|_| error("what follows the master name must be a database number"))?,
        };
        // The data nodes' credentials, decoded as any Redis URL's are.
        let credentials = match userinfo {
            Some(userinfo) => match ServerAddress::parse(&format!("redis://{userinfo}@localhost")) {
                Ok(address) => address.credentials,
                Err(ConfigError::Url { reason, .. }) if reason.starts_with("a user name") => {
                    return Err(error("a user name without a password"))
                }
                Err(_) => return Err(error("the credentials before the hosts cannot be read")),
            },
            None => None,
        };
        let (mut username, mut password) = (None, None);
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*name {
                "sentinelUsername" | "sentinel_username" => username = Some(value.into_owned()),
                "sentinelPassword" | "sentinel_password" => password = Some(value.into_owned()),
                "protocol" => return Err(error("protocol=… is not supported: inflight speaks RESP2")),
                other => {
                    return Err(error(&format!(
                    "unsupported query parameter {other:?}: a sentinel URL takes sentinelUsername and sentinelPassword"
                )))
                }
            }
        }
        let sentinel_credentials = match (username, password) {
            (username, Some(password)) => Some(Credentials { username, password }),
            (Some(_), None) => return Err(error("a sentinelUsername without a sentinelPassword")),
            (None, None) => None,
        };
        Ok(Self {
            tls,
            sentinels,
            master,
            credentials,
            sentinel_credentials,
            database,
        })
    }
}

/// A master name the sentinels' messages can carry: they are space
/// separated, so a name with a space (or a control character) could never
/// be matched in a `+switch-master` message.
pub(crate) fn check_master_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("no master name: put the name the sentinels monitor after the hosts, e.g. /mymaster");
    }
    if name.len() > 256 {
        return Err("the master name is longer than 256 bytes");
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the master name holds a space or a control character");
    }
    Ok(())
}

/// TLS or not, and what follows `://`, for a sentinel scheme.
fn sentinel_scheme(text: &str) -> Option<(bool, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    match scheme {
        "redis+sentinel" | "valkey+sentinel" => Some((false, rest)),
        "rediss+sentinel" | "valkeys+sentinel" => Some((true, rest)),
        _ => None,
    }
}

/// `host[:port]` or `[v6]:port`; the port defaults to the sentinels' own.
fn parse_host(host: &str) -> Option<Endpoint> {
    let url = url::Url::parse(&format!("redis://{host}")).ok()?;
    if url.path() != "/" && !url.path().is_empty() || !url.username().is_empty() {
        return None;
    }
    let name = match url.host()? {
        url::Host::Ipv6(ip) => ip.to_string(),
        other => other.to_string(),
    };
    let port = url.port().unwrap_or(SENTINEL_PORT);
    (!name.is_empty() && port != 0).then_some(Endpoint::Tcp { host: name, port })
}

/// A sentinel URL with its passwords (the data nodes' and the sentinels')
/// replaced, fit for an error message or a log.
pub fn redact_sentinel_url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return "<unparsable>".into();
    };
    // Everything up to the last `@` may be a secret, even one holding a
    // `/`, `?` or `@` it should have percent-encoded: none of it is shown.
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => ("<redacted>@", &rest[at + 1..]),
        None => ("", rest),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let mut shown = format!("{scheme}://{userinfo}{rest}");
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.to_ascii_lowercase().contains("password") => format!("{name}=<redacted>"),
                _ => pair.to_string(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&pairs.join("&"));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Endpoint {
        Endpoint::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn the_sentinel_form_parses_hosts_master_database_and_both_credentials() {
        let address = SentinelAddress::parse(
            "redis+sentinel://app:s%40cret@10.0.0.1:26380,s2,[::1]:5000/mymaster/3?sentinelPassword=sp",
        )
        .unwrap();
        assert!(!address.tls);
        assert_eq!(
            address.sentinels,
            vec![tcp("10.0.0.1", 26380), tcp("s2", SENTINEL_PORT), tcp("::1", 5000)]
        );
        assert_eq!(address.master, "mymaster");
        assert_eq!(address.database, 3);
        let data = address.credentials.unwrap();
        assert_eq!(
            (data.username.as_deref(), data.password.as_str()),
            (Some("app"), "s@cret")
        );
        let sentinel = address.sentinel_credentials.unwrap();
        assert_eq!((sentinel.username, sentinel.password.as_str()), (None, "sp"));
        let tls = SentinelAddress::parse("rediss+sentinel://s1/m").unwrap();
        assert!(tls.tls && tls.credentials.is_none() && tls.database == 0);
        assert!(SentinelAddress::is_sentinel_url("valkey+sentinel://s1/m"));
        assert!(!SentinelAddress::is_sentinel_url("redis://s1/0"));
    }

    #[test]
    fn bad_sentinel_urls_say_why_and_hide_passwords() {
        let cases = [
            ("redis+sentinel://s1:26379", "no master name"),
            ("redis+sentinel://s1:26379/", "no master name"),
            ("redis+sentinel://s1,,s2/m", "empty sentinel address"),
            ("redis+sentinel://s1:99999/m", "is not host[:port]"),
            ("redis+sentinel://s1/m/x", "database number"),
            ("redis+sentinel://s1/my%20master", "space"),
            ("redis+sentinel://s1/m?sentinelUsername=u", "without a sentinelPassword"),
            ("redis+sentinel://s1/m?timeout=1", "unsupported query parameter"),
            ("redis+sentinel://user@s1/m", "user name without a password"),
        ];
        for (url, reason) in cases {
            let error = SentinelAddress::parse(url).unwrap_err().to_string();
            assert!(error.contains(reason), "{url}: {error}");
        }
        let error = SentinelAddress::parse("redis+sentinel://u:hunter2@s1,s2?sentinelPassword=hunter3")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("hunter"), "{error}");
        assert!(error.contains("://<redacted>@s1,s2"), "{error}");
        // A password with characters it should have percent-encoded.
        for url in [
            "redis+sentinel://u:zq?xj@h/m",
            "redis+sentinel://u:zq/xj@h/m",
            "redis+sentinel://u:zq@xj@h:0/m",
        ] {
            let shown = format!("{:?}", SentinelAddress::parse(url));
            assert!(!shown.contains("zq") && !shown.contains("xj"), "{shown}");
        }
    }
}
