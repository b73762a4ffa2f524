//! Composite limits on a real redis-server: one permit over several keys,
//! all or nothing. Under load from two limiters no key goes over its limit,
//! every refusal names a key that was full, cancelled acquires leave nothing
//! behind, a refusal takes nothing on the other keys, and waiting composites
//! that name the same keys in opposite orders all finish.

use std::time::{Duration, Instant};

use inflight_core::key::SubjectKeys;
use inflight_core::resp::Frame;
use inflight_tests::composite_load::{self, Limited};
use inflight_tests::RedisServer;
use inflight_tokio::{Acquire, Builder, CompositeError, ConfigError, Error, Key, Limiter};

const PREFIX: &str = "composite";

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(PREFIX)
        .lease_ttl(Duration::from_secs(30))
        .timeout(Duration::from_millis(1000))
}

fn key(namespace: &str, subject: &str) -> Key {
    Key::new(namespace, subject).unwrap()
}

/// Units Redis holds for `key` now.
fn live(server: &RedisServer, key: &Key) -> i64 {
    let keys = SubjectKeys::new(PREFIX, key);
    match server.client().call(&[b"ZCARD", keys.leases()]).unwrap() {
        Frame::Integer(n) => n,
        other => panic!("ZCARD answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_keys_under_load_from_two_limiters_stay_within_every_limit() {
    let server = RedisServer::start();
    let limiters = [
        builder(&server).connect().await.unwrap(),
        builder(&server).connect().await.unwrap(),
    ];
    let keys = [
        Limited {
            key: key("tenant", "acme"),
            limit: 3,
        },
        Limited {
            key: key("route", "/upload"),
            limit: 5,
        },
        Limited {
            key: key("service", "api"),
            limit: 10,
        },
    ];
    let seen = composite_load::run(&limiters, &keys, 64, Duration::from_secs(3), 8, true).await;
    println!(
        "granted {}, refused by key {:?}, cancelled {}, errors {:?}, peaks {:?}",
        seen.granted, seen.refused, seen.cancelled, seen.errors, seen.peaks
    );
    for (limited, peak) in keys.iter().zip(&seen.peaks) {
        assert!(
            *peak <= limited.limit as usize,
            "{:?}: {peak} holders at once over a limit of {}",
            limited.key,
            limited.limit
        );
    }
    // The load fills every key: each is reached, and named in refusals.
    assert_eq!(seen.peaks, vec![3, 5, 10], "every key full at some point");
    assert!(
        seen.refused.iter().all(|n| *n > 0),
        "refusals by key: {:?}",
        seen.refused
    );
    assert!(seen.granted > 1_000, "only {} grants", seen.granted);
    assert!(seen.cancelled > 100, "only {} cancelled", seen.cancelled);
    assert_eq!(seen.unfounded, 0, "refusals of keys that were not full");
    assert!(seen.errors.is_empty(), "{:?}", seen.errors);
    // Cancelled acquires and releases leave no slot of any key behind.
    for limiter in limiters {
        let drained = limiter.drain().await;
        assert!(drained.is_complete(), "{drained}");
    }
    for limited in &keys {
        assert_eq!(live(&server, &limited.key), 0, "{:?} left leases", limited.key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_takes_nothing_and_names_the_full_key() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (tenant, route, global) = (key("tenant", "t1"), key("route", "r1"), key("service", "s1"));
    let holder = limiter.acquire_with(&route, 2).await.unwrap();
    let second = limiter.acquire_with(&route, 2).await.unwrap();
    let refused = limiter.acquire_all(&[(&tenant, 5), (&route, 2), (&global, 5)]).await;
    assert!(
        matches!(
            refused,
            Err(Error::Exceeded {
                key: Some(1),
                shed: false,
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        (live(&server, &tenant), live(&server, &global)),
        (0, 0),
        "nothing taken"
    );
    drop((holder, second));
    // Given back: all three at once, one lease each, with a token each when fenced.
    let permits = limiter
        .acquire_all(&[(&tenant, 5), (&route, 2), (&global, 5)])
        .await
        .unwrap();
    assert_eq!(permits.parts().len(), 3);
    assert!(permits.is_enforced());
    assert_eq!(
        [live(&server, &tenant), live(&server, &route), live(&server, &global)],
        [1, 1, 1]
    );
    // A weight applies to every key.
    let heavy = limiter
        .acquire_all_opts(&[(&tenant, 5), (&global, 5)], Acquire::default().weight(3))
        .await
        .unwrap();
    assert_eq!([live(&server, &tenant), live(&server, &global)], [4, 4]);
    let over = limiter
        .acquire_all_opts(&[(&global, 5), (&tenant, 5)], Acquire::default().weight(2))
        .await;
    assert!(matches!(over, Err(Error::Exceeded { key: Some(0), .. })), "{over:?}");
    heavy.release().await.unwrap();
    permits.release().await.unwrap();
    for key in [&tenant, &route, &global] {
        assert_eq!(live(&server, key), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_key_sets_get_clear_errors_before_anything_is_sent() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (a, b) = (key("tenant", "a"), key("route", "b"));
    assert!(matches!(
        limiter.acquire_all(&[]).await,
        Err(Error::Composite(CompositeError::Empty))
    ));
    assert!(matches!(
        limiter.acquire_all(&[(&a, 2), (&b, 2), (&a, 3)]).await,
        Err(Error::Composite(CompositeError::Repeated { first: 0, second: 2 }))
    ));
    assert!(matches!(
        limiter.acquire_all(&[(&a, 2), (&b, 0)]).await,
        Err(Error::Config(_))
    ));
    assert!(matches!(
        limiter.acquire_all_opts(&[(&a, 2)], Acquire::default().limit(3)).await,
        Err(Error::Config(ConfigError::OutOfRange { .. }))
    ));
    assert!(matches!(
        limiter
            .acquire_all_opts(&[(&a, 5), (&b, 2)], Acquire::default().weight(3))
            .await,
        Err(Error::Composite(CompositeError::Claim { index: 1, .. }))
    ));
    let many: Vec<Key> = (0..17).map(|n| key("tenant", &n.to_string())).collect();
    let asked: Vec<(&Key, u32)> = many.iter().map(|k| (k, 1)).collect();
    assert!(matches!(
        limiter.acquire_all(&asked).await,
        Err(Error::Composite(CompositeError::TooMany { given: 17, most: 16 }))
    ));
    assert_eq!(live(&server, &a), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_composites_in_opposite_orders_all_finish() {
    let server = RedisServer::start();
    let limiters = [
        builder(&server).connect().await.unwrap(),
        builder(&server).connect().await.unwrap(),
    ];
    let keys = [key("tenant", "w"), key("route", "w"), key("service", "w")];
    let started = Instant::now();
    let tasks: Vec<_> = (0..16)
        .map(|n| {
            let limiter = limiters[n % 2].clone();
            let keys = keys.clone();
            tokio::spawn(async move {
                // Half name the keys one way round, half the other.
                let mut order: Vec<&Key> = keys.iter().collect();
                if n % 2 == 1 {
                    order.reverse();
                }
                let asked: Vec<(&Key, u32)> = order.into_iter().map(|k| (k, 2)).collect();
                for _ in 0..5 {
                    let wait = Acquire::default().wait(Duration::from_secs(20));
                    let permits = limiter.acquire_all_opts(&asked, wait).await.expect("a slot in time");
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    permits.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    println!("80 waiting composites took {:?}", started.elapsed());
    for key in &keys {
        assert_eq!(live(&server, key), 0);
    }
}

#[test]
fn a_foreign_fence_key_fails_the_call_before_any_lease_is_written() {
    use inflight_core::lease_id::LeaseId;
    use inflight_core::scripts::{Eval, LeaseCall, Scripts};
    let server = RedisServer::start();
    let mut client = server.client();
    let now_ms = match client.call(&[b"TIME"]).unwrap() {
        Frame::Array(items) => match &items[0] {
            Frame::BulkString(seconds) => std::str::from_utf8(seconds).unwrap().parse::<u64>().unwrap() * 1000,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let subjects: Vec<SubjectKeys> = ["a", "b", "c"]
        .iter()
        .map(|s| SubjectKeys::new(PREFIX, &key("fenced", s)))
        .collect();
    // The last subject's fencing counter is someone else's hash.
    client.call(&[b"HSET", &subjects[2].fence(), b"f", b"v"]).unwrap();
    let ids: Vec<String> = (1..=3).map(|n| LeaseId::from_parts(7, n).to_string()).collect();
    let calls: Vec<(LeaseCall, u32)> = subjects
        .iter()
        .zip(&ids)
        .map(|(keys, id)| {
            let call = LeaseCall {
                keys,
                id: id.as_bytes(),
                expiry_ms: now_ms + 60_000,
                valid_until_ms: now_ms + 60_000,
                fenced: true,
            };
            (call, 5)
        })
        .collect();
    let mut command = bytes::BytesMut::new();
    Scripts::shared().encode_acquire_all(&mut command, Eval::Text, &calls, b"");
    let reply = client.call_raw(&command).unwrap();
    assert!(
        matches!(&reply, Frame::Error(e) if e.contains("WRONGTYPE")),
        "{reply:?}"
    );
    for keys in &subjects {
        assert!(matches!(
            client.call(&[b"ZCARD", keys.leases()]).unwrap(),
            Frame::Integer(0)
        ));
    }
}

/// Reserved capacity (Stripe's recipe): every request shares one key, the
/// critical ones under its whole limit (10), the others under 8 of it. A
/// flood of ordinary requests, failing fast or waiting, never takes the
/// last two slots: every critical request is served at once, and ordinary
/// ones never hold more than 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_requests_keep_their_reserved_share_under_a_flood() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let server = RedisServer::start();
    let limiters = [
        builder(&server).connect().await.unwrap(),
        builder(&server).connect().await.unwrap(),
    ];
    let service = key("service", "reserved");
    for waiting in [false, true] {
        let stop = Arc::new(AtomicBool::new(false));
        let (ordinary, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let flood: Vec<_> = (0..48)
            .map(|n| {
                let limiter = limiters[n % 2].clone();
                let (stop, ordinary, peak, service) = (stop.clone(), ordinary.clone(), peak.clone(), service.clone());
                tokio::spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                        let mut options = Acquire::default().limit(8);
                        if waiting {
                            options = options.wait(Duration::from_millis(200));
                        }
                        match limiter.acquire_opts(&service, options).await {
                            Ok(permit) => {
                                let now = ordinary.fetch_add(1, Ordering::SeqCst) + 1;
                                peak.fetch_max(now, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(3)).await;
                                ordinary.fetch_sub(1, Ordering::SeqCst);
                                drop(permit);
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                        }
                    }
                })
            })
            .collect();
        // The flood fills its 8 slots first.
        let started = Instant::now();
        while peak.load(Ordering::SeqCst) < 8 {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the flood never filled its share"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Two critical callers, one on each limiter, 100 requests each.
        let critical: Vec<_> = (0..2)
            .map(|n| {
                let (limiter, service) = (limiters[n].clone(), service.clone());
                tokio::spawn(async move {
                    let mut refused = 0;
                    for _ in 0..100 {
                        let mut options = Acquire::default().limit(10);
                        if waiting {
                            options = options.wait(Duration::from_millis(200));
                        }
                        match limiter.acquire_opts(&service, options).await {
                            Ok(permit) => {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                permit.release().await.unwrap();
                            }
                            Err(_) => refused += 1,
                        }
                    }
                    refused
                })
            })
            .collect();
        let mut refused = 0;
        for task in critical {
            refused += task.await.unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        for task in flood {
            task.await.unwrap();
        }
        println!(
            "waiting {waiting}: ordinary peak {}, critical refused {refused} of 200",
            peak.load(Ordering::SeqCst)
        );
        assert_eq!(refused, 0, "critical requests refused (waiting: {waiting})");
        assert!(
            peak.load(Ordering::SeqCst) <= 8,
            "ordinary requests took a reserved slot"
        );
    }
    for limiter in limiters {
        assert!(limiter.drain().await.is_complete());
    }
    assert_eq!(live(&server, &service), 0);
}
