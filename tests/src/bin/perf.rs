//! Side by side, in one run against one redis-server: inflight (with its
//! default `TCP_NODELAY`, and with `tcp_nodelay(false)` as redis-rs's default
//! socket has it), a raw pipelined client sending the same commands (redis-rs multiplexed
//! connection: `EVALSHA` of `ACQUIRE`, then `ZREM` and `EXISTS` of the queue
//! pipelined, the exact keys and arguments inflight sends: the library's own
//! overhead), a minimal client
//! (the same connection; the least a correct TTL lease needs: one `EVALSHA`
//! of `ZREMRANGEBYSCORE` + `ZCARD` + `ZADD`, then one `ZREM`: what the
//! scripts' features cost), and the seed's design (a hash scanned on every
//! acquire, `redis::ConnectionManager`). A cycle is an acquire and its awaited
//! release, on one key whose limit is never reached, with 1, 64 and 512 tasks.
//!
//! For every row: cycles/s, client CPU µs per cycle (this process's user +
//! system time, `/proc/self/stat`), Redis CPU µs per cycle (`INFO cpu`), and
//! the host's CPU steal while it ran (`/proc/stat`), so noise is visible. Three
//! repetitions, interleaved (every row of a repetition before the next one),
//! medians; at 1 task the acquire's p50 latency too.
//!
//!     cargo run --release -p inflight-tests --bin perf -- [seconds per row, default 2]
//!
//! Starts its own redis-server on a free loopback port; every loop is bounded
//! in time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::scripts::Scripts;
use inflight_tests::bench::MINIMAL_ACQUIRE;
use inflight_tests::{bench, cpu, RedisServer};
use inflight_tokio::Limiter;

/// Task counts; the last entry runs 64 tasks on 64 keys (one each), where
/// inflight cannot batch acquires of one subject.
const TASKS: [(usize, bool); 4] = [(1, false), (64, false), (512, false), (64, true)];
const REPETITIONS: usize = 3;
const HIGH_LIMIT: u32 = 1_000_000_000;
const TTL_MS: u64 = 600_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Row {
    Inflight,
    /// inflight with `tcp_nodelay(false)`, as the raw row's socket (redis-rs
    /// leaves Nagle on unless built with its `tcp_nodelay` feature).
    InflightNagle,
    Raw,
    /// The least a correct TTL lease needs (see `MINIMAL_ACQUIRE`).
    Minimal,
    Seed,
}

impl Row {
    const ALL: [Row; 5] = [Row::Inflight, Row::InflightNagle, Row::Raw, Row::Minimal, Row::Seed];

    fn name(self) -> &'static str {
        match self {
            Row::Inflight => "inflight",
            Row::InflightNagle => "inflight, Nagle",
            Row::Raw => "raw pipelined",
            Row::Minimal => "minimal",
            Row::Seed => "seed design",
        }
    }
}

/// One measurement.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    cycles_per_sec: f64,
    client_us: f64,
    redis_us: f64,
    /// Redis commands per cycle, those the scripts call included.
    redis_commands: f64,
    steal_pct: f64,
    /// Acquire p50 in µs (measured at every task count, reported at 1).
    acquire_p50_us: f64,
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).map_or(2.0, |s| s.parse().expect("seconds"));
    let measure = Duration::from_secs_f64(seconds);
    let server = RedisServer::start_with(&["--maxclients", "10000"]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // `PERF_ONLY=inflight` (a row's name, spaces as dashes) and
    // `PERF_TASKS=64k` (64 tasks on 64 keys; `64` one key) narrow the run, to
    // profile one cell (`perf record -g -p <pid>`).
    let only = std::env::var("PERF_ONLY").ok();
    let only_tasks = std::env::var("PERF_TASKS").ok();
    let wanted = |row: Row, setup: Setup| {
        only.as_deref().is_none_or(|name| row.name().replace(' ', "-") == name)
            && only_tasks.as_deref().is_none_or(|tasks| {
                let (count, own_keys) = setup;
                *tasks
                    == if own_keys {
                        format!("{count}k")
                    } else {
                        count.to_string()
                    }
            })
    };
    let mut samples: Vec<(Row, Setup, Sample)> = Vec::new();
    for repetition in 0..REPETITIONS {
        for setup in TASKS {
            for row in Row::ALL.into_iter().filter(|row| wanted(*row, setup)) {
                eprintln!(
                    "perf: repetition {} of {REPETITIONS}, {setup:?}, {}",
                    repetition + 1,
                    row.name()
                );
                let sample = runtime.block_on(measure_row(&server, row, setup, measure, repetition));
                samples.push((row, setup, sample));
            }
        }
    }
    print!("{}", report(&samples, seconds));
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A ratio of the report: its name, the two rows, the field, the target.
type RatioLine = (&'static str, Row, Row, fn(&Sample) -> f64, &'static str);

/// How many tasks, and whether each has its own key.
type Setup = (usize, bool);

fn label((tasks, own_keys): Setup) -> String {
    if own_keys {
        format!("{tasks} ({tasks} keys)")
    } else {
        tasks.to_string()
    }
}

fn cell(samples: &[(Row, Setup, Sample)], row: Row, tasks: Setup, field: fn(&Sample) -> f64) -> f64 {
    median(
        samples
            .iter()
            .filter(|(r, t, _)| *r == row && *t == tasks)
            .map(|(_, _, s)| field(s))
            .collect(),
    )
}

fn report(samples: &[(Row, Setup, Sample)], seconds: f64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{REPETITIONS} interleaved repetitions of {seconds} s per row, medians (per repetition in brackets)\n"
    );
    let _ = writeln!(
        out,
        "| tasks | row | cycles/s | client CPU µs/cycle | Redis CPU µs/cycle | Redis commands/cycle | steal % | acquire p50 µs |"
    );
    let _ = writeln!(out, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for tasks in TASKS {
        for row in Row::ALL {
            let rates: Vec<String> = samples
                .iter()
                .filter(|(r, t, _)| *r == row && *t == tasks)
                .map(|(_, _, s)| format!("{:.0}", s.cycles_per_sec))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} ({}) | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} |",
                label(tasks),
                row.name(),
                cell(samples, row, tasks, |s| s.cycles_per_sec),
                rates.join(", "),
                cell(samples, row, tasks, |s| s.client_us),
                cell(samples, row, tasks, |s| s.redis_us),
                cell(samples, row, tasks, |s| s.redis_commands),
                cell(samples, row, tasks, |s| s.steal_pct),
                cell(samples, row, tasks, |s| s.acquire_p50_us),
            );
        }
    }
    let _ = writeln!(
        out,
        "\n| ratio (medians of the per-repetition ratios) | 1 task | 64 tasks | 512 tasks | 64 tasks, 64 keys | target |"
    );
    let _ = writeln!(out, "| --- | ---: | ---: | ---: | ---: | --- |");
    let ratio = |a: Row, b: Row, tasks: Setup, field: fn(&Sample) -> f64| {
        let of = |row: Row| -> Vec<f64> {
            samples
                .iter()
                .filter(|(r, t, _)| *r == row && *t == tasks)
                .map(|(_, _, s)| field(s))
                .collect()
        };
        median(of(a).iter().zip(of(b)).map(|(x, y)| x / y).collect())
    };
    let lines: [RatioLine; 10] = [
        (
            "cycles/s inflight ÷ raw",
            Row::Inflight,
            Row::Raw,
            |s| s.cycles_per_sec,
            "≥ 1.0",
        ),
        (
            "cycles/s inflight, Nagle ÷ raw",
            Row::InflightNagle,
            Row::Raw,
            |s| s.cycles_per_sec,
            "≥ 1.0",
        ),
        (
            "cycles/s inflight ÷ minimal",
            Row::Inflight,
            Row::Minimal,
            |s| s.cycles_per_sec,
            "≥ 0.95, 1.0, 1.0, 0.6",
        ),
        (
            "cycles/s inflight ÷ seed",
            Row::Inflight,
            Row::Seed,
            |s| s.cycles_per_sec,
            "≥ 1.0 at 64 keys",
        ),
        (
            "Redis CPU/cycle inflight ÷ minimal",
            Row::Inflight,
            Row::Minimal,
            |s| s.redis_us,
            "≤ 2 at 64 keys",
        ),
        (
            "Redis commands/cycle inflight ÷ minimal",
            Row::Inflight,
            Row::Minimal,
            |s| s.redis_commands,
            "≤ 7/5 at 64 keys",
        ),
        (
            "acquire p50 inflight ÷ raw",
            Row::Inflight,
            Row::Raw,
            |s| s.acquire_p50_us,
            "≤ 1.1 at 1 task",
        ),
        (
            "Redis CPU/cycle inflight ÷ raw",
            Row::Inflight,
            Row::Raw,
            |s| s.redis_us,
            "≤ 1.0 at 64 tasks",
        ),
        (
            "client CPU/cycle inflight ÷ raw",
            Row::Inflight,
            Row::Raw,
            |s| s.client_us,
            "≤ 1.0",
        ),
        (
            "client CPU/cycle inflight, Nagle ÷ raw",
            Row::InflightNagle,
            Row::Raw,
            |s| s.client_us,
            "≤ 1.0",
        ),
    ];
    for (name, a, b, field, target) in lines {
        let [one, some, many, spread] = TASKS.map(|setup| ratio(a, b, setup, field));
        let _ = writeln!(
            out,
            "| {name} | {one:.2} | {some:.2} | {many:.2} | {spread:.2} | {target} |"
        );
    }
    out
}

/// Runs `tasks` workers of `row` for a warm-up and then `measure`.
async fn measure_row(server: &RedisServer, row: Row, setup: Setup, measure: Duration, repetition: usize) -> Sample {
    let (tasks, own_keys) = setup;
    let subject = format!("{}-{tasks}-{own_keys}-{repetition}", row.name().replace(' ', "-"));
    let cycles = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(1 << 16)));
    let worker = Worker {
        cycles: cycles.clone(),
        counting: counting.clone(),
        stop: stop.clone(),
        latencies: latencies.clone(),
    };
    let (workers, limiter) = match row {
        Row::Inflight | Row::InflightNagle => {
            let limiter = Limiter::builder(server.url())
                .tcp_nodelay(row == Row::Inflight)
                .key_prefix("perf")
                .lease_ttl(Duration::from_millis(TTL_MS))
                .timeout(Duration::from_secs(5))
                .max_in_flight(8192)
                .connect()
                .await
                .expect("connect");
            (spawn_inflight(&limiter, &subject, setup, &worker), Some(limiter))
        }
        Row::Raw => (spawn_raw(server, &subject, setup, &worker).await, None),
        Row::Minimal => (spawn_minimal(server, &subject, setup, &worker).await, None),
        Row::Seed => (spawn_seed(server, &subject, setup, &worker).await, None),
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (client_before, redis_before, host_before) =
        (cpu::process_seconds(), cpu::redis_seconds(server), cpu::host_jiffies());
    let commands_before = cpu::redis_commands(server);
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(measure).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let (client_after, redis_after, host_after) =
        (cpu::process_seconds(), cpu::redis_seconds(server), cpu::host_jiffies());
    // Less the two `INFO` reads of the measurement itself.
    let commands = cpu::redis_commands(server) - commands_before - 2.0;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), worker).await;
    }
    if let Some(limiter) = limiter {
        limiter.drain().await;
    }
    let done = cycles.load(Ordering::Relaxed) as f64;
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap());
    latencies.sort_unstable();
    let p50 = latencies.get(latencies.len() / 2).copied().unwrap_or(0) as f64 / 1000.0;
    let (busy, steal) = (host_after.0 - host_before.0, host_after.1 - host_before.1);
    Sample {
        cycles_per_sec: done / elapsed,
        client_us: (client_after - client_before) * 1e6 / done,
        redis_us: (redis_after - redis_before) * 1e6 / done,
        redis_commands: commands / done,
        steal_pct: if busy > 0.0 { 100.0 * steal / busy } else { 0.0 },
        acquire_p50_us: p50,
    }
}

#[derive(Clone)]
struct Worker {
    cycles: Arc<AtomicU64>,
    counting: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// Acquire latencies in ns, sampled while counting.
    latencies: Arc<Mutex<Vec<u64>>>,
}

impl Worker {
    fn done(&self, acquire: Duration) {
        if self.counting.load(Ordering::Relaxed) {
            self.cycles.fetch_add(1, Ordering::Relaxed);
            let mut latencies = self.latencies.lock().unwrap();
            if latencies.len() < 1 << 20 {
                latencies.push(acquire.as_nanos() as u64);
            }
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The subject task `task` uses.
fn subject_of(subject: &str, (_, own_keys): Setup, task: usize) -> String {
    if own_keys {
        format!("{subject}-{task}")
    } else {
        subject.to_string()
    }
}

fn spawn_inflight(limiter: &Limiter, subject: &str, setup: Setup, worker: &Worker) -> Vec<tokio::task::JoinHandle<()>> {
    (0..setup.0)
        .map(|task| {
            let key = Key::new("perf", subject_of(subject, setup, task)).expect("key");
            let (limiter, worker) = (limiter.clone(), worker.clone());
            tokio::spawn(async move {
                while !worker.stopped() {
                    let started = Instant::now();
                    let permit = limiter.acquire_with(&key, HIGH_LIMIT).await.expect("acquire");
                    let acquired = started.elapsed();
                    permit.release().await.expect("release");
                    worker.done(acquired);
                }
            })
        })
        .collect()
}

/// The same two commands inflight sends, over redis-rs's multiplexed
/// connection (one connection, requests pipelined by redis-rs).
async fn spawn_raw(
    server: &RedisServer,
    subject: &str,
    setup: Setup,
    worker: &Worker,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = redis::Client::open(server.url()).expect("url");
    let connection = client.get_multiplexed_async_connection().await.expect("connect");
    let scripts = Scripts::default();
    for text in [scripts.acquire.text] {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(text)
            .query_async(&mut connection.clone())
            .await
            .expect("SCRIPT LOAD");
    }
    let next = Arc::new(AtomicU64::new(0));
    let acquire_sha = scripts.acquire.sha.clone();
    // Leases end at an absolute server time, as the client writes them:
    // the server's clock now, plus the TTL (longer than any run).
    let (seconds, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut connection.clone())
        .await
        .expect("TIME");
    let expiry_ms = seconds * 1000 + micros / 1000 + TTL_MS;
    (0..setup.0)
        .map(|task| {
            let keys = SubjectKeys::new(
                "perf",
                &Key::new("perf", subject_of(subject, setup, task)).expect("key"),
            );
            let mut connection = connection.clone();
            let (next, worker) = (next.clone(), worker.clone());
            let acquire_sha = acquire_sha.clone();
            tokio::spawn(async move {
                let (fence, queue, waiters) = (keys.fence(), keys.queue(), keys.waiters());
                let holds = keys.holds();
                while !worker.stopped() {
                    let lease = LeaseId::from_parts(0x7a3, next.fetch_add(1, Ordering::Relaxed));
                    let id = lease.to_string();
                    let started = Instant::now();
                    let reply: redis::Value = redis::cmd("EVALSHA")
                        .arg(&acquire_sha)
                        .arg(6)
                        .arg(&keys.leases()[..])
                        .arg(&keys.tombstone(&lease)[..])
                        .arg(&fence[..])
                        .arg(&queue[..])
                        .arg(&waiters[..])
                        .arg(&holds[..])
                        .arg(expiry_ms)
                        .arg(HIGH_LIMIT)
                        .arg(&id)
                        .arg(99_999_999_999_999u64)
                        .arg("perf:recovery")
                        // No fencing token, as a limiter by default.
                        .arg("0")
                        .query_async(&mut connection)
                        .await
                        .expect("acquire");
                    let acquired = started.elapsed();
                    assert!(
                        matches!(&reply, redis::Value::Array(items) if items.first() == Some(&redis::Value::Int(1))),
                        "the raw acquire was not granted: {reply:?}"
                    );
                    // The release as inflight sends it: `ZREM`, and `EXISTS`
                    // of the queue (no `RELEASE`: nobody waits here).
                    let (_, queued): (i64, i64) = redis::pipe()
                        .cmd("ZREM")
                        .arg(&keys.leases()[..])
                        .arg(&id)
                        .cmd("EXISTS")
                        .arg(&queue[..])
                        .query_async(&mut connection)
                        .await
                        .expect("release");
                    assert_eq!(queued, 0, "nobody waits on the raw row's subjects");
                    worker.done(acquired);
                }
            })
        })
        .collect()
}

/// The least a correct TTL lease needs, over the raw row's connection:
/// `MINIMAL_ACQUIRE` by `EVALSHA` (redis-rs loads it on the first
/// `NOSCRIPT`), then a plain `ZREM`.
async fn spawn_minimal(
    server: &RedisServer,
    subject: &str,
    setup: Setup,
    worker: &Worker,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = redis::Client::open(server.url()).expect("url");
    let connection = client.get_multiplexed_async_connection().await.expect("connect");
    let acquire = redis::Script::new(MINIMAL_ACQUIRE);
    let next = Arc::new(AtomicU64::new(0));
    (0..setup.0)
        .map(|task| {
            let key = format!("minimal:{{perf|{}}}:leases", subject_of(subject, setup, task));
            let (mut connection, acquire) = (connection.clone(), acquire.clone());
            let (next, worker) = (next.clone(), worker.clone());
            tokio::spawn(async move {
                while !worker.stopped() {
                    let id = format!("minimal-{}", next.fetch_add(1, Ordering::Relaxed));
                    let now = unix_ms();
                    let started = Instant::now();
                    let granted: i64 = acquire
                        .key(&key)
                        .arg(now)
                        .arg(now + TTL_MS)
                        .arg(HIGH_LIMIT)
                        .arg(&id)
                        .invoke_async(&mut connection)
                        .await
                        .expect("minimal acquire");
                    let acquired = started.elapsed();
                    assert_eq!(granted, 1, "the minimal acquire was not granted");
                    let _: i64 = redis::cmd("ZREM")
                        .arg(&key)
                        .arg(&id)
                        .query_async(&mut connection)
                        .await
                        .expect("minimal release");
                    worker.done(acquired);
                }
            })
        })
        .collect()
}

/// The client's wall clock in ms: the minimal and seed rows' "now".
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

async fn spawn_seed(
    server: &RedisServer,
    subject: &str,
    setup: Setup,
    worker: &Worker,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = redis::Client::open(server.url()).expect("url");
    let manager = redis::aio::ConnectionManager::new(client).await.expect("connect");
    let (acquire, release) = (
        redis::Script::new(bench::BASELINE_ACQUIRE),
        redis::Script::new(bench::BASELINE_RELEASE),
    );
    let next = Arc::new(AtomicU64::new(0));
    (0..setup.0)
        .map(|task| {
            let key = format!("seed:{{perf|{}}}:leases", subject_of(subject, setup, task));
            let (mut manager, acquire, release) = (manager.clone(), acquire.clone(), release.clone());
            let (next, worker) = (next.clone(), worker.clone());
            tokio::spawn(async move {
                while !worker.stopped() {
                    let id = format!("seed-{}", next.fetch_add(1, Ordering::Relaxed));
                    let now = unix_ms();
                    let started = Instant::now();
                    let (granted, _): (i64, String) = acquire
                        .key(&key)
                        .arg(now)
                        .arg(TTL_MS)
                        .arg(u64::from(HIGH_LIMIT))
                        .arg(&id)
                        .invoke_async(&mut manager)
                        .await
                        .expect("seed acquire");
                    let acquired = started.elapsed();
                    assert_eq!(granted, 1);
                    let _: i64 = release
                        .key(&key)
                        .arg(&id)
                        .invoke_async(&mut manager)
                        .await
                        .expect("seed release");
                    worker.done(acquired);
                }
            })
        })
        .collect()
}
