//! Protocol stories of a cluster-mode client against the model cluster:
//! hosts `127.0.0.1:7000+i`, each answering for its own slots by Redis's
//! rules; every byte delivered at once, time moved by hand.

use std::collections::HashMap;
use std::time::Instant;

use super::{key, limit, ms, start};
use inflight_core::event::{Action, ConnectionId, Event, Lease, Outcome, RequestId, Unavailable};
use inflight_core::key::SubjectKeys;
use inflight_core::{Client, Config, Endpoint, Servers, Stats};
use inflight_testkit::model::{ModelConnection, RedisModel};
use inflight_testkit::model_cluster::{ClusterConnection, Migration, ModelCluster};

const BASE_PORT: u16 = 7000;

struct Bench {
    client: Client,
    model: RedisModel,
    cluster: ModelCluster,
    /// Open connections: the host they reach and its per-connection state.
    links: HashMap<ConnectionId, (usize, ModelConnection, ClusterConnection)>,
    /// Hosts that refuse connections.
    down: Vec<usize>,
    now: Instant,
    events: Vec<Event>,
    /// Every command name written, in order, for stories about what was sent.
    written: Vec<String>,
}

impl Bench {
    /// Three primaries (and a spare) with `subjects` each placed on the host given.
    fn new(placed: &[(&str, usize)], down: Vec<usize>) -> Self {
        let addresses = (0..4).map(|i| ("127.0.0.1".to_string(), BASE_PORT + i)).collect();
        let mut cluster = ModelCluster::new(addresses, 3);
        for (subject, host) in placed {
            cluster.assign(keys(subject).slot(), *host);
        }
        let seeds = (0..3).map(|i| endpoint(BASE_PORT + i)).collect();
        let config = Config {
            servers: Servers::Cluster { seeds, tls: false },
            ..super::config()
        };
        let now = start();
        let mut model = RedisModel::new(1_700_000_000_000);
        model.cluster_enabled = true;
        let mut bench = Self {
            client: Client::new(config, [3; 16], now).unwrap(),
            model,
            cluster,
            links: HashMap::new(),
            down,
            now,
            events: Vec::new(),
            written: Vec::new(),
        };
        bench.pump();
        bench
    }

    /// Delivers everything both ways until nothing moves.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(action) = self.client.poll_action() {
                moved = true;
                match action {
                    Action::Connect(id, endpoint) => {
                        let host = usize::from(endpoint.as_tcp().unwrap().1 - BASE_PORT);
                        if self.down.contains(&host) {
                            self.client.handle_closed(self.now, id);
                        } else {
                            self.links
                                .insert(id, (host, ModelConnection::new(), ClusterConnection::default()));
                            self.client.handle_connected(self.now, id);
                        }
                    }
                    Action::ConnectSentinel(id, _) => unreachable!("{id:?}: a cluster has no sentinels"),
                    Action::Close(id) => {
                        self.links.remove(&id);
                    }
                }
            }
            while let Some(transmit) = self.client.poll_transmit() {
                moved = true;
                self.record(&transmit.data);
                let Some((host, conn, cluster_conn)) = self.links.get_mut(&transmit.connection) else {
                    continue;
                };
                let (host, cluster) = (*host, &self.cluster);
                let replies = self
                    .model
                    .handle_each_with(conn, &transmit.data, |model, args| {
                        cluster.intercept(host, cluster_conn, model, args)
                    })
                    .unwrap();
                for reply in replies {
                    self.client.handle_input(self.now, transmit.connection, &reply);
                }
            }
            while let Some(event) = self.client.poll_event() {
                moved = true;
                self.events.push(event);
            }
            if !moved {
                return;
            }
        }
    }

    fn record(&mut self, data: &[u8]) {
        let mut reader = inflight_core::resp::ReplyReader::new(inflight_core::resp::ReplyLimits::TOPOLOGY);
        reader.push(data);
        while let Ok(Some(inflight_core::resp::Frame::Array(items))) = reader.next_frame() {
            if let Some(inflight_core::resp::Frame::BulkString(name)) = items.first() {
                self.written.push(String::from_utf8_lossy(name).to_ascii_uppercase());
            }
        }
    }

    fn advance(&mut self, by: std::time::Duration) {
        self.now += by;
        self.model.now_ms += by.as_millis() as u64;
        self.client.handle_timeout(self.now);
        self.pump();
    }

    /// `subject`'s slot starts moving from `from` to `to` (its keys already
    /// moved, or not yet).
    fn migrate(&mut self, subject: &str, from: usize, to: usize, keys_moved: bool) {
        self.cluster.migration = Some(Migration {
            slot: keys(subject).slot(),
            from,
            to,
            keys_moved,
        });
    }

    fn acquire(&mut self, subject: &str) -> RequestId {
        let request = self.client.acquire(self.now, &key("t", subject), limit(2));
        self.pump();
        request
    }

    fn outcome(&self, request: RequestId) -> Option<&Outcome> {
        self.events.iter().find_map(|event| match event {
            Event::Acquired(r, outcome) if *r == request => Some(outcome),
            _ => None,
        })
    }

    fn granted(&self, request: RequestId) -> Lease {
        match self.outcome(request) {
            Some(Outcome::Granted(lease)) => lease.clone(),
            other => panic!("{request:?}: {other:?}"),
        }
    }

    fn live(&mut self, subject: &str) -> usize {
        self.model.live_leases(keys(subject).leases()).len()
    }

    fn stats(&self) -> Stats {
        self.client.stats()
    }
}

fn keys(subject: &str) -> SubjectKeys {
    SubjectKeys::new("inflight", &key("t", subject))
}

fn endpoint(port: u16) -> Endpoint {
    Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

fn no_trouble(stats: Stats) {
    assert_eq!(
        (stats.compensations, stats.connections_replaced, stats.unavailable),
        (0, 0, 0),
        "{stats:?}"
    );
}

#[test]
fn each_subject_goes_straight_to_its_primary() {
    let mut bench = Bench::new(&[("a", 0), ("b", 1), ("c", 2)], vec![]);
    for subject in ["a", "b", "c"] {
        let request = bench.acquire(subject);
        bench.granted(request);
        assert_eq!(bench.live(subject), 1);
    }
    assert_eq!(bench.client.connections().filter(|c| c.2).count(), 3);
    assert_eq!((bench.stats().moved, bench.stats().asked), (0, 0));
    no_trouble(bench.stats());
}

#[test]
fn a_moved_slot_is_followed_without_compensating_or_retiring() {
    let mut bench = Bench::new(&[("a", 0), ("b", 1)], vec![]);
    let held = bench.acquire("a");
    let lease = bench.granted(held);
    // The slot moves to host 1 behind the client's back (keys and all).
    bench.migrate("a", 0, 1, true);
    bench.cluster.finish_migration();
    let second = bench.acquire("a");
    bench.granted(second);
    assert_eq!(bench.live("a"), 2, "one lease each, the limit counted across the move");
    let third = bench.acquire("a");
    assert_eq!(bench.outcome(third), Some(&Outcome::Exceeded));
    assert_eq!(bench.stats().moved, 1, "one MOVED, then the table knows");
    assert!(bench.stats().topology_refreshes >= 1);
    // The lease granted before the move is released where the slot lives now.
    bench.client.release(bench.now, lease);
    bench.pump();
    assert_eq!(bench.live("a"), 1);
    no_trouble(bench.stats());
}

#[test]
fn a_migrating_slot_is_asked_for_once_then_tried_again_until_it_settles() {
    let mut bench = Bench::new(&[("a", 0), ("b", 1)], vec![]);
    let first = bench.acquire("a");
    bench.granted(first);
    bench.migrate("a", 0, 1, false);
    // The lease set is on the source, its tombstone key is not: TRYAGAIN.
    let request = bench.acquire("a");
    assert_eq!(bench.outcome(request), None, "held back, not failed");
    assert_eq!(bench.stats().try_again, 1);
    // The keys move: the source says ASK, the target (after ASKING) runs it,
    // unless the tombstone is missing there too (TRYAGAIN): either way the
    // request keeps trying within its timeout.
    bench.cluster.migration.as_mut().unwrap().keys_moved = true;
    bench.advance(ms(25));
    assert!(bench.stats().asked >= 1, "{:?}", bench.stats());
    let asking = bench.written.iter().filter(|c| *c == "ASKING").count();
    assert_eq!(asking as u64, bench.stats().asked, "ASKING once per ASK");
    assert_eq!(bench.outcome(request), None);
    bench.cluster.finish_migration();
    bench.advance(ms(25));
    bench.granted(request);
    assert_eq!(bench.live("a"), 2);
    no_trouble(bench.stats());
}

#[test]
fn a_try_again_that_outlasts_the_timeout_is_unavailable_and_owes_nothing() {
    let mut bench = Bench::new(&[("a", 0)], vec![]);
    bench.acquire("a");
    bench.migrate("a", 0, 1, false);
    let request = bench.acquire("a");
    for _ in 0..20 {
        bench.advance(ms(25));
    }
    assert_eq!(
        bench.outcome(request),
        Some(&Outcome::Unavailable(Unavailable::Timeout))
    );
    assert_eq!(bench.stats().compensations, 0, "nothing ran: nothing to compensate");
    assert_eq!(bench.client.in_flight_calls(), 0);
}

#[test]
fn a_dead_seed_hands_over_to_the_next() {
    let mut bench = Bench::new(&[("a", 2)], vec![0]);
    assert!(
        !bench.events.iter().any(|e| matches!(e, Event::ConnectFailed(..))),
        "one seed of three failing is not a failure to connect"
    );
    let request = bench.acquire("a");
    bench.granted(request);
}

#[test]
fn every_seed_failing_is_reported_once() {
    let bench = Bench::new(&[], vec![0, 1, 2]);
    let failed = bench
        .events
        .iter()
        .filter(|e| matches!(e, Event::ConnectFailed(..)))
        .count();
    assert_eq!(failed, 1);
}

#[test]
fn redirects_for_gone_callers_are_dropped() {
    let mut bench = Bench::new(&[("a", 0)], vec![]);
    bench.acquire("a");
    bench.migrate("a", 0, 1, false);
    let request = bench.acquire("a"); // TRYAGAIN: waits
    bench.client.abandon(bench.now, request);
    bench.cluster.finish_migration();
    bench.advance(ms(50));
    assert_eq!(bench.outcome(request), None);
    assert_eq!(bench.client.in_flight_calls(), 0);
    assert_eq!(bench.stats().compensations, 0);
}
