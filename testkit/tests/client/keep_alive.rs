//! Keep-alive: the client renews on its own schedule, and says when a lease
//! is lost.

use super::*;
use inflight_core::event::LeaseLost;

fn kept_config() -> Config {
    Config {
        lease_ttl: Duration::from_secs(3),
        acquire_timeout: ms(200),
        ..config()
    }
}

/// A lease kept alive, then taken behind its holder's back (someone
/// else's release, or a flush), and a second later: its renewal is due.
fn kept_then_taken() -> Pair {
    let mut pair = Pair::connected(kept_config(), start());
    pair.acquire("t", "s", 1);
    pair.exchange();
    let lease = pair.held[0].clone();
    pair.client.keep_alive(pair.now, &lease);
    let mut conn = inflight_testkit::model::ModelConnection::new();
    let mut command = bytes::BytesMut::new();
    inflight_core::resp::encode_command(&mut command, &[b"ZREM", lease.redis_key(), &lease.id().to_bytes()]);
    pair.server.handle(&mut conn, &command).unwrap();
    pair.advance(ms(1000));
    pair
}

fn kept_events(pair: &Pair) -> (usize, Vec<LeaseLost>) {
    let renewed = pair
        .events
        .iter()
        .filter(|event| matches!(event, Event::KeptAlive { .. }))
        .count();
    let lost = pair
        .events
        .iter()
        .filter_map(|event| match event {
            Event::LeaseLost { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect();
    (renewed, lost)
}

#[test]
fn a_kept_alive_lease_is_renewed_every_third_of_its_ttl_and_outlives_it() {
    let mut pair = Pair::connected(kept_config(), start());
    let a = pair.acquire("t", "s", 1);
    pair.exchange();
    assert!(matches!(pair.outcome(a), Some(Outcome::Granted(_))));
    let lease = pair.held[0].clone();
    pair.client.keep_alive(pair.now, &lease);
    assert_eq!(pair.client.kept_alive(), 1);
    // The first renewal is due a third of the TTL after the grant.
    let due = pair.client.poll_timeout().expect("a renewal is scheduled");
    assert_eq!(due, lease.expires_at() - ms(2000));
    for _ in 0..10 {
        pair.advance(ms(1000));
        pair.exchange();
    }
    let (renewed, lost) = kept_events(&pair);
    assert!(renewed >= 9, "{renewed} renewals in 10 s");
    assert!(lost.is_empty());
    // Ten seconds on, well past the first TTL, the slot is still held.
    let b = pair.acquire("t", "s", 1);
    pair.exchange();
    assert_eq!(pair.outcome(b), Some(&Outcome::Exceeded));
    assert_eq!(pair.client.stats().kept_alive, renewed as u64);
    // Released: no renewal after that.
    pair.release(0);
    pair.settle();
    assert_eq!(pair.client.kept_alive(), 0);
    assert!(pair.server.all_live_leases().is_empty());
    assert_eq!(kept_events(&pair).0, renewed);
}

#[test]
fn a_lease_found_gone_is_reported_lost_and_dropped() {
    let mut pair = kept_then_taken();
    pair.exchange();
    assert_eq!(kept_events(&pair).1, vec![LeaseLost::Gone]);
    assert_eq!(pair.client.kept_alive(), 0);
    assert_eq!(pair.client.held_leases(), 0, "nothing left to write back");
    assert_eq!(pair.client.stats().keep_alive_lost, 1);
}

#[test]
fn news_of_a_lease_given_back_before_the_driver_read_it_is_dropped() {
    // The renewal's answer (gone) and the holder's release reach the client
    // in one driver wake-up: the driver has let the lease go, so a loss it
    // read afterwards would be kept for a permit that no longer exists.
    let mut pair = kept_then_taken();
    pair.to_server(usize::MAX);
    pair.to_client_then_release(usize::MAX, 0);
    pair.exchange();
    assert_eq!(pair.client.stats().keep_alive_lost, 1, "the renewal found it gone");
    assert_eq!(kept_events(&pair).1, vec![], "and nobody is told");
}

#[test]
fn with_redis_unreachable_the_loss_is_reported_at_the_expiry_after_retries() {
    let mut pair = Pair::connected(kept_config(), start());
    pair.acquire("t", "s", 1);
    pair.exchange();
    let lease = pair.held[0].clone();
    pair.client.keep_alive(pair.now, &lease);
    // The server stops answering: every renewal times out, and is retried.
    let mut lost_at = None;
    for _ in 0..100 {
        pair.refuse();
        pair.advance(ms(50));
        if lost_at.is_none() && !kept_events(&pair).1.is_empty() {
            lost_at = Some(pair.now);
        }
    }
    let lost_at = lost_at.expect("the loss was reported");
    assert_eq!(kept_events(&pair).1, vec![LeaseLost::Expired]);
    assert!(lost_at >= lease.expires_at(), "not before the expiry");
    assert!(lost_at <= lease.expires_at() + ms(50), "within a tick of it");
    assert_eq!(pair.client.held_leases(), 0);
}
