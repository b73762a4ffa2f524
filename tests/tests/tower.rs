//! The tower layers on real parts: an axum server on loopback, a real
//! redis-server, a real HTTP/1 client (hyper) whose hang-ups the test
//! controls.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, State};
use axum::routing::get;
use axum::{Extension, Router};
use http::StatusCode;
use inflight_core::key::SubjectKeys;
use inflight_core::resp::Frame;
use inflight_tests::http_client::{self, Exchange};
use inflight_tests::RedisServer;
use inflight_tokio::tower::{
    Admitted, Decision, FromExtension, FromHeader, InflightLayer, PermitError, PermitLayer, Rejection, WhenMissing,
};
use inflight_tokio::{Builder, Error, Key, Limiter, UnavailablePolicy};
use tokio::sync::Semaphore;
use tower::{Service, ServiceExt};

const PREFIX: &str = "tower";
const TIMEOUT: Duration = Duration::from_millis(300);

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(PREFIX)
        .default_limit(5)
        .lease_ttl(Duration::from_secs(60))
        .timeout(TIMEOUT)
        .connect_timeout(Duration::from_millis(300))
        .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(200))
}

/// What the streaming handler shares with the test: how many responses are
/// streaming now (a server-side gauge, counted from the handler's start to
/// the body's drop), the most at once, and the gate that lets bodies end.
struct Streams {
    live: AtomicUsize,
    peak: AtomicUsize,
    finish: Semaphore,
}

impl Default for Streams {
    fn default() -> Self {
        Self {
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            finish: Semaphore::new(0),
        }
    }
}

impl Streams {
    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Lets `n` streaming bodies end.
    fn finish(&self, n: usize) {
        self.finish.add_permits(n);
    }
}

/// Counts one streaming response while it lives.
struct LiveGuard(Arc<Streams>);

impl LiveGuard {
    fn new(streams: Arc<Streams>) -> Self {
        let live = streams.live.fetch_add(1, Ordering::SeqCst) + 1;
        streams.peak.fetch_max(live, Ordering::SeqCst);
        Self(streams)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A body that sends `start` at once, then waits for the gate, then sends
/// `end` and ends: a response that streams for as long as the test says.
async fn streaming(State(streams): State<Arc<Streams>>) -> Body {
    let guard = LiveGuard::new(streams);
    let chunks = futures_util::stream::unfold((0u8, guard), |(step, guard)| async move {
        match step {
            0 => Some((Ok::<_, std::io::Error>("start\n"), (1, guard))),
            1 => {
                guard.0.finish.acquire().await.expect("the gate stays open").forget();
                Some((Ok("end\n"), (2, guard)))
            }
            _ => None,
        }
    });
    Body::from_stream(chunks)
}

/// The fencing token the layer put in the request, as the body.
async fn token(Extension(admitted): Extension<Admitted>) -> String {
    match admitted.fencing_token() {
        Some(token) => token.to_string(),
        None => "none".into(),
    }
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("the test server runs") });
    addr
}

/// An app limited per `x-tenant` header.
async fn tenant_app(limiter: Limiter, extract: FromHeader) -> (SocketAddr, Arc<Streams>) {
    let streams = Arc::new(Streams::default());
    let app = Router::new()
        .route("/stream", get(streaming))
        .route("/token", get(token))
        .route("/ok", get(|| async { "ok" }))
        .layer(InflightLayer::new(limiter, extract))
        .with_state(Arc::clone(&streams));
    (serve(app).await, streams)
}

fn by_tenant() -> FromHeader {
    FromHeader::new(http::HeaderName::from_static("x-tenant"), "tenant")
}

/// Leases held in Redis for `namespace`/`subject`.
fn zcard(server: &RedisServer, namespace: &str, subject: &str) -> i64 {
    let keys = SubjectKeys::new(PREFIX, &Key::new(namespace, subject).unwrap());
    match server.client().call(&[b"ZCARD", keys.leases()]) {
        Ok(Frame::Integer(n)) => n,
        other => panic!("ZCARD: {other:?}"),
    }
}

/// Waits (bounded) until `condition` holds: for effects that travel through
/// the driver in the background, such as a release reaching Redis.
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `n` streaming requests for `tenant` at once and returns them once
/// every response head is in: the admitted ones still streaming.
async fn stream_all(addr: SocketAddr, tenant: &str, n: usize) -> (Vec<Exchange>, Vec<Exchange>) {
    let requests: Vec<_> = (0..n)
        .map(|_| {
            let tenant = tenant.to_string();
            tokio::spawn(async move { http_client::get(addr, "/stream", &[("x-tenant", &tenant)]).await })
        })
        .collect();
    let (mut admitted, mut rejected) = (Vec::new(), Vec::new());
    for request in requests {
        let mut exchange = request.await.expect("the request task");
        match exchange.status() {
            StatusCode::OK => {
                assert_eq!(exchange.next_chunk().await.as_deref(), Some(&b"start\n"[..]));
                admitted.push(exchange);
            }
            StatusCode::TOO_MANY_REQUESTS => rejected.push(exchange),
            other => panic!("unexpected status {other}"),
        }
    }
    (admitted, rejected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_responses_hold_their_slot_until_the_body_ends() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (addr, streams) = tenant_app(limiter, by_tenant()).await;

    for round in 0..2 {
        let (admitted, rejected) = stream_all(addr, "acme", 20).await;
        assert_eq!((admitted.len(), rejected.len()), (5, 15), "round {round}");
        // While the five bodies stream, the server has five live responses
        // and Redis holds five leases.
        assert_eq!(streams.live(), 5);
        assert_eq!(zcard(&server, "tenant", "acme"), 5);
        // Every 429 says when to come back: before any hold ended, the
        // limiter's one second; after, the average hold (whole seconds, ≥ 1).
        let retry_after = rejected[0].header("retry-after");
        assert_eq!(retry_after.as_deref(), Some("1"), "round {round}");
        drop(rejected);

        streams.finish(5);
        for exchange in admitted {
            assert_eq!(exchange.rest().await, "end\n");
        }
        eventually("the five leases are released", || zcard(&server, "tenant", "acme") == 0).await;
    }
    assert_eq!(streams.peak.load(Ordering::SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_body_frees_its_slot() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (addr, streams) = tenant_app(limiter, by_tenant()).await;

    let (mut admitted, rejected) = stream_all(addr, "hangup", 6).await;
    assert_eq!((admitted.len(), rejected.len()), (5, 1));
    // One client goes away with its body half read; nobody opened the gate.
    drop(admitted.pop());
    eventually("the server drops the abandoned body", || streams.live() == 4).await;
    eventually("its lease is released", || zcard(&server, "tenant", "hangup") == 4).await;

    let mut next = http_client::get(addr, "/stream", &[("x-tenant", "hangup")]).await;
    assert_eq!(next.status(), StatusCode::OK);
    assert_eq!(next.next_chunk().await.as_deref(), Some(&b"start\n"[..]));
    assert_eq!(zcard(&server, "tenant", "hangup"), 5);

    drop(next);
    drop(admitted);
    eventually("every lease is released", || zcard(&server, "tenant", "hangup") == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_do_not_affect_each_other() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (addr, streams) = tenant_app(limiter, by_tenant()).await;

    let (full, _) = stream_all(addr, "big", 8).await;
    assert_eq!(full.len(), 5);
    let (other, rejected) = stream_all(addr, "small", 5).await;
    assert_eq!(
        (other.len(), rejected.len()),
        (5, 0),
        "a full tenant takes nothing from another"
    );
    assert_eq!(
        (zcard(&server, "tenant", "big"), zcard(&server, "tenant", "small")),
        (5, 5)
    );
    streams.finish(10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_route_limit_through_the_extractor() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let streams = Arc::new(Streams::default());
    // `route_layer` runs after routing, so axum's MatchedPath is there.
    let by_route = FromExtension::new(|path: &MatchedPath| {
        let limit = if path.as_str() == "/upload" { 2 } else { 3 };
        Decision::key("route", path.as_str()).with_limit(limit)
    });
    let app = Router::new()
        .route("/upload", get(streaming))
        .route("/download", get(streaming))
        .route_layer(InflightLayer::new(limiter, by_route))
        .with_state(Arc::clone(&streams));
    let addr = serve(app).await;

    let mut statuses = Vec::new();
    let mut held = Vec::new();
    for path in [
        "/upload",
        "/upload",
        "/upload",
        "/download",
        "/download",
        "/download",
        "/download",
    ] {
        let exchange = http_client::get(addr, path, &[]).await;
        statuses.push((path, exchange.status().as_u16()));
        held.push(exchange);
    }
    assert_eq!(
        statuses,
        [
            ("/upload", 200),
            ("/upload", 200),
            ("/upload", 429),
            ("/download", 200),
            ("/download", 200),
            ("/download", 200),
            ("/download", 429)
        ]
    );
    assert_eq!(zcard(&server, "route", "/upload"), 2);
    assert_eq!(zcard(&server, "route", "/download"), 3);
    streams.finish(5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_header_follow_the_extractors_choice() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (refusing, _) = tenant_app(limiter.clone(), by_tenant()).await;
    let (passing, _) = tenant_app(limiter.clone(), by_tenant().when_missing(WhenMissing::Pass)).await;

    let refused = http_client::get(refusing, "/ok", &[]).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.rest().await, "the request has no x-tenant header\n");
    let oversized = "x".repeat(600);
    let refused = http_client::get(refusing, "/ok", &[("x-tenant", &oversized)]).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);

    let granted_before = limiter.stats().granted;
    let passed = http_client::get(passing, "/token", &[]).await;
    assert_eq!(passed.status(), StatusCode::OK);
    assert_eq!(passed.rest().await, "none", "a request let pass holds no lease");
    assert_eq!(limiter.stats().granted, granted_before, "nothing was asked of Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_sees_its_fencing_token() {
    let server = RedisServer::start();
    let limiter = builder(&server).fencing_tokens(true).connect().await.unwrap();
    let (addr, _) = tenant_app(limiter, by_tenant()).await;
    let mut last = 0;
    for _ in 0..3 {
        let exchange = http_client::get(addr, "/token", &[("x-tenant", "fenced")]).await;
        let token: u64 = exchange.rest().await.parse().expect("a token");
        assert!(token > last, "fencing tokens increase: {token} after {last}");
        last = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_within_the_timeout_and_back_without_a_restart() {
    let mut server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let (addr, _) = tenant_app(limiter, by_tenant()).await;
    assert_eq!(
        http_client::get(addr, "/ok", &[("x-tenant", "t")]).await.status(),
        StatusCode::OK
    );

    server.stop();
    for _ in 0..3 {
        let started = Instant::now();
        let refused = http_client::get(addr, "/ok", &[("x-tenant", "t")]).await;
        let took = started.elapsed();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Not connected: the reconnect backoff cap (200 ms) says when to retry.
        assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
        assert!(took < TIMEOUT + Duration::from_millis(200), "503 after {took:?}");
    }

    server.start_again();
    // The server came back empty: the limiter holds grants for the recovery
    // window (503, Retry-After), then serves again. Same service, no restart.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let exchange = http_client::get(addr, "/ok", &[("x-tenant", "t")]).await;
        match exchange.status() {
            StatusCode::OK => break,
            StatusCode::SERVICE_UNAVAILABLE => assert!(exchange.header("retry-after").is_some()),
            other => panic!("unexpected status {other}"),
        }
        assert!(Instant::now() < deadline, "the service never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_lets_requests_through_unmarked() {
    let mut server = RedisServer::start();
    let limiter = builder(&server)
        .on_unavailable(UnavailablePolicy::Allow)
        .connect()
        .await
        .unwrap();
    let (addr, _) = tenant_app(limiter.clone(), by_tenant()).await;
    server.stop();
    for _ in 0..3 {
        let exchange = http_client::get(addr, "/token", &[("x-tenant", "open")]).await;
        assert_eq!(exchange.status(), StatusCode::OK);
        assert_eq!(exchange.header("retry-after"), None);
        assert_eq!(
            exchange.rest().await,
            "none",
            "no lease is held, and nothing else says so"
        );
    }
    assert_eq!(limiter.stats().fail_open, 3);
}

/// A gRPC-style call: a typed request, no HTTP.
#[derive(Debug)]
struct Call {
    tenant: &'static str,
}

fn by_call_tenant(call: &Call) -> Decision {
    Decision::key("tenant", call.tenant).with_limit(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generic_layer_holds_the_permit_for_the_response_future() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let handler = {
        let gate = Arc::clone(&gate);
        tower::service_fn(move |call: Call| {
            let gate = Arc::clone(&gate);
            async move {
                gate.acquire().await.expect("open").forget();
                Ok::<_, std::convert::Infallible>(format!("served {}", call.tenant))
            }
        })
    };
    let service = tower::ServiceBuilder::new()
        .layer(PermitLayer::new(limiter, by_call_tenant as fn(&Call) -> Decision))
        .service(handler);

    let calls: Vec<_> = (0..2)
        .map(|_| tokio::spawn(service.clone().oneshot(Call { tenant: "grpc" })))
        .collect();
    eventually("both calls hold a lease", || zcard(&server, "tenant", "grpc") == 2).await;
    match service.clone().oneshot(Call { tenant: "grpc" }).await {
        Err(PermitError::Rejected(Rejection::Exceeded { key, .. })) => assert_eq!(key.subject(), "grpc"),
        other => panic!("expected a typed rejection, got {other:?}"),
    }

    gate.add_permits(2);
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), "served grpc");
    }
    eventually("the leases are released", || zcard(&server, "tenant", "grpc") == 0).await;
    gate.add_permits(1);
    let mut service = service;
    let ready = service.ready().await.unwrap();
    assert_eq!(ready.call(Call { tenant: "grpc" }).await.unwrap(), "served grpc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_response_futures_mid_acquire_leaks_nothing() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let handler = tower::service_fn(|_: Call| async { Ok::<_, std::convert::Infallible>("served") });
    let service = tower::ServiceBuilder::new()
        .layer(PermitLayer::new(
            limiter.clone(),
            by_call_tenant as fn(&Call) -> Decision,
        ))
        .service(handler);

    // Redis is frozen: every acquire is in flight when its caller gives up,
    // as a client hanging up or `tower::timeout` would make it.
    server.pause();
    for _ in 0..10 {
        let call = service.clone().oneshot(Call { tenant: "cancel" });
        assert!(tokio::time::timeout(Duration::from_millis(20), call).await.is_err());
    }
    server.resume();
    // Redis then granted two of the ten (the limit) to callers long gone:
    // both are given back, and the limit is whole again.
    eventually("both late grants are compensated", || {
        limiter.stats().compensations == 2
    })
    .await;
    eventually("no lease is left", || zcard(&server, "tenant", "cancel") == 0).await;
    let key = Key::new("tenant", "cancel").unwrap();
    let held = [
        limiter.acquire_with(&key, 2).await.expect("a slot"),
        limiter.acquire_with(&key, 2).await.expect("a second slot"),
    ];
    assert!(matches!(
        limiter.acquire_with(&key, 2).await,
        Err(Error::Exceeded { .. })
    ));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_up_to_a_full_key_queues_instead_of_429() {
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let streams = Arc::new(Streams::default());
    let layer = InflightLayer::new(limiter, by_tenant()).wait_up_to(Duration::from_secs(5));
    let app = Router::new()
        .route("/stream", get(streaming))
        .layer(layer)
        .with_state(Arc::clone(&streams));
    let addr = serve(app).await;

    let (admitted, rejected) = stream_all(addr, "patient", 5).await;
    assert_eq!((admitted.len(), rejected.len()), (5, 0));
    // The sixth waits in the key's queue instead of being refused...
    let sixth = tokio::spawn(async move { http_client::get(addr, "/stream", &[("x-tenant", "patient")]).await });
    let keys = SubjectKeys::new(PREFIX, &Key::new("tenant", "patient").unwrap());
    eventually("the sixth request waits in the queue", || {
        matches!(server.client().call(&[b"ZCARD", &keys.queue()]), Ok(Frame::Integer(1)))
    })
    .await;
    assert!(!sixth.is_finished());
    // ...and is served as soon as one body ends.
    streams.finish(1);
    let mut sixth = sixth.await.unwrap();
    assert_eq!(sixth.status(), StatusCode::OK);
    assert_eq!(sixth.next_chunk().await.as_deref(), Some(&b"start\n"[..]));
    assert_eq!(zcard(&server, "tenant", "patient"), 5);
    streams.finish(5);
    drop(admitted);
}

/// One layer, three limits (a tenant's from a header, a route's from
/// axum's `MatchedPath`, the whole service's): a request runs only with a
/// slot of each, and the 429 says which was full; a refused request holds
/// nothing on the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_layer_counts_a_request_against_tenant_route_and_service_and_names_the_full_one() {
    use inflight_tokio::tower::AllOf;
    let server = RedisServer::start();
    let limiter = builder(&server).connect().await.unwrap();
    let streams = Arc::new(Streams::default());
    let by_route = FromExtension::new(|path: &MatchedPath| Decision::key("route", path.as_str()).with_limit(3));
    let service = |_: &http::Request<Body>| Decision::key("service", "api").with_limit(4);
    let app = Router::new()
        .route("/a", get(streaming))
        .route("/b", get(streaming))
        .route_layer(InflightLayer::new(
            limiter,
            AllOf((by_tenant().with_limit(2), by_route, service)),
        ))
        .with_state(Arc::clone(&streams));
    let addr = serve(app).await;
    let mut held = Vec::new();
    let mut outcomes = Vec::new();
    for (path, tenant) in [
        ("/a", "t1"),
        ("/a", "t1"),
        ("/a", "t1"),
        ("/a", "t2"),
        ("/a", "t2"),
        ("/b", "t3"),
        ("/b", "t3"),
    ] {
        let exchange = http_client::get(addr, path, &[("x-tenant", tenant)]).await;
        let status = exchange.status().as_u16();
        if status == 429 {
            let body = exchange.rest().await;
            outcomes.push((path, tenant, status, body.trim().to_string()));
        } else {
            outcomes.push((path, tenant, status, String::new()));
            held.push(exchange);
        }
    }
    let full = |what: &str| format!("too many requests in flight for this {what}; try again later");
    assert_eq!(
        outcomes,
        [
            ("/a", "t1", 200, String::new()),
            ("/a", "t1", 200, String::new()),
            ("/a", "t1", 429, full("tenant")),
            ("/a", "t2", 200, String::new()),
            ("/a", "t2", 429, full("route")),
            ("/b", "t3", 200, String::new()),
            ("/b", "t3", 429, full("service")),
        ]
    );
    // Four requests run, and each refused one took nothing anywhere.
    assert_eq!(
        [
            zcard(&server, "tenant", "t1"),
            zcard(&server, "tenant", "t2"),
            zcard(&server, "tenant", "t3"),
            zcard(&server, "route", "/a"),
            zcard(&server, "route", "/b"),
            zcard(&server, "service", "api"),
        ],
        [2, 1, 1, 3, 1, 4]
    );
    streams.finish(4);
    drop(held);
    eventually("every slot is given back", || zcard(&server, "service", "api") == 0).await;
}
