//! The madsim harness: the same simulated Redis and client replicas as the
//! turmoil harness, under a scheduler that picks a random ready task at every
//! poll. turmoil explores the network; madsim explores task interleavings:
//! which of a timer, a reply and a cancellation runs first.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight_tokio::{tcp_endpoint, Connector, Endpoint};
use madsim::net::NetSim;
use madsim::runtime::{Handle, Runtime};
use madsim::time::TimeHandle;

use crate::callers::{run_client, ClientPlan, S10_WINDOW};
use crate::ledger::Ledger;
use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::server::{promote_spare, serve_connection, start_migration, ServerState, PORT};
use crate::{check_no_ghosts, finish, Bug, Report};

const REDIS: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// The cluster scenario's hosts: three primaries and a spare replica.
const CLUSTER_HOSTS: usize = 4;
const CLUSTER_PRIMARIES: usize = 3;

/// Host `host`'s address: the server's (10.0.0.1) and the ones after it.
fn host_ip(host: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, 1 + host as u8)
}

fn host_name(host: usize) -> String {
    host_ip(host).to_string()
}

/// What the cluster announces: IPs (madsim dials only IPs).
fn cluster_addresses() -> Vec<(String, u16)> {
    (0..CLUSTER_HOSTS).map(|host| (host_name(host), PORT)).collect()
}

/// madsim's simulated TCP, plugged into the real driver.
#[derive(Clone, Copy)]
pub struct MadsimConnector;

impl Connector for MadsimConnector {
    type Io = madsim::net::TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> std::io::Result<Self::Io> {
        let (host, port) = tcp_endpoint(endpoint)?;
        let ip: IpAddr = host
            .parse()
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "the madsim harness dials IPs"))?;
        madsim::net::TcpStream::connect(SocketAddr::new(ip, port)).await
    }
}

fn elapsed() -> Duration {
    TimeHandle::current().elapsed()
}

fn elapsed_ms() -> u64 {
    elapsed().as_millis() as u64
}

/// Runs one seed of one scenario in a fresh madsim runtime.
pub fn run_seed(scenario: &'static Scenario, seed: u64, bug: Option<Bug>) -> Report {
    let runtime = Runtime::with_seed_and_config(seed, madsim::Config::default());
    runtime.block_on(fleet(scenario, seed, bug))
}

/// One run, inside the current madsim runtime (also what `#[madsim::test]` calls).
pub async fn fleet(scenario: &'static Scenario, seed: u64, bug: Option<Bug>) -> Report {
    let faults = scenario.faults;
    let ledger = Arc::new(Mutex::new(Ledger::new(scenario.keys, scenario.exact)));
    if scenario.faults.is_calm() {
        ledger
            .lock()
            .unwrap()
            .expect_hand_overs_heard(crate::callers::WAKE_BOUND, crate::callers::COMPOSITE_HAND_OVER_BOUND);
    }
    let mut server = ServerState::new(ledger.clone(), scenario.keys, elapsed_ms);
    server.bug = bug;
    if scenario.faults.lagging_failover {
        server = server.with_lagging_replica();
    }
    if scenario.cluster {
        server = server.with_cluster(cluster_addresses(), CLUSTER_PRIMARIES);
    }
    let handle = Handle::current();
    let net = NetSim::current();
    if faults.jitter {
        net.update_config(|c| c.send_latency = Duration::from_millis(1)..Duration::from_millis(12));
    }

    // One server, or a cluster's hosts (the first at the server's address).
    let hosts = if scenario.cluster { CLUSTER_HOSTS } else { 1 };
    let redis_nodes: Vec<_> = (0..hosts)
        .map(|host| {
            let redis_state = server.clone();
            handle
                .create_node()
                .name(if hosts == 1 {
                    "redis".to_string()
                } else {
                    format!("redis{host}")
                })
                .ip(host_ip(host).into())
                .init(move || {
                    let state = redis_state.clone();
                    async move {
                        let listener = madsim::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT))
                            .await
                            .expect("bind 6379");
                        while let Ok((stream, _)) = listener.accept().await {
                            madsim::task::spawn(serve_connection(stream, state.clone(), host));
                        }
                    }
                })
                .build()
        })
        .collect();
    let redis = &redis_nodes[0];

    let root = Rng::new(seed);
    let finished = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for index in 0..scenario.clients {
        let plan = ClientPlan {
            name: format!("client{index}"),
            url: format!("redis://{REDIS}:{PORT}"),
            fail_open: index == 0,
            // Client 1 asks for no fencing tokens: both kinds share keys.
            fencing: index != 1,
            scenario,
            rng: root.fork(1000 + index as u64),
            bugs: Bug::injected(bug),
            // madsim charges 50-100 ns of virtual time per task poll, so a
            // burst of work delays a wake-up by more than any timer tick.
            slack: Duration::from_millis(5),
            ledger: ledger.clone(),
            elapsed,
            live_lease: server.lease_oracle(scenario),
        };
        let node = handle
            .create_node()
            .name(plan.name.clone())
            .ip(Ipv4Addr::new(10, 0, 1, index as u8 + 1).into())
            .build();
        let finished = finished.clone();
        node.spawn(async move {
            run_client(plan, MadsimConnector).await;
            finished.fetch_add(1, Ordering::SeqCst);
        });
        clients.push(node);
    }

    // The fault schedule: one fault at a time, drawn from the seed.
    let mut chaos = root.fork(7);
    if faults.resets > 0.0 {
        net.update_config(|c| c.packet_loss_rate = faults.resets);
    }
    let options: Vec<u8> = [
        (faults.partitions || faults.stalls, 0),
        (faults.reply_loss, 1),
        (faults.bounce, 2),
        (faults.migrations, 3),
        (faults.failovers, 4),
        (faults.lagging_failover, 5),
        (faults.lagging_wake_ups, 6),
    ]
    .into_iter()
    .filter_map(|(on, choice)| on.then_some(choice))
    .collect();
    while elapsed() < scenario.active {
        madsim::time::sleep(Duration::from_millis(chaos.range(200, 1200))).await;
        if options.is_empty() || elapsed() >= scenario.active {
            continue;
        }
        let note = |what: String| {
            let mut ledger = ledger.lock().unwrap();
            ledger.counters.faults += 1;
            ledger.note(elapsed(), what);
        };
        match options[chaos.range(0, options.len() as u64) as usize] {
            0 => {
                // A link clogged both ways: a stall, or a partition if it lasts.
                let client = &clients[chaos.range(0, clients.len() as u64) as usize];
                let lasting = if faults.long_stalls {
                    let (shortest, longest) = faults.stall_ms();
                    Duration::from_millis(chaos.range(shortest, longest))
                } else {
                    Duration::from_millis(chaos.range(20, 2000))
                };
                note(format!("clog client {} for {lasting:?}", client.id()));
                net.clog_link(client.id(), redis.id());
                net.clog_link(redis.id(), client.id());
                madsim::time::sleep(lasting).await;
                net.unclog_link(client.id(), redis.id());
                net.unclog_link(redis.id(), client.id());
            }
            1 => {
                note("the server will lose one reply".into());
                server.lose_one_reply();
            }
            3 => {
                // A slot migrates: keys moved, then the new owner serves it.
                let cluster = server.cluster.as_ref().expect("a cluster scenario");
                let started = start_migration(&mut cluster.lock().unwrap(), scenario.keys, &mut chaos, host_name);
                note(started);
                // One in four is slow (as under turmoil: `ClusterChaos`).
                let (fastest, slowest) = if chaos.chance(1, 4) { (1000, 4000) } else { (20, 400) };
                madsim::time::sleep(Duration::from_millis(chaos.range(fastest, slowest))).await;
                if let Some(migration) = cluster.lock().unwrap().migration.as_mut() {
                    migration.keys_moved = true;
                }
                madsim::time::sleep(Duration::from_millis(chaos.range(fastest, slowest))).await;
                cluster.lock().unwrap().finish_migration();
                ledger.lock().unwrap().note(elapsed(), "the migration is over");
            }
            4 => {
                // A primary cut off from everyone; its replica takes over,
                // then it comes back as the spare (answering MOVED).
                let cluster = server.cluster.as_ref().expect("a cluster scenario");
                let primaries = cluster.lock().unwrap().primaries();
                let failed = primaries[chaos.range(0, primaries.len() as u64) as usize];
                let lasting = Duration::from_millis(chaos.range(300, 1500));
                note(format!("{} cut off for {lasting:?}", host_name(failed)));
                net.clog_node(redis_nodes[failed].id());
                madsim::time::sleep(lasting).await;
                let spare = promote_spare(&mut cluster.lock().unwrap(), failed, CLUSTER_HOSTS);
                net.unclog_node(redis_nodes[failed].id());
                ledger.lock().unwrap().note(
                    elapsed(),
                    format!("{} promoted in place of {}", host_name(spare), host_name(failed)),
                );
            }
            5 => {
                note("the server fails over to its lagging replica".into());
                server.fail_over(elapsed());
            }
            6 => {
                let lag = chaos.range(300, 2000);
                let until = elapsed() + Duration::from_millis(chaos.range(200, 1500));
                note(format!("wake-ups lag by {lag} ms until {:.3}s", until.as_secs_f64()));
                server.lag_wake_ups(lag, until.as_millis() as u64);
            }
            _ => {
                note("the server restarts, losing its data".into());
                server.restart(elapsed());
            }
        }
    }
    net.update_config(|c| c.packet_loss_rate = 0.0);
    server.drop_replies.store(0, Ordering::SeqCst);
    server.stop_lagging_wake_ups();
    ledger.lock().unwrap().note(elapsed(), "all faults healed");
    madsim::time::sleep(S10_WINDOW).await;
    check_no_ghosts(&server, elapsed());

    let give_up = elapsed() + Duration::from_secs(120);
    while finished.load(Ordering::SeqCst) < clients.len() {
        if elapsed() > give_up {
            ledger
                .lock()
                .unwrap()
                .violate(elapsed(), "S6 no panic", "client replicas did not finish".into());
            break;
        }
        madsim::time::sleep(Duration::from_millis(10)).await;
    }
    finish(scenario, seed, bug, &server)
}
