//! Long requests (streams, websockets) under a short lease TTL: each holder
//! renews its lease while it works, so a crashed replica's slots still come
//! back within seconds.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p inflight-tokio --example long_requests
//! ```
//!
//! Three streams of 5 s each run under a limit of 2 with a 2 s lease TTL.
//! Two are admitted and renew every 600 ms, so they keep their slots for the
//! full 5 s; the third is refused while they run, and admitted once one ends.

use std::time::{Duration, Instant};

use inflight_tokio::{Error, Key, Limiter, Permit, RenewError};

const TTL: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let limiter = Limiter::builder(&url)
        .key_prefix("inflight-example")
        .default_limit(2)
        .lease_ttl(TTL)
        .connect()
        .await?;
    let key = Key::new("streams", "acme")?;
    let started = Instant::now();

    let mut streams = Vec::new();
    for stream in 0..3 {
        let (limiter, key) = (limiter.clone(), key.clone());
        streams.push(tokio::spawn(async move {
            // The third arrives a little later than the first two.
            tokio::time::sleep(Duration::from_millis(100 * stream)).await;
            loop {
                match limiter.acquire(&key).await {
                    Ok(permit) => {
                        println!("{:>5.1}s stream {stream}: admitted", started.elapsed().as_secs_f64());
                        serve(stream, permit, started).await;
                        return;
                    }
                    Err(Error::Exceeded { .. }) => {
                        println!(
                            "{:>5.1}s stream {stream}: refused, retrying",
                            started.elapsed().as_secs_f64()
                        );
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(other) => {
                        println!("stream {stream}: {other}");
                        return;
                    }
                }
            }
        }));
    }
    for stream in streams {
        stream.await?;
    }
    limiter.drain().await;
    Ok(())
}

/// Five seconds of work, renewing the lease every 600 ms (under a third of the TTL).
async fn serve(stream: u64, mut permit: Permit, started: Instant) {
    let done = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut renew = tokio::time::interval(Duration::from_millis(600));
    renew.tick().await; // the first tick is immediate
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(done) => break,
            _ = renew.tick() => match permit.renew().await {
                Ok(()) => {}
                Err(RenewError::Unavailable { reason }) => println!("stream {stream}: renewal failed ({reason}); retrying"),
                Err(error) => {
                    // Lost (or the limiter stopped): the slot is no longer ours.
                    println!("stream {stream}: {error}; stopping");
                    return;
                }
            },
        }
    }
    permit.release().await.ok();
    println!("{:>5.1}s stream {stream}: done", started.elapsed().as_secs_f64());
}
