//! A client replica, shared by both harnesses: one real `Limiter` over the
//! harness's simulated TCP, and caller tasks that use it the way a service
//! would: acquire, hold, release or drop; some give up early, some are aborted
//! mid-acquire; some hold far longer than the lease TTL and renew.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight_core::InjectedBugs;
use inflight_tokio::{
    Acquire, Builder, Connector, Error, Key, Limiter, Permit, Permits, Recovery, ReleasePolicy, RenewError,
    UnavailablePolicy,
};
use tokio::time::Instant;

use crate::http_callers::{self, HttpCaller};
use crate::ledger::Ledger;
use crate::rng::Rng;
use crate::scenario::{Scenario, ACQUIRE_TIMEOUT};
use crate::server::LeaseOracle;
use crate::stalls::{stall_driver, DriverStalls};

/// The key prefix of every simulated limiter; subjects are `load|<key>`.
pub const KEY_PREFIX: &str = "sim";

/// The Redis keys of scenario key `name`.
pub fn subject_keys(name: &str) -> inflight_core::key::SubjectKeys {
    inflight_core::key::SubjectKeys::new(KEY_PREFIX, &Key::new("load", name).expect("valid key"))
}

/// How long a request may go unanswered before its connection is replaced,
/// and after which Redis refuses it (its valid-until).
pub const LIVENESS: Duration = Duration::from_millis(500);

/// Backoff caps: after faults heal, a replica reconnects and retries what it
/// owes within these.
pub const RECONNECT_MAX_BACKOFF: Duration = Duration::from_millis(200);
pub const RELEASE_MAX_BACKOFF: Duration = Duration::from_millis(250);

/// S10: once every fault has healed, within this no lease exists in Redis that
/// no caller holds (a request's liveness, a reconnect and a release retry at
/// their longest backoff, and round trips).
pub const S10_WINDOW: Duration = Duration::from_millis(500 + 200 + 250 + 150);

/// How long a waiter keeps its place without checking in (the limiters'
/// default).
pub const WAITER_LIFETIME: Duration = Duration::from_secs(1);

/// Idle connections are probed this often while leases are held.
pub const IDLE_PROBE: Duration = Duration::from_millis(200);

/// New grants are held this long after a loss: the backoff cap plus the
/// connect timeout. Every simulated restart and failover breaks the
/// connections, so each limiter notices at once and is back within this;
/// the default window also counts the idle probe and the liveness, for a
/// host that dies silently (1.2 s here), which would hold grants through
/// most of a scenario whose faults come every 0.2–1.2 s.
pub const RECOVERY_WINDOW: Duration = Duration::from_millis(500);

/// S9 in fault-free runs: a waiter in line that could be granted is within
/// this, long before the waiters' own periodic check (every 333 ms). A
/// hand-over is four messages of at most 12 ms each (the release's `ZREM`
/// and `EXISTS` out, their replies back, the `RELEASE` out, the wake-up to
/// the waiter's client), with a few ticks to spare. (It was 50 ms while the
/// release was one script: madsim seed 1476 of `calm` saw 55 ms after the
/// split, one round trip more, as designed.)
pub const WAKE_BOUND: Duration = Duration::from_millis(75);

/// S13 in fault-free runs, for a limiter with a waiting composite acquire
/// under way (or never seen holding): a part of that acquire handed over
/// stays in the limiter while its other parts are waited for, and is
/// confirmed an eighth of the way into its reservation (at most
/// [`WAITER_LIFETIME`] / 8), with a round trip. Still well before the
/// waiter's own periodic check (a third of the lifetime), which is how an
/// unheard hand-over would end. Other slots handed over reach their caller
/// within [`WAKE_BOUND`].
pub const COMPOSITE_HAND_OVER_BOUND: Duration = Duration::from_millis(75 + 1000 / 8);

/// The heaviest permit a caller asks for: one acquire in five takes 2 or 3
/// units (at most the key's limit).
pub const MAX_WEIGHT: u32 = 3;

/// The lease TTL of each replica's second limiter, whose callers hold for up
/// to several TTLs: half of them renew every third of it, the other half
/// have the driver keep their lease alive and watch for its loss.
pub const RENEWING_TTL: Duration = Duration::from_millis(1500);

/// A lease expiry (the driver's clock) on tokio's timer.
#[cfg(not(madsim))]
fn on_timer(at: std::time::Instant) -> Instant {
    Instant::from_std(at)
}

#[cfg(madsim)]
fn on_timer(at: std::time::Instant) -> Instant {
    at
}

pub struct ClientPlan {
    pub name: String,
    /// `redis://host:port` of the simulated server.
    pub url: String,
    /// Client 0 of a run fails open, the others deny, so both policies run.
    pub fail_open: bool,
    /// Its limiters give fencing tokens (`Builder::fencing_tokens`).
    pub fencing: bool,
    pub scenario: &'static Scenario,
    pub rng: Rng,
    pub bugs: InjectedBugs,
    /// How late an acquire may return past its timeout (one tick of the harness).
    pub slack: Duration,
    pub ledger: Arc<Mutex<Ledger>>,
    /// Virtual time since the run began, for the ledger.
    pub elapsed: fn() -> Duration,
    /// S14's oracle (scenarios that lose no data): whether a lease is live
    /// in Redis.
    pub live_lease: Option<LeaseOracle>,
}

pub async fn run_client<C: Connector + Clone>(mut plan: ClientPlan, connector: C) {
    let end = Instant::now() + plan.scenario.active;
    let at = plan.elapsed;
    let policy = if plan.fail_open {
        UnavailablePolicy::Allow
    } else {
        UnavailablePolicy::Deny
    };
    let mut builder = Limiter::builder(&plan.url);
    if plan.scenario.cluster {
        builder = builder.cluster();
    }
    let builder = builder
        .key_prefix(KEY_PREFIX)
        .lease_ttl(plan.scenario.lease_ttl)
        .timeout(ACQUIRE_TIMEOUT)
        .request_liveness(LIVENESS)
        .reconnect_backoff(Duration::from_millis(10), RECONNECT_MAX_BACKOFF)
        .release_policy(ReleasePolicy {
            max_backoff: RELEASE_MAX_BACKOFF,
            ..ReleasePolicy::default()
        })
        .connect_timeout(Duration::from_millis(300))
        .max_in_flight(8)
        .waiter_lifetime(WAITER_LIFETIME)
        .idle_probe(IDLE_PROBE)
        .recovery(Recovery::Reassert {
            window: Some(RECOVERY_WINDOW),
        })
        .on_unavailable(policy)
        .fencing_tokens(plan.fencing)
        .simulation_entropy(plan.rng.entropy())
        .inject_bugs(plan.bugs);
    let name = plan.name.clone();
    let Some(limiter) = connect(&plan, builder.clone(), &connector, end).await else {
        return;
    };
    let renewing_builder = builder.lease_ttl(RENEWING_TTL).simulation_entropy(plan.rng.entropy());
    let Some(renewing) = connect(&plan, renewing_builder, &connector, end).await else {
        return;
    };
    plan.ledger.lock().unwrap().note(at(), format!("{name} connected"));
    let stalls = DriverStalls::default();
    if plan.scenario.faults.driver_stalls {
        let stalling = stall_driver(
            limiter.clone(),
            stalls.clone(),
            plan.rng.fork(1_000),
            plan.ledger.clone(),
            name.clone(),
            end,
            at,
        );
        tokio::spawn(stalling);
    }

    let mut callers = Vec::new();
    let served = plan
        .scenario
        .tower
        .then(|| http_callers::service(limiter.clone(), plan.bugs, plan.ledger.clone(), at));
    for caller in 0..plan.scenario.callers {
        if let Some(service) = &served {
            let task = HttpCaller {
                who: format!("{name}/h{caller}"),
                service: service.clone(),
                rng: plan.rng.fork(caller as u64 + 1),
                keys: plan.scenario.keys,
                ledger: plan.ledger.clone(),
                end,
                slack: plan.slack,
                at,
            };
            callers.push(tokio::spawn(task.run()));
            continue;
        }
        let task = Caller {
            calm: plan.scenario.faults.is_calm(),
            call_limits: plan.scenario.call_limits,
            longest_wait: plan.scenario.longest_wait(),
            stalls: stalls.clone(),
            live_lease: plan.live_lease.clone(),
            fencing: plan.fencing,
            who: format!("{name}/c{caller}"),
            limiter: limiter.clone(),
            renewing: renewing.clone(),
            rng: plan.rng.fork(caller as u64 + 1),
            keys: plan.scenario.keys,
            ledger: plan.ledger.clone(),
            end,
            slack: plan.slack,
            at,
        };
        callers.push(tokio::spawn(task.run()));
    }
    for caller in callers {
        if caller.await.is_err() {
            let message = format!("{name}: a caller task panicked");
            plan.ledger.lock().unwrap().violate(at(), "S6 no panic", message);
        }
    }
    // Everything owed is done (or reported abandoned) before the replica ends.
    for limiter in [&limiter, &renewing] {
        if tokio::time::timeout(Duration::from_secs(60), limiter.clone().drain())
            .await
            .is_err()
        {
            plan.ledger
                .lock()
                .unwrap()
                .violate(at(), "S2 no leak", format!("{name}: drain() did not finish"));
        }
        let stats = limiter.stats();
        let mut ledger = plan.ledger.lock().unwrap();
        ledger.note(at(), format!("{name} closed: {stats:?}"));
        let counters = &mut ledger.counters;
        counters.compensations += stats.compensations;
        counters.release_retries += stats.release_retries;
        counters.releases_abandoned += stats.releases_abandoned;
        counters.connections_replaced += stats.connections_replaced;
        counters.handed_late += stats.handed_late;
    }
}

/// Connects a limiter, retrying until the replica's active time is over.
async fn connect<C: Connector + Clone>(
    plan: &ClientPlan,
    builder: Builder,
    connector: &C,
    end: Instant,
) -> Option<Limiter> {
    loop {
        match builder.clone().connect_with(connector.clone()).await {
            Ok(limiter) => return Some(limiter),
            Err(error) => {
                plan.ledger
                    .lock()
                    .unwrap()
                    .note((plan.elapsed)(), format!("{} connect failed: {error}", plan.name));
                if Instant::now() >= end {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How a granted caller holds its permit.
#[derive(Clone, Copy)]
enum Hold {
    /// Up to 300 ms.
    Short,
    /// Several TTLs, renewing by hand every third of the TTL.
    Renewing,
    /// Several TTLs, kept alive by the driver, stopping if the lease is lost.
    KeptAlive,
}

struct Caller {
    /// No faults: S9 holds a waiter to the wake-up bound.
    calm: bool,
    /// Some acquires bring a limit below their key's.
    call_limits: bool,
    /// The longest a waiting acquire waits, in milliseconds.
    longest_wait: u64,
    /// When its replica's main driver stood still.
    stalls: DriverStalls,
    /// S14's oracle, where the scenario loses no data.
    live_lease: Option<LeaseOracle>,
    /// Its limiters give fencing tokens: every permit must carry one.
    fencing: bool,
    who: String,
    limiter: Limiter,
    renewing: Limiter,
    rng: Rng,
    keys: &'static [(&'static str, u32)],
    ledger: Arc<Mutex<Ledger>>,
    end: Instant,
    slack: Duration,
    at: fn() -> Duration,
}

impl Caller {
    async fn run(mut self) {
        while Instant::now() < self.end {
            // One acquire in eight takes a slot of two or three keys at once.
            if self.keys.len() >= 2 && self.rng.chance(1, 8) {
                self.composite().await;
                tokio::time::sleep(Duration::from_millis(self.rng.range(1, 30))).await;
                continue;
            }
            let (key, mut limit) = self.keys[self.rng.range(0, self.keys.len() as u64) as usize];
            if self.call_limits && limit > 1 && self.rng.chance(1, 3) {
                limit -= 1;
            }
            let subject = Key::new("load", key).expect("valid key");
            self.ledger.lock().unwrap().counters.acquires += 1;
            let long = self.rng.chance(1, 25);
            // Three acquires in ten wait for a slot.
            let wait = (!long && self.rng.chance(3, 10)).then(|| self.draw_wait());
            let limiter = if long { &self.renewing } else { &self.limiter };
            let weight = if self.rng.chance(1, 5) {
                (self.rng.range(2, u64::from(MAX_WEIGHT) + 1) as u32).min(limit)
            } else {
                1
            };
            let kept_alive = long && self.rng.chance(1, 2);
            let mut options = Acquire::default().limit(limit).weight(weight).keep_alive(kept_alive);
            if let Some(wait) = wait {
                options = options.wait(wait);
                self.ledger.lock().unwrap().counters.waits += 1;
            }
            let acquire = {
                let (limiter, subject) = (limiter.clone(), subject.clone());
                async move { limiter.acquire_opts(&subject, options).await }
            };
            let budget = wait.unwrap_or_default().max(ACQUIRE_TIMEOUT);
            let started = wait.map(|_| (self.at)());
            let outcome = self
                .attempt(acquire, budget, || {
                    format!("an acquire (timeout {ACQUIRE_TIMEOUT:?}, wait {wait:?})")
                })
                .await;
            let hold = match (long, kept_alive) {
                (false, _) => Hold::Short,
                (true, false) => Hold::Renewing,
                (true, true) => Hold::KeptAlive,
            };
            self.settle(key, outcome, hold, started).await;
            tokio::time::sleep(Duration::from_millis(self.rng.range(1, 30))).await;
        }
    }

    /// `waited_since`: when the caller began to wait, if it did.
    async fn settle(
        &mut self,
        key: &'static str,
        outcome: Option<Result<Permit, Error>>,
        hold: Hold,
        waited_since: Option<Duration>,
    ) {
        let (who, at) = (self.who.clone(), self.at);
        let waited = waited_since.is_some();
        match outcome {
            Some(Ok(mut permit)) if permit.is_enforced() => {
                let lease = permit.lease_id().map(|id| id.to_string());
                let weight = permit.weight();
                let lapsed = self.lapsed(key, lease.as_deref());
                {
                    let mut ledger = self.ledger.lock().unwrap();
                    if lapsed {
                        let detail = format!("{who} got a permit for {key} whose lease {lease:?} is not live in Redis");
                        ledger.violate(at(), "S14 live permits", detail);
                    }
                    // S7: a limiter that asked for tokens gets one with
                    // every lease it still holds.
                    if self.fencing && lease.is_some() && permit.fencing_token().is_none() {
                        let detail = format!("{who} holds a lease on {key} with no fencing token");
                        ledger.violate(at(), "S7 fencing", detail);
                    }
                    ledger.counters.granted += 1;
                    if let Some(started) = waited_since {
                        ledger.counters.waits_granted += 1;
                        if self.calm {
                            ledger.wait_served(at(), &who, key, started, WAKE_BOUND);
                        }
                    }
                    if weight > 1 {
                        ledger.counters.weighted += 1;
                    }
                    ledger.hold(at(), &who, key, lease.clone(), weight);
                }
                match hold {
                    Hold::Short => tokio::time::sleep(Duration::from_millis(self.rng.range(1, 300))).await,
                    Hold::Renewing => self.hold_renewing(key, &mut permit).await,
                    Hold::KeptAlive => self.hold_kept_alive(key, &permit).await,
                }
                // Counted out before the slot is given back.
                self.ledger.lock().unwrap().unhold(at(), &who, key, lease, weight);
                if self.rng.chance(1, 2) {
                    if let Err(error) = permit.release().await {
                        self.ledger
                            .lock()
                            .unwrap()
                            .note(at(), format!("{who}'s release of {key}: {error}"));
                    }
                } else {
                    drop(permit);
                }
            }
            Some(Ok(unenforced)) => {
                let mut ledger = self.ledger.lock().unwrap();
                if let Some(loss) = unenforced.loss().filter(|_| self.live_lease.is_some()) {
                    let detail = format!("{who} got a permit for {key} whose lease was lost already ({loss:?})");
                    ledger.violate(at(), "S14 live permits", detail);
                }
                ledger.counters.fail_open += 1;
                ledger.note(at(), format!("{who} fails open on {key}"));
            }
            // A wait whose deadline passed: not a denial (S4), but S9.
            Some(Err(Error::Exceeded { shed: false, .. })) if waited => {
                let bound = self.calm.then_some(WAKE_BOUND);
                self.ledger.lock().unwrap().wait_timed_out(at(), &who, key, bound);
            }
            Some(Err(Error::Exceeded { shed, .. })) => {
                let mut ledger = self.ledger.lock().unwrap();
                ledger.counters.denied += 1;
                if shed {
                    ledger.counters.shed += 1;
                }
                ledger.exceeded(key);
                ledger.note(at(), format!("{who} exceeded on {key}"));
            }
            Some(Err(Error::Unavailable { reason })) => {
                let mut ledger = self.ledger.lock().unwrap();
                ledger.counters.unavailable += 1;
                ledger.note(at(), format!("{who} unavailable on {key}: {reason}"));
            }
            Some(Err(other)) => {
                let detail = format!("{who}: {other} (the driver died?)");
                self.ledger.lock().unwrap().violate(at(), "S6 no panic", detail);
            }
            None => self
                .ledger
                .lock()
                .unwrap()
                .note(at(), format!("{who} gave up on {key}")),
        }
    }

    /// Holds for up to several lease TTLs, renewing every third of the TTL.
    /// The holder stops counting itself the moment its lease may have run out
    /// (a renewal that cannot get through in time), as a careful service would:
    /// past its lease's expiry it no longer owns a slot.
    async fn hold_renewing(&mut self, key: &'static str, permit: &mut Permit) {
        let (who, at) = (self.who.clone(), self.at);
        let until = Instant::now() + Duration::from_millis(self.rng.range(500, 3_000));
        loop {
            let Some(expires) = permit.expires_at().map(on_timer) else {
                return;
            };
            tokio::time::sleep_until((Instant::now() + RENEWING_TTL / 3).min(until).min(expires)).await;
            let now = Instant::now();
            if now >= until {
                return;
            }
            if now >= expires {
                self.note(format!("{who} could not renew {key} in time; stops"));
                return;
            }
            let started = Instant::now();
            // (madsim's tokio has no `timeout_at`.)
            let renewed = tokio::time::timeout(expires - started, permit.renew()).await;
            let took = started.elapsed();
            let stalled = self.stalls.within(started, Instant::now());
            if renewed.is_ok() && took > ACQUIRE_TIMEOUT + self.slack + stalled {
                let detail = format!("{who} waited {took:?} for a renewal (timeout {ACQUIRE_TIMEOUT:?})");
                self.ledger.lock().unwrap().violate(at(), "S3 bounded latency", detail);
            }
            match renewed {
                Ok(Ok(())) => self.ledger.lock().unwrap().counters.renewals += 1,
                Ok(Err(RenewError::Lost)) => {
                    let early = Instant::now() < expires;
                    self.ledger.lock().unwrap().lease_lost(at(), &who, key, early);
                    return;
                }
                Ok(Err(RenewError::Unavailable { reason })) => {
                    self.note(format!("{who} could not renew {key}: {reason}"));
                }
                Ok(Err(error)) => {
                    let detail = format!("{who}: renew failed unexpectedly: {error}");
                    self.ledger.lock().unwrap().violate(at(), "S6 no panic", detail);
                    return;
                }
                Err(_) => {
                    self.note(format!("{who}'s renewal of {key} outlived the lease; stops"));
                    return;
                }
            }
        }
    }

    /// Holds for up to several lease TTLs without renewing: the driver keeps
    /// the lease alive. The work stops the moment the lease is reported lost
    /// (S1 then checks that nobody else held its units before that, S11
    /// that it never happens with Redis up).
    async fn hold_kept_alive(&mut self, key: &'static str, permit: &Permit) {
        let until = Instant::now() + Duration::from_millis(self.rng.range(500, 3_000));
        let lost = permit.lost();
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(until) => {
                self.ledger.lock().unwrap().counters.kept_alive += 1;
            }
            reason = lost => {
                let reason = format!("{reason:?}");
                self.ledger
                    .lock()
                    .unwrap()
                    .kept_alive_lost((self.at)(), &self.who, key, &reason, self.calm);
            }
        }
    }

    /// Runs `acquire` as a caller does: one time in ten it gives up after
    /// 1–60 ms (the future dropped wherever it is), one in ten it is
    /// aborted from outside after 0–40 ms, otherwise it is awaited and
    /// must return within `budget` (S3). `None` when given up or aborted.
    async fn attempt<T: Send + 'static>(
        &mut self,
        acquire: impl std::future::Future<Output = T> + Send + 'static,
        budget: Duration,
        what: impl FnOnce() -> String,
    ) -> Option<T> {
        let started = Instant::now();
        match self.rng.range(0, 10) {
            0 => {
                let patience = Duration::from_millis(self.rng.range(1, 60));
                tokio::time::timeout(patience, acquire).await.ok()
            }
            1 => {
                let task = tokio::spawn(acquire);
                tokio::time::sleep(Duration::from_millis(self.rng.range(0, 40))).await;
                task.abort();
                task.await.ok()
            }
            _ => {
                let outcome = acquire.await;
                let took = started.elapsed();
                if took > budget + self.slack + self.stalls.within(started, Instant::now()) {
                    let detail = format!("{} waited {took:?} for {}", self.who, what());
                    self.ledger
                        .lock()
                        .unwrap()
                        .violate((self.at)(), "S3 bounded latency", detail);
                }
                Some(outcome)
            }
        }
    }

    /// S14: whether the lease of a permit just granted (`None`: fail open)
    /// is missing from Redis, or expired there.
    fn lapsed(&self, key: &'static str, lease: Option<&str>) -> bool {
        match (&self.live_lease, lease) {
            (Some(live), Some(lease)) => !live(key, lease),
            _ => false,
        }
    }

    /// How long a waiting acquire (single or composite) waits: 20-400 ms,
    /// longer where links stall (see `Scenario::longest_wait`), never more
    /// than 400 ms past the active time: S10 then finds every caller done.
    fn draw_wait(&mut self) -> Duration {
        let wait = Duration::from_millis(self.rng.range(20, self.longest_wait));
        wait.min((self.end + Duration::from_millis(400)).saturating_duration_since(Instant::now()))
    }

    /// An acquire over two or three distinct keys (`acquire_all`), each
    /// under its limit (or one below), of one weight, failing fast or (three
    /// in ten) waiting; dropped or aborted as often as single acquires.
    async fn composite(&mut self) {
        let mut order: Vec<usize> = (0..self.keys.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, self.rng.range(0, i as u64 + 1) as usize);
        }
        order.truncate(self.rng.range(2, self.keys.len().min(3) as u64 + 1) as usize);
        let chosen: Vec<(&'static str, u32)> = order
            .iter()
            .map(|i| {
                let (key, limit) = self.keys[*i];
                let lower = self.call_limits && limit > 1 && self.rng.chance(1, 3);
                (key, limit - u32::from(lower))
            })
            .collect();
        let subjects: Vec<Key> = chosen
            .iter()
            .map(|(key, _)| Key::new("load", *key).expect("valid key"))
            .collect();
        let least = chosen.iter().map(|(_, limit)| *limit).min().expect("two keys");
        let weight = if self.rng.chance(1, 5) {
            (self.rng.range(2, u64::from(MAX_WEIGHT) + 1) as u32).min(least)
        } else {
            1
        };
        let wait = self.rng.chance(3, 10).then(|| self.draw_wait());
        let mut options = Acquire::default().weight(weight);
        if let Some(wait) = wait {
            options = options.wait(wait);
            self.ledger.lock().unwrap().composite_waiting(&self.who, true);
        }
        {
            let mut ledger = self.ledger.lock().unwrap();
            ledger.counters.acquires += 1;
            ledger.counters.composites += 1;
            if wait.is_some() {
                ledger.counters.waits += 1;
            }
        }
        let limiter = self.limiter.clone();
        let asked: Vec<(Key, u32)> = subjects.into_iter().zip(chosen.iter().map(|(_, l)| *l)).collect();
        let acquire = async move {
            let asked: Vec<(&Key, u32)> = asked.iter().map(|(k, l)| (k, *l)).collect();
            limiter.acquire_all_opts(&asked, options).await
        };
        // Keys of different slots go one slot after another: each may take
        // a whole timeout, and a wait its whole wait.
        let budget = wait.unwrap_or_default() + ACQUIRE_TIMEOUT * chosen.len() as u32;
        let outcome = self
            .attempt(acquire, budget, || format!("an acquire of {chosen:?} (wait {wait:?})"))
            .await;
        if wait.is_some() {
            self.ledger.lock().unwrap().composite_waiting(&self.who, false);
        }
        self.settle_all(&chosen, outcome, wait.is_some()).await;
    }

    async fn settle_all(
        &mut self,
        chosen: &[(&'static str, u32)],
        outcome: Option<Result<Permits, Error>>,
        waited: bool,
    ) {
        let (who, at) = (self.who.clone(), self.at);
        let keys: Vec<&'static str> = chosen.iter().map(|(key, _)| *key).collect();
        match outcome {
            Some(Ok(permits)) if permits.is_enforced() => {
                let held: Vec<(&'static str, Option<String>, u32)> = keys
                    .iter()
                    .zip(permits.parts())
                    .map(|(key, permit)| (*key, permit.lease_id().map(|id| id.to_string()), permit.weight()))
                    .collect();
                let lapsed: Vec<_> = held
                    .iter()
                    .filter(|(key, lease, _)| self.lapsed(key, lease.as_deref()))
                    .map(|(key, lease, _)| (*key, lease.clone()))
                    .collect();
                {
                    let mut ledger = self.ledger.lock().unwrap();
                    for (key, lease) in lapsed {
                        let detail = format!("{who} got a permit for {key} whose lease {lease:?} is not live in Redis");
                        ledger.violate(at(), "S14 live permits", detail);
                    }
                    if self.fencing && permits.fencing_tokens().iter().any(Option::is_none) {
                        let detail = format!("{who} holds leases on {keys:?} without a fencing token each");
                        ledger.violate(at(), "S7 fencing", detail);
                    }
                    ledger.counters.granted += 1;
                    ledger.counters.composites_granted += 1;
                    if waited {
                        ledger.counters.waits_granted += 1;
                    }
                    for (key, lease, weight) in &held {
                        ledger.hold(at(), &who, key, lease.clone(), *weight);
                    }
                }
                tokio::time::sleep(Duration::from_millis(self.rng.range(1, 300))).await;
                {
                    let mut ledger = self.ledger.lock().unwrap();
                    for (key, lease, weight) in held {
                        ledger.unhold(at(), &who, key, lease, weight);
                    }
                }
                if self.rng.chance(1, 2) {
                    if let Err(error) = permits.release().await {
                        self.note(format!("{who}'s release of {keys:?}: {error}"));
                    }
                } else {
                    drop(permits);
                }
            }
            Some(Ok(unenforced)) => {
                let mut ledger = self.ledger.lock().unwrap();
                let lost = unenforced.parts().iter().filter_map(|part| part.loss()).next();
                if let Some(loss) = lost.filter(|_| self.live_lease.is_some()) {
                    let detail = format!("{who} got permits for {keys:?} with a lease lost already ({loss:?})");
                    ledger.violate(at(), "S14 live permits", detail);
                }
                ledger.counters.fail_open += 1;
                ledger.note(at(), format!("{who} fails open on {keys:?}"));
            }
            Some(Err(Error::Exceeded { key: Some(i), shed, .. })) if i < keys.len() => {
                if waited && !shed {
                    let bound = self.calm.then_some(WAKE_BOUND);
                    return self.ledger.lock().unwrap().wait_timed_out(at(), &who, keys[i], bound);
                }
                let mut ledger = self.ledger.lock().unwrap();
                ledger.counters.denied += 1;
                ledger.counters.shed += u64::from(shed);
                ledger.exceeded(keys[i]);
                ledger.note(at(), format!("{who} exceeded on {} of {keys:?}", keys[i]));
            }
            Some(Err(Error::Unavailable { reason })) => {
                let mut ledger = self.ledger.lock().unwrap();
                ledger.counters.unavailable += 1;
                ledger.note(at(), format!("{who} unavailable on {keys:?}: {reason}"));
            }
            Some(Err(other)) => {
                let detail = format!("{who}: acquire of {keys:?}: {other}");
                self.ledger.lock().unwrap().violate(at(), "S6 no panic", detail);
            }
            None => self.note(format!("{who} gave up on {keys:?}")),
        }
    }

    fn note(&self, what: String) {
        self.ledger.lock().unwrap().note((self.at)(), what);
    }
}
