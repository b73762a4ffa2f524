//! `cargo run --release -p inflight-tests --bin cluster_bench [SECONDS]` —
//! acquire+release cycles per second over many tenants, on one standalone
//! redis-server and on a 3-primary Redis Cluster (no replicas) on the same
//! machine, in one run, at 64 and 512 tasks. Each pair of rows is measured
//! back to back, three rounds, alternating which goes first; the ratio is
//! taken per round. Also printed: redirects followed while measuring (a
//! steady cluster should need none).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight_tests::{RedisCluster, RedisServer};
use inflight_tokio::{Builder, Error, Key, Limiter};

const TENANTS: usize = 256;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let measure = Duration::from_secs(seconds);
    let server = RedisServer::start_with(&["--maxclients", "10000"]);
    let cluster = RedisCluster::start_with(3, 0);
    println!(
        "| tasks | round | standalone cycles/s | cluster cycles/s | cluster ÷ standalone | redirects while measuring |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for tasks in [64usize, 512] {
        for round in 0..3 {
            let standalone = || Limiter::builder(server.url());
            let clustered = || Limiter::builder(cluster.url()).cluster();
            let (alone, (clustered_rate, redirects)) = if round % 2 == 0 {
                let alone = cycles(standalone(), tasks, measure).await;
                (alone, cycles(clustered(), tasks, measure).await)
            } else {
                let clustered_rate = cycles(clustered(), tasks, measure).await;
                (cycles(standalone(), tasks, measure).await, clustered_rate)
            };
            println!(
                "| {tasks} | {} | {:.0} | {:.0} | {:.2} | {} |",
                round + 1,
                alone.0,
                clustered_rate,
                clustered_rate / alone.0,
                redirects
            );
        }
    }
}

/// Cycles per second of `tasks` callers over `TENANTS` tenants, and the
/// redirects the limiter followed while measuring.
async fn cycles(builder: Builder, tasks: usize, measure: Duration) -> (f64, u64) {
    let limiter = builder
        .key_prefix("cbench")
        .lease_ttl(Duration::from_secs(600))
        .timeout(Duration::from_secs(5))
        .max_in_flight(8192)
        .connect()
        .await
        .expect("connect the bench limiter");
    let done = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let limiter = limiter.clone();
            let (done, counting, stop) = (done.clone(), counting.clone(), stop.clone());
            let key = Key::new("tenant", format!("t{}", task % TENANTS)).expect("valid key");
            tokio::spawn(async move {
                // Bounded: the stop flag ends it after the measuring window.
                while !stop.load(Ordering::Relaxed) {
                    match limiter.acquire_with(&key, 1_000_000).await {
                        Ok(permit) => {
                            permit.release().await.expect("release");
                            if counting.load(Ordering::Relaxed) {
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(Error::Exceeded { .. }) => unreachable!("the limit is never reached"),
                        Err(other) => panic!("bench acquire failed: {other}"),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await; // warm up: connections, slot table
    let before = limiter.stats();
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(measure).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let after = limiter.stats();
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("a bench task");
    }
    limiter.drain().await;
    let redirects = (after.moved + after.asked + after.try_again) - (before.moved + before.asked + before.try_again);
    (done.load(Ordering::Relaxed) as f64 / elapsed, redirects)
}
