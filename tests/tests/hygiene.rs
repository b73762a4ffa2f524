//! What a new user hits first (issue 10), each against a real redis-server.

use std::time::Duration;

use inflight_tests::RedisServer;
use inflight_tokio::{Builder, ConnectError, Error, Key, Limiter, UnavailablePolicy};

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
            Err(Error::Exceeded { .. }) => retake(&limiter, &key).await,
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
        assert!(matches!(
            limiter.acquire(&key).await.unwrap_err(),
            Error::Exceeded { shed: false, .. }
        ));
        assert_eq!(limiter.stats().denied, round, "denial {round} not yet counted");
        permit.release().await.unwrap();
        assert_eq!(limiter.stats().releases, round, "release {round} not yet counted");
    }
}

/// A path for a Unix socket, unique to this test run.
fn socket_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("inflight-{}-{name}.sock", std::process::id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_urls_reach_a_real_server_with_database_and_password() {
    let path = socket_path("unix");
    let path_text = path.to_str().unwrap();
    let server = RedisServer::start_with(&[
        "--unixsocket",
        path_text,
        "--unixsocketperm",
        "700",
        "--requirepass",
        "s3cret",
    ]);
    for url in [
        format!("redis+unix://{path_text}?pass=s3cret&db=2"),
        format!("unix://{path_text}?db=2&pass=s3cret"),
    ] {
        let a = builder(&url).connect().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        let held = a.acquire(&key("unix")).await.unwrap();
        assert!(matches!(
            a.acquire(&key("unix")).await.unwrap_err(),
            Error::Exceeded { shed: false, .. }
        ));
        // The lease is in database 2, reached through the socket.
        let mut client = server.client();
        client.call(&[b"SELECT", b"2"]).unwrap();
        let live = client.call(&[b"ZCARD", b"hygiene:{tier|unix}:leases"]).unwrap();
        assert_eq!(live, inflight_core::resp::Frame::Integer(1), "{url}");
        held.release().await.unwrap();
    }
    let refused = builder(&format!("redis+unix://{path_text}"))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(refused, ConnectError::Auth { .. }), "{refused}");
    let missing = builder("redis+unix:///nonexistent/inflight.sock")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(missing, ConnectError::Unreachable { ref addr, .. } if addr == "unix:/nonexistent/inflight.sock"),
        "{missing}"
    );
    drop(server);
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_schemes_are_aliases_and_unsupported_options_are_named() {
    let server = RedisServer::start();
    let url = format!("valkey://127.0.0.1:{}/1", server.port());
    let limiter = builder(&url).connect().await.unwrap();
    drop(limiter.acquire(&key("valkey")).await.unwrap());
    let resp3 = format!("redis://127.0.0.1:{}/?protocol=resp3", server.port());
    match builder(&resp3).connect().await.unwrap_err() {
        ConnectError::Config(error) => assert!(error.to_string().contains("RESP2"), "{error}"),
        other => panic!("{other}"),
    }
    match builder("mongodb://127.0.0.1:1").connect().await.unwrap_err() {
        ConnectError::Config(error) => {
            let message = error.to_string();
            assert!(
                message.contains("redis+unix://") && message.contains("valkey://"),
                "{message}"
            );
        }
        other => panic!("{other}"),
    }
}

/// A fail-open service starts while Redis is down, lets requests through
/// unenforced, and enforces its limit once Redis is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_limiter_starts_without_redis_and_enforces_once_it_is_up() {
    let port = inflight_tests::redis_server::free_port();
    let url = format!("redis://127.0.0.1:{port}/");
    // A strict limiter still refuses to start without Redis...
    let strict = builder(&url)
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await;
    assert!(matches!(strict, Err(ConnectError::Unreachable { .. })), "{strict:?}");
    // ...a lazy one starts at once.
    let limiter = builder(&url)
        .on_unavailable(UnavailablePolicy::Allow)
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50))
        .connect_lazy()
        .await
        .unwrap();
    let key = key("lazy");
    let unenforced: Vec<_> = acquire_each(&limiter, &key, 3).await;
    assert!(unenforced.iter().all(|p| !p.is_enforced()), "no Redis: fail open");
    assert!(limiter.stats().fail_open >= 3);

    let server = RedisServer::start_at(port);
    let held = within(Duration::from_secs(5), || async {
        limiter.acquire(&key).await.ok().filter(|permit| permit.is_enforced())
    })
    .await
    .expect("enforced once Redis is up");
    assert!(matches!(
        limiter.acquire(&key).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    held.release().await.unwrap();
    drop(server);

    // Lazy and Deny: unavailable, not unenforced, while Redis is away.
    let port = inflight_tests::redis_server::free_port();
    let strict = builder(&format!("redis://127.0.0.1:{port}/"))
        .connect_lazy()
        .await
        .unwrap();
    assert!(matches!(strict.acquire(&key).await, Err(Error::Unavailable { .. })));
}

/// `count` acquires of `key`, one after another.
async fn acquire_each(limiter: &Limiter, key: &Key, count: usize) -> Vec<inflight_tokio::Permit> {
    let mut permits = Vec::new();
    for _ in 0..count {
        permits.push(limiter.acquire(key).await.expect("fail open"));
    }
    permits
}

/// Tries `attempt` every 20 ms until it gives something, for at most `limit`.
async fn within<T, F: std::future::Future<Output = Option<T>>>(
    limit: Duration,
    mut attempt: impl FnMut() -> F,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if let Some(value) = attempt().await {
            return Some(value);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The docs stand on their own: every relative link resolves inside the
/// repository, and none points at files that are not shipped with it.
#[test]
fn docs_link_only_inside_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    for page in pages.iter().filter(|p| p.extension().is_some_and(|e| e == "md")) {
        let text = std::fs::read_to_string(page).unwrap();
        assert!(
            !text.contains("../shared"),
            "{} refers outside the repository",
            page.display()
        );
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            if target.starts_with('#') || target.starts_with("https://docs.rs/") {
                continue;
            }
            assert!(!target.contains("://"), "{}: external link {target}", page.display());
            let path = target.split('#').next().unwrap();
            let resolved = page.parent().unwrap().join(path);
            assert!(resolved.exists(), "{}: broken link {target}", page.display());
        }
    }
}

/// Pointed at a Redis Cluster node, the limiter says so at `connect`
/// instead of failing every acquire whose slot lives elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_node_is_refused_with_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("inflight-cluster-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    let error = builder(&server.url()).connect().await.unwrap_err();
    assert!(matches!(error, ConnectError::ClusterMode { .. }), "{error}");
    assert!(error.to_string().contains("cluster mode"), "{error}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
