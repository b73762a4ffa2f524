//! # inflight-sim
//!
//! Deterministic simulation of an `inflight` fleet: K client hosts run the real
//! `inflight-tokio` driver over turmoil's simulated TCP against a simulated
//! Redis (the core's reference model), while a schedule drawn from the seed
//! injects faults. A ledger kept outside the code under test checks the
//! invariants S1–S6 of the design. Same seed, same run: replay any failure
//! with the command its report prints.

#![forbid(unsafe_code)]

pub mod callers;
pub mod clock;
pub mod http_callers;
pub mod ledger;
pub mod rng;
pub mod scenario;
pub mod sentinel;
pub mod server;
pub mod stalls;

#[cfg(madsim)]
pub mod madsim_harness;
#[cfg(not(madsim))]
pub mod turmoil_cluster;
#[cfg(not(madsim))]
pub mod turmoil_harness;

use std::time::Duration;

use inflight_core::InjectedBugs;

use crate::ledger::{Counters, Violation};
use crate::scenario::Scenario;
use crate::server::ServerState;

#[cfg(madsim)]
pub use madsim_harness::run_seed;
#[cfg(not(madsim))]
pub use turmoil_harness::run_seed;

/// A deliberate bug to switch on, to show the simulator catches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    NoLateGrantCompensation,
    NoEchoCheck,
    /// Requests carry no valid-until: a script that runs late still acts.
    NoStaleCheck,
    /// A cluster redirect answering an acquire is taken for a denial.
    RedirectAsDenial,
    /// Lost lease data is reported and nothing else: held leases are not
    /// written back, new grants are not held (recovery switched off).
    NoRecovery,
    /// The tower layer gives the permit back when the response head is
    /// ready, while the body streams on (tower's `ConcurrencyLimit`).
    ReleaseAtResponseHead,
    /// Waiters ignore wake-ups and learn of free slots only at their
    /// periodic check.
    NoWakeUp,
    /// The fail-fast acquire script ignores the wait queue (a script bug,
    /// injected into the simulated Redis).
    AcquireIgnoresQueue,
    /// Kept-alive leases are renewed only once their expiry has come: no
    /// margin for one failed attempt.
    KeepAliveWithoutMargin,
    /// The scripts judge every waiter under the limit the last one
    /// recorded, not its own (injected into the simulated Redis).
    LastLimitForAll,
    /// `ACQUIRE_ACROSS` takes every acquire under its first one's limit
    /// (injected into the simulated Redis).
    AcrossFirstLimit,
    /// A fail-fast grant of a limiter that asked for fencing tokens reaches
    /// its caller without one.
    DroppedFencingToken,
    /// A grant under a higher limit takes a unit a waiter ahead under a
    /// lower limit is owed (injected into the simulated Redis).
    NewcomerTakesOwedUnit,
    /// A switch to the primary the sentinels name forgets the old one's
    /// identity: the failover is not found, nothing is written back.
    SwitchForgetsIdentity,
    /// A recovery repeats only the releases confirmed within its window of
    /// the recovery itself: one a failover lost stays if the new primary is
    /// found late.
    ReleasesAgedFromRecovery,
    /// `ACQUIRE_ALL` grants each subject that has room, whether or not
    /// the others do, as one acquire per key would (injected into the
    /// simulated Redis).
    CompositeGrantsPartly,
    /// A release refused by `TRYAGAIN` while its slot moves spends an
    /// attempt: a long move makes it give up, the slot left taken.
    TryAgainSpendsAttempts,
    /// The one queue check of a write's releases counts some queues but
    /// not as many as subjects, and is read as "none": another replica's
    /// waiters get the freed slot only at their periodic check.
    PartialQueueCountAsNone,
    /// A hand-over heard with under half its reservation left (its
    /// client's link held while the release ran) is delivered from the
    /// message, not checked again: the permit may come with its
    /// reservation spent and the slot already someone else's.
    TrustsLateHandOver,
    /// A waiting composite acquire hands out a part lost while it waited
    /// for the next key (its reservation spent with the driver stalled),
    /// instead of giving it back and taking it again.
    KeepsLostCompositePart,
}

impl Bug {
    pub const ALL: [Bug; 20] = [
        Bug::NoLateGrantCompensation,
        Bug::NoEchoCheck,
        Bug::NoStaleCheck,
        Bug::RedirectAsDenial,
        Bug::NoRecovery,
        Bug::ReleaseAtResponseHead,
        Bug::NoWakeUp,
        Bug::AcquireIgnoresQueue,
        Bug::KeepAliveWithoutMargin,
        Bug::LastLimitForAll,
        Bug::AcrossFirstLimit,
        Bug::DroppedFencingToken,
        Bug::NewcomerTakesOwedUnit,
        Bug::SwitchForgetsIdentity,
        Bug::ReleasesAgedFromRecovery,
        Bug::CompositeGrantsPartly,
        Bug::TryAgainSpendsAttempts,
        Bug::PartialQueueCountAsNone,
        Bug::TrustsLateHandOver,
        Bug::KeepsLostCompositePart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Bug::NoLateGrantCompensation => "no-late-grant-compensation",
            Bug::NoEchoCheck => "no-echo-check",
            Bug::NoStaleCheck => "no-stale-check",
            Bug::RedirectAsDenial => "redirect-as-denial",
            Bug::NoRecovery => "no-recovery",
            Bug::ReleaseAtResponseHead => "release-at-response-head",
            Bug::NoWakeUp => "no-wake-up",
            Bug::AcquireIgnoresQueue => "acquire-ignores-queue",
            Bug::KeepAliveWithoutMargin => "keep-alive-without-margin",
            Bug::LastLimitForAll => "last-limit-for-all",
            Bug::AcrossFirstLimit => "across-first-limit",
            Bug::DroppedFencingToken => "dropped-fencing-token",
            Bug::NewcomerTakesOwedUnit => "newcomer-takes-owed-unit",
            Bug::SwitchForgetsIdentity => "switch-forgets-identity",
            Bug::ReleasesAgedFromRecovery => "releases-aged-from-recovery",
            Bug::CompositeGrantsPartly => "composite-grants-partly",
            Bug::TryAgainSpendsAttempts => "try-again-spends-attempts",
            Bug::PartialQueueCountAsNone => "partial-queue-count-as-none",
            Bug::TrustsLateHandOver => "trusts-late-hand-over",
            Bug::KeepsLostCompositePart => "keeps-lost-composite-part",
        }
    }

    /// The one scenario that can show this bug, when only one can: its
    /// self-test runs that scenario's seeds rather than the rotation's.
    /// (A hand-over never sent is S9's, which holds in fault-free runs
    /// only, a twelfth of the rotation.)
    pub fn scenario(self) -> Option<&'static str> {
        match self {
            Bug::PartialQueueCountAsNone => Some("calm"),
            // Hand-overs heard late need a stalled driver and long waits.
            Bug::TrustsLateHandOver | Bug::KeepsLostCompositePart => Some("stalls"),
            _ => None,
        }
    }

    /// Sets the simulated Redis's toggle for this bug, if it is one of the
    /// scripts' (the others live in the driver or the callers).
    pub fn inject_into(self, model: &mut inflight_testkit::model::RedisModel) {
        match self {
            Bug::AcquireIgnoresQueue => model.ignore_queue = true,
            Bug::LastLimitForAll => model.last_limit_for_all = true,
            Bug::AcrossFirstLimit => model.across_first_limit = true,
            Bug::NewcomerTakesOwedUnit => model.ignore_room = true,
            Bug::CompositeGrantsPartly => model.grant_all_unchecked = true,
            _ => {}
        }
    }

    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }

    pub fn injected(bug: Option<Bug>) -> InjectedBugs {
        InjectedBugs {
            skip_late_grant_compensation: bug == Some(Bug::NoLateGrantCompensation),
            skip_echo_check: bug == Some(Bug::NoEchoCheck),
            skip_stale_check: bug == Some(Bug::NoStaleCheck),
            redirect_as_denial: bug == Some(Bug::RedirectAsDenial),
            no_recovery: bug == Some(Bug::NoRecovery),
            release_at_response_head: bug == Some(Bug::ReleaseAtResponseHead),
            skip_wake_up: bug == Some(Bug::NoWakeUp),
            acquire_ignores_queue: bug == Some(Bug::AcquireIgnoresQueue),
            keep_alive_without_margin: bug == Some(Bug::KeepAliveWithoutMargin),
            drop_fencing_token: bug == Some(Bug::DroppedFencingToken),
            switch_forgets_identity: bug == Some(Bug::SwitchForgetsIdentity),
            releases_aged_from_recovery: bug == Some(Bug::ReleasesAgedFromRecovery),
            try_again_spends_attempts: bug == Some(Bug::TryAgainSpendsAttempts),
            partial_queue_count_as_none: bug == Some(Bug::PartialQueueCountAsNone),
            trust_late_hand_overs: bug == Some(Bug::TrustsLateHandOver),
            keep_lost_composite_parts: bug == Some(Bug::KeepsLostCompositePart),
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
        if cfg!(madsim) {
            format!(
                "MADSIM_TEST_SEED={} scripts/madsim.sh --scenario {}{bug}",
                self.seed, self.scenario
            )
        } else {
            format!(
                "cargo run --release -p inflight-sim -- --scenario {} --seed {}{bug}",
                self.scenario, self.seed
            )
        }
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

/// The end-of-run checks both harnesses share (S2, S4), and the report.
pub fn finish(scenario: &'static Scenario, seed: u64, bug: Option<Bug>, server: &ServerState) -> Report {
    let end = Duration::from_secs(3600); // after the run: the trace orders it last
    let leftover = {
        let mut model = server.model.lock().unwrap();
        // Once the run is over the harness's clock reads nothing: look one
        // waiter lifetime after the last command instead. A slot handed to a
        // waiter whose caller had just left (its `LEAVE` cut off) lasts that
        // long at most; a leaked lease lasts its TTL.
        let last = model.now_ms.max(server::EPOCH_MS + (server.elapsed_ms)());
        model.now_ms = last + callers::WAITER_LIFETIME.as_millis() as u64;
        model.all_live_leases()
    };
    let mut ledger = server.ledger.lock().unwrap();
    // S2: with every fault healed and every limiter closed, Redis holds
    // nothing, except what a reported-abandoned release left to its TTL.
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

/// S10, once every fault has healed and [`callers::S10_WINDOW`] has passed.
/// `at` is the run's virtual time, from the harness (outside a host the
/// harness's clock function reads nothing).
pub fn check_no_ghosts(server: &ServerState, at: Duration) {
    let live: Vec<(String, String)> = {
        let mut model = server.model.lock().unwrap();
        model.now_ms = model.now_ms.max(server::EPOCH_MS + at.as_millis() as u64);
        model
            .all_live_leases()
            .into_iter()
            .map(|(k, id)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&id).into_owned(),
                )
            })
            .collect()
    };
    // A release takes a round trip (at most 2 x 12 ms of jitter, plus ticks).
    let grace = Duration::from_millis(100);
    server.ledger.lock().unwrap().check_no_ghosts(at, &live, grace);
}

/// The first of seeds `0..limit` (spread over all scenarios) in which `bug`
/// breaks an invariant, with whichever harness this build runs.
/// Replays a list of regression seeds, one `SCENARIO SEED [BUG]` per line
/// (`#` starts a comment): without a bug each run must hold every
/// invariant, with one it must violate one. Panics at the first that does
/// not; returns how many ran.
pub fn replay_regressions(list: &str) -> usize {
    let mut count = 0;
    for line in list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let scenario = scenario::find(fields[0]).unwrap_or_else(|| panic!("unknown scenario in {line:?}"));
        let seed: u64 = fields[1].parse().unwrap_or_else(|_| panic!("bad seed in {line:?}"));
        let bug = fields
            .get(2)
            .map(|name| Bug::parse(name).unwrap_or_else(|| panic!("unknown bug in {line:?}")));
        let report = run_seed(scenario, seed, bug);
        match bug {
            None => assert!(report.violations.is_empty(), "{line:?}:\n{}", report.describe_failure()),
            Some(bug) => assert!(
                !report.violations.is_empty(),
                "{line:?}: bug {} no longer caught",
                bug.name()
            ),
        }
        count += 1;
    }
    count
}

/// The first of seeds `0..limit` whose run with `bug` breaks an invariant:
/// each seed's scenario of the rotation, or the bug's own scenario.
pub fn seeds_to_catch(bug: Bug, limit: u64) -> Option<u64> {
    let home = bug
        .scenario()
        .map(|name| scenario::find(name).expect("a known scenario"));
    (0..limit).find(|&seed| {
        let scenario = home.unwrap_or_else(|| scenario::for_seed(seed));
        !run_seed(scenario, seed, Some(bug)).violations.is_empty()
    })
}

/// Reads a panic's message.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}
