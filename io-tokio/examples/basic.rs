//! A service handling requests under a fleet-wide in-flight limit.
//!
//! Run against a local Redis (start one with `redis-server --port 6379`):
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p inflight-tokio --example basic
//! ```
//!
//! It simulates 200 requests for three tenants arriving at once, each holding
//! its slot for a while, under a limit of 5 per tenant across every replica
//! that shares the Redis. Start it twice at the same time to see the limit hold
//! across processes.

use std::time::Duration;

use inflight_tokio::{Error, Key, Limiter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let limiter = Limiter::builder(&url)
        .key_prefix("inflight-example")
        .default_limit(5)
        .lease_ttl(Duration::from_secs(30))
        .timeout(Duration::from_millis(200))
        .connect()
        .await?;
    println!("connected to {url}");

    let mut tasks = Vec::new();
    for request in 0..200u64 {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let tenant = ["acme", "globex", "initech"][(request % 3) as usize];
            // Requests arrive over ~200 ms.
            tokio::time::sleep(Duration::from_millis(request)).await;
            let key = Key::new("tenant", tenant).expect("valid key");
            match limiter.acquire(&key).await {
                Ok(permit) => {
                    // The request's work; the permit is held until it ends.
                    tokio::time::sleep(Duration::from_millis(5 + request % 20)).await;
                    drop(permit);
                    "served"
                }
                Err(Error::Exceeded { .. }) => "shed (429)",
                Err(_) => "shed (503)",
            }
        }));
    }
    let mut served = 0;
    let mut shed = 0;
    for task in tasks {
        match task.await? {
            "served" => served += 1,
            _ => shed += 1,
        }
    }
    println!("served {served}, shed {shed} (limit 5 per tenant across the fleet)");
    limiter.drain().await;
    println!("all releases done");
    Ok(())
}
