//! A client host: one real `Limiter` over turmoil's TCP, and the caller tasks
//! that use it the way a service would: acquire, hold, release or drop; some
//! give up early, some are aborted mid-acquire.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use inflight_core::InjectedBugs;
use inflight_tokio::{Connector, Error, Key, Limiter, UnavailablePolicy};
use tokio::time::Instant;

use crate::ledger::Ledger;
use crate::rng::Rng;
use crate::scenario::Scenario;

/// turmoil's simulated TCP, plugged into the real driver.
pub struct TurmoilConnector;

impl Connector for TurmoilConnector {
    type Io = turmoil::net::TcpStream;

    async fn connect(&self, host: &str, port: u16) -> io::Result<Self::Io> {
        turmoil::net::TcpStream::connect((host, port)).await
    }
}

/// The caller latency budget every simulated limiter uses.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(100);

fn at() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

pub struct ClientPlan {
    pub index: usize,
    pub scenario: &'static Scenario,
    pub rng: Rng,
    pub bugs: InjectedBugs,
    pub tick: Duration,
    pub ledger: Rc<RefCell<Ledger>>,
}

pub async fn run_client(mut plan: ClientPlan) -> turmoil::Result {
    let name = format!("client{}", plan.index);
    let end = Instant::now() + plan.scenario.active;
    // One client in each run fails open, so both policies are exercised.
    let policy = if plan.index == 0 {
        UnavailablePolicy::Allow
    } else {
        UnavailablePolicy::Deny
    };
    let builder = Limiter::builder(format!("redis://redis:{}", crate::redis_host::PORT))
        .key_prefix("sim")
        .lease_ttl(Duration::from_secs(600))
        .timeout(ACQUIRE_TIMEOUT)
        .request_liveness(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(300))
        .max_in_flight(8)
        .on_unavailable(policy)
        .entropy(plan.rng.entropy())
        .inject_bugs(plan.bugs);
    let limiter = loop {
        match builder.clone().connect_with(TurmoilConnector).await {
            Ok(limiter) => break limiter,
            Err(error) => {
                plan.ledger
                    .borrow_mut()
                    .note(at(), format!("{name} connect failed: {error}"));
                if Instant::now() >= end {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    plan.ledger.borrow_mut().note(at(), format!("{name} connected"));

    let mut callers = Vec::new();
    for caller in 0..plan.scenario.callers {
        let who = format!("{name}/c{caller}");
        let task = Caller {
            who,
            limiter: limiter.clone(),
            rng: plan.rng.fork(caller as u64 + 1),
            keys: plan.scenario.keys,
            ledger: plan.ledger.clone(),
            end,
            tick: plan.tick,
        };
        callers.push(tokio::task::spawn_local(task.run()));
    }
    for caller in callers {
        if let Err(error) = caller.await {
            let message = format!("{name}: a caller task failed: {error}");
            plan.ledger.borrow_mut().violate(at(), "S6 no panic", message);
        }
    }
    // Everything owed is done (or reported abandoned) before the host ends.
    if tokio::time::timeout(Duration::from_secs(60), limiter.clone().close())
        .await
        .is_err()
    {
        plan.ledger
            .borrow_mut()
            .violate(at(), "S2 no leak", format!("{name}: close() did not finish"));
    }
    let stats = limiter.stats();
    let mut ledger = plan.ledger.borrow_mut();
    ledger.note(at(), format!("{name} closed: {stats:?}"));
    let counters = &mut ledger.counters;
    counters.compensations += stats.compensations;
    counters.release_retries += stats.release_retries;
    counters.releases_abandoned += stats.releases_abandoned;
    counters.connections_replaced += stats.connections_replaced;
    Ok(())
}

struct Caller {
    who: String,
    limiter: Limiter,
    rng: Rng,
    keys: &'static [(&'static str, u32)],
    ledger: Rc<RefCell<Ledger>>,
    end: Instant,
    tick: Duration,
}

impl Caller {
    async fn run(mut self) {
        while Instant::now() < self.end {
            let (key, limit) = self.keys[self.rng.range(0, self.keys.len() as u64) as usize];
            let subject = Key::new("load", key).expect("valid key");
            self.ledger.borrow_mut().counters.acquires += 1;
            let started = Instant::now();
            let outcome = match self.rng.range(0, 10) {
                // Gives up early: its future is dropped at whatever point it reached.
                0 => {
                    let patience = Duration::from_millis(self.rng.range(1, 60));
                    tokio::time::timeout(patience, self.limiter.acquire_with(&subject, limit))
                        .await
                        .ok()
                }
                // Aborted mid-acquire from outside.
                1 => {
                    let (limiter, subject) = (self.limiter.clone(), subject.clone());
                    let task = tokio::task::spawn_local(async move { limiter.acquire_with(&subject, limit).await });
                    tokio::time::sleep(Duration::from_millis(self.rng.range(0, 40))).await;
                    task.abort();
                    task.await.ok()
                }
                _ => {
                    let outcome = self.limiter.acquire_with(&subject, limit).await;
                    let took = started.elapsed();
                    if took > ACQUIRE_TIMEOUT + self.tick {
                        let detail = format!(
                            "{} waited {took:?} for an acquire (timeout {ACQUIRE_TIMEOUT:?})",
                            self.who
                        );
                        self.ledger.borrow_mut().violate(at(), "S3 bounded latency", detail);
                    }
                    Some(outcome)
                }
            };
            self.settle(key, outcome).await;
            tokio::time::sleep(Duration::from_millis(self.rng.range(1, 30))).await;
        }
    }

    async fn settle(&mut self, key: &'static str, outcome: Option<Result<inflight_tokio::Permit, Error>>) {
        let who = self.who.clone();
        match outcome {
            Some(Ok(permit)) if permit.is_enforced() => {
                self.ledger.borrow_mut().counters.granted += 1;
                self.ledger.borrow_mut().hold(at(), &who, key);
                tokio::time::sleep(Duration::from_millis(self.rng.range(1, 300))).await;
                // Counted out before the slot is given back.
                self.ledger.borrow_mut().unhold(at(), &who, key);
                if self.rng.chance(1, 2) {
                    let _ = permit.release().await;
                } else {
                    drop(permit);
                }
            }
            Some(Ok(_unenforced)) => {
                let mut ledger = self.ledger.borrow_mut();
                ledger.counters.fail_open += 1;
                ledger.note(at(), format!("{who} fails open on {key}"));
            }
            Some(Err(Error::Exceeded)) => {
                let mut ledger = self.ledger.borrow_mut();
                ledger.counters.denied += 1;
                ledger.exceeded(key);
                ledger.note(at(), format!("{who} exceeded on {key}"));
            }
            Some(Err(Error::Unavailable { reason })) => {
                let mut ledger = self.ledger.borrow_mut();
                ledger.counters.unavailable += 1;
                ledger.note(at(), format!("{who} unavailable on {key}: {reason}"));
            }
            Some(Err(other)) => {
                let detail = format!("{who}: {other} (the driver died?)");
                self.ledger.borrow_mut().violate(at(), "S6 no panic", detail);
            }
            None => self.ledger.borrow_mut().note(at(), format!("{who} gave up on {key}")),
        }
    }
}
