//! Keep-alive and the lost-lease signal on a real redis-server: a kept-alive
//! permit outlives many TTLs while it is held, also once moved into another
//! task; its loss (deleted behind its back, Redis unreachable past its
//! expiry) is signalled before the holder could exceed the limit; a plain
//! permit's signal fires at its expiry; a released one's says so.

use std::time::{Duration, Instant};

use inflight_core::key::SubjectKeys;
use inflight_core::resp::Frame;
use inflight_tests::RedisServer;
use inflight_tokio::{Acquire, Builder, Key, Limiter, Lost, Permit};

const PREFIX: &str = "alive";
const TTL: Duration = Duration::from_millis(600);

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(PREFIX)
        .default_limit(2)
        .lease_ttl(TTL)
        .timeout(Duration::from_millis(100))
}

fn key(subject: &str) -> Key {
    Key::new("job", subject).unwrap()
}

fn live(server: &RedisServer, subject: &str) -> i64 {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let now_ms = server.client().server_ms();
    // Live by score, as the scripts count them (expired members may wait
    // for a prune).
    let after = format!("({now_ms}");
    match server
        .client()
        .call(&[b"ZCOUNT", keys.leases(), after.as_bytes(), b"+inf"])
    {
        Ok(Frame::Integer(n)) => n,
        other => panic!("ZCOUNT: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_permit_outlives_many_ttls_while_held_in_another_task() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let subject = "long";
    let permit = limiter
        .acquire_opts(&key(subject), Acquire::default().keep_alive(true))
        .await
        .unwrap();
    let first_expiry = permit.expires_at().unwrap();
    let lost = permit.lost();
    // The permit moves into the task that does the work; nobody calls renew.
    let work = tokio::spawn(async move {
        tokio::time::sleep(TTL * 4).await;
        let moved = permit.expires_at().unwrap();
        (permit, moved)
    });
    let (permit, moved) = tokio::select! {
        reason = lost => panic!("lost while held and Redis up: {reason:?}"),
        done = work => done.unwrap(),
    };
    assert_eq!(live(&server, subject), 1, "held in Redis four TTLs later");
    assert!(moved > first_expiry + TTL * 2, "expires_at follows the renewals");
    let stats = limiter.stats();
    assert!(stats.kept_alive >= 5, "one renewal per third of the TTL: {stats:?}");
    assert_eq!(stats.keep_alive_lost, 0);
    let lost = permit.lost();
    permit.release().await.unwrap();
    assert_eq!(lost.await, Lost::Released);
    assert_eq!(live(&server, subject), 0);
    // The schedule forgets a released lease: no renewal after it.
    let renewals = limiter.stats().kept_alive;
    tokio::time::sleep(TTL).await;
    assert_eq!(limiter.stats().kept_alive, renewals);
    limiter.drain().await;
}

/// A permit whose loss is known says so through every accessor.
fn assert_lost(permit: &Permit, reason: Lost) {
    assert_eq!(permit.loss(), Some(reason));
    assert!(!permit.is_enforced());
    assert_eq!(permit.expires_at(), None);
    assert_eq!(permit.lease_id(), None);
    assert_eq!(permit.fencing_token(), None);
    assert_eq!(permit.weight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_behind_its_holders_back_is_signalled_gone_within_a_renewal_period() {
    let server = RedisServer::start();
    let limiter = builder(&server).keep_alive(true).connect().await.unwrap();
    let subject = "stolen";
    let permit = limiter.acquire(&key(subject)).await.unwrap();
    let lost = permit.lost();
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let member = permit.lease_id().unwrap().to_string();
    let deleted = Instant::now();
    assert!(matches!(
        server.client().call(&[b"ZREM", keys.leases(), member.as_bytes()]),
        Ok(Frame::Integer(1))
    ));
    let reason = tokio::time::timeout(TTL, lost).await.expect("signalled within a TTL");
    assert_eq!(reason, Lost::Gone);
    println!("lease deleted -> signalled after {:?}", deleted.elapsed());
    assert!(deleted.elapsed() <= TTL / 3 + Duration::from_millis(150));
    assert_eq!(limiter.stats().keep_alive_lost, 1);
    // The loss is final: every accessor says the permit holds nothing.
    assert_lost(&permit, Lost::Gone);
    drop(permit); // nothing left to release; no error, no panic
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unreachable_past_the_expiry_is_signalled_before_the_lease_could_be_reused() {
    let server = RedisServer::start();
    let limiter = builder(&server).keep_alive(true).connect().await.unwrap();
    let subject = "frozen";
    let permit = limiter.acquire(&key(subject)).await.unwrap();
    // Let one renewal through, then freeze Redis: the renewals time out and
    // are retried until the lease's expiry.
    tokio::time::sleep(TTL / 2).await;
    let expires_at = permit.expires_at().unwrap();
    let lost = permit.lost();
    server.pause();
    let reason = tokio::time::timeout(TTL * 3, lost).await;
    let signalled = Instant::now();
    server.resume();
    assert_eq!(reason.expect("signalled"), Lost::Expired);
    assert_lost(&permit, Lost::Expired);
    // The signal comes no later than the expiry the holder was told (and
    // the scripts count a lease live until then): before anyone else could
    // be granted its slot.
    assert!(
        signalled <= expires_at + Duration::from_millis(20),
        "signalled {:?} after the expiry",
        signalled.saturating_duration_since(expires_at)
    );
    assert!(limiter.stats().keep_alive_lost >= 1);
    drop(permit);
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_permits_signal_fires_at_its_expiry_and_a_renewal_moves_it() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let mut permit = limiter.acquire(&key("plain")).await.unwrap();
    tokio::time::sleep(TTL / 2).await;
    permit.renew().await.unwrap();
    let expires_at = permit.expires_at().unwrap();
    let lost = permit.lost();
    assert!(permit.is_enforced() && permit.loss().is_none());
    assert_eq!(tokio::time::timeout(TTL * 2, lost).await.unwrap(), Lost::Expired);
    let now = Instant::now();
    assert!(
        now + Duration::from_millis(5) >= expires_at,
        "not before the renewed expiry"
    );
    assert_lost(&permit, Lost::Expired);
    drop(permit);
    limiter.drain().await;
}
