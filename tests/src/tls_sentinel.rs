//! One real sentinel watching one real data node, TLS on one side only: the
//! sentinel listening on a `tls-port` beside a plain data node, or a plain
//! sentinel watching a data node it reaches over TLS (`tls-replication
//! yes`), so that a limiter must reach each side its own way. Both keep a
//! plain port for the fixture's own checks.

use std::path::PathBuf;

use crate::pki::TestPki;
use crate::redis_server::{free_port, RedisServer};
use crate::watched::Watched;

/// The name the sentinel monitors the data node under.
pub const MASTER: &str = "tlsmaster";

const INSTALL_HINT: &str = "redis-server was not found on PATH. This test runs a real sentinel \
(`redis-server sentinel.conf --sentinel`). Install it with `apt-get update && apt-get install -y \
redis-server` (Debian/Ubuntu) or `brew install redis` (macOS), then run the tests again.";

/// Which side speaks TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsSide {
    /// The sentinel listens on a `tls-port`; the data node is plain.
    Sentinel,
    /// The data node is reached on its `tls-port`; the sentinel is plain.
    DataNode,
}

pub struct LoneSentinel {
    pub data: RedisServer,
    sentinel: Watched,
    /// The sentinel's plain port, and its TLS port if it has one.
    port: u16,
    tls_port: Option<u16>,
    conf: PathBuf,
}

impl LoneSentinel {
    pub fn start(pki: &TestPki, side: TlsSide) -> Self {
        let data = match side {
            TlsSide::DataNode => RedisServer::start_tls(pki, false),
            TlsSide::Sentinel => RedisServer::start(),
        };
        let watched = match side {
            TlsSide::DataNode => data.tls_port(),
            TlsSide::Sentinel => data.port(),
        };
        for _ in 0..5 {
            let port = free_port();
            let tls_port = (side == TlsSide::Sentinel).then(free_port);
            let conf = std::env::temp_dir().join(format!("inflight-lone-sentinel-{}-{port}.conf", std::process::id()));
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                 tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\ntls-auth-clients no\n",
                dir = std::env::temp_dir().display(),
                cert = pki.file("server.pem"),
                key = pki.file("server.key"),
                ca = pki.file("ca.pem"),
            );
            match tls_port {
                Some(tls_port) => text += &format!("tls-port {tls_port}\n"),
                None => text += "tls-replication yes\n",
            }
            text += &format!(
                "sentinel monitor {MASTER} 127.0.0.1 {watched} 1\nsentinel down-after-milliseconds {MASTER} 5000\n"
            );
            std::fs::write(&conf, text).expect("write the sentinel's configuration");
            let args = vec![conf.to_str().expect("utf-8 temp dir").to_string(), "--sentinel".into()];
            if let Some(sentinel) = Watched::spawn(&args, port, INSTALL_HINT) {
                return Self {
                    data,
                    sentinel,
                    port,
                    tls_port,
                    conf,
                };
            }
            let _ = std::fs::remove_file(&conf);
        }
        panic!("a sentinel did not start on free loopback ports after 5 tries");
    }

    /// The URL a limiter reaches the sentinel by: `rediss://` on its TLS
    /// port, else `redis://`.
    pub fn sentinel_url(&self) -> String {
        match self.tls_port {
            Some(tls_port) => format!("rediss://localhost:{tls_port}"),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }
}

impl Drop for LoneSentinel {
    fn drop(&mut self) {
        self.sentinel.kill();
        let _ = std::fs::remove_file(&self.conf);
    }
}
