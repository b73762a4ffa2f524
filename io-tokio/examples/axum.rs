//! An axum app limited per tenant and as a whole: at most 3 requests of each
//! `x-tenant` in flight at once and 10 in all, across every replica that
//! shares the Redis, with 2 of the 10 kept for critical traffic.
//!
//! ```text
//! redis-server --port 6379 &
//! cargo run -p inflight-tokio --features tower --example axum
//! # in another shell: four slow downloads for one tenant, one refused
//! for i in 1 2 3 4; do curl -s -H 'x-tenant: acme' localhost:3000/download & done; wait
//! ```
//!
//! `/download` streams for two seconds: the slot is held until the body
//! ends (or the client hangs up). A fourth concurrent request for the same
//! tenant gets 429 with a `Retry-After` (the body says the tenant's limit
//! is full); another tenant is unaffected. Each request also takes a slot of
//! the service's 10, all or nothing with its tenant's: a request marked
//! `x-priority: critical` may use all 10, any other only 8 of them, so a
//! flood of ordinary requests never takes the last two (reserved capacity).
//! A request without the header gets 400; `/health` is not limited.

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use inflight_tokio::tower::{AllOf, Decision, InflightLayer};
use inflight_tokio::Limiter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let limiter = Limiter::builder(&url)
        .key_prefix("inflight-example")
        .default_limit(3)
        .lease_ttl(Duration::from_secs(30))
        .timeout(Duration::from_millis(200))
        .connect()
        .await?;

    // The extractors decide per request: a key, a pass, or a refusal. With
    // `AllOf`, a request counts against every key they name, all or nothing.
    let per_tenant = |request: &http::Request<Body>| {
        if request.uri().path() == "/health" {
            return Decision::Pass;
        }
        match request.headers().get("x-tenant").and_then(|value| value.to_str().ok()) {
            Some(tenant) => Decision::key("tenant", tenant),
            None => Decision::refuse("send an x-tenant header"),
        }
    };
    // Reserved capacity: every request shares the service's key, critical
    // ones under its whole limit (10), the others under 8 of it.
    let service = |request: &http::Request<Body>| {
        if request.uri().path() == "/health" {
            return Decision::Pass;
        }
        let critical = request
            .headers()
            .get("x-priority")
            .is_some_and(|value| value == "critical");
        Decision::key("service", "api").with_limit(if critical { 10 } else { 8 })
    };
    let per_tenant = InflightLayer::new(limiter, AllOf((per_tenant, service)));
    let app = Router::new()
        .route("/download", get(download))
        .route("/health", get(|| async { "ok\n" }))
        .layer(per_tenant);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://127.0.0.1:3000 (Redis at {url})");
    axum::serve(listener, app).await?;
    Ok(())
}

/// Ten chunks over two seconds: a response that holds its slot while it
/// streams.
async fn download() -> Body {
    let chunks = futures_util::stream::unfold(1, |n| async move {
        if n > 10 {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        Some((Ok::<_, std::convert::Infallible>(format!("chunk {n} of 10\n")), n + 1))
    });
    Body::from_stream(chunks)
}
