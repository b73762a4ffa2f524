//! Property test: the `Client` under random interleavings of callers, wire
//! chunking, timeouts, disconnects, late bytes and script flushes.
//!
//! The test bench's ledger checks after every step that each request gets at
//! most one outcome, never after abandon, that a grant carries the request's own
//! lease id and is live in Redis, and that `Exceeded` only follows a denial the
//! model really made. At the end the wire heals, late bytes land, everything
//! settles, and then every lease in Redis must be one the test still holds (or
//! one whose release was reported abandoned); after releasing those, none.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::testkit::Pair;
use crate::Config;

#[derive(Clone, Debug)]
pub enum Op {
    Acquire { subject: u8, limit: u8 },
    Abandon(usize),
    Release(usize),
    ToServer(usize),
    ToClient(usize),
    Advance(u64),
    Accept,
    Refuse,
    Cut,
    LandGhosts,
    FlushScripts,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 1u8..4).prop_map(|(subject, limit)| Op::Acquire { subject, limit }),
        2 => any::<usize>().prop_map(Op::Abandon),
        3 => any::<usize>().prop_map(Op::Release),
        6 => (1usize..400).prop_map(Op::ToServer),
        6 => (1usize..400).prop_map(Op::ToClient),
        3 => (0u64..2_500).prop_map(Op::Advance),
        3 => Just(Op::Accept),
        1 => Just(Op::Refuse),
        1 => Just(Op::Cut),
        1 => Just(Op::LandGhosts),
        1 => Just(Op::FlushScripts),
    ]
}

fn config() -> Config {
    Config {
        // Longer than any test run, so expiry never hides a leak.
        lease_ttl: Duration::from_secs(24 * 3600),
        max_in_flight: 6,
        ..Config::default()
    }
}

/// Runs one sequence; panics (with the ledger's message) on a violation.
pub fn run(ops: &[Op], start: Instant) {
    let mut pair = Pair::new(config(), start);
    let mut outstanding = Vec::new();
    for op in ops {
        match *op {
            Op::Acquire { subject, limit } => {
                outstanding.push(pair.acquire("ns", &format!("s{subject}"), u32::from(limit)));
            }
            Op::Abandon(i) if !outstanding.is_empty() => {
                let request = outstanding.remove(i % outstanding.len());
                pair.abandon(request);
            }
            Op::Release(i) if !pair.held.is_empty() => {
                let index = i % pair.held.len();
                pair.release(index);
            }
            Op::ToServer(n) => pair.to_server(n),
            Op::ToClient(n) => pair.to_client(n),
            Op::Advance(ms) => pair.advance(Duration::from_millis(ms)),
            Op::Accept => pair.accept(),
            Op::Refuse => pair.refuse(),
            Op::Cut => pair.cut(),
            Op::LandGhosts => pair.land_ghosts(),
            Op::FlushScripts => pair.server.flush_scripts(),
            Op::Abandon(_) | Op::Release(_) => {}
        }
    }
    // Heal: the network works and every timer runs out; then the bytes still
    // stuck on dead connections land, after the compensations that covered them.
    pair.settle();
    pair.land_ghosts();
    pair.settle();
    assert!(
        pair.unanswered().is_empty(),
        "requests without an outcome: {:?}",
        pair.unanswered()
    );
    pair.assert_no_leak();
    while !pair.held.is_empty() {
        pair.release(0);
    }
    pair.settle();
    pair.assert_no_leak();
    assert_eq!(pair.client.outstanding_releases(), 0);
}

#[allow(clippy::disallowed_methods)] // the one arbitrary starting instant
fn start() -> Instant {
    Instant::now()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        .. ProptestConfig::default()
    })]

    #[test]
    fn client_keeps_its_promises_under_any_interleaving(ops in proptest::collection::vec(op(), 1..200)) {
        run(&ops, start());
    }
}
