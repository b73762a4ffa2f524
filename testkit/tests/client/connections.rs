//! Connections: retirement, handshakes, passwords, backoff and its jitter, the server clock.

use super::*;

#[test]
fn a_stalled_connection_is_retired_after_the_liveness_budget_and_recovers() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX); // executed, reply stuck
    pair.advance(config().request_liveness);
    assert_eq!(pair.outcome(a), Some(&Outcome::Unavailable(Unavailable::Timeout)));
    assert!(pair.events.contains(&Event::Retired(first, ConnectionError::Stalled)));
    pair.settle();
    assert!(
        pair.server.all_live_leases().is_empty(),
        "the ambiguous acquire was not compensated"
    );
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
}

#[test]
fn garbage_or_unsolicited_replies_retire_the_connection() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = inflight_testkit::connection(&pair.client).unwrap();
    pair.inject(b"+OK\r\n");
    assert!(pair.events.contains(&Event::Retired(
        first,
        ConnectionError::Protocol(ProtocolError::Unsolicited)
    )));

    pair.settle();
    let (second, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.inject(b"$4611686018427387904\r\n");
    assert!(matches!(
        pair.outcome(a),
        Some(Outcome::Unavailable(Unavailable::ConnectionLost(_)))
    ));
    assert!(pair
        .events
        .iter()
        .any(|e| matches!(e, Event::Retired(id, ConnectionError::Protocol(_)) if *id == second)));
    pair.land_ghosts();
    pair.settle();
    pair.assert_no_leak();
}

#[test]
fn server_errors_are_unavailable_and_some_retire() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = inflight_testkit::connection(&pair.client).unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.inject(b"-BUSY Redis is busy running a script\r\n");
    let Some(Outcome::Unavailable(Unavailable::Server(error))) = pair.outcome(a) else {
        panic!("{:?}", pair.outcome(a))
    };
    assert_eq!(error.kind(), ServerErrorKind::Busy);
    assert_eq!(error.message(), "BUSY Redis is busy running a script");
    assert_eq!(inflight_testkit::connection(&pair.client), Some((first, true)));
    assert_eq!(
        pair.client.stats().compensations,
        0,
        "a refused command created nothing"
    );

    let b = pair.acquire("t", "s", 1);
    pair.inject(b"-READONLY You can't write against a read only replica.\r\n");
    assert!(matches!(
        pair.outcome(b),
        Some(Outcome::Unavailable(Unavailable::Server(_)))
    ));
    assert!(matches!(pair.events.last(), Some(Event::Retired(id, ConnectionError::Server(_))) if *id == first));
}

#[test]
fn an_unreachable_server_fails_fast_during_backoff_and_recovery_is_automatic() {
    let mut pair = Pair::new(config(), start());
    let a = pair.acquire("t", "s", 1); // waits for the first connection
    pair.refuse();
    assert!(matches!(
        pair.outcome(a),
        Some(Outcome::Unavailable(Unavailable::NotConnected(ConnectionError::Closed)))
    ));
    assert!(pair.events.iter().any(|e| matches!(e, Event::ConnectFailed(..))));
    let b = pair.acquire("t", "s", 1);
    assert!(matches!(
        pair.outcome(b),
        Some(Outcome::Unavailable(Unavailable::NotConnected(_)))
    ));
    // Backoff grows while the server stays away, then it comes back.
    for _ in 0..5 {
        let at = pair.client.poll_timeout().unwrap();
        pair.advance(at.saturating_duration_since(pair.now));
        pair.refuse();
    }
    let at = pair.client.poll_timeout().unwrap();
    pair.advance(at.saturating_duration_since(pair.now));
    pair.accept();
    pair.exchange();
    let c = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(c), Some(Outcome::Granted(_))));
}

#[test]
fn a_handshake_that_never_answers_times_out() {
    let mut pair = Pair::new(config(), start());
    pair.accept(); // TCP is up, Redis says nothing
    pair.advance(config().connect_timeout);
    assert!(pair
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectFailed(_, ConnectionError::ConnectTimeout))));
}

#[test]
fn a_wrong_password_fails_the_handshake_with_an_auth_error() {
    let mut pair = Pair::new(
        Config {
            credentials: Some(Credentials {
                username: None,
                password: "wrong".into(),
            }),
            ..config()
        },
        start(),
    );
    pair.server.password = Some("right".into());
    pair.accept();
    pair.exchange();
    assert!(pair
        .events
        .iter()
        .any(|e| matches!(e, Event::ConnectFailed(_, ConnectionError::Auth(m)) if m.starts_with("WRONGPASS"))));
}

#[test]
fn the_right_password_connects() {
    let mut pair = Pair::new(
        Config {
            credentials: Some(Credentials {
                username: None,
                password: "right".into(),
            }),
            database: 2,
            ..config()
        },
        start(),
    );
    pair.server.password = Some("right".into());
    pair.accept();
    pair.exchange();
    assert!(inflight_testkit::connection(&pair.client).is_some_and(|(_, ready)| ready));
}

#[test]
fn poll_timeout_is_none_when_idle_and_a_probe_while_a_lease_is_held() {
    let mut pair = Pair::connected(config(), start());
    assert_eq!(pair.client.poll_timeout(), None);
    pair.acquire("t", "s", 1);
    assert!(pair.client.poll_timeout().is_some());
    pair.exchange();
    // Something is at stake (a lease to write back after a failover): the
    // idle connection is probed.
    let probe = pair.now + config().idle_probe;
    assert_eq!(pair.client.next_timer(None), Some((probe, inflight_core::Timer::Probe)));
    pair.release(0);
    pair.exchange();
    assert_eq!(pair.client.poll_timeout(), None);
}

#[test]
fn a_host_that_dies_silently_is_found_by_the_idle_probe() {
    let mut pair = Pair::connected(config(), start());
    let first = inflight_testkit::connection(&pair.client).unwrap().0;
    pair.acquire("t", "s", 1);
    pair.exchange();
    // Answered probes keep the connection.
    for _ in 0..3 {
        pair.advance(config().idle_probe);
        pair.exchange();
    }
    assert_eq!(inflight_testkit::connection(&pair.client).unwrap().0, first);
    assert_eq!(pair.client.stats().connections_replaced, 0);
    // The host dies without a word: the probe goes unanswered, and its
    // liveness retires the connection (a new one then finds the failover).
    pair.advance(config().idle_probe);
    pair.advance(config().request_liveness);
    assert_eq!(pair.client.stats().connections_replaced, 1);
    assert!(pair
        .events
        .iter()
        .any(|event| matches!(event, Event::Retired(id, ConnectionError::Stalled) if *id == first)));
}

#[test]
fn reconnect_backoff_is_jittered_from_the_entropy_and_replays_with_it() {
    let a = reconnect_delays([1; 16], 8);
    let b = reconnect_delays([2; 16], 8);
    assert_eq!(a, reconnect_delays([1; 16], 8), "same entropy, same delays");
    assert_ne!(a, b, "a fleet does not reconnect in lockstep");
    let (initial, max) = (config().reconnect_initial_backoff, config().reconnect_max_backoff);
    for delays in [a, b] {
        for (failures, delay) in (1u32..).zip(delays) {
            let full = (initial * 2u32.pow(failures - 1)).min(max);
            assert!(
                delay >= full / 2 && delay <= full,
                "attempt {failures}: {delay:?} for {full:?}"
            );
        }
    }
}

#[test]
fn the_server_clock_is_read_again_while_requests_flow() {
    let mut pair = Pair::connected(short_ttl(), start());
    let times = |pair: &Pair| pair.server.times;
    let after_handshake = times(&pair);
    assert_eq!(after_handshake, 1, "the handshake reads the clock once");
    pair.advance(Duration::from_secs(11));
    assert_eq!(times(&pair), 1, "an idle client reads nothing");
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    assert_eq!(times(&pair), 2, "the first request after 10 s reads it again");
    pair.acquire("t", "s", 5);
    pair.exchange();
    assert_eq!(times(&pair), 2);
}

#[test]
fn a_redis_cluster_node_is_refused_at_the_handshake() {
    let mut pair = Pair::new(config(), start());
    pair.server.cluster_enabled = true;
    pair.accept();
    pair.exchange();
    assert!(
        pair.events
            .iter()
            .any(|e| matches!(e, Event::ConnectFailed(_, ConnectionError::ClusterMode))),
        "{:?}",
        pair.events
    );
    assert_eq!(
        inflight_testkit::connection(&pair.client),
        None,
        "backing off, not using the node"
    );
    // A standalone server is used as before.
    pair.server.cluster_enabled = false;
    pair.settle();
    assert!(inflight_testkit::connection(&pair.client).is_some_and(|(_, ready)| ready));
}
