//! Acquires: grants, denials, late grants, timeouts, the in-flight cap, NOSCRIPT, fail-open.

use super::*;

#[test]
fn grants_up_to_the_limit_denies_past_it_and_a_release_admits_again() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("tier", "acme", 2);
    let b = pair.acquire("tier", "acme", 2);
    let c = pair.acquire("tier", "acme", 2);
    let other = pair.acquire("tier", "globex", 2);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
    assert_eq!(pair.outcome(c), Some(&Outcome::Exceeded));
    assert!(matches!(pair.outcome(other), Some(Outcome::Granted(_))));

    pair.release(0);
    pair.exchange();
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::Released {
            of: ReleaseOf::Holder,
            ..
        }
    )));
    let d = pair.acquire("tier", "acme", 2);
    pair.exchange();
    assert!(matches!(pair.outcome(d), Some(Outcome::Granted(_))));
    pair.assert_no_leak();
    assert_eq!(pair.client.stats().granted, 4);
    assert_eq!(pair.client.stats().denied, 1);
}

#[test]
fn a_grant_for_an_abandoned_caller_is_compensated_and_never_delivered() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX); // Redis grants it...
    pair.abandon(a); // ...but the caller is gone before the reply.
    pair.settle();
    assert_eq!(pair.outcome(a), None);
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::Released {
            of: ReleaseOf::Compensation,
            ..
        }
    )));
    assert!(pair.server.all_live_leases().is_empty());
    // The slot is free again for the next caller.
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
}

#[test]
fn an_outcome_not_yet_taken_is_withdrawn_when_its_caller_leaves() {
    // A grant: the reply reaches the client and the caller leaves before the
    // driver takes a single event. The lease goes back; nothing is delivered.
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX);
    pair.to_client_then_abandon(usize::MAX, a);
    pair.settle();
    assert_eq!(pair.outcome(a), None);
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::Released {
            of: ReleaseOf::Compensation,
            ..
        }
    )));
    assert!(pair.server.all_live_leases().is_empty());
    let stats = pair.client.stats();
    assert_eq!((stats.granted, stats.compensations), (0, 1));

    // A denial, likewise: withdrawn and not counted.
    let held = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(held), Some(Outcome::Granted(_))));
    let b = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX);
    pair.to_client_then_abandon(usize::MAX, b);
    pair.settle();
    assert_eq!(pair.outcome(b), None);
    assert_eq!(pair.client.stats().denied, 0);
}

#[test]
fn a_caller_timeout_keeps_a_slow_connection_and_compensates_the_late_grant() {
    let mut pair = Pair::connected(config(), start());
    let (connection, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX);
    pair.advance(config().acquire_timeout);
    assert_eq!(pair.outcome(a), Some(&Outcome::Unavailable(Unavailable::Timeout)));
    // The reply arrives late, but within the liveness budget.
    pair.advance(ms(500));
    pair.exchange();
    assert_eq!(
        inflight_testkit::connection(&pair.client),
        Some((connection, true)),
        "a slow reply must not retire the connection"
    );
    assert!(
        pair.server.all_live_leases().is_empty(),
        "the late grant was not compensated"
    );
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
    assert_eq!(inflight_testkit::connection(&pair.client), Some((connection, true)));
}

#[test]
fn a_reply_echoing_another_lease_retires_the_connection_and_is_unavailable() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 1);
    // A denial echoing someone else's id: not evidence of anything.
    pair.inject(b"*4\r\n:0\r\n$38\r\n00000000000000000000000000000abc-99999\r\n:0\r\n:0\r\n");
    assert_eq!(
        pair.outcome(a),
        Some(&Outcome::Unavailable(Unavailable::ConnectionLost(
            ConnectionError::EchoMismatch
        )))
    );
    assert!(pair
        .events
        .contains(&Event::Retired(first, ConnectionError::EchoMismatch)));
    assert_eq!(pair.client.stats().denied, 0);
    // Its own acquire may still land (the bytes were sent): compensation and
    // the tombstone make sure it takes no slot.
    pair.land_ghosts();
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty());
    assert_ne!(inflight_testkit::connection(&pair.client).unwrap().0, first);
}

#[test]
fn an_acquire_landing_after_its_own_compensation_takes_no_slot() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.cut(); // the bytes are still on the wire
    assert!(matches!(
        pair.outcome(a),
        Some(Outcome::Unavailable(Unavailable::ConnectionLost(_)))
    ));
    pair.settle(); // compensation goes out on a fresh connection first
    pair.land_ghosts(); // then the old acquire reaches Redis
    assert_eq!(pair.server.acquires.last().map(|a| a.status), Some(-1));
    assert!(pair.server.all_live_leases().is_empty());
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
}

#[test]
fn the_in_flight_cap_refuses_at_once_and_leaves_the_connection_healthy() {
    let mut pair = Pair::connected(
        Config {
            max_in_flight: 2,
            ..config()
        },
        start(),
    );
    let (connection, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 5);
    let b = pair.acquire("t", "s", 5);
    let c = pair.acquire("t", "s", 5);
    assert_eq!(pair.outcome(c), Some(&Outcome::Unavailable(Unavailable::Overloaded)));
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
    let d = pair.acquire("t", "s", 5);
    pair.exchange();
    assert!(matches!(pair.outcome(d), Some(Outcome::Granted(_))));
    assert_eq!(inflight_testkit::connection(&pair.client), Some((connection, true)));
}

#[test]
fn noscript_falls_back_to_eval_and_reloads_the_script() {
    let mut pair = Pair::connected(config(), start());
    pair.server.flush_scripts();
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    // The reload put the script back: the next acquire goes by SHA.
    let b = pair.acquire("t", "s", 2);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
    assert_eq!(pair.server.acquires.len(), 2);
    pair.assert_no_leak();
}

#[test]
fn fail_open_policy_lets_unanswerable_requests_through_and_counts_them() {
    let mut pair = Pair::connected(
        Config {
            unavailable_policy: UnavailablePolicy::Allow,
            ..config()
        },
        start(),
    );
    let a = pair.acquire("t", "s", 1);
    pair.advance(config().acquire_timeout);
    assert_eq!(pair.outcome(a), Some(&Outcome::FailOpen(Unavailable::Timeout)));
    assert_eq!(pair.client.stats().fail_open, 1);
    pair.settle();
    pair.assert_no_leak();
}

#[test]
fn a_request_goes_by_the_id_its_caller_drew_and_another_clients_id_is_refused_unsent() {
    let pair = Pair::connected(config(), start());
    let (mut client, now) = (pair.client, pair.now);
    let keys = inflight_core::key::SubjectKeys::new(&client.config().key_prefix, &key("t", "s"));
    let (limit, claim) = (limit(1), inflight_core::Claim::default());
    let written = |client: &mut inflight_core::Client| {
        let mut bytes = Vec::new();
        while let Some(transmit) = client.poll_transmit() {
            bytes.extend_from_slice(&transmit.data);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let lease = |id| inflight_testkit::plain_lease_id([7; 16], id).to_string();
    // Drawn ahead, on the callers' side (one on another thread), and used
    // in an order other than the draws'.
    let ids = client.request_ids();
    let (first, second) = (ids.draw(), std::thread::spawn(move || ids.draw()).join().unwrap());
    let (first_id, second_id) = (first.id(), second.id());
    assert_ne!(first_id, second_id);
    let named = client.acquire_claim(now, second, keys.clone(), limit, &claim, None);
    assert_eq!(named, Ok(second_id));
    let text = written(&mut client);
    assert!(text.contains(&lease(second_id)) && !text.contains(&lease(first_id)));

    // Another client's id could repeat one of ours (and with it a lease id):
    // refused before anything is written.
    let other = inflight_core::Client::new(config(), [9; 16], now).unwrap();
    let foreign = other.request_ids().draw();
    let foreign_id = foreign.id();
    let refused = client.acquire_claim(now, foreign, keys.clone(), limit, &claim, None);
    let expected = inflight_core::ClaimError::Foreign(inflight_core::ForeignRequest(foreign_id));
    assert_eq!(refused, Err(expected));
    assert_eq!(written(&mut client), "", "nothing is written for a refused id");
    assert_eq!(client.in_flight_calls(), 1);

    // The id drawn first still names its own request, later; an id the
    // client draws for itself never repeats a caller's.
    let late = client.acquire_claim(now, first, keys, limit, &claim, None);
    assert_eq!(late, Ok(first_id));
    assert!(written(&mut client).contains(&lease(first_id)));
    let own = client.acquire(now, &key("t", "s"), limit);
    assert!(own != first_id && own != second_id);
}

#[test]
fn a_timeout_that_passed_before_the_call_reached_the_client_ends_it_unwritten() {
    let mut pair = Pair::connected(config(), start());
    // The caller asked a whole timeout ago; its driver read the call only now.
    let asked = pair.now;
    pair.advance(config().acquire_timeout);
    let a = pair.acquire_asked("t", "s", 1, 1, asked);
    pair.exchange();
    assert_eq!(pair.outcome(a), Some(&Outcome::Unavailable(Unavailable::Timeout)));
    assert!(pair.server.acquires.is_empty(), "it was written");
    // Asked a moment ago, the next one is written and granted.
    let b = pair.acquire_asked("t", "s", 1, 1, pair.now - ms(1));
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
    pair.assert_no_leak();
}
