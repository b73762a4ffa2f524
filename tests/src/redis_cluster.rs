//! A real Redis Cluster owned by one test binary: 3 primaries and 3
//! replicas of `redis-server --cluster-enabled yes` on free loopback ports,
//! joined by `redis-cli --cluster create`, with helpers to move a slot
//! under load, fail a primary over, or kill it. Node state lives in a
//! temporary directory that is removed when the cluster is dropped.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inflight_core::resp::Frame;

use crate::redis_server::free_port;
use crate::resp_client::RespClient;
use crate::watched::Watched;

const INSTALL_HINT: &str = "redis-server and redis-cli were not found on PATH. These tests run a real Redis \
Cluster. Install them with `apt-get update && apt-get install -y redis-server` (Debian/Ubuntu; redis-cli comes \
with it) or `brew install redis` (macOS), then run the tests again.";

/// `cluster-node-timeout` of the test cluster: a killed primary is failed
/// over about this long after it stops answering.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// One node of the cluster, a [`Watched`] process: a test binary that
/// keeps its cluster in a `static` (never dropped) leaves no server behind.
pub struct ClusterNode {
    process: Watched,
    port: u16,
    password: Option<String>,
    /// The TLS port, for a cluster from [`RedisCluster::start_tls`].
    tls_port: Option<u16>,
}

impl ClusterNode {
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    pub fn client(&self) -> RespClient {
        let mut client = RespClient::connect(self.addr()).expect("connect to a cluster node");
        if let Some(password) = &self.password {
            client.call(&[b"AUTH", password.as_bytes()]).expect("AUTH");
        }
        client
    }

    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// The TLS port of a node of [`RedisCluster::start_tls`].
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("this cluster was started without TLS")
    }

    /// SIGKILL.
    fn kill(&mut self) {
        self.process.kill();
    }
}

/// What `CLUSTER NODES` says of one node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// The id of its primary (replicas).
    pub primary_id: Option<String>,
    /// Inclusive slot ranges (primaries).
    pub slots: Vec<(u16, u16)>,
}

pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    dir: PathBuf,
    /// Extra options of every node.
    options: Vec<String>,
    password: Option<String>,
    /// Every node also listens for TLS, with these certificate files.
    tls: Option<TlsFiles>,
}

/// Certificate, key and CA files for TLS nodes.
#[derive(Clone)]
struct TlsFiles {
    cert: String,
    key: String,
    ca: String,
    /// The certificate nodes present to each other on the cluster bus,
    /// which always asks for one (the server's is for serverAuth only).
    client_cert: String,
    client_key: String,
}

impl RedisCluster {
    /// Starts 3 primaries with one replica each and waits until every node
    /// says `cluster_state:ok` and agrees on who serves every slot.
    pub fn start() -> Self {
        Self::start_with(3, 1)
    }

    pub fn start_with(primaries: usize, replicas: usize) -> Self {
        Self::start_inner(primaries, replicas, Vec::new(), None, None)
    }

    /// Primaries only, each also listening for TLS (clients only: the
    /// cluster bus and the plain port stay plain, so the fixture can watch
    /// it) with `pki`'s server certificate. Over TLS, `CLUSTER SHARDS` names
    /// each node's `tls-port` and redirects point there.
    pub fn start_tls(primaries: usize, pki: &crate::TestPki) -> Self {
        let client = |name: &str, pem: &str| {
            let path = std::path::Path::new(&pki.file("ca.pem")).with_file_name(name);
            std::fs::write(&path, pem).expect("write the bus certificate");
            path.to_str().expect("utf-8 temp dir").to_string()
        };
        let tls = TlsFiles {
            cert: pki.file("server.pem"),
            key: pki.file("server.key"),
            ca: pki.file("ca.pem"),
            client_cert: client("bus.pem", &pki.client_chain_pem),
            client_key: client("bus.key", &pki.client_key_pem),
        };
        Self::start_inner(primaries, 0, Vec::new(), None, Some(tls))
    }

    /// Primaries only, every node requiring `password` (`requirepass`, and
    /// `masterauth` for its replicas) and announcing itself by the host name
    /// `localhost` (`cluster-announce-hostname`, preferred endpoint type
    /// `hostname`): `CLUSTER SHARDS` and redirects then name `localhost`.
    pub fn start_with_password_and_hostnames(primaries: usize, password: &str) -> Self {
        let options = [
            "--requirepass",
            password,
            "--masterauth",
            password,
            "--cluster-announce-hostname",
            "localhost",
            "--cluster-preferred-endpoint-type",
            "hostname",
        ];
        let options = options.iter().map(|o| o.to_string()).collect();
        Self::start_inner(primaries, 0, options, Some(password.to_string()), None)
    }

    fn start_inner(
        primaries: usize,
        replicas: usize,
        options: Vec<String>,
        password: Option<String>,
        tls: Option<TlsFiles>,
    ) -> Self {
        let dir = std::env::temp_dir().join(format!("inflight-cluster-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).expect("create the cluster's directory");
        let count = primaries * (1 + replicas);
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
            options,
            password,
            tls,
        };
        for _ in 0..count {
            let node = cluster.spawn_node();
            cluster.nodes.push(node);
        }
        // redis-cli speaks TLS to a TLS cluster, at the TLS ports.
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port.unwrap_or(n.port)))
            .collect();
        let mut auth: Vec<&str> = match &cluster.password {
            Some(password) => vec!["-a", password, "--no-auth-warning"],
            None => Vec::new(),
        };
        if let Some(tls) = &cluster.tls {
            auth.extend(["--tls", "--cacert", tls.ca.as_str()]);
        }
        // redis-cli waits for the nodes to meet without a bound: give it one.
        let child = Command::new("redis-cli")
            .args(&auth)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!("{INSTALL_HINT}"),
            Err(error) => panic!("could not run redis-cli: {error}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for redis-cli") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("redis-cli --cluster create did not finish within 60 s (the nodes never met)");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "redis-cli --cluster create failed: {status}");
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
    }

    fn spawn_node(&self) -> ClusterNode {
        for _ in 0..5 {
            let (port, bus_port) = (free_port(), free_port());
            let tls_port = self.tls.as_ref().map(|_| free_port());
            let tls_args: Vec<String> = match (&self.tls, tls_port) {
                (Some(tls), Some(tls_port)) => [
                    "--tls-port",
                    &tls_port.to_string(),
                    "--tls-cert-file",
                    &tls.cert,
                    "--tls-key-file",
                    &tls.key,
                    "--tls-ca-cert-file",
                    &tls.ca,
                    "--tls-client-cert-file",
                    &tls.client_cert,
                    "--tls-client-key-file",
                    &tls.client_key,
                    "--tls-auth-clients",
                    "no",
                    // Nodes announce (and redirect to) their TLS ports only
                    // when the cluster itself speaks TLS.
                    "--tls-cluster",
                    "yes",
                    "--tls-replication",
                    "yes",
                ]
                .iter()
                .map(|a| a.to_string())
                .collect(),
                _ => Vec::new(),
            };
            let node_dir = self.dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("create a node's directory");
            let args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus_port.to_string(),
                "--cluster-config-file",
                "nodes.conf",
                // Slots of live primaries keep serving while another fails
                // over (the default refuses every slot meanwhile).
                "--cluster-require-full-coverage",
                "no",
                // Any replica may take over, however recent its last sync.
                "--cluster-replica-validity-factor",
                "0",
                "--cluster-node-timeout",
                &NODE_TIMEOUT.as_millis().to_string(),
                "--dir",
                node_dir.to_str().expect("utf-8 temp dir"),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--loglevel",
                "warning",
            ]
            .iter()
            .map(|arg| arg.to_string())
            .chain(self.options.iter().cloned())
            .chain(tls_args)
            .collect();
            if let Some(process) = Watched::spawn(&args, port, INSTALL_HINT) {
                return ClusterNode {
                    process,
                    port,
                    password: self.password.clone(),
                    tls_port,
                };
            }
        }
        panic!("a cluster node did not start on free loopback ports after 5 tries");
    }

    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// A seed URL (the first running node), with the password if any.
    pub fn url(&self) -> String {
        let node = self.nodes.iter().find(|n| n.is_running()).expect("a running node");
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}", node.port),
            None => format!("redis://127.0.0.1:{}", node.port),
        }
    }

    /// Every running node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    pub fn node(&self, port: u16) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// `CLUSTER NODES`, as the first running node sees it.
    pub fn topology(&self) -> Vec<NodeInfo> {
        let node = self.nodes.iter().find(|n| n.is_running()).expect("a running node");
        read_nodes(&mut node.client())
    }

    /// The port of the primary that serves `slot`.
    pub fn owner(&self, slot: u16) -> u16 {
        self.topology()
            .into_iter()
            .find(|n| n.primary && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|n| n.port)
            .expect("a primary serves every slot")
    }

    /// The slot of `key`, as the server computes it.
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let node = self.nodes.iter().find(|n| n.is_running()).expect("a running node");
        match node
            .client()
            .call(&[b"CLUSTER", b"KEYSLOT", key])
            .expect("CLUSTER KEYSLOT")
        {
            Frame::Integer(slot) => slot as u16,
            other => panic!("CLUSTER KEYSLOT answered {other:?}"),
        }
    }

    /// The ports of the running primaries.
    pub fn primaries(&self) -> Vec<u16> {
        self.topology()
            .into_iter()
            .filter(|n| n.primary && !n.failed && !n.slots.is_empty())
            .map(|n| n.port)
            .collect()
    }

    /// A primary with a live replica (an earlier test may have killed the
    /// replica of another), for a test that fails one over. A test running
    /// beside this one may be failing a primary over right now: the demoted
    /// node takes a moment to rejoin as a replica, so this waits (bounded).
    pub fn primary_with_replica(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let topology = self.topology();
            let live = |n: &&NodeInfo| !n.failed && self.node(n.port).is_running();
            let replicas: Vec<&NodeInfo> = topology.iter().filter(|n| !n.primary).filter(live).collect();
            let found = topology
                .iter()
                .filter(|n| n.primary && !n.slots.is_empty())
                .filter(live)
                .find(|p| replicas.iter().any(|r| r.primary_id.as_deref() == Some(p.id.as_str())));
            if let Some(primary) = found {
                return primary.port;
            }
            assert!(Instant::now() < deadline, "no primary has a live replica after 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A replica of the primary at `primary`. After an earlier test's
    /// failover the demoted node takes a moment to rejoin as a replica:
    /// waits (bounded) until the primary has one.
    pub fn replica_of(&self, primary: u16) -> u16 {
        let topology = self.topology();
        let id = &topology.iter().find(|n| n.port == primary).expect("the primary").id;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let node = self.nodes.iter().find(|n| n.is_running()).expect("a running node");
            let lines = match node.client().call(&[b"CLUSTER", b"REPLICAS", id.as_bytes()]) {
                Ok(Frame::Array(lines)) => lines,
                other => panic!("CLUSTER REPLICAS answered {other:?}"),
            };
            let live = lines.iter().find_map(|line| match line {
                Frame::BulkString(line) => Some(parse_node_line(std::str::from_utf8(line).expect("text")))
                    .filter(|replica| !replica.failed && self.node(replica.port).is_running()),
                _ => None,
            });
            if let Some(replica) = live {
                return replica.port;
            }
            assert!(
                Instant::now() < deadline,
                "the primary at {primary} has no replica after 15 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Moves `slot` to the primary at `to`, keys included, the way
    /// `redis-cli --cluster reshard` does: IMPORTING on the target, MIGRATING
    /// on the source, `MIGRATE` of its keys in batches, then `SETSLOT NODE`.
    /// `between_batches` runs after every batch (the test's load goes on
    /// meanwhile, and sees `ASK` and `TRYAGAIN`).
    pub fn migrate_slot(&self, slot: u16, to: u16, mut between_batches: impl FnMut()) {
        let topology = self.topology();
        let from = self.owner(slot);
        assert_ne!(from, to, "the slot is already there");
        let id = |port: u16| topology.iter().find(|n| n.port == port).expect("a node").id.clone();
        let (from_id, to_id) = (id(from), id(to));
        let slot_text = slot.to_string();
        let mut source = self.node(from).client();
        let mut target = self.node(to).client();
        expect_ok(target.call(&[
            b"CLUSTER",
            b"SETSLOT",
            slot_text.as_bytes(),
            b"IMPORTING",
            from_id.as_bytes(),
        ]));
        expect_ok(source.call(&[
            b"CLUSTER",
            b"SETSLOT",
            slot_text.as_bytes(),
            b"MIGRATING",
            to_id.as_bytes(),
        ]));
        between_batches();
        loop {
            let keys = match source.call(&[b"CLUSTER", b"GETKEYSINSLOT", slot_text.as_bytes(), b"1"]) {
                Ok(Frame::Array(keys)) => keys,
                other => panic!("GETKEYSINSLOT answered {other:?}"),
            };
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            for key in keys {
                let Frame::BulkString(key) = key else { continue };
                let reply = source.call(&[
                    b"MIGRATE",
                    b"127.0.0.1",
                    port.as_bytes(),
                    &key,
                    b"0",
                    b"5000",
                    b"REPLACE",
                ]);
                // NOKEY: the key expired or was deleted meanwhile.
                assert!(
                    matches!(&reply, Ok(Frame::SimpleString(_))),
                    "MIGRATE answered {reply:?}"
                );
                between_batches();
            }
        }
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            let reply = node
                .client()
                .call(&[b"CLUSTER", b"SETSLOT", slot_text.as_bytes(), b"NODE", to_id.as_bytes()]);
            // A replica may refuse; the primaries' word is what counts.
            let _ = reply;
        }
        self.wait_healthy(Duration::from_secs(30));
    }

    /// `CLUSTER FAILOVER` on a replica of `primary`: a coordinated switch,
    /// no write lost. Returns the new primary's port.
    pub fn failover(&self, primary: u16) -> u16 {
        let replica = self.replica_of(primary);
        self.wait_synced(replica);
        expect_ok(self.node(replica).client().call(&[b"CLUSTER", b"FAILOVER"]));
        // A coordinated failover gives up after its own timeout when the
        // machine is loaded (seen once in CI): ask again, then force it.
        for retry in [
            &[b"CLUSTER".as_slice(), b"FAILOVER"][..],
            &[b"CLUSTER", b"FAILOVER", b"FORCE"],
        ] {
            if self.promoted_within(replica, Duration::from_secs(10)) {
                break;
            }
            let _ = self.node(replica).client().call(retry);
        }
        self.wait_promoted(replica)
    }

    /// Whether `replica` serves slots as a primary within `within`.
    fn promoted_within(&self, replica: u16, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self
                .topology()
                .iter()
                .any(|n| n.port == replica && n.primary && !n.slots.is_empty())
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Kills the primary at `port` (SIGKILL): its replica is promoted after
    /// about [`NODE_TIMEOUT`]. Returns the new primary's port once the
    /// cluster is healthy again.
    pub fn kill_primary(&mut self, port: u16) -> u16 {
        let replica = self.replica_of(port);
        self.wait_synced(replica);
        self.nodes.iter_mut().find(|n| n.port == port).expect("a node").kill();
        self.wait_promoted(replica)
    }

    /// Waits until `replica` serves slots as a primary and the cluster is
    /// healthy again; returns its port.
    fn wait_promoted(&self, replica: u16) -> u16 {
        // Generous: a loaded 2-core machine (a CI build alongside) has taken
        // longer than 30 s to elect.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self
                .topology()
                .iter()
                .any(|n| n.port == replica && n.primary && !n.slots.is_empty())
            {
                self.wait_healthy(Duration::from_secs(30));
                return replica;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the replica at {replica} did not take over");
    }

    /// Waits until the replica at `port` is in sync with its primary.
    fn wait_synced(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Frame::BulkString(info)) = self.node(port).client().call(&[b"INFO", b"replication"]) {
                if String::from_utf8_lossy(&info).contains("master_link_status:up") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the replica at {port} did not sync");
    }

    /// Waits until every running node says `cluster_state:ok` and sees the
    /// same owner for every slot.
    pub fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        while Instant::now() < deadline {
            match self.health() {
                Ok(()) => return,
                Err(why) => last = why,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not become healthy: {last}");
    }

    fn health(&self) -> Result<(), String> {
        let mut views = Vec::new();
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            if RespClient::connect(node.addr()).is_err() {
                return Err(format!("node {} does not answer", node.port));
            }
            let mut client = node.client();
            let info = match client.call(&[b"CLUSTER", b"INFO"]) {
                Ok(Frame::BulkString(info)) => String::from_utf8_lossy(&info).into_owned(),
                other => return Err(format!("CLUSTER INFO answered {other:?}")),
            };
            if !info.contains("cluster_state:ok") {
                return Err(format!("node {} is not ok", node.port));
            }
            let mut owners: Vec<(u16, u16, u16)> = read_nodes(&mut client)
                .into_iter()
                .filter(|n| n.primary && !n.failed)
                .flat_map(|n| n.slots.into_iter().map(move |(a, b)| (a, b, n.port)))
                .collect();
            owners.sort();
            let covered: u32 = owners.iter().map(|(a, b, _)| u32::from(b - a) + 1).sum();
            if covered != 16384 {
                return Err(format!("node {} sees {covered} slots served", node.port));
            }
            views.push(owners);
        }
        if views.windows(2).any(|pair| pair[0] != pair[1]) {
            return Err("nodes disagree on the slot table".into());
        }
        Ok(())
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear(); // each node is killed as it drops
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn expect_ok(reply: std::io::Result<Frame>) {
    match reply {
        Ok(Frame::SimpleString(ok)) if &ok[..] == b"OK" => {}
        other => panic!("expected OK, got {other:?}"),
    }
}

fn read_nodes(client: &mut RespClient) -> Vec<NodeInfo> {
    let text = match client.call(&[b"CLUSTER", b"NODES"]) {
        Ok(Frame::BulkString(text)) => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("CLUSTER NODES answered {other:?}"),
    };
    text.lines().filter(|l| !l.is_empty()).map(parse_node_line).collect()
}

/// `<id> <ip:port@cport> <flags> <primary> <ping> <pong> <epoch> <link> <slot>…`
fn parse_node_line(line: &str) -> NodeInfo {
    let fields: Vec<&str> = line.split(' ').collect();
    let port = fields[1]
        .split('@')
        .next()
        .and_then(|addr| addr.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .expect("a node address");
    let flags = fields[2];
    let slots = fields[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .map(|s| match s.split_once('-') {
            Some((a, b)) => (a.parse().expect("slot"), b.parse().expect("slot")),
            None => {
                let slot = s.parse().expect("slot");
                (slot, slot)
            }
        })
        .collect();
    NodeInfo {
        id: fields[0].to_string(),
        port,
        primary: flags.contains("master"),
        failed: flags.contains("fail") && !flags.contains("fail?"),
        primary_id: Some(fields[3].to_string()).filter(|id| id != "-"),
        slots,
    }
}
