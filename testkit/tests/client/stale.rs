//! Stale requests: valid-until, tombstones, compensation deadlines, promised expiry.

use super::*;

#[test]
fn an_acquire_held_back_past_its_liveness_takes_no_slot_even_after_its_compensation_gave_up() {
    let mut pair = Pair::connected(short_ttl(), start());
    let a = pair.acquire("t", "s", 1);
    pair.cut(); // the bytes sit in a stalled proxy
    assert!(matches!(
        pair.outcome(a),
        Some(Outcome::Unavailable(Unavailable::ConnectionLost(_)))
    ));
    // Redis stays out of reach for longer than liveness plus a TTL: the
    // compensation cannot get through and gives up.
    for _ in 0..40 {
        pair.advance(ms(100));
        pair.refuse();
    }
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::ReleaseAbandoned {
            of: ReleaseOf::Compensation,
            ..
        }
    )));
    // Then the held bytes run: too late, so the script refuses them.
    pair.land_ghosts();
    assert_eq!(
        pair.server.acquires.last().map(|a| a.status),
        Some(inflight_core::scripts::STALE)
    );
    assert!(pair.server.all_live_leases().is_empty(), "a ghost lease nobody holds");
}

#[test]
fn a_compensation_keeps_trying_while_its_acquire_may_still_run() {
    let mut pair = Pair::connected(short_ttl(), start());
    let a = pair.acquire("t", "s", 1);
    pair.cut();
    assert!(matches!(pair.outcome(a), Some(Outcome::Unavailable(_))));
    for _ in 0..5 {
        pair.advance(ms(100));
        pair.refuse();
    }
    pair.land_ghosts(); // the held acquire runs (still valid): a lease exists
    assert_eq!(pair.server.acquires.last().map(|a| a.status), Some(1));
    // Out of reach for longer than the TTL, but not past the acquire's
    // valid-until: the compensation must still be there when Redis returns.
    for _ in 0..10 {
        pair.advance(ms(100));
        pair.refuse();
    }
    assert!(
        pair.client.outstanding_releases() > 0,
        "the compensation gave up too early"
    );
    pair.settle(); // Redis is back: the compensation removes what is left
    assert!(pair.server.all_live_leases().is_empty());
    assert_eq!(pair.client.stats().releases_abandoned, 0);
}

#[test]
fn an_acquire_held_back_past_its_leases_expiry_takes_nothing() {
    // Valid for its liveness (2 s), but its expiry is absolute (a TTL of
    // 1 s after it was written): run later than that, it would make a lease
    // already over, so it makes none; it cannot outlive its TTL by its delay.
    let mut pair = Pair::connected(short_ttl(), start());
    pair.acquire("t", "s", 1);
    pair.cut();
    for _ in 0..12 {
        pair.advance(ms(100));
        pair.refuse();
    }
    pair.land_ghosts();
    assert_eq!(
        pair.server.acquires.last().map(|a| a.status),
        Some(inflight_core::scripts::STALE)
    );
    assert!(pair.server.all_live_leases().is_empty());
}

#[test]
fn a_tombstone_lives_exactly_until_its_acquire_turns_stale() {
    let mut pair = Pair::connected(short_ttl(), start());
    pair.acquire("t", "s", 1);
    pair.cut();
    pair.settle(); // the compensation lands first, with its tombstone
    pair.land_ghosts();
    assert_eq!(pair.server.acquires.last().map(|a| a.status), Some(-1));
    // Past the acquire's valid-until the tombstone is gone: nothing lingers.
    pair.advance(Duration::from_secs(3));
    assert_eq!(pair.server.key_count(), 0, "lease sets and tombstones left");
}

#[test]
fn a_granted_lease_is_promised_no_longer_than_redis_keeps_it() {
    let mut pair = Pair::connected(short_ttl(), start());
    let sent = pair.now;
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    let Some(Outcome::Granted(lease)) = pair.outcome(a) else {
        panic!("{:?}", pair.outcome(a))
    };
    // Redis scores it from its own (rounded-down) clock when the script runs,
    // no earlier than the send; we promise a little less than the TTL.
    assert!(lease.expires_at() < sent + short_ttl().lease_ttl);
    assert!(lease.expires_at() >= sent + short_ttl().lease_ttl - ms(5));
}
