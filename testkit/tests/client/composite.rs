//! Acquires of several keys at once (`Client::acquire_all`): one call, one
//! outcome, all or nothing, and every key given back whatever happens to
//! the call.

use super::*;

fn three() -> [(&'static str, &'static str, u32); 3] {
    [("tenant", "acme", 2), ("route", "/upload", 3), ("service", "api", 5)]
}

#[test]
fn a_composite_is_one_call_and_one_outcome_holding_every_key() {
    let mut pair = Pair::connected(config(), start());
    let request = pair.acquire_all(&three());
    pair.exchange();
    let Some(Outcome::GrantedAll(leases)) = pair.outcome(request) else {
        panic!("{:?}", pair.outcome(request));
    };
    assert_eq!(leases.len(), 3);
    assert_eq!(pair.server.batches, 1, "one ACQUIRE_ALL");
    assert_eq!(pair.server.all_live_leases().len(), 3);
    assert_eq!(pair.client.stats().granted, 1, "one acquire, whatever its keys");
    pair.assert_no_leak();
    for _ in 0..3 {
        pair.release(0);
    }
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty());
}

#[test]
fn a_full_key_refuses_the_whole_composite_and_is_named() {
    let mut pair = Pair::connected(config(), start());
    for _ in 0..3 {
        pair.acquire("route", "/upload", 3);
    }
    pair.exchange();
    let request = pair.acquire_all(&three());
    pair.exchange();
    assert_eq!(pair.outcome(request), Some(&Outcome::ExceededAt(1)));
    // Only the three single leases: nothing of the refused composite.
    assert_eq!(pair.server.all_live_leases().len(), 3);
    pair.assert_no_leak();
}

#[test]
fn a_composite_abandoned_after_it_ran_gives_back_every_key() {
    let mut pair = Pair::connected(config(), start());
    let request = pair.acquire_all(&three());
    pair.to_server(usize::MAX); // it runs: three leases in Redis
    assert_eq!(pair.server.all_live_leases().len(), 3);
    pair.to_client_then_abandon(usize::MAX, request);
    assert_eq!(pair.outcome(request), None, "no outcome after abandon");
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty(), "every key compensated");
    assert_eq!(pair.client.stats().compensations, 3);
}

#[test]
fn a_composite_whose_connection_breaks_after_the_write_leaves_nothing() {
    let mut pair = Pair::connected(config(), start());
    let request = pair.acquire_all(&three());
    pair.cut(); // the bytes are still on the wire
    assert!(matches!(
        pair.outcome(request),
        Some(Outcome::Unavailable(Unavailable::ConnectionLost(_)))
    ));
    pair.settle(); // three compensations (tombstones) on a fresh connection
    pair.land_ghosts(); // then the old call reaches Redis: refused
    assert!(pair.server.all_live_leases().is_empty());
    let tombstoned = pair.server.acquires.iter().filter(|a| a.status == -1).count();
    assert_eq!(
        tombstoned, 3,
        "each part of the late call is refused by its own tombstone"
    );
    let again = pair.acquire_all(&three());
    pair.exchange();
    assert!(matches!(pair.outcome(again), Some(Outcome::GrantedAll(_))));
}

#[test]
fn a_reply_granting_part_of_a_composite_is_not_believed() {
    let mut pair = Pair::connected(config(), start());
    for _ in 0..5 {
        pair.acquire("service", "api", 5);
    }
    pair.exchange();
    // A server that grants each subject with room, whatever the others say.
    pair.server.grant_all_unchecked = true;
    let request = pair.acquire_all(&three());
    pair.exchange();
    assert!(
        matches!(
            pair.outcome(request),
            Some(Outcome::Unavailable(Unavailable::ConnectionLost(_)))
        ),
        "{:?}",
        pair.outcome(request)
    );
    pair.server.grant_all_unchecked = false;
    pair.settle();
    // The two parts it granted are given back; the five single leases stay.
    assert_eq!(pair.server.all_live_leases().len(), 5);
    pair.assert_no_leak();
}

#[test]
fn a_composite_answered_noscript_goes_again_by_text_whole() {
    let mut pair = Pair::connected(config(), start());
    pair.server.flush_scripts();
    let request = pair.acquire_all(&three());
    pair.exchange();
    assert!(matches!(pair.outcome(request), Some(Outcome::GrantedAll(_))));
    assert_eq!(pair.server.batches, 1, "one ACQUIRE_ALL ran, the resend");
    pair.assert_no_leak();
}
