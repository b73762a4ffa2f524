//! `cargo run --release -p inflight-tests --bin wait_bench [SECONDS]` —
//! waiting acquires against the poll loop the other libraries use.
//!
//! One key, limit 10; 64 tasks on 4 limiters (16 each), each acquiring,
//! holding 1–5 ms (drawn from a fixed seed) and releasing, for SECONDS
//! (default 3) per row, on one redis-server on loopback
//! (`WAIT_BENCH_LIMITERS=1` puts all 64 tasks on one limiter;
//! `WAIT_BENCH_HOLD_MS=20` holds 20–100 ms instead, five times as long at
//! each end as the default). Rows:
//! `acquire_wait` (the server's FIFO queue, woken by releases), and a
//! fail-fast `acquire` retried every 10 ms until it succeeds (what
//! redis-semaphore and DistributedLock do). Two rounds, the order
//! alternating. Printed per row: slot utilisation (time slots were held ÷
//! (limit × time)) as the holders saw it (from their grant to their drop)
//! and as Redis saw it (the lease set's size, sampled every millisecond), grants per second, the wait from call to grant (p50,
//! p99), and overtaking: for each grant, how many acquires that were called
//! later got their slot first (max and mean; client-side call order, so
//! two calls a few microseconds apart on different limiters can swap
//! without any unfairness on the server), and CPU per grant of this process
//! and of redis-server.
//!
//! For digging: `WAIT_BENCH_DEBUG=1` prints the queue and each limiter's
//! stats per row; `WAIT_BENCH_MONITOR=path` records Redis's `MONITOR` there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inflight_tests::{cpu, RedisServer, Rng};
use inflight_tokio::{Error, Key, Limiter};

const LIMIT: u32 = 10;
const LIMITERS: usize = 4;

/// Holds are drawn from `[low, low + 4 × low)` µs: 1–5 ms by default.
fn hold_low_us() -> u64 {
    std::env::var("WAIT_BENCH_HOLD_MS")
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(1_000, |ms| ms * 1_000)
}

fn limiter_count() -> usize {
    std::env::var("WAIT_BENCH_LIMITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(LIMITERS)
}
const TASKS: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Waiting,
    Polling,
}

/// One grant: when its acquire was called, when the slot came, how long it was held.
struct Grant {
    called: Instant,
    granted: Instant,
    held: Duration,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let measure = Duration::from_secs_f64(seconds);
    let server = RedisServer::start();
    let _monitor = std::env::var("WAIT_BENCH_MONITOR").ok().map(|path| {
        std::process::Command::new("redis-cli")
            .args(["-p", &server.port().to_string(), "MONITOR"])
            .stdout(std::fs::File::create(path).unwrap())
            .spawn()
            .unwrap()
    });
    println!(
        "limit {LIMIT}, {TASKS} tasks on {} limiters, holds {}-{} ms, {seconds} s per row",
        limiter_count(),
        hold_low_us() / 1_000,
        hold_low_us() * 5 / 1_000
    );
    println!("| round | mode | utilisation (holders) | utilisation (Redis) | grants/s | wait p50 | wait p99 | overtaking max | overtaking mean | client CPU µs/grant | Redis CPU µs/grant |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for round in 0..2 {
        let order = if round % 2 == 0 {
            [Mode::Waiting, Mode::Polling]
        } else {
            [Mode::Polling, Mode::Waiting]
        };
        for mode in order {
            let subject = format!("bench-{round}-{}", mode == Mode::Waiting);
            let row = run(&server, mode, &subject, measure).await;
            println!("| {} | {row}", round + 1);
        }
    }
}

async fn run(server: &RedisServer, mode: Mode, subject: &str, measure: Duration) -> String {
    let mut limiters = Vec::new();
    for _ in 0..limiter_count() {
        let limiter = Limiter::builder(server.url())
            .key_prefix("wbench")
            .default_limit(LIMIT)
            .lease_ttl(Duration::from_secs(60))
            .timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect to the benchmark's redis-server");
        limiters.push(limiter);
    }
    let key = Key::new("bench", subject).unwrap();
    let grants = Arc::new(Mutex::new(Vec::<Grant>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (cpu_before, redis_before) = (cpu::process_seconds(), cpu::redis_seconds(server));
    let commands_before = cpu::redis_command_calls(server);
    let started = Instant::now();
    let low = hold_low_us();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (limiter, key) = (limiters[task % limiters.len()].clone(), key.clone());
            let (grants, stop) = (Arc::clone(&grants), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ task as u64);
                // Bounded: a task does at most 100 000 cycles.
                for _ in 0..100_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let called = Instant::now();
                    let permit = match mode {
                        Mode::Waiting => limiter.acquire_wait(&key, Duration::from_secs(5)).await,
                        Mode::Polling => poll(&limiter, &key, called + Duration::from_secs(5)).await,
                    };
                    let Ok(permit) = permit else { continue };
                    let granted = Instant::now();
                    let hold = Duration::from_micros(low + rng.below(4 * low));
                    tokio::time::sleep(hold).await;
                    let held = granted.elapsed();
                    drop(permit);
                    grants.lock().unwrap().push(Grant { called, granted, held });
                }
            })
        })
        .collect();
    // Slots held as Redis sees them: the lease set's size, sampled every
    // millisecond on a connection of its own (bounded by the window).
    let sampler = {
        let (addr, keys) = (server.addr(), inflight_core::key::SubjectKeys::new("wbench", &key));
        let stop = Arc::clone(&stop);
        tokio::task::spawn_blocking(move || {
            let mut client = inflight_tests::RespClient::connect(addr).expect("a sampling connection");
            let (mut samples, mut held) = (0u64, 0u64);
            for _ in 0..100_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(inflight_core::resp::Frame::Integer(n)) = client.call(&[b"ZCARD", keys.leases()]) {
                    samples += 1;
                    held += n as u64;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            (held as f64 / (samples.max(1) as f64 * f64::from(LIMIT)), samples)
        })
    };
    tokio::time::sleep(measure).await;
    if std::env::var("WAIT_BENCH_DEBUG").is_ok() {
        let keys = inflight_core::key::SubjectKeys::new("wbench", &key);
        eprintln!(
            "queue {:?}",
            server
                .client()
                .call(&[b"ZRANGE", &keys.queue(), b"0", b"4", b"WITHSCORES"])
        );
        eprintln!(
            "waiters {:?}",
            server
                .client()
                .call(&[b"ZRANGE", &keys.waiters(), b"0", b"4", b"WITHSCORES"])
        );
        eprintln!(
            "leases {:?}",
            server.client().call(&[b"ZRANGE", keys.leases(), b"0", b"-1"])
        );
        eprintln!("time {:?}", server.client().call(&[b"TIME"]));
    }
    stop.store(true, Ordering::Relaxed);
    let stopped = Instant::now();
    let cpu = (
        cpu::process_seconds() - cpu_before,
        cpu::redis_seconds(server) - redis_before,
    );
    let commands = cpu::redis_command_calls(server);
    let (in_redis, samples) = sampler.await.expect("the sampler");
    for task in tasks {
        task.await.expect("a task");
    }
    for limiter in limiters {
        if std::env::var("WAIT_BENCH_DEBUG").is_ok() {
            eprintln!("{:?}", limiter.stats());
        }
        limiter.drain().await;
    }
    let grants = std::mem::take(&mut *grants.lock().unwrap());
    // What Redis ran per grant, by command (the sampler's ZCARDs and the
    // INFOs left out), on stderr: where the Redis CPU of a row goes.
    // Commands were counted up to the stop: per grant of the window.
    let in_window = granted_before(&grants, stopped);
    let per_grant = |calls: f64| calls / in_window;
    let mut ran: Vec<(String, f64)> = commands
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .map(|(name, calls)| {
            let sampled = if name == "zcard" { samples as f64 } else { 0.0 };
            let before = commands_before.get(name).copied().unwrap_or(0.0);
            (name.clone(), per_grant(calls - before - sampled))
        })
        .filter(|(_, n)| *n >= 0.01)
        .collect();
    ran.sort_by(|a, b| b.1.total_cmp(&a.1));
    let ran: Vec<String> = ran.iter().map(|(name, n)| format!("{name} {n:.2}")).collect();
    let name = if mode == Mode::Waiting { "waiting" } else { "polling" };
    eprintln!("{name}: Redis commands per grant: {}", ran.join(", "));
    summarise(mode, &grants, (started, stopped), cpu, in_redis)
}

/// What the anchors do: try, and on `Exceeded` sleep 10 ms and try again.
async fn poll(limiter: &Limiter, key: &Key, until: Instant) -> Result<inflight_tokio::Permit, Error> {
    loop {
        match limiter.acquire(key).await {
            Err(Error::Exceeded { .. }) if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => return other,
        }
    }
}

/// How many of `grants` came before `stopped` (at least 1: a divisor).
fn granted_before(grants: &[Grant], stopped: Instant) -> f64 {
    grants.iter().filter(|g| g.granted < stopped).count().max(1) as f64
}

/// What the row measured between `started` and `stopped`: the tasks still
/// waiting at the stop are granted and hold after it, and those holds,
/// grants and their CPU fall outside the window (counting them overstated
/// the holders' utilisation by up to a tenth with 20-100 ms holds).
fn summarise(
    mode: Mode,
    grants: &[Grant],
    (started, stopped): (Instant, Instant),
    (client_cpu, redis_cpu): (f64, f64),
    in_redis: f64,
) -> String {
    let elapsed = stopped - started;
    let held: Duration = grants
        .iter()
        .map(|g| {
            (g.granted + g.held)
                .min(stopped)
                .saturating_duration_since(g.granted.max(started))
        })
        .sum();
    let utilisation = held.as_secs_f64() / (f64::from(LIMIT) * elapsed.as_secs_f64());
    // Rates and CPU per grant count the window's grants; the waits and the
    // overtaking count every call made in it, however late its grant (a
    // caller starved past the stop is the tail these are for).
    let in_window = granted_before(grants, stopped);
    let mut waits: Vec<Duration> = grants.iter().map(|g| g.granted - g.called).collect();
    waits.sort();
    let percentile = |p: f64| waits[((waits.len() - 1) as f64 * p) as usize];
    let (max, mean) = overtaking(grants);
    let name = match mode {
        Mode::Waiting => "acquire_wait (queue + wake-ups)",
        Mode::Polling => "acquire + 10 ms poll (baseline)",
    };
    let per_grant = |cpu: f64| cpu * 1e6 / in_window;
    format!(
        "{name} | {:.1}% | {:.1}% | {:.0} | {:.2?} | {:.2?} | {max} | {mean:.2} | {:.0} | {:.0} |",
        utilisation * 100.0,
        in_redis * 100.0,
        in_window / elapsed.as_secs_f64(),
        percentile(0.5),
        percentile(0.99),
        per_grant(client_cpu),
        per_grant(redis_cpu),
    )
}

/// For each grant, how many acquires called after it were granted before
/// it: the inversions between call order and grant order (a Fenwick tree
/// over grant ranks, in call order from the last).
fn overtaking(grants: &[Grant]) -> (usize, f64) {
    let n = grants.len();
    let mut by_grant: Vec<usize> = (0..n).collect();
    by_grant.sort_by_key(|&i| grants[i].granted);
    let mut grant_rank = vec![0; n];
    for (rank, &i) in by_grant.iter().enumerate() {
        grant_rank[i] = rank;
    }
    let mut by_call: Vec<usize> = (0..n).collect();
    by_call.sort_by_key(|&i| grants[i].called);
    let mut tree = vec![0usize; n + 1];
    let (mut max, mut total) = (0, 0usize);
    // From the latest call back: count later calls granted earlier.
    for &i in by_call.iter().rev() {
        let rank = grant_rank[i];
        let mut earlier = 0;
        let mut at = rank;
        while at > 0 {
            earlier += tree[at];
            at &= at - 1;
        }
        max = max.max(earlier);
        total += earlier;
        let mut at = rank + 1;
        while at <= n {
            tree[at] += 1;
            at += at & at.wrapping_neg();
        }
    }
    (max, total as f64 / n.max(1) as f64)
}
