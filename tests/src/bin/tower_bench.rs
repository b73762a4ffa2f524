//! `cargo run --release -p inflight-tests --bin tower_bench [SECONDS]` —
//! requests per second of a trivial axum handler over HTTP/1 keep-alive
//! connections on loopback: bare, behind `InflightLayer` with an extractor
//! that lets every request pass (the layer's own cost), and behind
//! `InflightLayer` keyed per tenant (a lease taken and released in Redis
//! per request). Server, clients and limiter share one 2-thread runtime;
//! redis-server runs alongside. Three rounds, the order rotating each
//! round; ratios are per round against the bare row of the same round.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use inflight_tests::RedisServer;
use inflight_tokio::tower::{Decision, FromHeader, InflightLayer};
use inflight_tokio::Limiter;

const CONNECTIONS: usize = 32;
const TENANTS: usize = 16;

#[derive(Clone, Copy, Debug)]
enum Row {
    Bare,
    LayerPass,
    LayerLimited,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let measure = Duration::from_secs_f64(seconds);
    let server = RedisServer::start();
    let limiter = Limiter::builder(server.url())
        .key_prefix("tbench")
        .default_limit(10_000)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect to the benchmark's redis-server");
    println!("{CONNECTIONS} keep-alive connections, {TENANTS} tenants, {seconds} s per row");
    println!("| round | bare req/s | layer, pass req/s | layer, per tenant req/s | pass ÷ bare | per tenant ÷ bare |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    let rows = [Row::Bare, Row::LayerPass, Row::LayerLimited];
    let mut ratios = (Vec::new(), Vec::new());
    for round in 0..3 {
        let mut rates = [0.0; 3];
        for turn in 0..3 {
            let index = (round + turn) % 3;
            rates[index] = rate(app(rows[index], &limiter), measure).await;
        }
        let [bare, pass, limited] = rates;
        ratios.0.push(pass / bare);
        ratios.1.push(limited / bare);
        println!(
            "| {} | {bare:.0} | {pass:.0} | {limited:.0} | {:.2} | {:.2} |",
            round + 1,
            pass / bare,
            limited / bare
        );
    }
    println!(
        "median ratios: pass ÷ bare {:.2}, per tenant ÷ bare {:.2}; leases taken {}",
        median(&mut ratios.0),
        median(&mut ratios.1),
        limiter.stats().granted
    );
}

fn app(row: Row, limiter: &Limiter) -> Router {
    let router = Router::new().route("/", get(|| async { "ok" }));
    match row {
        Row::Bare => router,
        Row::LayerPass => router.layer(InflightLayer::new(limiter.clone(), |_: &http::Request<Body>| {
            Decision::Pass
        })),
        Row::LayerLimited => router.layer(InflightLayer::new(
            limiter.clone(),
            FromHeader::new(http::HeaderName::from_static("x-tenant"), "tenant"),
        )),
    }
}

/// Requests per second through `app`, after a short warm-up.
async fn rate(app: Router, measure: Duration) -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|i| tokio::spawn(client(addr, i % TENANTS, Arc::clone(&stop), Arc::clone(&done))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (start, before) = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::time::sleep(measure).await;
    let (elapsed, after) = (start.elapsed(), done.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.expect("a client task");
    }
    server.abort();
    (after - before) as f64 / elapsed.as_secs_f64()
}

/// One keep-alive connection sending GETs back to back until `stop`
/// (bounded: at most 10 million requests).
async fn client(addr: SocketAddr, tenant: usize, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP/1 handshake");
    tokio::spawn(connection);
    let tenant = format!("t{tenant}");
    for _ in 0..10_000_000u64 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let request = http::Request::get("/")
            .header("host", "localhost")
            .header("x-tenant", &tenant)
            .body(Empty::<Bytes>::new())
            .expect("a request");
        sender.ready().await.expect("the connection stays up");
        let response = sender.send_request(request).await.expect("a response");
        assert_eq!(
            response.status(),
            http::StatusCode::OK,
            "the benchmark never fills a key"
        );
        response.into_body().collect().await.expect("the body");
        done.fetch_add(1, Ordering::Relaxed);
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
