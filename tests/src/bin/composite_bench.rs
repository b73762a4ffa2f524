//! `cargo run --release -p inflight-tests --bin composite_bench [SECONDS]` —
//! what a request under three limits (its tenant's, its route's, the
//! service's) costs: one `Limiter::acquire_all` of the three keys and one
//! release of the `Permits`, against three `Limiter::acquire`s one after
//! another (in a fixed order, as one must to avoid deadlocks) and their
//! three releases at once: what a service would write by hand, without the
//! atomicity. Through the real limiter, on one redis-server on
//! loopback, at 1 task and at 64 tasks (64 tenants, 8 routes, one service
//! key; limits never reached). Three rounds, the order of the two rows
//! rotating; medians, and per round the ratio of the composite row to the
//! hand-made one measured in the same round. Redis CPU from `INFO cpu`,
//! Redis commands from `INFO commandstats` (script calls and the
//! `redis.call`s inside them), client CPU from `/proc/self/stat`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight_tests::{cpu, RedisServer};
use inflight_tokio::{Key, Limiter};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Row {
    /// One `acquire_all` of three keys.
    Composite,
    /// Three `acquire`s in turn.
    ThreeSingles,
}

/// Cycles per second, then per cycle: Redis µs, Redis commands, client µs.
type Measured = (f64, f64, f64, f64);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let server = RedisServer::start();
    let limiter = Limiter::builder(server.url())
        .key_prefix("cbench")
        .default_limit(1_000_000)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_secs(2))
        .keep_alive(false)
        .connect()
        .await
        .expect("connect to the benchmark's redis-server");
    println!("{seconds} s per row, 3 rounds, medians (per round in brackets)\n");
    println!("| tasks | row | cycles/s | Redis µs/cycle | Redis commands/cycle | client µs/cycle |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    let mut summary = Vec::new();
    for tasks in [1, 64] {
        let mut measured: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
        for round in 0..3 {
            for turn in 0..2 {
                let index = (round + turn) % 2;
                let row = [Row::Composite, Row::ThreeSingles][index];
                measured[index].push(run(&server, &limiter, row, tasks, Duration::from_secs_f64(seconds)).await);
            }
        }
        for (index, name) in ["acquire_all of 3 keys", "3 acquires in turn"].iter().enumerate() {
            let column = |pick: fn(&Measured) -> f64| median(measured[index].iter().map(pick).collect());
            let rates: Vec<String> = measured[index].iter().map(|m| format!("{:.0}", m.0)).collect();
            println!(
                "| {tasks} | {name} | {:.0} ({}) | {:.1} | {:.1} | {:.1} |",
                column(|m| m.0),
                rates.join(", "),
                column(|m| m.1),
                column(|m| m.2),
                column(|m| m.3)
            );
        }
        let ratio = |pick: fn(&Measured) -> f64| {
            let per_round: Vec<f64> = measured[0]
                .iter()
                .zip(&measured[1])
                .map(|(c, s)| pick(c) / pick(s))
                .collect();
            let shown: Vec<String> = per_round.iter().map(|r| format!("{r:.2}")).collect();
            format!("{:.2} ({})", median(per_round), shown.join(", "))
        };
        summary.push(format!(
            "| {tasks} | {} | {} | {} | {} |",
            ratio(|m| m.0),
            ratio(|m| m.1),
            ratio(|m| m.2),
            ratio(|m| m.3)
        ));
    }
    println!("\n| tasks | cycles/s composite ÷ singles | Redis CPU/cycle | Redis commands/cycle | client CPU/cycle |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for line in summary {
        println!("{line}");
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Runs `tasks` callers for `measure` (bounded: each stops after a minute
/// whatever happens) and measures what one cycle cost.
async fn run(server: &RedisServer, limiter: &Limiter, row: Row, tasks: usize, measure: Duration) -> Measured {
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let (redis_before, commands_before, client_before) = (
        cpu::redis_seconds(server),
        cpu::redis_commands(server),
        cpu::process_seconds(),
    );
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|n| {
            let (limiter, stop, cycles) = (limiter.clone(), stop.clone(), cycles.clone());
            let keys = [
                Key::new("tenant", format!("t{n}")).unwrap(),
                Key::new("route", format!("r{}", n % 8)).unwrap(),
                Key::new("service", "api").unwrap(),
            ];
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    match row {
                        Row::Composite => {
                            let asked: Vec<(&Key, u32)> = keys.iter().map(|k| (k, 1_000_000)).collect();
                            let permits = limiter.acquire_all(&asked).await.expect("a grant");
                            permits.release().await.expect("a release");
                        }
                        Row::ThreeSingles => {
                            let a = limiter.acquire(&keys[0]).await.expect("a grant");
                            let b = limiter.acquire(&keys[1]).await.expect("a grant");
                            let c = limiter.acquire(&keys[2]).await.expect("a grant");
                            let released = tokio::join!(a.release(), b.release(), c.release());
                            assert!(released.0.is_ok() && released.1.is_ok() && released.2.is_ok());
                        }
                    }
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(measure).await;
    stop.store(true, Ordering::Relaxed);
    for handle in handles {
        handle.await.expect("a bench task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let done = cycles.load(Ordering::Relaxed) as f64;
    (
        done / elapsed,
        (cpu::redis_seconds(server) - redis_before) * 1e6 / done,
        (cpu::redis_commands(server) - commands_before) / done,
        (cpu::process_seconds() - client_before) * 1e6 / done,
    )
}
