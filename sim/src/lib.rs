//! # inflight-sim
//!
//! Deterministic simulation of an `inflight` fleet: K client hosts run the real
//! `inflight-tokio` driver over turmoil's simulated TCP against a simulated
//! Redis (the core's reference model), while a schedule drawn from the seed
//! injects faults. A ledger kept outside the code under test checks the
//! invariants S1–S6 of the design. Same seed, same run: replay any failure
//! with the command its report prints.

#![forbid(unsafe_code)]

pub mod fleet;
pub mod ledger;
pub mod redis_host;
pub mod rng;
pub mod scenario;

use std::cell::{Cell, RefCell};
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::time::Duration;

use inflight_core::model::RedisModel;
use inflight_core::InjectedBugs;

use crate::fleet::ClientPlan;
use crate::ledger::{Counters, Ledger, Violation};
use crate::redis_host::ServerState;
use crate::rng::Rng;
use crate::scenario::Scenario;

/// One simulated tick.
pub const TICK: Duration = Duration::from_millis(1);

/// A deliberate bug to switch on, to show the simulator catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    NoLateGrantCompensation,
    NoEchoCheck,
}

impl Bug {
    pub const ALL: [Bug; 2] = [Bug::NoLateGrantCompensation, Bug::NoEchoCheck];

    pub fn name(self) -> &'static str {
        match self {
            Bug::NoLateGrantCompensation => "no-late-grant-compensation",
            Bug::NoEchoCheck => "no-echo-check",
        }
    }

    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }

    fn injected(bug: Option<Bug>) -> InjectedBugs {
        InjectedBugs {
            skip_late_grant_compensation: bug == Some(Bug::NoLateGrantCompensation),
            skip_echo_check: bug == Some(Bug::NoEchoCheck),
        }
    }
}

/// What one seed did.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub bug: Option<Bug>,
    pub counters: Counters,
    /// (key, highest simultaneous holders, limit)
    pub peaks: Vec<(&'static str, u32, u32)>,
    pub leftover_leases: usize,
    pub violations: Vec<Violation>,
    pub trace_hash: u64,
    pub recent_events: String,
}

impl Report {
    /// The one command that replays exactly this run.
    pub fn replay_command(&self) -> String {
        let bug = self.bug.map(|b| format!(" --bug {}", b.name())).unwrap_or_default();
        format!(
            "cargo run --release -p inflight-sim -- --scenario {} --seed {}{bug}",
            self.scenario, self.seed
        )
    }

    pub fn describe_failure(&self) -> String {
        let mut out = format!("seed {} in scenario {} violated:\n", self.seed, self.scenario);
        for v in self.violations.iter().take(5) {
            out.push_str(&format!(
                "  {} at {:.3}s: {}\n",
                v.invariant,
                v.at.as_secs_f64(),
                v.detail
            ));
        }
        if self.violations.len() > 5 {
            out.push_str(&format!("  ... and {} more\n", self.violations.len() - 5));
        }
        out.push_str("  last events:\n");
        out.push_str(&self.recent_events);
        out.push_str(&format!("  replay: {}\n", self.replay_command()));
        out
    }
}

/// Runs one seed of one scenario.
pub fn run_seed(scenario: &'static Scenario, seed: u64, bug: Option<Bug>) -> Report {
    let ledger = Rc::new(RefCell::new(Ledger::new(scenario.keys, scenario.exact)));
    let model = Rc::new(RefCell::new(RedisModel::new(0)));
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| simulate(scenario, seed, bug, &ledger, &model)));
    if let Err(panic) = outcome {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        ledger.borrow_mut().violate(Duration::ZERO, "S6 no panic", message);
    }
    let mut ledger = ledger.borrow_mut();
    let end = Duration::from_secs(3600); // after the run: the trace orders it last
                                         // S2: with every fault healed and every limiter closed, Redis holds
                                         // nothing, except what a reported-abandoned release left to its TTL.
    let leftover = model.borrow_mut().all_live_leases();
    if leftover.len() as u64 > ledger.counters.releases_abandoned {
        let sample: Vec<String> = leftover
            .iter()
            .take(3)
            .map(|(k, id)| format!("{} {}", String::from_utf8_lossy(k), String::from_utf8_lossy(id)))
            .collect();
        let detail = format!(
            "{} leases left in Redis, {} releases reported abandoned; e.g. {sample:?}",
            leftover.len(),
            ledger.counters.releases_abandoned
        );
        ledger.violate(end, "S2 no leak", detail);
    }
    ledger.check_honest_denials(end);
    let summary = format!("leftover {} counters {:?}", leftover.len(), ledger.counters);
    ledger.note(end, summary);
    Report {
        scenario: scenario.name,
        seed,
        bug,
        counters: ledger.counters,
        peaks: ledger.peaks(),
        leftover_leases: leftover.len(),
        violations: ledger.violations.clone(),
        trace_hash: ledger.trace_hash(),
        recent_events: ledger.recent_events(),
    }
}

/// A fault in progress, and when it ends.
enum Active {
    Partition(String),
    Hold(String),
}

fn simulate(
    scenario: &'static Scenario,
    seed: u64,
    bug: Option<Bug>,
    ledger: &Rc<RefCell<Ledger>>,
    model: &Rc<RefCell<RedisModel>>,
) {
    let faults = scenario.faults;
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

    let server = ServerState {
        model: model.clone(),
        ledger: ledger.clone(),
        drop_replies: Rc::new(Cell::new(0)),
        keys: scenario.keys,
    };
    let drop_replies = server.drop_replies.clone();
    sim.host("redis", move || redis_host::serve(server.clone()));

    let root = Rng::new(seed);
    let clients: Vec<String> = (0..scenario.clients).map(|i| format!("client{i}")).collect();
    for (index, name) in clients.iter().enumerate() {
        let plan = ClientPlan {
            index,
            scenario,
            rng: root.fork(1000 + index as u64),
            bugs: Bug::injected(bug),
            tick: TICK,
            ledger: ledger.clone(),
        };
        sim.client(name.as_str(), fleet::run_client(plan));
    }

    let mut chaos = root.fork(7);
    let mut next_fault = Duration::from_millis(chaos.range(100, 600));
    let mut active: Vec<Option<(Duration, Active)>> = (0..scenario.clients).map(|_| None).collect();
    let mut healed = false;
    loop {
        let finished = match sim.step() {
            Ok(finished) => finished,
            Err(error) => {
                ledger
                    .borrow_mut()
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
                ledger.borrow_mut().note(now, what);
            }
        }
        if now >= scenario.active && !healed {
            healed = true;
            sim.set_fail_rate(0.0);
            drop_replies.set(0);
            ledger.borrow_mut().note(now, "all faults healed");
        }
        if now < scenario.active && now >= next_fault {
            next_fault = now + Duration::from_millis(chaos.range(200, 1200));
            let client = chaos.range(0, scenario.clients as u64) as usize;
            let name = clients[client].clone();
            let mut options = Vec::new();
            if faults.partitions {
                options.push(0);
            }
            if faults.stalls {
                options.push(1);
            }
            if faults.reply_loss {
                options.push(2);
            }
            if faults.bounce {
                options.push(3);
            }
            if options.is_empty() {
                // Resets and jitter act on their own.
            } else {
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
                        let until = now + Duration::from_millis(chaos.range(20, 3000));
                        sim.hold(name.as_str(), "redis");
                        active[client] = Some((until, Active::Hold(name.clone())));
                        Some(format!("hold {name} until {:.3}s", until.as_secs_f64()))
                    }
                    2 => {
                        drop_replies.set(drop_replies.get() + 1);
                        Some("the server will lose one reply".to_string())
                    }
                    _ => {
                        sim.bounce("redis");
                        Some("the server restarts, losing its data".to_string())
                    }
                };
                if let Some(note) = note {
                    let mut ledger = ledger.borrow_mut();
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
