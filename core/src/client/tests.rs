//! Protocol stories for the `Client`, told through the test bench.

use std::time::{Duration, Instant};

use crate::event::{ConnectionError, Event, Outcome, ReleaseFailure, Renewal, Unavailable};
use crate::resp::ProtocolError;
use crate::testkit::Pair;
use crate::{Config, Credentials, ServerErrorKind, UnavailablePolicy};

/// The one clock read of these tests: an arbitrary starting point.
#[allow(clippy::disallowed_methods)]
fn start() -> Instant {
    Instant::now()
}

fn config() -> Config {
    Config {
        lease_ttl: Duration::from_secs(3600),
        ..Config::default()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

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
            compensation: false,
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
fn a_release_goes_out_before_an_acquire_that_follows_it_in_one_wake_up() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    for _ in 0..3 {
        // The permit is dropped and the same caller acquires at once: the
        // slot it gave back is free by the time its acquire runs.
        let again = pair.release_then_acquire(0, "t", "s", 1);
        pair.exchange();
        assert!(
            matches!(pair.outcome(again), Some(Outcome::Granted(_))),
            "{:?}",
            pair.outcome(again)
        );
    }
    pair.assert_no_leak();
}

#[test]
fn a_grant_for_an_abandoned_caller_is_compensated_and_never_delivered() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX); // Redis grants it...
    pair.abandon(a); // ...but the caller is gone before the reply.
    pair.settle();
    assert_eq!(pair.outcome(a), None);
    assert!(pair
        .events
        .iter()
        .any(|e| matches!(e, Event::Released { compensation: true, .. })));
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
    assert!(pair
        .events
        .iter()
        .any(|e| matches!(e, Event::Released { compensation: true, .. })));
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
    let (connection, _) = pair.client.connection().unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.to_server(usize::MAX);
    pair.advance(config().acquire_timeout);
    assert_eq!(pair.outcome(a), Some(&Outcome::Unavailable(Unavailable::Timeout)));
    // The reply arrives late, but within the liveness budget.
    pair.advance(ms(500));
    pair.exchange();
    assert_eq!(
        pair.client.connection(),
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
    assert_eq!(pair.client.connection(), Some((connection, true)));
}

#[test]
fn a_reply_echoing_another_lease_retires_the_connection_and_is_unavailable() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = pair.client.connection().unwrap();
    let a = pair.acquire("t", "s", 1);
    // A denial echoing someone else's id: not evidence of anything.
    pair.inject(b"*2\r\n:0\r\n$38\r\n00000000000000000000000000000abc-99999\r\n");
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
    assert_ne!(pair.client.connection().unwrap().0, first);
}

#[test]
fn a_stalled_connection_is_retired_after_the_liveness_budget_and_recovers() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = pair.client.connection().unwrap();
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
    let (connection, _) = pair.client.connection().unwrap();
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
    assert_eq!(pair.client.connection(), Some((connection, true)));
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
fn garbage_or_unsolicited_replies_retire_the_connection() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = pair.client.connection().unwrap();
    pair.inject(b"+OK\r\n");
    assert!(pair.events.contains(&Event::Retired(
        first,
        ConnectionError::Protocol(ProtocolError::Unsolicited)
    )));

    pair.settle();
    let (second, _) = pair.client.connection().unwrap();
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
    let (first, _) = pair.client.connection().unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.inject(b"-BUSY Redis is busy running a script\r\n");
    let Some(Outcome::Unavailable(Unavailable::Server(error))) = pair.outcome(a) else {
        panic!("{:?}", pair.outcome(a))
    };
    assert_eq!(error.kind(), ServerErrorKind::Busy);
    assert_eq!(error.message(), "BUSY Redis is busy running a script");
    assert_eq!(pair.client.connection(), Some((first, true)));
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
fn a_release_retries_on_a_fresh_connection_with_backoff() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    pair.release(0);
    pair.cut(); // the ZREM never arrives
    pair.refuse(); // nor does the first reconnect
    assert_eq!(pair.server.all_live_leases().len(), 1);
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty());
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::Released {
            compensation: false,
            ..
        }
    )));
    assert!(pair.client.stats().release_retries >= 1);
    assert_eq!(pair.client.outstanding_releases(), 0);
}

#[test]
fn a_release_refused_for_lack_of_retry_room_is_not_counted_as_a_retry() {
    let mut config = config();
    config.release.max_retrying = 1;
    let mut pair = Pair::connected(config, start());
    for subject in ["a", "b", "c"] {
        pair.acquire("t", subject, 1);
    }
    pair.exchange();
    pair.release_burst(3);
    pair.cut(); // all three releases fail; room to retry only one
    let stats = pair.client.stats();
    assert_eq!((stats.release_retries, stats.releases_abandoned), (1, 2));
    let overloaded = pair
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::ReleaseAbandoned {
                    reason: ReleaseFailure::Overloaded,
                    ..
                }
            )
        })
        .count();
    assert_eq!(overloaded, 2);
}

#[test]
fn a_release_that_cannot_get_through_gives_up_and_says_so() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    pair.release(0);
    pair.cut();
    // Every fresh connection dies just after its handshake, with the ZREM unsent.
    for _ in 0..200 {
        pair.accept();
        pair.to_server(usize::MAX);
        pair.to_client(usize::MAX);
        pair.cut();
        match pair.client.poll_timeout() {
            Some(at) => pair.advance(at.saturating_duration_since(pair.now)),
            None => break,
        }
    }
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::ReleaseAbandoned {
            compensation: false,
            reason: ReleaseFailure::AttemptsExhausted,
            ..
        }
    )));
    assert_eq!(pair.client.stats().releases_abandoned, 1);
    assert_eq!(pair.client.outstanding_releases(), 0);
}

#[test]
fn a_release_never_retries_past_the_lease_ttl() {
    let ttl = ms(300);
    let mut pair = Pair::connected(
        Config {
            lease_ttl: ttl,
            ..config()
        },
        start(),
    );
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    let started = pair.now;
    pair.release(0);
    pair.cut();
    while pair.client.outstanding_releases() > 0 {
        pair.refuse();
        let at = pair.client.poll_timeout().expect("a release waits on a timer");
        pair.advance(at.saturating_duration_since(pair.now));
    }
    assert!(pair.now <= started + ttl, "retried past the TTL");
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::ReleaseAbandoned {
            reason: ReleaseFailure::Expired,
            ..
        }
    )));
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
    assert!(pair.client.connection().is_some_and(|(_, ready)| ready));
}

#[test]
fn poll_timeout_is_none_when_idle() {
    let mut pair = Pair::connected(config(), start());
    assert_eq!(pair.client.poll_timeout(), None);
    pair.acquire("t", "s", 1);
    assert!(pair.client.poll_timeout().is_some());
    pair.exchange();
    assert_eq!(pair.client.poll_timeout(), None);
}

fn renewed(pair: &Pair, request: crate::event::RequestId) -> Option<&Renewal> {
    pair.events.iter().find_map(|event| match event {
        Event::Renewed(r, renewal) if *r == request => Some(renewal),
        _ => None,
    })
}

#[test]
fn a_renewal_keeps_a_lease_alive_past_its_first_ttl() {
    let config = Config {
        lease_ttl: Duration::from_secs(1),
        ..config()
    };
    let mut pair = Pair::connected(config, start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    let first_expiry = pair.held[0].expires_at();

    pair.advance(ms(800));
    let renewal = pair.renew(0);
    pair.exchange();
    let Some(Renewal::Extended(lease)) = renewed(&pair, renewal) else {
        panic!("{:?}", renewed(&pair, renewal));
    };
    assert_eq!(lease.expires_at(), first_expiry + ms(800));
    assert_eq!(pair.held[0].expires_at(), lease.expires_at());

    // Past the first TTL the slot is still taken...
    pair.advance(ms(500));
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert_eq!(pair.outcome(b), Some(&Outcome::Exceeded));
    // ...and once the renewed TTL is over, it is free, and the lease is lost.
    pair.advance(ms(600));
    let lost = pair.renew(0);
    pair.exchange();
    assert_eq!(renewed(&pair, lost), Some(&Renewal::Lost));
    let stats = pair.client.stats();
    assert_eq!((stats.renewals, stats.leases_lost), (1, 1));
}

#[test]
fn a_renewal_that_comes_too_late_cannot_bring_a_released_lease_back() {
    let mut pair = Pair::connected(config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    // The renewal is written, then the connection dies with its bytes in flight.
    let renewal = pair.renew(0);
    pair.cut();
    assert!(matches!(
        renewed(&pair, renewal),
        Some(Renewal::Unavailable(Unavailable::ConnectionLost(_)))
    ));
    // Nothing is compensated for a renewal: the holder still has its slot.
    pair.settle();
    assert_eq!(pair.server.all_live_leases().len(), 1);
    pair.release(0);
    pair.settle();
    assert!(pair.server.all_live_leases().is_empty());
    // The renewal's bytes land after the release: still nothing.
    pair.land_ghosts();
    assert!(pair.server.all_live_leases().is_empty());
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(b), Some(Outcome::Granted(_))));
}

#[test]
fn a_renewal_times_out_without_touching_the_connection_or_the_lease() {
    let mut pair = Pair::connected(config(), start());
    let (connection, _) = pair.client.connection().unwrap();
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    pair.server.flush_scripts(); // and the renewal goes the NOSCRIPT way
    let renewal = pair.renew(0);
    pair.to_server(usize::MAX);
    pair.advance(config().acquire_timeout);
    assert_eq!(
        renewed(&pair, renewal),
        Some(&Renewal::Unavailable(Unavailable::Timeout))
    );
    pair.settle();
    assert_eq!(pair.client.connection(), Some((connection, true)));
    assert_eq!(pair.server.all_live_leases().len(), 1, "a renewal is never compensated");
    // The next renewal goes through (by EVAL after the NOSCRIPT, or reloaded).
    let again = pair.renew(0);
    pair.exchange();
    assert!(matches!(renewed(&pair, again), Some(Renewal::Extended(_))));
    pair.assert_no_leak();
}

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
    assert_eq!(pair.client.in_flight_acquires(), 2);
    let mut written = Vec::new();
    while let Some(transmit) = pair.client.poll_transmit() {
        written.extend_from_slice(&transmit.data);
    }
    let text = String::from_utf8_lossy(&written);
    let lease = |r: crate::event::RequestId| pair.client.lease_id(r).to_string();
    assert!(text.contains(&lease(requests[0])) && text.contains(&lease(requests[2])));
    assert!(
        !text.contains(&lease(requests[1])),
        "an abandoned, unwritten acquire is dropped"
    );
}

#[test]
fn a_batch_reply_with_one_wrong_echo_makes_every_member_ambiguous() {
    use crate::model::{ModelConnection, RedisModel};
    let mut client = crate::Client::new(config(), [7; 16], start()).unwrap();
    let Some(crate::event::Action::Connect(id)) = client.poll_action() else {
        panic!("a new client connects");
    };
    client.handle_connected(start(), id);
    // The handshake, answered by the model.
    let mut model = RedisModel::new(1_700_000_000_000);
    let mut connection = ModelConnection::new();
    let handshake = client.poll_transmit().unwrap().data;
    let reply = model.handle(&mut connection, &handshake).unwrap();
    client.handle_input(start(), id, &reply);
    assert_eq!(client.connection(), Some((id, true)));
    let requests: Vec<_> = (0..3)
        .map(|_| client.acquire(start(), &key("t", "s"), limit(5)))
        .collect();
    let batch = client.poll_transmit().unwrap().data;
    // Redis runs the batch (the leases exist), but the reply lies about one id.
    let honest = String::from_utf8(model.handle(&mut connection, &batch).unwrap().to_vec()).unwrap();
    let victim = client.lease_id(requests[1]).to_string();
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
    assert_ne!(client.connection().map(|c| c.0), Some(id), "the connection is retired");
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

fn key(namespace: &str, subject: &str) -> crate::Key {
    crate::Key::new(namespace, subject).unwrap()
}

fn limit(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).unwrap()
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
                    compensation: false,
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
        reply_limits: crate::ReplyLimits {
            max_array_len: 6,
            ..crate::ReplyLimits::default()
        },
        ..config()
    };
    let mut pair = Pair::connected(config, start());
    let burst = pair.acquire_burst("t", "s", 10, 7);
    pair.exchange();
    assert_eq!(
        pair.server.batches, 2,
        "7 acquires in batches of at most 3 (6 reply items)"
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
    let count = crate::script::MAX_RELEASE_BATCH + 3;
    for _ in 0..count.div_ceil(crate::script::MAX_BATCH) {
        pair.acquire_burst("t", "s", 1000, crate::script::MAX_BATCH);
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

/// Reconnect delays after failed attempts, for a client built with `entropy`.
fn reconnect_delays(entropy: [u8; 16], attempts: usize) -> Vec<Duration> {
    use crate::event::Action;
    use crate::Client;
    let mut now = start();
    let mut client = Client::new(config(), entropy, now).unwrap();
    let mut delays = Vec::new();
    for _ in 0..attempts {
        let Some(Action::Connect(id)) = client.poll_action() else {
            panic!("a connect was asked for")
        };
        client.handle_closed(now, id); // refused
        while client.poll_action().is_some() {}
        let at = client.poll_timeout().expect("a reconnect is scheduled");
        delays.push(at - now);
        now = at;
        client.handle_timeout(now);
    }
    delays
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

/// A short-TTL limiter, as in the fleets where ghost leases hurt most.
fn short_ttl() -> Config {
    Config {
        lease_ttl: Duration::from_secs(1),
        request_liveness: Duration::from_secs(2),
        ..Config::default()
    }
}

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
    assert!(pair
        .events
        .iter()
        .any(|e| matches!(e, Event::ReleaseAbandoned { compensation: true, .. })));
    // Then the held bytes run: too late, so the script refuses them.
    pair.land_ghosts();
    assert_eq!(
        pair.server.acquires.last().map(|a| a.status),
        Some(crate::script::STALE)
    );
    assert!(pair.server.all_live_leases().is_empty(), "a ghost lease nobody holds");
}

#[test]
fn a_compensation_keeps_trying_while_its_acquire_may_still_run() {
    let mut pair = Pair::connected(short_ttl(), start());
    let a = pair.acquire("t", "s", 1);
    pair.cut();
    assert!(matches!(pair.outcome(a), Some(Outcome::Unavailable(_))));
    // Out of reach for longer than the TTL, but not past the acquire's
    // valid-until: the compensation must still be there when Redis returns.
    for _ in 0..15 {
        pair.advance(ms(100));
        pair.refuse();
    }
    assert!(
        pair.client.outstanding_releases() > 0,
        "the compensation gave up too early"
    );
    pair.land_ghosts(); // the held acquire runs (still valid): a lease exists
    assert_eq!(pair.server.acquires.last().map(|a| a.status), Some(1));
    pair.settle(); // Redis is back: the compensation removes it
    assert!(pair.server.all_live_leases().is_empty());
    assert_eq!(pair.client.stats().releases_abandoned, 0);
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

#[test]
fn a_renewal_that_runs_too_late_changes_nothing_and_says_so() {
    let mut pair = Pair::connected(short_ttl(), start());
    pair.acquire("t", "s", 1);
    pair.exchange();
    let renewal = pair.renew(0);
    pair.to_server(0); // written, not yet delivered
    pair.advance(Duration::from_millis(2_100)); // past its liveness: retired
    assert!(matches!(
        renewed(&pair, renewal),
        Some(Renewal::Unavailable(Unavailable::Timeout))
    ));
    pair.land_ghosts();
    assert_eq!(pair.server.renewals.last(), Some(&crate::script::STALE));
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
