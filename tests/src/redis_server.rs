//! A `redis-server` process owned by one test.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pki::TestPki;
use crate::resp_client::RespClient;

pub struct RedisServer {
    child: Child,
    port: u16,
    password: Option<String>,
    tls_port: Option<u16>,
}

const INSTALL_HINT: &str = "redis-server was not found on PATH. These tests run a real Redis. \
Install it with `apt-get update && apt-get install -y redis-server` (Debian/Ubuntu) \
or `brew install redis` (macOS), then run the tests again.";

impl RedisServer {
    /// Starts a server with no persistence on a free loopback port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server that requires `password` (legacy `requirepass`).
    pub fn start_with_password(password: &str) -> Self {
        let mut server = Self::start_with(&["--requirepass", password]);
        server.password = Some(password.to_string());
        server
    }

    /// Starts a server that also listens for TLS on [`RedisServer::tls_port`],
    /// with the certificates of `pki`, requiring client certificates when
    /// `client_certificates` is set. The plain port stays open so that tests
    /// can inspect the server without TLS.
    pub fn start_tls(pki: &TestPki, client_certificates: bool) -> Self {
        Self::start_inner(&[], Some((pki, client_certificates)))
    }

    /// Starts a server with extra command-line options.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_inner(extra, None)
    }

    /// Starts a server on `port` (from [`free_port`]), for a test that had a
    /// client point there before any server listened.
    pub fn start_at(port: u16) -> Self {
        Self::start_inner_at(&[], None, Some(port))
    }

    fn start_inner(extra: &[&str], tls: Option<(&TestPki, bool)>) -> Self {
        Self::start_inner_at(extra, tls, None)
    }

    fn start_inner_at(extra: &[&str], tls: Option<(&TestPki, bool)>, at: Option<u16>) -> Self {
        // A port can be taken between our probe and the server's bind; retry.
        for _ in 0..5 {
            let port = at.unwrap_or_else(free_port);
            let tls_port = tls.map(|_| free_port());
            let tls_args: Vec<String> = match (tls, tls_port) {
                (Some((pki, client_certificates)), Some(tls_port)) => vec![
                    "--tls-port".into(),
                    tls_port.to_string(),
                    "--tls-cert-file".into(),
                    pki.file("server.pem"),
                    "--tls-key-file".into(),
                    pki.file("server.key"),
                    "--tls-ca-cert-file".into(),
                    pki.file("ca.pem"),
                    "--tls-auth-clients".into(),
                    if client_certificates { "yes" } else { "no" }.into(),
                ],
                _ => Vec::new(),
            };
            // Its own RDB file, out of the working directory: a replica saves
            // the data it syncs there, and a server started later in the same
            // directory would load it (leases of an earlier run).
            let dbfilename = rdb_file(port);
            let child = Command::new("redis-server")
                .args([
                    "--dir",
                    &std::env::temp_dir().to_string_lossy(),
                    "--dbfilename",
                    &dbfilename,
                ])
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .args(["--protected-mode", "no", "--loglevel", "warning"])
                .args(extra)
                .args(&tls_args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let child = match child {
                Ok(child) => child,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
                Err(error) => panic!("could not start redis-server: {error}"),
            };
            let mut server = Self {
                child,
                port,
                password: extra
                    .iter()
                    .position(|a| *a == "--requirepass")
                    .map(|i| extra[i + 1].to_string()),
                tls_port,
            };
            if server.wait_ready(Duration::from_secs(10)) {
                return server;
            }
            let _ = server.child.kill();
        }
        panic!("redis-server did not start on a free loopback port after 5 tries");
    }

    fn wait_ready(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // exited: most likely the port was taken
            }
            if let Ok(mut client) = RespClient::connect(self.addr()) {
                if let Some(password) = &self.password {
                    let _ = client.call(&[b"AUTH", password.as_bytes()]);
                }
                if client.call(&[b"PING"]).is_ok() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Starts a replica of `primary` (`--replicaof`), read-only, and waits
    /// until its link to the primary is up.
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        let port = primary.port.to_string();
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &port]);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(inflight_core::resp::Frame::BulkString(info)) = replica.client().call(&[b"INFO", b"replication"])
            {
                if String::from_utf8_lossy(&info).contains("master_link_status:up") {
                    return replica;
                }
            }
            assert!(Instant::now() < deadline, "the replica never synced with its primary");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server and starts a fresh one, empty (no persistence), on
    /// the same port: every connection breaks, every key is gone.
    pub fn restart_empty(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kills the server: every connection breaks, and nothing listens on
    /// its port until [`start_again`](RedisServer::start_again).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a fresh, empty server on the port of a stopped one.
    pub fn start_again(&mut self) {
        *self = Self::start_at(self.port);
    }

    /// Freezes the server (`SIGSTOP`): connections stay open and the kernel
    /// keeps accepting and buffering, but nothing runs until [`resume`].
    ///
    /// [`resume`]: RedisServer::resume
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server run again (`SIGCONT`); it works through whatever
    /// was buffered meanwhile.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port of a server from [`RedisServer::start_tls`].
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("this server was started without TLS")
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    pub fn url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// A plain RESP connection to this server, authenticated if needed.
    pub fn client(&self) -> RespClient {
        let mut client = RespClient::connect(self.addr()).expect("connect to the test redis-server");
        if let Some(password) = &self.password {
            client.call(&[b"AUTH", password.as_bytes()]).expect("AUTH");
        }
        client
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(std::env::temp_dir().join(rdb_file(self.port)));
    }
}

/// The RDB file name of the server on `port` (in the temporary directory).
fn rdb_file(port: u16) -> String {
    format!("inflight-test-{}-{port}.rdb", std::process::id())
}

/// A loopback port nothing listens on (just now).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("bind a loopback port")
}
