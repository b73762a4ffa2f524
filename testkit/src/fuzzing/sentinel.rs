//! `sentinel_replies`: a hostile sentinel. A client behind Redis Sentinel
//! hears whatever the fuzzer makes its sentinels say: answers naming the
//! primary or a replica, `+switch-master` messages, sentinel lists, raw
//! bytes, closed connections, and time passing, between acquires. The data
//! nodes are honest: one is a primary, one a replica. Whatever the
//! sentinels say: no panic, no connection to the replica ever made ready,
//! nothing but the handshake's reads ever sent to it, at most one outcome
//! per request, and every request answered once its deadlines pass.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use inflight_core::event::{Action, ConnectionId, Event, RequestId, Transmit};
use inflight_core::key::Key;
use inflight_core::resp::{Frame, ReplyLimits, ReplyReader};
use inflight_core::{Client, Config, Endpoint, Servers};

use super::handshake_replies;

const PRIMARY: u16 = 7001;
const REPLICA: u16 = 7002;
const SENTINELS: [u16; 3] = [26379, 26380, 26381];

/// What a replica may be sent before its `ROLE` answer refuses it: reads,
/// and `SCRIPT LOAD` (which writes no data).
const READS: [&[u8]; 8] = [
    b"AUTH", b"HELLO", b"SELECT", b"PING", b"ROLE", b"INFO", b"TIME", b"SCRIPT",
];

fn tcp(port: u16) -> Endpoint {
    Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

fn port_of(endpoint: &Endpoint) -> Option<u16> {
    match endpoint {
        Endpoint::Tcp { port, .. } => Some(*port),
        _ => None,
    }
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

fn array(items: &[&str]) -> String {
    items
        .iter()
        .fold(format!("*{}\r\n", items.len()), |out, item| out + &bulk(item))
}

/// What the fuzzer's sentinels can say, besides raw bytes.
fn said(what: u8) -> String {
    let node = |n: u8| if n.is_multiple_of(2) { PRIMARY } else { REPLICA };
    match what % 6 {
        0 | 1 => array(&["127.0.0.1", &node(what / 6).to_string()]),
        2 => {
            let items: Vec<String> = SENTINELS[1..]
                .iter()
                .map(|port| array(&["name", "x", "ip", "127.0.0.1", "port", &port.to_string()]))
                .collect();
            format!("*{}\r\n{}", items.len(), items.concat())
        }
        3 => ["+switch-master", "+odown", "-odown"]
            .iter()
            .enumerate()
            .map(|(n, channel)| format!("*3\r\n{}{}:{}\r\n", bulk("subscribe"), bulk(channel), n + 1))
            .collect(),
        4 => {
            let to = node(what / 6);
            let text = format!("mymaster 127.0.0.1 {} 127.0.0.1 {to}", PRIMARY + REPLICA - to);
            array(&["message", "+switch-master", &text])
        }
        _ => array(&["pong", ""]),
    }
}

/// The replies a replica gives a handshake: its `ROLE` says so.
fn replica_handshake() -> Vec<u8> {
    let role = format!(
        "*5\r\n{}{}:{PRIMARY}\r\n{}:0\r\n",
        bulk("slave"),
        bulk("127.0.0.1"),
        bulk("connected")
    );
    let mut replies = b"+PONG\r\n".to_vec();
    replies.extend_from_slice(role.as_bytes());
    replies
}

struct Bench {
    now: Instant,
    sentinel: Option<ConnectionId>,
    primary: Option<ConnectionId>,
    replicas: HashSet<ConnectionId>,
    answered: HashMap<RequestId, usize>,
}

impl Bench {
    /// Opens what the client asks for (the data nodes answer honestly),
    /// and checks every event and every write.
    fn pump(&mut self, client: &mut Client) {
        loop {
            let mut progressed = false;
            while let Some(action) = client.poll_action() {
                progressed = true;
                match action {
                    Action::Connect(id, endpoint) => self.open(client, id, &endpoint, false),
                    Action::ConnectSentinel(id, endpoint) => self.open(client, id, &endpoint, true),
                    Action::Close(id) => {
                        self.replicas.remove(&id);
                        self.sentinel = self.sentinel.filter(|s| *s != id);
                        self.primary = self.primary.filter(|p| *p != id);
                    }
                }
            }
            while let Some(transmit) = client.poll_transmit() {
                progressed = true;
                if self.replicas.contains(&transmit.connection) {
                    only_reads(&transmit);
                }
            }
            while let Some(event) = client.poll_event() {
                progressed = true;
                if let Event::Acquired(request, _) = event {
                    let times = self.answered.entry(request).or_default();
                    *times += 1;
                    assert_eq!(*times, 1, "a second outcome for {request:?}");
                }
            }
            for (id, endpoint, ready) in client.connections() {
                assert!(
                    !(ready && port_of(endpoint) == Some(REPLICA)),
                    "connection {id:?} to the replica was made ready"
                );
            }
            if !progressed {
                break;
            }
        }
    }

    /// Opens `id`: a sentinel's socket for the fuzzer to speak on, or a
    /// data node's, answered honestly (a port that is neither is refused).
    fn open(&mut self, client: &mut Client, id: ConnectionId, endpoint: &Endpoint, sentinel: bool) {
        if sentinel {
            client.handle_connected(self.now, id);
            self.sentinel = Some(id);
            return;
        }
        match port_of(endpoint) {
            Some(PRIMARY) => {
                client.handle_connected(self.now, id);
                client.handle_input(self.now, id, &handshake_replies(None));
                self.primary = Some(id);
            }
            Some(REPLICA) => {
                self.replicas.insert(id);
                client.handle_connected(self.now, id);
                client.handle_input(self.now, id, &replica_handshake());
            }
            _ => client.handle_closed(self.now, id),
        }
    }
}

/// Every command in `transmit` is a read (or a script load).
fn only_reads(transmit: &Transmit) {
    let mut reader = ReplyReader::new(ReplyLimits::default());
    reader.push(&transmit.data);
    while let Ok(Some(frame)) = reader.next_frame() {
        let name = match &frame {
            Frame::Array(items) => match items.first() {
                Some(Frame::BulkString(name)) => name.to_ascii_uppercase(),
                _ => panic!("a command that is not an array of strings: {frame:?}"),
            },
            _ => panic!("a command that is not an array: {frame:?}"),
        };
        assert!(
            READS.contains(&&name[..]),
            "{} sent to a replica",
            String::from_utf8_lossy(&name)
        );
    }
}

pub fn sentinel_replies(data: &[u8], start: Instant) {
    let config = Config {
        servers: Servers::Sentinel {
            sentinels: SENTINELS[..1].iter().map(|port| tcp(*port)).collect(),
            master: "mymaster".into(),
            credentials: None,
        },
        ..Config::default()
    };
    let mut client = Client::new(config, [7; 16], start).expect("valid config");
    let mut bench = Bench {
        now: start,
        sentinel: None,
        primary: None,
        replicas: HashSet::new(),
        answered: HashMap::new(),
    };
    bench.pump(&mut client);
    let key = Key::new("ns", "s").expect("valid");
    let limit = NonZeroU32::new(5).expect("non-zero");
    let mut requests = Vec::new();
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        match op % 8 {
            0..=2 => {
                if let Some(sentinel) = bench.sentinel {
                    let text = said(bytes.next().unwrap_or(0));
                    client.handle_input(bench.now, sentinel, text.as_bytes());
                }
            }
            3 => {
                // Raw bytes from the sentinel: up to 32 of them.
                let raw: Vec<u8> = bytes.by_ref().take(usize::from(op / 8 % 32)).collect();
                if let Some(sentinel) = bench.sentinel {
                    client.handle_input(bench.now, sentinel, &raw);
                }
            }
            4 => {
                if let Some(sentinel) = bench.sentinel.take() {
                    client.handle_closed(bench.now, sentinel);
                }
            }
            5 => {
                if let Some(primary) = bench.primary.take() {
                    client.handle_closed(bench.now, primary);
                }
            }
            6 => {
                bench.now += Duration::from_millis(u64::from(op / 8) * 20);
                client.handle_timeout(bench.now);
            }
            _ => requests.push(client.acquire(bench.now, &key, limit)),
        }
        bench.pump(&mut client);
    }
    // Every deadline passes: everyone still waiting hears something.
    bench.now += Duration::from_secs(10);
    client.handle_timeout(bench.now);
    bench.pump(&mut client);
    for request in requests {
        assert_eq!(bench.answered.get(&request), Some(&1), "{request:?} never answered");
    }
}
