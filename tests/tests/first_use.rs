//! What a new user meets first, on a real redis-server: "forever" written
//! as `Duration::MAX`, a zero wait, the hint in a 429, the error chain, a
//! lazy limiter with Redis down.

use std::error::Error as _;
use std::time::{Duration, Instant};

use inflight_tests::RedisServer;
use inflight_tokio::{Acquire, Builder, Error, Key, Limiter, Unavailable};

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix("first")
        .default_limit(1)
        .timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("tenant", subject).unwrap()
}

/// "Wait forever" as `Duration::MAX` waits (it once panicked the driver and
/// took every clone of the limiter down), and the limiter goes on working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_of_duration_max_waits_and_the_limiter_goes_on() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let holder = limiter.acquire(&key("forever")).await.unwrap();
    let waiting = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire_wait(&key("forever"), Duration::MAX).await })
    };
    let options = Acquire::default().wait(Duration::MAX).limit(5);
    let other = limiter.acquire_opts(&key("elsewhere"), options).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "the wait ended early: {:?}", waiting.await);
    drop(holder);
    let served = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served once the slot is free")
        .unwrap();
    assert!(served.unwrap().is_enforced());
    drop(other);
    assert!(limiter.drain().await.is_complete());
}

/// Every duration setting at `Duration::MAX`: a typed error naming the
/// setting, never a panic inside `connect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_duration_setting_at_max_is_a_typed_error() {
    let server = RedisServer::start();
    let max = Duration::MAX;
    let settings: Vec<(&str, Builder)> = vec![
        ("lease_ttl", builder(&server).lease_ttl(max)),
        ("acquire_timeout", builder(&server).timeout(max)),
        ("request_liveness", builder(&server).request_liveness(max)),
        ("connect_timeout", builder(&server).connect_timeout(max)),
        (
            "reconnect_initial_backoff",
            builder(&server).reconnect_backoff(max, max),
        ),
        ("waiter_lifetime", builder(&server).waiter_lifetime(max)),
        ("idle_probe", builder(&server).idle_probe(max)),
        ("drain_timeout", builder(&server).drain_timeout(max)),
    ];
    for (field, builder) in settings {
        let error = builder.connect().await.unwrap_err();
        let text = error.to_string();
        assert!(text.contains(field), "{field}: {text}");
        assert!(text.contains("longer than a year"), "{field}: {text}");
    }
    // A year is accepted: "as long as possible".
    let year = Duration::from_secs(365 * 24 * 3600);
    let limiter = builder(&server)
        .lease_ttl(year)
        .waiter_lifetime(year)
        .connect()
        .await
        .unwrap();
    drop(limiter.acquire(&key("a-year")).await.unwrap());
    assert!(limiter.drain().await.is_complete());
}

/// A zero wait is a fail-fast acquire (`Exceeded` when full, never a
/// `Timeout`), and every `Exceeded` says when to try again: the limiter's
/// average hold once permits were given back, a second before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_wait_fails_fast_and_every_exceeded_carries_a_hint() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let holder = limiter.acquire(&key("full")).await.unwrap();
    let error = limiter.acquire_wait(&key("full"), Duration::ZERO).await.unwrap_err();
    assert!(error.is_exceeded(), "{error:?}");
    assert!(matches!(error, Error::Exceeded { shed: false, .. }), "{error:?}");
    // Nothing was given back yet: one second.
    assert_eq!(error.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(limiter.retry_after(&error), Some(Duration::from_secs(1)));
    drop(holder);

    // Holds of about 150 ms: the hint follows them (a moving average,
    // 1/8 per hold, from the first one's ~1 ms: about 100 ms after eight).
    for _ in 0..8 {
        let permit = limiter.acquire(&key("full")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        drop(permit);
    }
    let _holder = limiter.acquire(&key("full")).await.unwrap();
    let error = limiter.acquire(&key("full")).await.unwrap_err();
    let hint = error.retry_after().unwrap();
    assert!(
        hint >= Duration::from_millis(80) && hint < Duration::from_millis(600),
        "the average hold was about 150 ms; the hint says {hint:?}"
    );
    // A waiting acquire whose deadline passes says the same.
    let error = limiter
        .acquire_wait(&key("full"), Duration::from_millis(60))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Exceeded { shed: false, .. }), "{error:?}");
    assert!(error.retry_after().unwrap() >= Duration::from_millis(80));
}

/// A lazy limiter with Redis down keeps the operating system's reason, as
/// `connect` does, and the error chain walks to it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_limiter_with_redis_down_says_why_down_the_error_chain() {
    // Port 1: nothing listens there. (A port found free a moment ago can be
    // taken meanwhile by a server another test of this binary starts: a
    // clean-clone CI run saw `Connection reset by peer` there.)
    let url = "redis://127.0.0.1:1".to_string();
    let connect = Limiter::builder(&url).connect().await.unwrap_err();
    assert!(connect.to_string().contains("refused"), "{connect}");

    let lazy = Limiter::builder(&url)
        .timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .connect_lazy()
        .await
        .unwrap();
    // The first attempt may still be under way: ask until it has failed.
    let deadline = Instant::now() + Duration::from_secs(5);
    let error = loop {
        let error = lazy.acquire(&key("down")).await.unwrap_err();
        if matches!(
            error,
            Error::Unavailable {
                reason: Unavailable::NotConnected(_)
            }
        ) || Instant::now() > deadline
        {
            break error;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!error.is_exceeded());
    assert_eq!(error.to_string(), "the limiter is unavailable: not connected to Redis");
    let cause = error.source().expect("the reason's cause");
    assert!(cause.to_string().contains("refused"), "{cause}");
    // Each cause once: the chain ends there.
    assert!(cause.source().is_none());
    let top: &(dyn std::error::Error + 'static) = &error;
    let chain: Vec<String> = std::iter::successors(Some(top), |e| (*e).source())
        .map(ToString::to_string)
        .collect();
    println!("{}", chain.join("\n  caused by: "));
    assert_eq!(chain.len(), 2, "{chain:?}");
    assert!(lazy.drain().await.is_complete());
}

/// `Debug` shows what was configured and what is held, never a secret nor
/// the library's channels and locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_shows_what_is_configured_and_held_not_internals() {
    let configured = Limiter::builder("redis://app:s3cret%21@127.0.0.1:17301/3").default_limit(7);
    let shown = format!("{configured:?}");
    for expected in [
        "17301",
        "database: 3",
        "username: Some(\"app\")",
        "<redacted>",
        "default_limit: 7",
    ] {
        assert!(shown.contains(expected), "{expected} missing: {shown}");
    }
    for hidden in ["s3cret", "%3C", "6379"] {
        assert!(!shown.contains(hidden), "{hidden} shown: {shown}");
    }
    let broken = format!("{:?}", Limiter::builder("app:s3cret@localhost:6379"));
    assert!(
        !broken.contains("s3cret") && broken.contains("missing scheme"),
        "{broken}"
    );

    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let permit = limiter
        .acquire_opts(&key("shown"), Acquire::default().weight(1).label("req-9"))
        .await
        .unwrap();
    let id = permit.lease_id().unwrap().to_string();
    for (what, shown) in [("permit", format!("{permit:?}")), ("limiter", format!("{limiter:?}"))] {
        for internal in ["Sender", "Mutex", "chan", "Arc", "news", "commands"] {
            assert!(!shown.contains(internal), "{what} shows {internal}: {shown}");
        }
    }
    assert!(format!("{permit:?}").contains(&id), "{permit:?}");
    assert!(format!("{limiter:?}").contains("default_limit: 1"), "{limiter:?}");
    // One rendering of a lease id: the permit's is the holder's, as Redis
    // stores it.
    let holders = limiter.holders(&key("shown")).await.unwrap();
    assert_eq!(holders[0].lease_id, id);
    assert!(id.ends_with("@req-9"), "{id}");
}
