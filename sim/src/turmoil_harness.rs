//! The turmoil harness: hosts on one thread in virtual time, network faults
//! from the seed's schedule (partitions, held links, message failures, lost
//! replies, server restarts).

use std::net::{IpAddr, Ipv4Addr};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight_tokio::{tcp_endpoint, Connector, Endpoint};

use crate::callers::{run_client, ClientPlan, S10_WINDOW};
use crate::ledger::Ledger;
use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::sentinel;
use crate::server::{serve_connection, ServerState, PORT};
use crate::turmoil_cluster as cluster;
use crate::{check_no_ghosts, finish, panic_message, Bug, Report};

/// One simulated tick.
pub const TICK: Duration = Duration::from_millis(1);

/// turmoil's simulated TCP, plugged into the real driver.
#[derive(Clone, Copy)]
pub struct TurmoilConnector;

impl Connector for TurmoilConnector {
    type Io = turmoil::net::TcpStream;

    async fn connect(&self, endpoint: &Endpoint) -> std::io::Result<Self::Io> {
        turmoil::net::TcpStream::connect(tcp_endpoint(endpoint)?).await
    }
}

fn elapsed() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

fn elapsed_ms() -> u64 {
    elapsed().as_millis() as u64
}

/// The redis host's software. A bounce starts it again; the harness
/// decides what the new run remembers (nothing, for a restart).
async fn redis_host(state: ServerState) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::task::spawn_local(serve_connection(stream, state.clone(), 0));
    }
}

/// A data host of the Sentinel scenario: the primary, or not (see `sentinel`).
async fn data_host(state: ServerState, host: usize) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        tokio::task::spawn_local(serve_connection(stream, state.clone(), host));
    }
}

/// A sentinel host of the Sentinel scenario.
async fn sentinel_host(deployment: Arc<sentinel::SentinelSim>, index: usize) -> turmoil::Result {
    let listener =
        turmoil::net::TcpListener::bind((IpAddr::V4(Ipv4Addr::UNSPECIFIED), sentinel::SENTINEL_PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let deployment = deployment.clone();
        tokio::task::spawn_local(async move { sentinel::serve_sentinel(stream, &deployment, index).await });
    }
}

/// Runs one seed of one scenario.
pub fn run_seed(scenario: &'static Scenario, seed: u64, bug: Option<Bug>) -> Report {
    let ledger = Arc::new(Mutex::new(Ledger::new(scenario.keys, scenario.exact)));
    if scenario.faults.is_calm() {
        ledger
            .lock()
            .unwrap()
            .expect_hand_overs_heard(crate::callers::WAKE_BOUND, crate::callers::COMPOSITE_HAND_OVER_BOUND);
    }
    let mut server = ServerState::new(ledger.clone(), scenario.keys, elapsed_ms);
    server.bug = bug;
    if scenario.cluster {
        server = server.with_cluster(cluster::addresses(), cluster::PRIMARIES);
    }
    if scenario.sentinel {
        server = server.with_sentinel();
    } else if scenario.faults.lagging_failover {
        server = server.with_lagging_replica();
    }
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| simulate(scenario, seed, bug, &server)));
    if let Err(panic) = outcome {
        ledger
            .lock()
            .unwrap()
            .violate(Duration::ZERO, "S6 no panic", panic_message(&*panic));
    }
    finish(scenario, seed, bug, &server)
}

/// A fault in progress.
enum Active {
    Partition(String),
    Hold(String),
}

fn simulate(scenario: &'static Scenario, seed: u64, bug: Option<Bug>, server: &ServerState) {
    let faults = scenario.faults;
    let ledger = &server.ledger;
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .tick_duration(TICK)
        .simulation_duration(scenario.active + Duration::from_secs(120))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(if faults.jitter {
            Duration::from_millis(12)
        } else {
            Duration::from_millis(1)
        })
        .fail_rate(faults.resets);
    let mut sim = builder.build();

    let url = if scenario.cluster {
        for host in 0..cluster::HOSTS {
            let host_state = server.clone();
            sim.host(cluster::host_name(host), move || {
                cluster::cluster_host(host_state.clone(), host)
            });
        }
        format!("redis://{}:{PORT}", cluster::host_name(0))
    } else if scenario.sentinel {
        for (index, name) in sentinel::DATA.iter().enumerate() {
            let host_state = server.clone();
            sim.host(*name, move || data_host(host_state.clone(), index));
        }
        for index in 0..sentinel::SENTINELS {
            let deployment = server.sentinel.clone().expect("a sentinel scenario");
            sim.host(sentinel::sentinel_name(index), move || {
                sentinel_host(deployment.clone(), index)
            });
        }
        sentinel::url()
    } else {
        let host_state = server.clone();
        sim.host("redis", move || redis_host(host_state.clone()));
        format!("redis://redis:{PORT}")
    };
    let mut cluster_chaos = cluster::ClusterChaos::default();

    let root = Rng::new(seed);
    let clients: Vec<String> = (0..scenario.clients).map(|i| format!("client{i}")).collect();
    for (index, name) in clients.iter().enumerate() {
        let plan = ClientPlan {
            name: name.clone(),
            url: url.clone(),
            fail_open: index == 0,
            // Client 1 asks for no fencing tokens: both kinds share keys.
            fencing: index != 1,
            scenario,
            rng: root.fork(1000 + index as u64),
            bugs: Bug::injected(bug),
            slack: TICK,
            ledger: ledger.clone(),
            elapsed,
            live_lease: server.lease_oracle(scenario),
        };
        sim.client(name.as_str(), async move {
            run_client(plan, TurmoilConnector).await;
            Ok(())
        });
    }

    let mut chaos = root.fork(7);
    let mut next_fault = Duration::from_millis(chaos.range(100, 600));
    let mut active: Vec<Option<(Duration, Active)>> = (0..scenario.clients).map(|_| None).collect();
    let mut healed = false;
    let mut ghosts_checked = false;
    loop {
        let finished = match sim.step() {
            Ok(finished) => finished,
            Err(error) => {
                ledger
                    .lock()
                    .unwrap()
                    .violate(sim.elapsed(), "S6 no panic", format!("a host failed: {error}"));
                return;
            }
        };
        let now = sim.elapsed();
        for slot in active.iter_mut() {
            if slot
                .as_ref()
                .is_some_and(|(until, _)| *until <= now || now >= scenario.active)
            {
                let (_, fault) = slot.take().expect("checked");
                let what = match fault {
                    Active::Partition(client) => {
                        sim.repair(client.as_str(), "redis");
                        format!("repair {client}")
                    }
                    Active::Hold(client) => {
                        sim.release(client.as_str(), "redis");
                        format!("release {client}")
                    }
                };
                ledger.lock().unwrap().note(now, what);
            }
        }
        if healed && !ghosts_checked && now >= scenario.active + S10_WINDOW {
            ghosts_checked = true;
            check_no_ghosts(server, now);
        }
        if let Some(deployment) = &server.sentinel {
            for note in deployment.advance(now.as_millis() as u64) {
                ledger.lock().unwrap().note(now, note);
            }
        }
        if scenario.cluster {
            for note in cluster_chaos.advance(&mut sim, server, now, &mut chaos, now >= scenario.active) {
                ledger.lock().unwrap().note(now, note);
            }
        }
        if now >= scenario.active && !healed {
            healed = true;
            sim.set_fail_rate(0.0);
            server.drop_replies.store(0, std::sync::atomic::Ordering::SeqCst);
            server.stop_lagging_wake_ups();
            ledger.lock().unwrap().note(now, "all faults healed");
        }
        if now < scenario.active && now >= next_fault {
            next_fault = now + Duration::from_millis(chaos.range(200, 1200));
            let client = chaos.range(0, scenario.clients as u64) as usize;
            let name = clients[client].clone();
            if faults.migrations || faults.failovers {
                if let Some(note) = cluster_chaos.inject(&mut sim, server, now, &mut chaos, faults.failovers) {
                    let mut ledger = ledger.lock().unwrap();
                    ledger.counters.faults += 1;
                    ledger.note(now, note);
                }
            }
            let options: Vec<u8> = [
                (faults.partitions, 0),
                (faults.stalls, 1),
                (faults.reply_loss, 2),
                (faults.bounce, 3),
                (faults.lagging_failover, 4),
                (faults.lagging_wake_ups, 5),
            ]
            .into_iter()
            .filter_map(|(on, choice)| on.then_some(choice))
            .collect();
            // Resets and jitter act on their own.
            if !options.is_empty() {
                let choice = options[chaos.range(0, options.len() as u64) as usize];
                let note = match choice {
                    0 | 1 if active[client].is_some() => None,
                    0 => {
                        let until = now + Duration::from_millis(chaos.range(20, 1500));
                        sim.partition(name.as_str(), "redis");
                        active[client] = Some((until, Active::Partition(name.clone())));
                        Some(format!("partition {name} until {:.3}s", until.as_secs_f64()))
                    }
                    1 => {
                        let (shortest, longest) = faults.stall_ms();
                        let until = now + Duration::from_millis(chaos.range(shortest, longest));
                        sim.hold(name.as_str(), "redis");
                        active[client] = Some((until, Active::Hold(name.clone())));
                        Some(format!("hold {name} until {:.3}s", until.as_secs_f64()))
                    }
                    2 => {
                        server.lose_one_reply();
                        Some("the server will lose one reply".to_string())
                    }
                    3 => {
                        server.forget_everything(now);
                        sim.bounce("redis");
                        Some("the server restarts, losing its data".to_string())
                    }
                    5 => {
                        let lag = chaos.range(300, 2000);
                        let until = now + Duration::from_millis(chaos.range(200, 1500));
                        server.lag_wake_ups(lag, until.as_millis() as u64);
                        Some(format!("wake-ups lag by {lag} ms until {:.3}s", until.as_secs_f64()))
                    }
                    // The last switch is known to every sentinel, and the
                    // old primary demoted, before the callers stop: a
                    // release the old primary confirmed and lost is then
                    // repeated by a limiter that lives to see the switch
                    // (one that closes first leaves it to its TTL, which
                    // S2 cannot tell from a leak).
                    _ if scenario.sentinel && now + sentinel::SETTLE >= scenario.active => None,
                    _ if scenario.sentinel => {
                        // The replica is promoted (its clients closed); the
                        // old primary's connections stay open until it is
                        // demoted (see `sentinel`).
                        let deployment = server.sentinel.as_ref().expect("a sentinel scenario");
                        let old = server.promote_replica(now);
                        Some(deployment.switch(now.as_millis() as u64, old, &mut chaos))
                    }
                    _ => {
                        // Bounced like a restart (turmoil closes the host's
                        // sockets deterministically), with the replica's data.
                        server.fail_over(now);
                        sim.bounce("redis");
                        Some("the server fails over to its lagging replica".to_string())
                    }
                };
                if let Some(note) = note {
                    let mut ledger = ledger.lock().unwrap();
                    ledger.counters.faults += 1;
                    ledger.note(now, note);
                }
            }
        }
        if finished {
            return;
        }
    }
}
