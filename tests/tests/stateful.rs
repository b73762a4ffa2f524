//! The stateful script test in CI: a few hundred random programs over the
//! real scripts on a real redis-server and on the model; the programs that
//! catch each regression of how the scripts compose (kept as regression
//! cases: each holds with the scripts as they are, and fails with its
//! regression); and each regression caught by random programs where they
//! find it quickly. The long run is `cargo run --release -p inflight-tests
//! --bin stateful` (see docs/simulation.md).

use inflight_tests::mutations;
use inflight_tests::stateful::{run, run_programs, ClientSetup, Options, Program, Step};
use inflight_tests::RedisServer;

#[test]
fn random_programs_keep_every_invariant_and_match_the_model() {
    let server = RedisServer::start();
    let summary =
        run_programs(server.addr(), 300, 40, 8, 1, &Options::default()).unwrap_or_else(|failure| panic!("{failure}"));
    println!("{summary:?}");
    // Every kind of step ran, many times.
    assert!(
        summary.grants > 300
            && summary.hand_overs > 20
            && summary.failovers > 50
            && summary.flushes > 20
            && summary.delivered_late > 30
            && summary.all_or_nothing > 100,
        "{summary:?}"
    );
}

fn clients() -> Vec<ClientSetup> {
    vec![
        ClientSetup {
            ttl: 800,
            lifetime: 750,
            liveness: 400,
        };
        3
    ]
}

fn acquire(client: usize, limit: u32) -> Step {
    Step::Acquire {
        client,
        weight: 1,
        limit,
        held_back: false,
    }
}

fn wait(client: usize, limit: u32) -> Step {
    Step::Wait {
        client,
        weight: 1,
        limit,
    }
}

/// A release as the client makes it (`ZREM`, `EXISTS`, `RELEASE`).
fn release(client: usize) -> Step {
    Step::Release {
        client,
        pick: 0,
        more: 0,
        how: 1,
    }
}

/// The programs that catch each regression: (its name, the program).
fn regressions() -> Vec<(&'static str, Program)> {
    vec![
        // Finding 1: w is handed a's slot and holds it; a failover restores
        // w's queue entry. Without the fix its write-back leaves the entry,
        // and b's release hands w a second slot, cutting the lease its
        // holder counts on down to a reservation.
        (
            "hand-over-to-holder",
            Program {
                clients: clients(),
                steps: vec![
                    acquire(0, 2),
                    acquire(1, 2),
                    wait(2, 2),
                    Step::Snapshot,
                    release(0),
                    Step::Messages { client: 2 },
                    Step::Failover,
                    Step::Recover {
                        client: 2,
                        held_back: false,
                    },
                    Step::Recover {
                        client: 0,
                        held_back: false,
                    },
                    // Past the hold and the write-backs' valid-until (after
                    // which b's release is a plain one again).
                    Step::Sleep { ms: 450 },
                    release(1),
                ],
            },
        ),
        // Finding 2: a1 is granted (limit 4) after the replica's copy, and
        // lost with the failover; b1 is released after the copy too. The
        // recovery releases b1 again while the hold is set: that must not
        // let a waiter of limit 3 in (a1, b2, b3 and it would be 4).
        (
            "hand-over-during-hold",
            Program {
                clients: clients(),
                steps: vec![
                    acquire(1, 3),
                    acquire(1, 3),
                    acquire(1, 3),
                    wait(2, 3),
                    wait(2, 3),
                    Step::Snapshot,
                    acquire(0, 4),
                    release(1),
                    Step::Failover,
                    Step::Recover {
                        client: 1,
                        held_back: false,
                    },
                ],
            },
        ),
        // Finding 3: a write-back held up in a connection cut off; its
        // holder recovers again and gives the lease back (with a tombstone,
        // the write-back may still run); then the held-up bytes land.
        (
            "reassert-unbounded",
            Program {
                clients: clients(),
                steps: vec![
                    acquire(0, 1),
                    Step::Failover,
                    Step::Recover {
                        client: 0,
                        held_back: true,
                    },
                    Step::GiveUp { client: 0 },
                    release(0),
                    Step::Deliver { pick: 0 },
                ],
            },
        ),
        // Finding 6: waiters of limits 2 and 4 share the queue.
        (
            "last-limit-for-all",
            Program {
                clients: clients(),
                steps: vec![
                    acquire(0, 4),
                    acquire(0, 4),
                    acquire(0, 4),
                    acquire(0, 4),
                    wait(1, 2),
                    wait(2, 4),
                    release(0),
                ],
            },
        ),
        (
            // A hand-over whose reservation ran out (another caller took
            // the slot) read only after the waiter's next check queued it
            // again: told it entered the queue again, the waiter goes on
            // under a new id and the message finds nobody.
            "never-entered-again",
            Program {
                clients: vec![
                    ClientSetup {
                        ttl: 800,
                        lifetime: 60,
                        liveness: 400,
                    };
                    3
                ],
                steps: vec![
                    acquire(0, 1),
                    wait(0, 1),
                    release(0),
                    Step::Sleep { ms: 100 },
                    acquire(1, 1),
                    Step::Check { client: 0, pick: 0 },
                    Step::Messages { client: 0 },
                ],
            },
        ),
    ]
}

#[test]
fn each_regression_program_holds_as_the_scripts_are_and_fails_with_its_regression() {
    let server = RedisServer::start();
    for (name, program) in regressions() {
        if let Err(failure) = run(server.addr(), &program, &Options::default()) {
            panic!("{name}'s program fails with the scripts as they are: {failure}");
        }
        let mutation = mutations::find(name).expect("a known regression");
        let broken = Options {
            scripts: mutation.scripts(),
            check_model: false,
        };
        let failure = run(server.addr(), &program, &broken).expect_err(name);
        println!("{name}: {}", failure.lines().next().unwrap_or_default());
    }
}

#[test]
fn random_programs_catch_the_regressions_they_reach_quickly() {
    let server = RedisServer::start();
    for name in [
        "held-hash-no-expiry",
        "last-limit-for-all",
        "batch-counts-repeats",
        "no-argument-checks",
        "fractional-arguments",
        "plain-grant-over-limit",
        "all-grants-partly",
    ] {
        let options = Options {
            scripts: mutations::find(name).expect("a known regression").scripts(),
            check_model: false,
        };
        assert!(
            run_programs(server.addr(), 300, 40, 8, 1, &options).is_err(),
            "{name} is not caught by 300 programs"
        );
    }
}

/// The fail-fast acquire's fast path (one `EXISTS` for the tombstone, the
/// queue and the hold) must answer as the full path does: the programs run
/// against the model find a fast path that jumps the queue or grants a
/// compensated id or never prunes expired units (denying for units no one
/// holds), and a grant under a higher limit that takes a unit a
/// lower-limit waiter ahead is owed (no holder sees that one: only the
/// model's fairness does), and a renamed waiter's check that ignores the id
/// it went on from (its old entry left in the queue, where the model moved
/// it).
#[test]
fn random_programs_checked_against_the_model_catch_a_careless_fast_path() {
    let server = RedisServer::start();
    for name in [
        "plain-grant-skips-queue",
        "plain-grant-skips-tombstone",
        "newcomer-takes-owed-unit",
        "plain-grant-never-prunes",
        "previous-id-ignored",
    ] {
        let options = Options {
            scripts: mutations::find(name).expect("a known regression").scripts(),
            check_model: true,
        };
        assert!(
            run_programs(server.addr(), 300, 40, 8, 1, &options).is_err(),
            "{name} is not caught by 300 programs"
        );
    }
}
