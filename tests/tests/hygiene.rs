//! What a new user hits first (issue 10), each against a real redis-server.

use std::time::Duration;

use inflight_tests::RedisServer;
use inflight_tokio::{Builder, Error, Key, Limiter};

fn builder(url: &str) -> Builder {
    Limiter::builder(url)
        .key_prefix("hygiene")
        .default_limit(1)
        .lease_ttl(Duration::from_secs(30))
        .timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("tier", subject).unwrap()
}

/// Dropping a permit and acquiring the same key at once, at limit 1: the
/// release reaches Redis before the new acquire, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_dropped_and_acquired_again_at_once_is_granted() {
    let server = RedisServer::start();
    let limiter = builder(&server.url()).connect().await.unwrap();
    let key = key("again");
    let mut permit = limiter.acquire(&key).await.expect("the slot is free");
    let mut granted = 0;
    for _ in 0..200 {
        drop(permit);
        permit = match limiter.acquire(&key).await {
            Ok(permit) => {
                granted += 1;
                permit
            }
            // Refused: the release went out behind it. Take the slot back
            // once the release has landed, to go on counting.
            Err(Error::Exceeded) => retake(&limiter, &key).await,
            Err(other) => panic!("{other}"),
        };
    }
    assert_eq!(granted, 200, "every acquire right after a drop gets the freed slot");
}

/// Takes `key`'s one slot once it is free again (at most 100 tries).
async fn retake(limiter: &Limiter, key: &Key) -> inflight_tokio::Permit {
    for _ in 0..100 {
        if let Ok(permit) = limiter.acquire(key).await {
            return permit;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the slot never came back");
}

#[test]
fn a_builders_debug_print_hides_the_password_and_the_tls_key() {
    let pki = inflight_tests::TestPki::new(&["localhost"]);
    let key = pki.client_key_pem.clone();
    let builder = Limiter::builder("redis://alice:hunter2@127.0.0.1:6379/0")
        .tls_client_certificate(pki.client_chain_pem.clone(), key.clone());
    let printed = format!("{builder:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("alice") && printed.contains("127.0.0.1"), "{printed}");
    let key_body = key.lines().nth(1).expect("a PEM body line");
    assert!(!printed.contains(key_body), "the private key leaked: {printed}");
    assert!(!printed.contains("PRIVATE KEY"), "{printed}");
    // Something that is not a URL at all may be a secret pasted by mistake.
    let printed = format!("{:?}", Limiter::builder("hunter2"));
    assert!(!printed.contains("hunter2"), "{printed}");
}

/// No error prints its cause twice in a chain: a cause returned by `source()`
/// is not also part of its parent's message.
#[tokio::test]
async fn error_chains_print_each_cause_once() {
    fn assert_once(error: &(dyn std::error::Error + 'static)) {
        let mut current = error;
        while let Some(source) = current.source() {
            let (outer, inner) = (current.to_string(), source.to_string());
            assert!(!outer.contains(&inner), "{outer:?} repeats its source {inner:?}");
            current = source;
        }
    }
    let config = builder("redis://127.0.0.1:1")
        .lease_ttl(Duration::ZERO)
        .connect()
        .await
        .unwrap_err();
    assert!(config.to_string().contains("lease_ttl"), "{config}");
    assert_once(&config);
    let url = builder("http://127.0.0.1:1").connect().await.unwrap_err();
    assert_once(&url);
    let server = RedisServer::start();
    let limiter = builder(&server.url()).connect().await.unwrap();
    let zero = limiter.acquire_with(&key("chain"), 0).await.unwrap_err();
    assert_once(&zero);
}

/// `stats()` read right after an outcome includes that outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_include_every_outcome_already_returned() {
    let server = RedisServer::start();
    let limiter = builder(&server.url()).connect().await.unwrap();
    let key = key("stats");
    for round in 1..=100 {
        let permit = limiter.acquire(&key).await.unwrap();
        assert_eq!(limiter.stats().granted, round, "grant {round} not yet counted");
        assert_eq!(limiter.acquire(&key).await.unwrap_err(), Error::Exceeded);
        assert_eq!(limiter.stats().denied, round, "denial {round} not yet counted");
        permit.release().await.unwrap();
        assert_eq!(limiter.stats().releases, round, "release {round} not yet counted");
    }
}
