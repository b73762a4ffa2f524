//! Property test: the `Client` under random interleavings of callers, wire
//! chunking, timeouts, disconnects, late bytes and script flushes.
//!
//! The test bench's ledger checks after every step that each request gets at
//! most one outcome, never after abandon, that a grant carries the request's own
//! lease id and is live in Redis, and that `Exceeded` only follows a denial the
//! model really made. At the end the wire heals, late bytes land, everything
//! settles, and then every lease in Redis must be one the test still holds (or
//! one whose release was reported abandoned); after releasing those, none.
//! The same driver (`fuzzing::run_ops`) backs the `client_ops` fuzz target.

use std::time::Instant;

use proptest::prelude::*;

use inflight_testkit::fuzzing::{run_ops, Op};

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 1u8..4).prop_map(|(subject, limit)| Op::Acquire { subject, limit }),
        2 => (0u8..3, 1u8..4, 0u8..2).prop_map(|(subject, limit, weight)| Op::AcquireWeighted { subject, limit, weight }),
        2 => (0u8..3, 1u8..4, 0u8..6).prop_map(|(subject, limit, count)| Op::AcquireBurst { subject, limit, count }),
        2 => any::<usize>().prop_map(Op::Abandon),
        2 => (0u16..400, any::<usize>()).prop_map(|(n, i)| Op::ToClientThenAbandon(n, i)),
        3 => any::<usize>().prop_map(Op::Release),
        2 => any::<usize>().prop_map(Op::Renew),
        2 => any::<u8>().prop_map(Op::ReleaseBurst),
        6 => (0u16..400).prop_map(Op::ToServer),
        6 => (0u16..400).prop_map(Op::ToClient),
        3 => (0u16..2_500).prop_map(Op::Advance),
        3 => Just(Op::Accept),
        1 => Just(Op::Refuse),
        1 => Just(Op::Cut),
        1 => Just(Op::LandGhosts),
        1 => Just(Op::FlushScripts),
        2 => (3u8..8, 1u8..4).prop_map(|(subjects, limit)| Op::AcquireAll { subjects, limit }),
    ]
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
        run_ops(&ops, start());
    }
}
