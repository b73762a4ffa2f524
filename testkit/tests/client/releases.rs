//! Releases: ordering, retries, room, giving up.

use super::*;

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
            of: ReleaseOf::Holder,
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
    // Every fresh connection dies just after its handshake (two round
    // trips: the marker follows `INFO`), with the ZREM unsent.
    for _ in 0..200 {
        pair.accept();
        for _ in 0..2 {
            pair.to_server(usize::MAX);
            pair.to_client(usize::MAX);
        }
        pair.cut();
        match pair.client.poll_timeout() {
            Some(at) => pair.advance(at.saturating_duration_since(pair.now)),
            None => break,
        }
    }
    assert!(pair.events.iter().any(|e| matches!(
        e,
        Event::ReleaseAbandoned {
            of: ReleaseOf::Holder,
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
fn a_release_answered_read_only_by_a_standalone_server_retires_the_connection() {
    let mut pair = Pair::connected(config(), start());
    let (first, _) = inflight_testkit::connection(&pair.client).unwrap();
    pair.acquire("t", "s", 1);
    pair.exchange();
    pair.release(0); // written, not answered yet
    pair.inject(b"-READONLY You can't write against a read only replica.\r\n");
    assert!(
        pair.events
            .iter()
            .any(|e| matches!(e, Event::Retired(id, ConnectionError::Server(_)) if *id == first)),
        "a replica is of no use for writes: {:?}",
        pair.events
    );
    assert_eq!(pair.client.stats().release_retries, 1);
}

#[test]
fn a_client_owes_the_hand_over_of_a_released_slot_until_it_is_written_and_answered() {
    use inflight_core::key::{Key, SubjectKeys};

    let config = config();
    let keys = SubjectKeys::new(&config.key_prefix, &Key::new("t", "s").unwrap());
    let mut pair = Pair::connected(config, start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    // Another replica's waiter stands in the subject's queue.
    pair.server.queue_waiter(&keys.queue(), b"someone-else", 1, 60_000);
    pair.release(0);
    pair.to_server(usize::MAX); // the ZREM and the queue's EXISTS
    pair.to_client(usize::MAX); // their replies: the lease is back, a queue exists
    assert_eq!(pair.client.outstanding_releases(), 0);
    // A limiter draining now would stop before the RELEASE that hands the
    // freed slot to that waiter: it is still owed.
    assert!(!pair.client.owes_nothing(), "the hand-over is not written yet");
    pair.to_server(usize::MAX);
    assert!(!pair.client.owes_nothing(), "the hand-over is not answered yet");
    pair.exchange();
    assert!(pair.client.owes_nothing());
    // The slot went to the waiter, not back to the pool.
    let holders = pair.server.live_leases(keys.leases());
    assert_eq!(holders, [&b"someone-else"[..]], "{holders:?}");
}

#[test]
fn releases_of_several_subjects_check_their_queues_at_once_and_serve_the_one_that_waits() {
    use inflight_core::key::{Key, SubjectKeys};

    let config = config();
    let keys = |subject: &str| SubjectKeys::new(&config.key_prefix, &Key::new("t", subject).unwrap());
    let mut pair = Pair::connected(config.clone(), start());
    let grant_all = |pair: &mut Pair| {
        for subject in ["a", "b", "c"] {
            let request = pair.acquire("t", subject, 1);
            pair.exchange();
            assert!(matches!(pair.outcome(request), Some(Outcome::Granted(_))));
        }
    };
    // Nobody waits: one ZREM per subject and one EXISTS for the three.
    grant_all(&mut pair);
    let (zrems, exists) = (pair.server.zrems, pair.server.exists);
    pair.release_burst(3);
    pair.exchange();
    assert!(pair.client.owes_nothing());
    assert_eq!((pair.server.zrems - zrems, pair.server.exists - exists), (3, 1));
    // Another replica's waiter stands in the queue of `b` only.
    grant_all(&mut pair);
    pair.server.queue_waiter(&keys("b").queue(), b"someone-else", 1, 60_000);
    let (zrems, exists) = (pair.server.zrems, pair.server.exists);
    pair.release_burst(3);
    pair.exchange();
    assert!(pair.client.owes_nothing());
    assert_eq!(pair.client.outstanding_releases(), 0);
    // The EXISTS counts one queue without saying whose: each subject is
    // checked again on its own, and only `b` gets the RELEASE that hands
    // its slot over.
    assert_eq!((pair.server.zrems - zrems, pair.server.exists - exists), (4, 4));
    assert_eq!(pair.server.live_leases(keys("b").leases()), [&b"someone-else"[..]]);
    for subject in ["a", "c"] {
        assert!(pair.server.live_leases(keys(subject).leases()).is_empty(), "{subject}");
    }
}
