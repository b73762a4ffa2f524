//! README.md's whole-service example, verbatim below this comment (a test
//! checks it is, and runs it): what a new user copies first.

use inflight_tokio::tower::{FromHeader, InflightLayer};
use inflight_tokio::Limiter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    // 20 requests in flight per tenant, across every replica of the service.
    let limiter = Limiter::builder(redis).default_limit(20).connect().await?;
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello" }))
        .layer(InflightLayer::new(
            limiter.clone(),
            FromHeader::new("x-tenant".parse()?, "tenant"),
        ));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    // Shutdown: the server has stopped; give back what this process still
    // holds, for at most `Builder::drain_timeout` (5 s) if Redis is down.
    println!("{}", limiter.drain().await);
    Ok(())
}
