//! A real Redis Sentinel deployment owned by one test binary: one primary
//! and two replicas of `redis-server`, watched by three sentinels
//! (`redis-server sentinel.conf --sentinel`, quorum 2) on free loopback
//! ports, with helpers to fail the primary over (`SENTINEL FAILOVER`), kill
//! it (an unplanned failover after [`DOWN_AFTER`]), and stop or start a
//! sentinel. Sentinel rewrites its configuration file, so each sentinel has
//! its own, in a temporary directory removed when the set is dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use inflight_core::resp::Frame;

use crate::redis_server::free_port;
use crate::resp_client::RespClient;
use crate::watched::Watched;

/// The name the sentinels monitor the primary under.
pub const MASTER: &str = "mymaster";

/// `down-after-milliseconds`: a primary that stops answering is failed
/// over about this long after.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

const INSTALL_HINT: &str = "redis-server was not found on PATH. These tests run a real Redis Sentinel \
deployment (sentinels run from the same binary, `redis-server sentinel.conf --sentinel`). Install it with \
`apt-get update && apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS), then \
run the tests again.";

struct Process {
    process: Option<Watched>,
    port: u16,
}

pub struct SentinelSet {
    dir: PathBuf,
    /// The data nodes; which is the primary changes with failovers.
    data: Vec<Process>,
    sentinels: Vec<Process>,
}

impl SentinelSet {
    /// Starts the primary, its two replicas and three sentinels, and waits
    /// until the sentinels know each other and both replicas.
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("inflight-sentinel-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("create the sentinels' directory");
        let mut set = Self {
            dir,
            data: Vec::new(),
            sentinels: Vec::new(),
        };
        let primary = set.spawn_data(None);
        set.data.push(primary);
        let primary_port = set.data[0].port;
        for _ in 0..2 {
            let replica = set.spawn_data(Some(primary_port));
            set.data.push(replica);
        }
        for _ in 0..3 {
            let sentinel = set.spawn_sentinel(None, primary_port);
            set.sentinels.push(sentinel);
        }
        set.wait_healthy(Duration::from_secs(30));
        set
    }

    fn spawn_data(&self, replica_of: Option<u16>) -> Process {
        for _ in 0..5 {
            let port = free_port();
            if let Some(process) = self.run_data(port, replica_of) {
                return Process {
                    process: Some(process),
                    port,
                };
            }
        }
        panic!("a data node did not start on free loopback ports after 5 tries");
    }

    fn run_data(&self, port: u16, replica_of: Option<u16>) -> Option<Watched> {
        // Each node's RDB file in the set's directory: a replica saves what
        // it syncs, which must not land in (and be loaded from) the working
        // directory of a later run.
        let dbfilename = format!("dump-{port}.rdb");
        let dir = self.dir.to_string_lossy();
        let mut args: Vec<String> = [
            "--dir",
            &dir,
            "--dbfilename",
            &dbfilename,
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--loglevel",
            "warning",
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
        ]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
        if let Some(primary) = replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), primary.to_string()]);
        }
        Watched::spawn(&args, port, INSTALL_HINT)
    }

    /// A sentinel on `port` (or a free one) watching the primary on
    /// `primary`, with a configuration file of its own.
    fn spawn_sentinel(&self, port: Option<u16>, primary: u16) -> Process {
        for _ in 0..5 {
            let port = port.unwrap_or_else(free_port);
            let conf = self.dir.join(format!("sentinel-{port}.conf"));
            if !conf.exists() {
                let text = format!(
                    "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                     sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {MASTER} {down}\n\
                     sentinel failover-timeout {MASTER} 5000\n\
                     sentinel parallel-syncs {MASTER} 2\n",
                    dir = self.dir.display(),
                    down = DOWN_AFTER.as_millis(),
                );
                std::fs::write(&conf, text).expect("write a sentinel's configuration");
            }
            let args = vec![conf.to_str().expect("utf-8 temp dir").to_string(), "--sentinel".into()];
            if let Some(process) = Watched::spawn(&args, port, INSTALL_HINT) {
                return Process {
                    process: Some(process),
                    port,
                };
            }
            let _ = std::fs::remove_file(&conf);
        }
        panic!("a sentinel did not start on free loopback ports after 5 tries");
    }

    /// `redis+sentinel://` with every sentinel (running or not).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// Each sentinel as a `redis://` URL, for `Limiter::sentinel_builder`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The data nodes' ports.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(|d| d.port).collect()
    }

    /// A plain connection to the data node on `port`.
    pub fn client(port: u16) -> RespClient {
        RespClient::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).expect("connect to a data node")
    }

    /// What `ROLE` says on `port` (`master`, `slave`), if it answers.
    pub fn role(port: u16) -> Option<String> {
        let mut client = RespClient::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).ok()?;
        match client.call(&[b"ROLE"]).ok()? {
            Frame::Array(items) => match items.first() {
                Some(Frame::BulkString(role)) => Some(String::from_utf8_lossy(role).into_owned()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The primary as the first running sentinel names it.
    pub fn primary(&self) -> u16 {
        self.named_by_all().expect("a running sentinel names a primary")
    }

    /// The primary every running sentinel names, if they agree.
    fn named_by_all(&self) -> Option<u16> {
        let mut named = None;
        for sentinel in self.sentinels.iter().filter(|s| s.process.is_some()) {
            let port = Self::ask(
                sentinel.port,
                &[b"SENTINEL", b"get-master-addr-by-name", MASTER.as_bytes()],
            )
            .and_then(|frame| match frame {
                Frame::Array(items) => match items.get(1) {
                    Some(Frame::BulkString(port)) => std::str::from_utf8(port).ok()?.parse::<u16>().ok(),
                    _ => None,
                },
                _ => None,
            })?;
            if named.is_some_and(|named| named != port) {
                return None;
            }
            named = Some(port);
        }
        named
    }

    fn ask(sentinel: u16, command: &[&[u8]]) -> Option<Frame> {
        let mut client = RespClient::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, sentinel))).ok()?;
        client.call(command).ok()
    }

    /// A field of `SENTINEL master <name>` on `sentinel`.
    fn master_field(sentinel: u16, field: &str) -> Option<String> {
        let Frame::Array(items) = Self::ask(sentinel, &[b"SENTINEL", b"master", MASTER.as_bytes()])? else {
            return None;
        };
        items.chunks(2).find_map(|pair| match pair {
            [Frame::BulkString(name), Frame::BulkString(value)] if &name[..] == field.as_bytes() => {
                Some(String::from_utf8_lossy(value).into_owned())
            }
            _ => None,
        })
    }

    /// Waits until every running sentinel names the same primary, which
    /// says `ROLE` master and has both replicas online, sees it up with
    /// both replicas, and knows the other running sentinels.
    pub fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let running = self.sentinels.iter().filter(|s| s.process.is_some()).count();
        loop {
            if self.healthy(running) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinel deployment did not settle within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn healthy(&self, running: usize) -> bool {
        let Some(primary) = self.named_by_all() else {
            return false;
        };
        if Self::role(primary).as_deref() != Some("master") {
            return false;
        }
        let Ok(Frame::BulkString(info)) = Self::client(primary).call(&[b"INFO", b"replication"]) else {
            return false;
        };
        let info = String::from_utf8_lossy(&info);
        if !info.contains("connected_slaves:2") || info.matches("state=online").count() != 2 {
            return false;
        }
        self.sentinels.iter().filter(|s| s.process.is_some()).all(|sentinel| {
            Self::master_field(sentinel.port, "flags").as_deref() == Some("master")
                && Self::master_field(sentinel.port, "num-slaves").as_deref() == Some("2")
                && Self::master_field(sentinel.port, "num-other-sentinels")
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|n| n + 1 >= running)
        })
    }

    /// Waits until every running sentinel names a primary other than
    /// `old` and that node says it is one: the new primary's port.
    fn wait_switch(&self, old: u16, within: Duration) -> u16 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(new) = self.named_by_all().filter(|new| *new != old) {
                if Self::role(new).as_deref() == Some("master") {
                    return new;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not switch within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A planned failover (`SENTINEL FAILOVER`): returns the new primary
    /// once every sentinel names it, then waits for the set to settle.
    pub fn failover(&self) -> u16 {
        let old = self.primary();
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.process.is_some())
            .expect("a running sentinel");
        let reply = Self::ask(sentinel.port, &[b"SENTINEL", b"FAILOVER", MASTER.as_bytes()]);
        assert!(
            matches!(reply, Some(Frame::SimpleString(_))),
            "SENTINEL FAILOVER refused: {reply:?}"
        );
        let new = self.wait_switch(old, Duration::from_secs(30));
        self.wait_healthy(Duration::from_secs(30));
        new
    }

    /// Kills the primary (SIGKILL): the sentinels fail it over after
    /// [`DOWN_AFTER`]. Returns the new primary once they all name it; the
    /// old one is then started again, empty, as its replica, and the set
    /// settles.
    pub fn kill_primary(&mut self) -> u16 {
        let old = self.primary();
        let node = self
            .data
            .iter_mut()
            .find(|d| d.port == old)
            .expect("the primary is ours");
        if let Some(mut process) = node.process.take() {
            process.kill();
        }
        let new = self.wait_switch(old, Duration::from_secs(30));
        let restarted = self
            .run_data(old, Some(new))
            .expect("restart the old primary as a replica");
        let node = self
            .data
            .iter_mut()
            .find(|d| d.port == old)
            .expect("the primary is ours");
        node.process = Some(restarted);
        self.wait_healthy(Duration::from_secs(30));
        new
    }

    /// Stops sentinel `index` (SIGKILL).
    pub fn stop_sentinel(&mut self, index: usize) {
        if let Some(mut process) = self.sentinels[index].process.take() {
            process.kill();
        }
    }

    /// Starts sentinel `index` again, on its port, from its (rewritten)
    /// configuration file.
    pub fn start_sentinel(&mut self, index: usize) {
        let port = self.sentinels[index].port;
        // Asked of the data nodes: no sentinel may be running.
        let primary = *self
            .data_ports()
            .iter()
            .find(|port| Self::role(**port).as_deref() == Some("master"))
            .expect("a data node is the primary");
        let sentinel = self.spawn_sentinel(Some(port), primary);
        self.sentinels[index] = sentinel;
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for process in self.sentinels.iter_mut().chain(self.data.iter_mut()) {
            if let Some(mut process) = process.process.take() {
                process.kill();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
