//! The simulator under madsim (`scripts/madsim.sh`): random task order at
//! every poll, so cancellations, timers and replies race in every order the
//! seed picks. Compiled only with `--cfg madsim`.
#![cfg(madsim)]

use inflight_sim::madsim_harness::fleet;
use inflight_sim::{scenario, seeds_to_catch, Bug};

/// One seed per run; `MADSIM_TEST_NUM=N` runs N seeds, `MADSIM_TEST_SEED`
/// picks the first, and `MADSIM_TEST_CHECK_DETERMINISM=1` runs each twice and
/// compares. A failure prints its seed (madsim prints how to replay it).
#[madsim::test]
async fn the_fleet_keeps_every_invariant() {
    let seed = madsim::runtime::Handle::current().seed();
    // `TRACE_SEED=N` prints the driver's and madsim's logs of seed N.
    if std::env::var("TRACE_SEED").ok().and_then(|s| s.parse::<u64>().ok()) == Some(seed) {
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(std::io::stderr)
            .init();
    }
    let report = fleet(scenario::for_seed(seed), seed, None).await;
    // madsim keeps some state from one seed to the next within a process
    // (task ids count on, for one), and seeds have failed only after the
    // ones before them (failover 150 and 414, run from seed 1): when a seed
    // passes alone, replay the sequence up to it.
    let first: u64 = std::env::var("MADSIM_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(seed);
    assert!(
        report.violations.is_empty(),
        "\n{}  if it passes alone, replay the sequence: TRACE_SEED={seed} MADSIM_TEST_SEED={first} MADSIM_TEST_NUM={} scripts/madsim.sh\n",
        report.describe_failure(),
        seed.saturating_sub(first) + 1,
    );
}

#[test]
fn injected_bugs_are_caught_within_200_seeds() {
    // The Sentinel scenario's bugs: that scenario runs under turmoil only
    // (docs/simulation.md).
    let turmoil_only = [Bug::SwitchForgetsIdentity, Bug::ReleasesAgedFromRecovery];
    for bug in Bug::ALL.into_iter().filter(|bug| !turmoil_only.contains(bug)) {
        let caught = seeds_to_catch(bug, 200);
        println!("madsim: {} caught after {:?} seeds", bug.name(), caught.map(|s| s + 1));
        assert!(caught.is_some(), "the madsim harness cannot see {}", bug.name());
    }
}

/// Seeds the madsim harness once failed on, each in its own runtime (as the
/// CLI replays them): `madsim_regressions.txt`, one `SCENARIO SEED [BUG]` per line.
#[test]
fn madsim_regression_seeds_stay_clean() {
    let count = inflight_sim::replay_regressions(include_str!("../madsim_regressions.txt"));
    assert!(count > 0, "the madsim regression list is empty");
}
