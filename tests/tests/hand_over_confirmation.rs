//! A slot a release hands to a waiter of another limiter is a reservation
//! until the waiter's queue entry would have expired; the waiter's limiter
//! confirms it to a whole lease an eighth of the way in, unless its holder
//! gives it back or renews it first. What its permit believes must follow
//! Redis through every order of those (an outside review's sequences).

use std::time::{Duration, Instant};

use inflight_core::key::SubjectKeys;
use inflight_core::resp::Frame;
use inflight_tests::RedisServer;
use inflight_tokio::{Builder, Key, Limiter, Lost, Permit};

const PREFIX: &str = "handed";

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(PREFIX)
        .default_limit(1)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("job", subject).unwrap()
}

fn queued(server: &RedisServer, subject: &str) -> i64 {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    match server.client().call(&[b"ZCARD", &keys.queue()]) {
        Ok(Frame::Integer(n)) => n,
        other => panic!("ZCARD: {other:?}"),
    }
}

async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A permit handed over by a release (a reservation until about 1 s from
/// the waiter's last check): the holder's limiter, the waiter's, the permit.
async fn handed(server: &RedisServer, subject: &'static str) -> (Limiter, Limiter, Permit, Instant) {
    let holder = builder(server).connect().await.unwrap();
    let waiter = builder(server).connect().await.unwrap();
    let held = holder.acquire(&key(subject)).await.unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move { w.acquire_wait(&key(subject), Duration::from_secs(10)).await });
    let channel = SubjectKeys::new(PREFIX, &key(subject)).wake_channel();
    let subscribed = Frame::Array(vec![Frame::BulkString(channel.clone()), Frame::Integer(1)]);
    eventually("queued and subscribed", Duration::from_secs(2), || {
        queued(server, subject) == 1
            && server.client().call(&[b"PUBSUB", b"SHARDNUMSUB", &channel]).ok() == Some(subscribed.clone())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    let permit = waiting.await.unwrap().expect("handed the slot");
    let at = Instant::now();
    assert!(
        permit.expires_at().unwrap() < Instant::now() + Duration::from_secs(2),
        "a reservation"
    );
    (holder, waiter, permit, at)
}

fn redis_ttl_ms(server: &RedisServer, subject: &str, id: &str) -> Option<i64> {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let mut redis = server.client();
    let now_ms = redis.server_ms();
    match redis.call(&[b"ZSCORE", keys.leases(), id.as_bytes()]) {
        Ok(Frame::BulkString(score)) => {
            let expiry: i64 = std::str::from_utf8(&score).unwrap().parse().unwrap();
            Some(expiry - now_ms as i64)
        }
        _ => None,
    }
}

/// Released while its confirmation is on the wire: the answer is nobody's
/// (no renewal counted, no error logged for a caller that never was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_the_confirmation_is_on_the_wire_counts_no_renewal() {
    let server = RedisServer::start();
    let (_holder, waiter, permit, _at) = handed(&server, "stray").await;
    let before = waiter.stats();
    tokio::time::sleep(Duration::from_millis(40)).await;
    server.pause();
    // The confirmation is due ~85-125 ms after the grant: now on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(permit);
    tokio::time::sleep(Duration::from_millis(30)).await;
    server.resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = waiter.stats();
    assert_eq!(
        after.renewals + after.leases_lost + after.unavailable,
        before.renewals + before.leases_lost + before.unavailable,
        "no user renewal was made"
    );
}

/// Kept alive only after its confirmation, past the reservation's end:
/// keep-alive starts from the whole lease's expiry, not the reservation's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_asked_after_the_confirmation_keeps_the_whole_lease() {
    let server = RedisServer::start();
    let (_holder, _waiter, permit, _at) = handed(&server, "late-keep").await;
    eventually("confirmed", Duration::from_secs(1), || {
        permit
            .expires_at()
            .is_some_and(|at| at > Instant::now() + Duration::from_secs(30))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(permit.loss(), None, "held past the reservation");
    let id = permit.lease_id().unwrap().to_string();
    permit.keep_alive();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ttl = redis_ttl_ms(&server, "late-keep", &id);
    assert!(ttl.unwrap() > 50_000);
    assert_eq!(permit.loss(), None, "Redis holds it for ~58 s more");
}

/// Renewed by its holder before its confirmation was due, then a 1.3 s
/// stall: no confirmation is owed any more, and nothing reads it as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_its_holder_renews_needs_no_confirmation() {
    let server = RedisServer::start();
    let (_holder, _waiter, mut permit, _at) = handed(&server, "renewed").await;
    permit.renew().await.unwrap();
    let renewed_until = permit.expires_at().unwrap();
    assert!(renewed_until > Instant::now() + Duration::from_secs(50));
    let id = permit.lease_id().unwrap().to_string();
    server.pause();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    server.resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ttl = redis_ttl_ms(&server, "renewed", &id);
    assert!(ttl.unwrap() > 50_000);
    assert_eq!(permit.loss(), None, "renewed by its holder, and held in Redis");
}

/// The confirmation finds the reservation gone (taken behind the client's
/// back, as a data loss without write-back would): the permit, though
/// nobody watched it, reads the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_that_finds_the_slot_gone_is_seen_by_the_permit() {
    let server = RedisServer::start();
    let (_holder, waiter, permit, _at) = handed(&server, "gone").await;
    let id = permit.lease_id().unwrap().to_string();
    let keys = SubjectKeys::new(PREFIX, &key("gone"));
    server.client().call(&[b"ZREM", keys.leases(), id.as_bytes()]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiter.stats().keep_alive_lost, 1, "the confirmation found it gone");
    assert_eq!(permit.loss(), Some(Lost::Gone), "told");
}
