//! Restarts and replicas, on real redis-server processes: an empty restart
//! under load from two limiters loses no held lease and over-admits
//! nothing, and a replica is refused at connect.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use inflight_core::resp::Frame;
use inflight_tests::RedisServer;
use inflight_tokio::{Builder, ConnectError, Error, Key, Limiter, Permit, Reassertion};

const PREFIX: &str = "rec";

fn builder(url: &str) -> Builder {
    Limiter::builder(url)
        .key_prefix(PREFIX)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(500))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
        .request_liveness(Duration::from_millis(800))
        .idle_probe(Duration::from_millis(100))
        // Tokens show that grants after a loss rise above those before it.
        .fencing_tokens(true)
}

/// The recovery window of `builder`'s settings: idle probe + request
/// liveness + backoff cap + connect timeout.
const WINDOW: Duration = Duration::from_millis(100 + 800 + 200 + 500);

fn members(server: &RedisServer, subject: &str) -> Vec<Bytes> {
    let key = format!("{PREFIX}:{{tier|{subject}}}:leases");
    match server.client().call(&[b"ZRANGE", key.as_bytes(), b"0", b"-1"]) {
        Ok(Frame::Array(items)) => {
            let mut ids: Vec<Bytes> = items
                .into_iter()
                .map(|f| match f {
                    Frame::BulkString(b) => b,
                    other => panic!("{other:?}"),
                })
                .collect();
            ids.sort();
            ids
        }
        other => panic!("ZRANGE answered {other:?}"),
    }
}

/// Callers that hold permits of `key` for a few milliseconds at a time
/// until `until`, counting holders themselves: the most ever seen at once.
async fn load(limiter: Limiter, key: Key, limit: u32, holders: Arc<AtomicU32>, peak: Arc<AtomicU32>, until: Instant) {
    let mut round = 0u64;
    while Instant::now() < until {
        round += 1;
        match limiter.acquire_with(&key, limit).await {
            Ok(permit) if permit.is_enforced() => {
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5 + round % 20)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
            }
            Ok(_) => panic!("the policy is Deny: no unenforced permit"),
            Err(Error::Exceeded { .. } | Error::Unavailable { .. }) => {
                tokio::time::sleep(Duration::from_millis(3)).await
            }
            Err(other) => panic!("{other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_under_load_loses_no_held_lease_and_over_admits_nothing() {
    let mut server = RedisServer::start();
    let (a, b) = (
        builder(&server.url()).connect().await.unwrap(),
        builder(&server.url()).connect().await.unwrap(),
    );
    // Long-held permits, two per limiter, on a key of limit 4: full.
    let held = Key::new("tier", "held").unwrap();
    let mut long: Vec<Permit> = Vec::new();
    for limiter in [&a, &b, &a, &b] {
        long.push(limiter.acquire_with(&held, 4).await.unwrap());
    }
    let ids: Vec<Bytes> = {
        let mut ids: Vec<Bytes> = long
            .iter()
            .map(|p| Bytes::from(p.lease_id().unwrap().to_string()))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(members(&server, "held"), ids);
    let tokens_before: Vec<u64> = long.iter().map(|p| p.fencing_token().unwrap()).collect();

    // Load on another key from both limiters, across the restart.
    let busy = Key::new("tier", "busy").unwrap();
    let (holders, peak) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let until = Instant::now() + Duration::from_millis(2500);
    let mut tasks = Vec::new();
    for limiter in [&a, &b] {
        for _ in 0..6 {
            let task = load(limiter.clone(), busy.clone(), 5, holders.clone(), peak.clone(), until);
            tasks.push(tokio::spawn(task));
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart_empty();
    let restarted = Instant::now();
    // (The limiters may well have written them back already: that is the point.)

    // Every held lease is back within the recovery window.
    let back = loop {
        if members(&server, "held") == ids {
            break restarted.elapsed();
        }
        assert!(restarted.elapsed() < 2 * WINDOW, "the held leases did not come back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Nothing new squeezes in on the full key, from either limiter.
    for limiter in [&a, &b] {
        assert!(matches!(
            limiter.acquire_with(&held, 4).await,
            Err(Error::Exceeded { .. } | Error::Unavailable { .. })
        ));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert!(
        sa.data_losses >= 1 && sb.data_losses >= 1,
        "both found the loss: {sa:?} {sb:?}"
    );
    // The four long permits, and whatever the load held at the restart.
    assert!(sa.leases_restored + sb.leases_restored >= 4, "{sa:?} {sb:?}");
    assert_eq!(sa.over_admissions + sb.over_admissions, 0);
    assert!(
        peak.load(Ordering::SeqCst) <= 5,
        "{} holders of a limit of 5 at once",
        peak.load(Ordering::SeqCst)
    );
    for permit in &long {
        assert_eq!(permit.reassertion(), Some(Reassertion::Restored));
    }
    // Fencing tokens after the restart are above every one before it.
    drop(long.pop());
    let next = a.acquire_with(&held, 4).await;
    let next = match next {
        Ok(permit) => permit,
        Err(_) => {
            tokio::time::sleep(WINDOW).await;
            a.acquire_with(&held, 4).await.unwrap()
        }
    };
    let highest = tokens_before.iter().max().copied().unwrap();
    assert!(next.fencing_token().unwrap() > highest);
    println!(
        "held leases back {back:?} after the restart; peak {}",
        peak.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn a_replica_is_refused_at_connect_with_a_typed_error() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    match builder(&replica.url()).connect().await {
        Err(ConnectError::Replica { role, .. }) => assert_eq!(role, "slave"),
        Err(other) => panic!("expected ConnectError::Replica, got {other}"),
        Ok(_) => panic!("connected to a replica"),
    }
    // Even with writes allowed on the replica, nothing is granted there.
    replica
        .client()
        .call(&[b"CONFIG", b"SET", b"replica-read-only", b"no"])
        .unwrap();
    assert!(matches!(
        builder(&replica.url()).connect().await,
        Err(ConnectError::Replica { .. })
    ));
    // The primary itself is fine.
    assert!(builder(&primary.url()).connect().await.is_ok());
}

/// Lease ids of `subject` on `server`, as `members` reads them.
fn ids_of(permits: &[Permit]) -> Vec<Bytes> {
    let mut ids: Vec<Bytes> = permits
        .iter()
        .map(|p| Bytes::from(p.lease_id().unwrap().to_string()))
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn with_min_replicas_acked_every_confirmed_grant_survives_the_promotion() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let waiting = builder(&primary.url())
        .min_replicas_acked(1, Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let plain = builder(&primary.url()).connect().await.unwrap();
    let (synced, unsynced) = (
        Key::new("tier", "synced").unwrap(),
        Key::new("tier", "unsynced").unwrap(),
    );
    let mut confirmed = Vec::new();
    let mut unconfirmed = Vec::new();
    let started = Instant::now();
    for _ in 0..50 {
        confirmed.push(waiting.acquire_with(&synced, 1000).await.unwrap());
    }
    let with_wait = started.elapsed();
    let started = Instant::now();
    for _ in 0..50 {
        unconfirmed.push(plain.acquire_with(&unsynced, 1000).await.unwrap());
    }
    let without = started.elapsed();
    // The primary is lost the moment the last grant is delivered.
    replica.client().call(&[b"REPLICAOF", b"NO", b"ONE"]).unwrap();
    assert_eq!(
        members(&replica, "synced"),
        ids_of(&confirmed),
        "every grant WAIT confirmed is on the promoted replica"
    );
    let lost = ids_of(&unconfirmed).len() - members(&replica, "unsynced").len();
    println!(
        "50 sequential acquires: {with_wait:?} with WAIT, {without:?} without ({:.2}x); \
         without WAIT, {lost} of 50 grants were missing on the promoted replica",
        with_wait.as_secs_f64() / without.as_secs_f64()
    );
    assert_eq!(waiting.stats().not_replicated, 0);
}

#[tokio::test]
async fn with_min_replicas_acked_a_grant_no_replica_confirms_is_released() {
    let server = RedisServer::start(); // no replica at all
    let limiter = builder(&server.url())
        .min_replicas_acked(1, Duration::from_millis(20))
        .connect()
        .await
        .unwrap();
    let key = Key::new("tier", "alone").unwrap();
    match limiter.acquire_with(&key, 5).await {
        Err(Error::Unavailable {
            reason: inflight_tokio::Unavailable::NotReplicated { acked: 0, wanted: 1 },
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    limiter.clone().drain().await;
    assert!(
        members(&server, "alone").is_empty(),
        "the unconfirmed grant was released"
    );
    assert_eq!(limiter.stats().not_replicated, 1);
}

/// A slot a release hands to a waiter is a grant like any other: with
/// `min_replicas_acked` it is delivered only once `WAIT` says the replicas
/// have it (the waiter's confirming renewal runs after the hand-over in the
/// replication stream, so a `WAIT` after it covers both). With no replica,
/// the waiter gets `NotReplicated`, and the slot is given back.
#[tokio::test]
async fn with_min_replicas_acked_a_slot_handed_to_a_waiter_waits_for_the_replicas_too() {
    let server = RedisServer::start(); // no replica at all
    let holder = builder(&server.url()).connect().await.unwrap();
    let waiting = builder(&server.url())
        .timeout(Duration::from_millis(500))
        .waiter_lifetime(Duration::from_secs(30))
        .min_replicas_acked(1, Duration::from_millis(20))
        .connect()
        .await
        .unwrap();
    let key = Key::new("tier", "handed").unwrap();
    let permit = holder.acquire_with(&key, 1).await.unwrap();
    let waiter = {
        let waiting = waiting.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let options = inflight_tokio::Acquire::default().limit(1).wait(Duration::from_secs(5));
            waiting.acquire_opts(&key, options).await
        })
    };
    // Queued, subscribed to its subject's wake-ups, and parked after the
    // check its subscription prompts: that check rewrites the waiter's
    // expiry (each `WAIT` of 20 ms may hold a connection up to Redis's
    // 100 ms timer tick, so the check comes tens of ms after the first).
    let waiters = format!("{PREFIX}:{{tier|handed}}:waiters");
    let score = || match server
        .client()
        .call(&[b"ZRANGE", waiters.as_bytes(), b"0", b"0", b"WITHSCORES"])
    {
        Ok(Frame::Array(items)) if items.len() == 2 => Some(items[1].clone()),
        _ => None,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let first = loop {
        if let Some(first) = score() {
            break first;
        }
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    while score() == Some(first.clone()) {
        assert!(Instant::now() < deadline, "the waiter never checked again");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await; // its reply is on its way
    drop(permit); // the release hands the slot to the waiter
    match waiter.await.unwrap() {
        Err(Error::Unavailable {
            reason: inflight_tokio::Unavailable::NotReplicated { acked: 0, wanted: 1 },
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert_eq!(
        waiting.stats().handed_over,
        1,
        "the slot came with the release's message"
    );
    waiting.clone().drain().await;
    holder.drain().await;
    assert!(
        members(&server, "handed").is_empty(),
        "the unconfirmed hand-over was given back"
    );
}
