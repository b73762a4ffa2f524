//! Fuzz target bodies as plain functions: `cargo fuzz` (`fuzz/`) and the
//! corpus replay in `cargo test` run the same code. A panic is a crash.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use inflight_core::event::{Action, Event, RequestId};
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::scripts::{ScriptKind, Scripts};
use inflight_core::slot::hash_tag;
use inflight_core::{Client, Config, ServerAddress};

use crate::pair::Pair;

mod sentinel;
pub use sentinel::sentinel_replies;

/// One step of a caller/network interleaving (see [`run_ops`]).
#[derive(Arbitrary, Clone, Debug)]
pub enum Op {
    Acquire {
        subject: u8,
        limit: u8,
    },
    /// An acquire of 2 or 3 units (at most the limit).
    AcquireWeighted {
        subject: u8,
        limit: u8,
        weight: u8,
    },
    AcquireBurst {
        subject: u8,
        limit: u8,
        count: u8,
    },
    Abandon(usize),
    ToClientThenAbandon(u16, usize),
    Release(usize),
    Renew(usize),
    ReleaseBurst(u8),
    ToServer(u16),
    ToClient(u16),
    Advance(u16),
    Accept,
    Refuse,
    Cut,
    LandGhosts,
    FlushScripts,
    /// One lease on each subject whose bit is set (two at least), all or
    /// nothing, each under `limit`.
    AcquireAll {
        subjects: u8,
        limit: u8,
    },
}

fn ops_config() -> Config {
    Config {
        // Longer than any run, so expiry never hides a leak.
        lease_ttl: Duration::from_secs(24 * 3600),
        max_in_flight: 6,
        ..Config::default()
    }
}

/// Drives the client through `ops` against the model, then heals everything
/// and checks that nothing leaked. The bench's ledger checks every event.
pub fn run_ops(ops: &[Op], start: Instant) {
    let mut pair = Pair::new(ops_config(), start);
    let mut outstanding = Vec::new();
    for op in ops {
        match *op {
            Op::Acquire { subject, limit } => {
                let limit = u32::from(limit % 4).max(1);
                outstanding.push(pair.acquire("ns", &format!("s{}", subject % 3), limit));
            }
            Op::AcquireWeighted { subject, limit, weight } => {
                let limit = u32::from(limit % 4).max(1);
                let weight = (u32::from(weight % 2) + 2).min(limit);
                outstanding.push(pair.acquire_weighted("ns", &format!("s{}", subject % 3), limit, weight));
            }
            Op::AcquireBurst { subject, limit, count } => {
                let limit = u32::from(limit % 4).max(1);
                let count = usize::from(count % 6) + 2;
                outstanding.extend(pair.acquire_burst("ns", &format!("s{}", subject % 3), limit, count));
            }
            Op::Abandon(i) if !outstanding.is_empty() => {
                let request = outstanding.remove(i % outstanding.len());
                pair.abandon(request);
            }
            Op::ToClientThenAbandon(n, i) if !outstanding.is_empty() => {
                let request = outstanding.remove(i % outstanding.len());
                pair.to_client_then_abandon(usize::from(n % 400) + 1, request);
            }
            Op::Release(i) if !pair.held.is_empty() => {
                let index = i % pair.held.len();
                if !pair.renewing(pair.held[index].id()) {
                    pair.release(index);
                }
            }
            Op::ReleaseBurst(n) if !pair.held.is_empty() => {
                // Held leases with a renewal in flight stay with their holder.
                let renewing = pair.held.iter().take_while(|l| !pair.renewing(l.id())).count();
                pair.release_burst(renewing.min(usize::from(n % 6) + 2));
            }
            Op::Renew(i) if !pair.held.is_empty() => {
                let index = i % pair.held.len();
                outstanding.push(pair.renew(index));
            }
            Op::ToServer(n) => pair.to_server(usize::from(n % 400) + 1),
            Op::ToClient(n) => pair.to_client(usize::from(n % 400) + 1),
            Op::Advance(ms) => pair.advance(Duration::from_millis(u64::from(ms % 2500))),
            Op::Accept => pair.accept(),
            Op::Refuse => pair.refuse(),
            Op::Cut => pair.cut(),
            Op::LandGhosts => pair.land_ghosts(),
            Op::FlushScripts => pair.server.flush_scripts(),
            Op::AcquireAll { subjects, limit } => {
                let limit = u32::from(limit % 4).max(1);
                let names: Vec<String> = (0..3)
                    .filter(|i| subjects & (1 << i) != 0)
                    .map(|i| format!("s{i}"))
                    .collect();
                if names.len() >= 2 {
                    let keys: Vec<(&str, &str, u32)> = names.iter().map(|name| ("ns", name.as_str(), limit)).collect();
                    outstanding.push(pair.acquire_all(&keys));
                }
            }
            Op::Abandon(_) | Op::ToClientThenAbandon(..) | Op::Release(_) | Op::Renew(_) | Op::ReleaseBurst(_) => {}
        }
    }
    // Heal: the network works and every timer runs out; then the bytes still
    // stuck on dead connections land, after the compensations that covered them.
    pair.settle();
    pair.land_ghosts();
    pair.settle();
    assert!(
        pair.unanswered().is_empty(),
        "requests without an outcome: {:?}",
        pair.unanswered()
    );
    pair.assert_no_leak();
    while !pair.held.is_empty() {
        pair.release(0);
    }
    pair.settle();
    pair.assert_no_leak();
    assert_eq!(pair.client.outstanding_releases(), 0);
}

/// `client_ops`: structured interleavings from raw bytes.
pub fn client_ops(data: &[u8], start: Instant) {
    let mut input = Unstructured::new(data);
    let ops: Vec<Op> = input
        .arbitrary_iter()
        .map(|it| it.flatten())
        .ok()
        .into_iter()
        .flatten()
        .take(400)
        .collect();
    run_ops(&ops, start);
}

/// `reply_decode`: a hostile server. After a real handshake, with requests
/// pending, arbitrary bytes arrive in arbitrary chunks. Whatever they say: no
/// panic, at most one outcome per request, none after abandon, every request
/// answered once its deadlines pass, and memory bounded by the reply limits.
pub fn reply_decode(data: &[u8], start: Instant) {
    let (chunking, payload) = data.split_first().map_or((0u8, &[][..]), |(c, rest)| (*c, rest));
    let mut client = Client::new(Config::default(), [7; 16], start).expect("valid config");
    let Some(Action::Connect(connection, _)) = client.poll_action() else {
        panic!("a new client asks for a connection");
    };
    client.handle_connected(start, connection);
    let handshake = handshake_replies(None);
    client.handle_input(start, connection, &handshake);
    assert_eq!(
        crate::connection(&client),
        Some((connection, true)),
        "the handshake completes"
    );
    while client.poll_transmit().is_some() {}
    while client.poll_event().is_some() {}
    let key = Key::new("ns", "s").expect("valid");
    let limit = NonZeroU32::new(2).expect("non-zero");
    let requests: Vec<RequestId> = (0..4).map(|_| client.acquire(start, &key, limit)).collect();
    client.abandon(start, requests[1]);
    let mut answered: HashMap<RequestId, usize> = HashMap::new();
    let mut check = |client: &mut Client| {
        while let Some(event) = client.poll_event() {
            if let Event::Acquired(request, _) = event {
                assert_ne!(request, requests[1], "an outcome after abandon");
                *answered.entry(request).or_default() += 1;
                assert_eq!(answered[&request], 1, "a second outcome for {request:?}");
            }
        }
        while client.poll_transmit().is_some() {}
        while client.poll_action().is_some() {}
    };
    let chunk = usize::from(chunking % 16) + 1;
    for part in payload.chunks(chunk) {
        client.handle_input(start, connection, part);
        check(&mut client);
    }
    // Every deadline passes: everyone still waiting hears something.
    let later = start + Duration::from_secs(10);
    client.handle_timeout(later);
    check(&mut client);
    for request in [requests[0], requests[2], requests[3]] {
        assert_eq!(answered.get(&request), Some(&1), "{request:?} never answered");
    }
}

/// `cluster_replies`: a hostile Redis Cluster. A cluster-mode client learns
/// a two-primary slot table, has acquires pending on both primaries, then
/// arbitrary bytes (redirects among them: `MOVED`, `ASK`, `TRYAGAIN`, topology
/// replies) arrive in arbitrary chunks on either connection. Whatever they
/// say: no panic, at most one outcome per request, none after abandon, and
/// every request answered once its deadlines pass.
pub fn cluster_replies(data: &[u8], start: Instant) {
    let (header, payload) = data.split_at(data.len().min(2));
    let chunking = header.first().copied().unwrap_or(0);
    let mut spread = header.get(1).copied().unwrap_or(0);
    let endpoint = |port| inflight_core::Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port,
    };
    let config = Config {
        servers: inflight_core::Servers::Cluster {
            seeds: vec![endpoint(7000)],
            tls: false,
        },
        ..Config::default()
    };
    let mut client = Client::new(config, [7; 16], start).expect("valid config");
    let mut connections = Vec::new();
    let mut answered: HashMap<RequestId, usize> = HashMap::new();
    let abandoned = std::cell::RefCell::new(Vec::new());
    // Opens what the client asks for, with an honest handshake, and checks
    // every event.
    let mut pump = |client: &mut Client, connections: &mut Vec<inflight_core::ConnectionId>, honest: bool| loop {
        let mut progressed = false;
        while let Some(action) = client.poll_action() {
            progressed = true;
            if let Action::Connect(id, _) = action {
                client.handle_connected(start, id);
                connections.push(id);
                if honest {
                    client.handle_input(start, id, &cluster_handshake());
                }
            }
        }
        while client.poll_transmit().is_some() {
            progressed = true;
        }
        while let Some(event) = client.poll_event() {
            progressed = true;
            if let Event::Acquired(request, _) = event {
                assert!(!abandoned.borrow().contains(&request), "an outcome after abandon");
                *answered.entry(request).or_default() += 1;
                assert_eq!(answered[&request], 1, "a second outcome for {request:?}");
            }
        }
        if !progressed {
            break;
        }
    };
    pump(&mut client, &mut connections, true);
    let limit = NonZeroU32::new(2).expect("non-zero");
    let requests: Vec<RequestId> = (0..6)
        .map(|n| client.acquire(start, &Key::new("ns", format!("s{n}")).expect("valid"), limit))
        .collect();
    abandoned.borrow_mut().push(requests[1]);
    client.abandon(start, requests[1]);
    pump(&mut client, &mut connections, true);
    let ready = client.connections().filter(|(_, _, ready)| *ready).count();
    assert_eq!(ready, 2, "both primaries are connected, with acquires pending on each");
    let chunk = usize::from(chunking % 16) + 1;
    for part in payload.chunks(chunk) {
        let target = connections[usize::from(spread) % connections.len()];
        spread = spread.rotate_left(1);
        client.handle_input(start, target, part);
        pump(&mut client, &mut connections, false);
    }
    // Every deadline passes: everyone still waiting hears something.
    let later = start + Duration::from_secs(10);
    client.handle_timeout(later);
    pump(&mut client, &mut connections, false);
    for request in requests.iter().filter(|r| **r != requests[1]) {
        assert_eq!(answered.get(request), Some(&1), "{request:?} never answered");
    }
}

/// The replies to a handshake, in the client's order: PING, ROLE, INFO,
/// `CLUSTER SHARDS` (the given reply) in a cluster, TIME, one SCRIPT LOAD
/// per script, and standalone the marker (sent once INFO is answered).
pub fn handshake_replies(shards: Option<&str>) -> Vec<u8> {
    let cluster = u8::from(shards.is_some());
    let info = format!(
        "# Server\r\nrun_id:{:040}\r\n# Replication\r\nmaster_replid:{:040}\r\n# Cluster\r\ncluster_enabled:{cluster}\r\n",
        1, 2
    );
    let mut replies = format!(
        "+PONG\r\n*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n${}\r\n{info}\r\n",
        info.len()
    );
    if let Some(shards) = shards {
        replies += shards;
    }
    replies += "*2\r\n$10\r\n1700000000\r\n$6\r\n000000\r\n";
    let scripts = Scripts::default();
    for kind in ScriptKind::LOADED {
        replies += &format!("$40\r\n{}\r\n", scripts.get(kind).sha);
    }
    if shards.is_none() {
        replies += "*2\r\n:0\r\n$6\r\nmarker\r\n";
    }
    replies.into_bytes()
}

/// The replies to a cluster handshake, with slots 0-8191 on port 7000 and
/// the rest on 7001.
fn cluster_handshake() -> Vec<u8> {
    let shard = |first: u16, last: u16, port: u16| {
        format!(
            "*4\r\n$5\r\nslots\r\n*2\r\n:{first}\r\n:{last}\r\n$5\r\nnodes\r\n*1\r\n*6\r\n\
             $4\r\nport\r\n:{port}\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
        )
    };
    let mut shards = String::from("*2\r\n");
    shards += &shard(0, 8191, 7000);
    shards += &shard(8192, 16383, 7001);
    handshake_replies(Some(&shards))
}

/// `handshake`: a hostile server across a reconnect. A client that held two
/// leases on a server it knew loses the connection; the next handshake (two
/// acquires waiting for it) is answered with arbitrary bytes in arbitrary
/// chunks: `ROLE`, `INFO`, the marker, the recovery writes and the acquires'
/// replies are all the fuzzer's. Whatever they say: no panic, at most one
/// outcome per request, every request answered once its deadlines pass,
/// nothing granted on a connection that never finished its handshake (a
/// replica is refused before it can admit), and a connection that found
/// lost data admits nothing before the leases held there were written back.
pub fn handshake(data: &[u8], start: Instant) {
    let (chunking, payload) = data.split_first().map_or((0u8, &[][..]), |(c, rest)| (*c, rest));
    let mut client = Client::new(Config::default(), [7; 16], start).expect("valid config");
    let Some(Action::Connect(first, _)) = client.poll_action() else {
        panic!("a new client asks for a connection");
    };
    client.handle_connected(start, first);
    client.handle_input(start, first, &handshake_replies(None));
    assert_eq!(
        crate::connection(&client),
        Some((first, true)),
        "the first handshake completes"
    );
    while client.poll_transmit().is_some() {}
    let key = Key::new("ns", "s").expect("valid");
    let limit = NonZeroU32::new(5).expect("non-zero");
    for _ in 0..2 {
        let request = client.acquire(start, &key, limit);
        while client.poll_transmit().is_some() {}
        let id = crate::plain_lease_id([7; 16], request).to_string();
        let grant = format!("*4\r\n:1\r\n${}\r\n{id}\r\n:1700000000000000\r\n:0\r\n", id.len());
        client.handle_input(start, first, grant.as_bytes());
    }
    assert_eq!(client.held_leases(), 2);
    while client.poll_event().is_some() {}
    client.handle_closed(start, first);
    let mut second = None;
    while let Some(action) = client.poll_action() {
        if let Action::Connect(id, _) = action {
            second = Some(id);
        }
    }
    let second = second.expect("a fresh connection is asked for");
    client.handle_connected(start, second);
    let requests: Vec<RequestId> = (0..2).map(|_| client.acquire(start, &key, limit)).collect();
    let mut answered: HashMap<RequestId, usize> = HashMap::new();
    let (mut ready, mut reasserted, mut lost) = (false, 0usize, None);
    let mut check = |client: &mut Client| {
        while let Some(event) = client.poll_event() {
            match event {
                Event::Connected(id) if id == second => ready = true,
                Event::DataLoss { held, .. } => lost = Some(held),
                Event::Reasserted { .. } => reasserted += 1,
                Event::Acquired(request, outcome) => {
                    *answered.entry(request).or_default() += 1;
                    assert_eq!(answered[&request], 1, "a second outcome for {request:?}");
                    if matches!(outcome, inflight_core::Outcome::Granted(_)) {
                        assert!(ready, "granted before the handshake finished");
                        if let Some(held) = lost {
                            assert_eq!(reasserted, held, "granted before the held leases were written back");
                        }
                    }
                }
                _ => {}
            }
        }
        while client.poll_transmit().is_some() {}
        while client.poll_action().is_some() {}
    };
    let chunk = usize::from(chunking % 16) + 1;
    for part in payload.chunks(chunk) {
        client.handle_input(start, second, part);
        check(&mut client);
    }
    let later = start + Duration::from_secs(10);
    client.handle_timeout(later);
    check(&mut client);
    for request in requests {
        assert_eq!(answered.get(&request), Some(&1), "{request:?} never answered");
    }
}

/// `key_encoding`: two arbitrary (namespace, subject) pairs. Distinct pairs get
/// distinct keys; every key has exactly one hash tag, shared by its tombstones.
pub fn key_encoding(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let mut next = || -> String { input.arbitrary().unwrap_or_default() };
    let (a, b) = ((next(), next()), (next(), next()));
    let build = |(ns, subject): &(String, String)| Key::new(ns.as_str(), subject.as_str()).ok();
    let (Some(key_a), Some(key_b)) = (build(&a), build(&b)) else {
        return;
    };
    let (keys_a, keys_b) = (
        SubjectKeys::new("inflight", &key_a),
        SubjectKeys::new("inflight", &key_b),
    );
    assert_eq!(
        a == b,
        keys_a.leases() == keys_b.leases(),
        "{a:?} and {b:?}: encoding is not injective"
    );
    for keys in [&keys_a, &keys_b] {
        let leases = keys.leases();
        assert_eq!(leases.iter().filter(|&&c| c == b'{').count(), 1, "{leases:?}");
        assert_eq!(leases.iter().filter(|&&c| c == b'}').count(), 1, "{leases:?}");
        let tag = hash_tag(leases).expect("a hash tag");
        let tombstone = keys.tombstone(&LeaseId::from_parts(1, 2));
        assert_eq!(hash_tag(&tombstone), Some(tag));
    }
}

/// `config_url`: URL and configuration parsing never panics, and whatever it
/// accepts can be used.
pub fn config_url(data: &[u8], start: Instant) {
    let mut input = Unstructured::new(data);
    let url: String = input.arbitrary().unwrap_or_default();
    if let Ok(address) = ServerAddress::parse(&url) {
        let reachable = match &address.endpoint {
            inflight_core::Endpoint::Tcp { host, port } => !host.is_empty() && *port != 0,
            inflight_core::Endpoint::Unix(path) => path.is_absolute(),
            other => panic!("an endpoint of a kind this check does not know: {other:?}"),
        };
        assert!(reachable, "{url:?} -> {address:?}");
    }
    let mut millis = || Duration::from_millis(input.arbitrary::<u32>().unwrap_or(0).into());
    let mut config = Config {
        lease_ttl: millis(),
        acquire_timeout: millis(),
        request_liveness: millis(),
        connect_timeout: millis(),
        ..Config::default()
    };
    config.max_in_flight = input.arbitrary::<u16>().unwrap_or(0).into();
    config.key_prefix = input.arbitrary().unwrap_or_default();
    config.release.max_attempts = input.arbitrary::<u8>().unwrap_or(0).into();
    let valid = config.validate().is_ok();
    assert_eq!(valid, Client::new(config, [0; 16], start).is_ok());
}
