//! Protocol stories for the `Client`, told through the test bench.

use std::time::{Duration, Instant};

use crate::event::{ConnectionError, Event, Outcome, ReleaseFailure, Renewal, Unavailable};
use crate::resp::ProtocolError;
use crate::testkit::Pair;
use crate::{Config, Credentials, UnavailablePolicy};

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
    assert_eq!(
        pair.outcome(a),
        Some(&Outcome::Unavailable(Unavailable::Server(
            "BUSY Redis is busy running a script".into()
        )))
    );
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
