//! Batching: acquires and releases of one wake-up sharing commands.

use super::*;

#[test]
fn acquires_of_one_subject_in_one_wake_up_go_out_as_one_batch() {
    let mut pair = Pair::connected(config(), start());
    let burst = pair.acquire_burst("t", "s", 2, 4);
    let other = pair.acquire_burst("t", "other", 2, 1);
    pair.exchange();
    assert_eq!(pair.server.batches, 1, "the four acquires of t/s share one call");
    let granted = burst
        .iter()
        .filter(|r| matches!(pair.outcome(**r), Some(Outcome::Granted(_))))
        .count();
    let exceeded = burst
        .iter()
        .filter(|r| pair.outcome(**r) == Some(&Outcome::Exceeded))
        .count();
    assert_eq!((granted, exceeded), (2, 2), "the limit holds inside a batch");
    assert!(matches!(pair.outcome(other[0]), Some(Outcome::Granted(_))));
    pair.assert_no_leak();
    let stats = pair.client.stats();
    assert_eq!((stats.granted, stats.denied), (3, 2));
}

#[test]
fn a_batch_member_abandoned_before_it_is_written_is_never_sent() {
    let mut pair = Pair::connected(config(), start());
    let requests: Vec<_> = (0..3)
        .map(|_| pair.client.acquire(pair.now, &key("t", "s"), limit(5)))
        .collect();
    pair.client.abandon(pair.now, requests[1]);
    assert_eq!(pair.client.in_flight_calls(), 2);
    let mut written = Vec::new();
    while let Some(transmit) = pair.client.poll_transmit() {
        written.extend_from_slice(&transmit.data);
    }
    let text = String::from_utf8_lossy(&written);
    let lease = |r| inflight_testkit::plain_lease_id(pair.entropy(), r).to_string();
    assert!(text.contains(&lease(requests[0])) && text.contains(&lease(requests[2])));
    assert!(
        !text.contains(&lease(requests[1])),
        "an abandoned, unwritten acquire is dropped"
    );
}

#[test]
fn a_batch_reply_with_one_wrong_echo_makes_every_member_ambiguous() {
    use inflight_testkit::model::{ModelConnection, RedisModel};
    let mut client = inflight_core::Client::new(config(), [7; 16], start()).unwrap();
    let Some(inflight_core::event::Action::Connect(id, _)) = client.poll_action() else {
        panic!("a new client connects");
    };
    client.handle_connected(start(), id);
    // The handshake, answered by the model.
    let mut model = RedisModel::new(1_700_000_000_000);
    let mut connection = ModelConnection::new();
    // (Two round trips: the marker goes once `INFO` says this is a primary.)
    while let Some(handshake) = client.poll_transmit() {
        let reply = model.handle(&mut connection, &handshake.data).unwrap();
        client.handle_input(start(), id, &reply);
    }
    assert_eq!(inflight_testkit::connection(&client), Some((id, true)));
    let requests: Vec<_> = (0..3)
        .map(|_| client.acquire(start(), &key("t", "s"), limit(5)))
        .collect();
    let batch = client.poll_transmit().unwrap().data;
    // Redis runs the batch (the leases exist), but the reply lies about one id.
    let honest = String::from_utf8(model.handle(&mut connection, &batch).unwrap().to_vec()).unwrap();
    let victim = inflight_testkit::plain_lease_id([7; 16], requests[1]).to_string();
    let lie = honest.replace(&victim, &victim.replace('0', "1"));
    assert_ne!(lie, honest);
    client.handle_input(start(), id, lie.as_bytes());
    let mut ambiguous = 0;
    while let Some(event) = client.poll_event() {
        if let Event::Acquired(_, outcome) = event {
            assert_eq!(
                outcome,
                Outcome::Unavailable(Unavailable::ConnectionLost(ConnectionError::EchoMismatch))
            );
            ambiguous += 1;
        }
    }
    assert_eq!(ambiguous, 3, "no member of an untrusted reply is believed");
    assert_eq!(client.stats().compensations, 3);
    assert_ne!(
        inflight_testkit::connection(&client).map(|c| c.0),
        Some(id),
        "the connection is retired"
    );
}

#[test]
fn a_batch_told_noscript_is_resent_one_by_one_by_eval() {
    let mut pair = Pair::connected(config(), start());
    pair.server.flush_scripts();
    let burst = pair.acquire_burst("t", "s", 3, 3);
    pair.exchange();
    for request in burst {
        assert!(matches!(pair.outcome(request), Some(Outcome::Granted(_))));
    }
    // The script was reloaded: the next burst is one batch again.
    let batches = pair.server.batches;
    let more = pair.acquire_burst("t", "s", 5, 2);
    pair.exchange();
    assert_eq!(pair.server.batches, batches + 1);
    assert!(more
        .iter()
        .all(|r| matches!(pair.outcome(*r), Some(Outcome::Granted(_)))));
    pair.assert_no_leak();
}

#[test]
fn releases_of_one_subject_in_one_wake_up_go_out_as_one_zrem() {
    let mut pair = Pair::connected(config(), start());
    pair.acquire_burst("t", "s", 5, 3);
    pair.acquire_burst("t", "other", 5, 1);
    pair.exchange();
    assert_eq!(pair.held.len(), 4);
    let zrems = pair.server.zrems;
    pair.release_burst(4);
    pair.exchange();
    assert_eq!(pair.server.zrems, zrems + 2, "one ZREM per subject");
    let released = pair
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Released {
                    of: ReleaseOf::Holder,
                    ..
                }
            )
        })
        .count();
    assert_eq!(released, 4);
    assert!(pair.server.all_live_leases().is_empty());
    assert_eq!(pair.client.outstanding_releases(), 0);
}

#[test]
fn a_release_batch_cut_off_is_retried_and_still_frees_every_slot() {
    let mut pair = Pair::connected(config(), start());
    pair.acquire_burst("t", "s", 5, 3);
    pair.exchange();
    pair.release_burst(3);
    pair.cut(); // the ZREM never arrives
    assert_eq!(pair.client.outstanding_releases(), 3);
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty());
    assert!(pair.client.stats().release_retries >= 3);
    pair.assert_no_leak();
}

#[test]
fn batches_never_outgrow_the_reply_limits() {
    let config = Config {
        reply_limits: inflight_core::ReplyLimits {
            max_array_len: 10,
            ..inflight_core::ReplyLimits::default()
        },
        ..config()
    };
    let mut pair = Pair::connected(config, start());
    let burst = pair.acquire_burst("t", "s", 10, 7);
    pair.exchange();
    assert_eq!(
        pair.server.batches, 2,
        "7 acquires in batches of at most 3 (10 reply items)"
    );
    assert!(burst
        .iter()
        .all(|r| matches!(pair.outcome(*r), Some(Outcome::Granted(_)))));
    assert_eq!(pair.client.stats().connections_replaced, 0);
    pair.assert_no_leak();
}

#[test]
fn the_largest_release_batch_reaches_the_model_whole() {
    let mut pair = Pair::connected(config(), start());
    let count = inflight_core::scripts::MAX_RELEASE_BATCH + 3;
    for _ in 0..count.div_ceil(inflight_core::scripts::MAX_BATCH) {
        pair.acquire_burst("t", "s", 1000, inflight_core::scripts::MAX_BATCH);
        pair.exchange();
    }
    assert!(pair.held.len() >= count);
    let zrems = pair.server.zrems;
    pair.release_burst(count);
    pair.exchange();
    assert_eq!(
        pair.server.zrems,
        zrems + 2,
        "{count} releases: one full ZREM and one more"
    );
    assert_eq!(pair.client.stats().connections_replaced, 0);
    pair.assert_no_leak();
}
