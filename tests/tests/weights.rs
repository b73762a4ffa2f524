//! Weighted permits and holder labels through the limiter, on a real
//! redis-server: all-or-nothing units, exact releases (Redisson #6664,
//! #6687, #6343: mixed leases, over-release), renewal of every unit, FIFO
//! waiting by weight, and clear errors for bad weights and labels.

use std::time::{Duration, Instant};

use inflight_core::key::SubjectKeys;
use inflight_core::resp::Frame;
use inflight_tests::RedisServer;
use inflight_tokio::{Acquire, Builder, ClaimError, ConnectError, Error, Key, LabelError, Limiter, Permit};

const PREFIX: &str = "weights";

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(PREFIX)
        .default_limit(10)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("upload", subject).unwrap()
}

fn members(server: &RedisServer, subject: &str) -> Vec<String> {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    match server.client().call(&[b"ZRANGE", keys.leases(), b"0", b"-1"]) {
        Ok(Frame::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Frame::BulkString(member) => String::from_utf8(member.to_vec()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("ZRANGE: {other:?}"),
    }
}

fn units_held(server: &RedisServer, subject: &str) -> usize {
    members(server, subject).len()
}

async fn weighing(limiter: &Limiter, subject: &str, weight: u32) -> Result<Permit, Error> {
    limiter
        .acquire_opts(&key(subject), Acquire::default().weight(weight))
        .await
}

async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_weights_share_one_limit_all_or_nothing_and_give_back_exactly_their_units() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let other = builder(&server).connect().await.unwrap();
    let subject = "mixed";
    let big = weighing(&limiter, subject, 4).await.unwrap();
    let second = weighing(&other, subject, 4).await.unwrap();
    assert_eq!((big.weight(), second.weight()), (4, 4));
    assert_eq!(units_held(&server, subject), 8);
    // Three more units would make 11: refused, and nothing of them is taken.
    assert!(matches!(
        weighing(&limiter, subject, 3).await,
        Err(Error::Exceeded { .. })
    ));
    assert_eq!(units_held(&server, subject), 8, "all or nothing");
    let small = weighing(&other, subject, 2).await.unwrap();
    let plain = limiter.acquire(&key(subject)).await;
    assert!(matches!(plain, Err(Error::Exceeded { .. })), "10 of 10 units held");
    // Releasing a weight-4 permit frees its four units, and only those:
    // the other limiter's weight-4 and weight-2 permits stay held.
    big.release().await.unwrap();
    assert_eq!(units_held(&server, subject), 6);
    assert!(members(&server, subject)
        .iter()
        .all(|member| member.starts_with(&second.lease_id().unwrap().to_string())
            || member.starts_with(&small.lease_id().unwrap().to_string())));
    let refill = weighing(&limiter, subject, 4).await.unwrap();
    assert_eq!(units_held(&server, subject), 10);
    drop((second, small, refill));
    eventually("every unit is released", Duration::from_secs(5), || {
        units_held(&server, subject) == 0
    })
    .await;
    limiter.drain().await;
    other.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_extends_every_unit_of_a_weighted_permit() {
    let server = RedisServer::start();
    let limiter = builder(&server)
        .lease_ttl(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let subject = "renew";
    let mut permit = weighing(&limiter, subject, 3).await.unwrap();
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let scores = |server: &RedisServer| -> Vec<u64> {
        members(server, subject)
            .iter()
            .map(
                |member| match server.client().call(&[b"ZSCORE", keys.leases(), member.as_bytes()]) {
                    Ok(Frame::BulkString(score)) => std::str::from_utf8(&score).unwrap().parse().unwrap(),
                    other => panic!("ZSCORE: {other:?}"),
                },
            )
            .collect()
    };
    let before = scores(&server);
    assert_eq!(before.len(), 3);
    tokio::time::sleep(Duration::from_millis(20)).await;
    permit.renew().await.unwrap();
    let after = scores(&server);
    assert_eq!(after.len(), 3);
    assert!(
        after.iter().all(|score| *score == after[0]),
        "one expiry for all units: {after:?}"
    );
    assert!(after[0] > before[0], "renewed: {before:?} -> {after:?}");
    permit.release().await.unwrap();
    assert_eq!(units_held(&server, subject), 0);
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_waiter_is_served_in_its_turn_before_lighter_ones_behind_it() {
    let server = RedisServer::start();
    let limiter = builder(&server).default_limit(4).connect().await.unwrap();
    let subject = "queue";
    let mut holders = Vec::new();
    for _ in 0..3 {
        holders.push(limiter.acquire(&key(subject)).await.unwrap());
    }
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let queued = |server: &RedisServer| match server.client().call(&[b"ZCARD", &keys.queue()]) {
        Ok(Frame::Integer(n)) => n,
        other => panic!("ZCARD: {other:?}"),
    };
    let heavy = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .acquire_opts(
                    &key(subject),
                    Acquire::default().weight(3).wait(Duration::from_secs(30)),
                )
                .await
        })
    };
    eventually("the heavy waiter is queued", Duration::from_secs(5), || {
        queued(&server) == 1
    })
    .await;
    let light = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire_wait(&key(subject), Duration::from_secs(30)).await })
    };
    eventually("the light waiter is queued", Duration::from_secs(5), || {
        queued(&server) == 2
    })
    .await;
    // One unit is free, and the light waiter would fit it: it waits its turn.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!light.is_finished() && !heavy.is_finished());
    drop(holders.remove(0));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !light.is_finished() && !heavy.is_finished(),
        "two units free: not enough for the head"
    );
    drop(holders.remove(0));
    let heavy = tokio::time::timeout(Duration::from_secs(5), heavy)
        .await
        .expect("the heavy waiter is served once three units are free")
        .unwrap()
        .unwrap();
    assert_eq!(heavy.weight(), 3);
    assert_eq!(units_held(&server, subject), 4);
    assert!(!light.is_finished(), "nothing is left for the light waiter");
    drop(heavy);
    let light = tokio::time::timeout(Duration::from_secs(5), light)
        .await
        .expect("then the light one")
        .unwrap()
        .unwrap();
    assert_eq!(light.weight(), 1);
    drop((light, holders));
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_travel_in_the_lease_and_bad_weights_and_labels_are_typed_errors() {
    let server = RedisServer::start();
    let limiter = builder(&server).holder_label("pod-7").connect().await.unwrap();
    let subject = "labels";
    let by_default = limiter.acquire(&key(subject)).await.unwrap();
    let own = limiter
        .acquire_opts(&key(subject), Acquire::default().weight(2).label("req-42"))
        .await
        .unwrap();
    let mut seen = members(&server, subject);
    seen.sort();
    assert!(seen.iter().any(|m| m.ends_with("@pod-7")), "{seen:?}");
    assert!(seen.iter().any(|m| m.ends_with("*2@req-42")), "{seen:?}");
    assert!(seen.iter().any(|m| m.ends_with("*2@req-42#2")), "{seen:?}");
    assert_eq!(own.lease_id().unwrap().label().map(|l| l.as_str()), Some("req-42"));

    let bad = |options: Acquire| {
        let limiter = limiter.clone();
        async move { limiter.acquire_opts(&key(subject), options).await.unwrap_err() }
    };
    assert_eq!(
        bad(Acquire::default().weight(0)).await,
        Error::Claim(ClaimError::ZeroWeight)
    );
    assert_eq!(
        bad(Acquire::default().weight(11)).await,
        Error::Claim(ClaimError::AboveLimit { weight: 11, limit: 10 })
    );
    assert_eq!(
        bad(Acquire::default().weight(5000).limit(10_000)).await,
        Error::Claim(ClaimError::TooHeavy(5000))
    );
    assert_eq!(
        bad(Acquire::default().label("x".repeat(65))).await,
        Error::Label(LabelError::TooLong(65))
    );
    assert_eq!(
        bad(Acquire::default().label("a b")).await,
        Error::Label(LabelError::Character(' '))
    );
    assert_eq!(units_held(&server, subject), 3, "nothing was taken by a refused call");
    let error = builder(&server).holder_label("").connect().await.unwrap_err();
    assert_eq!(error, ConnectError::Label(LabelError::Empty));
    println!("{error}");
    drop((by_default, own));
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_holders_show_who_holds_what_and_expired_leases_are_not_counted() {
    let server = RedisServer::start();
    let limiter = builder(&server).holder_label("api-1").connect().await.unwrap();
    let short = builder(&server)
        .holder_label("batch-9")
        .timeout(Duration::from_millis(100))
        .lease_ttl(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let subject = "seen";
    let empty = limiter.usage(&key(subject)).await.unwrap();
    // Nothing waited: Redis does not know the limit (only the services do).
    assert_eq!((empty.held, empty.limit_recorded, empty.waiting), (0, None, 0));
    assert!(limiter.holders(&key(subject)).await.unwrap().is_empty());

    let one = limiter.acquire(&key(subject)).await.unwrap();
    let heavy = limiter
        .acquire_opts(&key(subject), Acquire::default().weight(3).label("req-7"))
        .await
        .unwrap();
    let dying = weighing(&short, subject, 2).await.unwrap();
    assert_eq!(limiter.usage(&key(subject)).await.unwrap().held, 6);
    let holders = limiter.holders(&key(subject)).await.unwrap();
    assert_eq!(holders.len(), 3, "{holders:?}");
    // Soonest to expire first: the 300 ms lease.
    assert_eq!((holders[0].weight, holders[0].label.as_deref()), (2, Some("batch-9")));
    let by_label = |label: &str| holders.iter().find(|h| h.label.as_deref() == Some(label)).unwrap();
    assert_eq!(by_label("api-1").weight, 1);
    assert_eq!(by_label("req-7").weight, 3);
    let heavy_id = heavy.lease_id().unwrap().to_string();
    // One rendering: the permit's id is the holder's, weight and label too.
    assert_eq!(heavy_id, by_label("req-7").lease_id);
    assert!(heavy_id.ends_with("*3@req-7"), "{heavy_id}");
    let in_a_minute = Instant::now() + Duration::from_secs(55);
    assert!(by_label("api-1").expires_at > in_a_minute);

    // The short-lived holder "crashes": its permit is forgotten, never released.
    std::mem::forget(dying);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        limiter.usage(&key(subject)).await.unwrap().held,
        4,
        "the dead lease is not counted"
    );
    assert_eq!(limiter.holders(&key(subject)).await.unwrap().len(), 2);
    // Its two units are pruned by the first acquire that needs their room
    // (one under a limit of 6: 4 live units and the dead 2 fill it), which
    // says so.
    let before = limiter.stats().reclaimed;
    let third = limiter.acquire_with(&key(subject), 6).await.unwrap();
    assert_eq!(
        limiter.stats().reclaimed - before,
        2,
        "units reclaimed from the dead holder"
    );

    // A waiter records the limit in Redis: the hint is Redis's then.
    let waiter = {
        let short = short.clone();
        tokio::spawn(async move {
            short
                .acquire_opts(
                    &key(subject),
                    Acquire::default().limit(5).wait(Duration::from_millis(300)),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let usage = short.usage(&key(subject)).await.unwrap();
    assert_eq!((usage.limit_recorded, usage.waiting), (Some(5), 1));
    assert!(
        waiter.await.unwrap().is_err(),
        "5 of 5 units held: the waiter times out"
    );
    drop((one, heavy, third));
    limiter.drain().await;
    short.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_mixed_weights_batched_together_never_exceed_the_limit() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let subject = "burst";
    for round in 0..5 {
        // Thirty acquires at once: the driver batches them (ACQUIRE_MANY),
        // each with its own weight.
        let tasks: Vec<_> = (0..30u32)
            .map(|i| {
                let limiter = limiter.clone();
                let weight = 1 + (i + round) % 3;
                tokio::spawn(async move { (weight, weighing(&limiter, subject, weight).await) })
            })
            .collect();
        let mut held = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                (weight, Ok(permit)) => {
                    assert_eq!(permit.weight(), weight);
                    held.push(permit);
                }
                (_, Err(Error::Exceeded { .. })) => {}
                (_, Err(other)) => panic!("{other}"),
            }
        }
        let granted: u32 = held.iter().map(Permit::weight).sum();
        assert!(granted <= 10, "{granted} units granted under a limit of 10");
        assert!(
            granted >= 8,
            "a burst fills the limit up to the last weight that fits: {granted}"
        );
        assert_eq!(units_held(&server, subject), granted as usize);
        drop(held);
        eventually("released", Duration::from_secs(5), || units_held(&server, subject) == 0).await;
    }
    assert!(limiter.stats().granted >= 15);
    limiter.drain().await;
}
