//! The benchmark: inflight against what Redis itself can do, and against the
//! reference design, measured side by side in one run on one machine.
//!
//! Everything targets a `redis-server` the bench starts on a free loopback
//! port; every loop is bounded in count and time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::{Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{Eval, LeaseCall, ScriptKind, Scripts};
use inflight_tokio::{Error, Limiter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::RedisServer;

/// How long each measurement runs, and how much is preloaded.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub measure: Duration,
    pub warmup: Duration,
    pub held_permits: usize,
    pub growth: [usize; 3],
}

impl Budget {
    pub fn full() -> Self {
        Self {
            measure: Duration::from_secs(3),
            warmup: Duration::from_millis(500),
            held_permits: 100_000,
            growth: [10, 1_000, 10_000],
        }
    }

    pub fn smoke() -> Self {
        Self {
            measure: Duration::from_millis(150),
            warmup: Duration::from_millis(20),
            held_permits: 2_000,
            growth: [10, 100, 1_000],
        }
    }
}

const TTL_MS: u64 = 600_000;
const HIGH_LIMIT: u32 = 1_000_000_000;

/// One line of results.
#[derive(Clone, Debug)]
pub struct Measured {
    pub name: String,
    pub cycles_per_sec: f64,
    pub note: String,
}

#[derive(Debug, Default)]
pub struct Results {
    pub rows: Vec<Measured>,
    pub ratios: Vec<(String, f64, String)>,
    pub latency: Option<(f64, f64, f64, f64)>,
    pub bytes_per_permit: Option<f64>,
}

impl Results {
    fn rate(&self, name: &str) -> f64 {
        self.rows
            .iter()
            .find(|r| r.name == name)
            .map_or(f64::NAN, |r| r.cycles_per_sec)
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| measurement | cycles/s | notes |\n| --- | ---: | --- |");
        for row in &self.rows {
            let _ = writeln!(out, "| {} | {:.0} | {} |", row.name, row.cycles_per_sec, row.note);
        }
        if let Some((offered, p50, p99, p999)) = self.latency {
            let _ = writeln!(
                out,
                "\nAcquire latency, open loop at {offered:.0} cycles/s (50% of the measured peak): \
                 p50 {p50:.0} µs, p99 {p99:.0} µs, p99.9 {p999:.0} µs"
            );
        }
        if let Some(bytes) = self.bytes_per_permit {
            let _ = writeln!(out, "\nClient memory: {bytes:.0} bytes per held permit");
        }
        let _ = writeln!(out, "\n| ratio | value | target |\n| --- | ---: | --- |");
        for (name, value, target) in &self.ratios {
            let _ = writeln!(out, "| {name} | {value:.2} | {target} |");
        }
        out
    }
}

/// Runs every measurement and returns the results.
pub async fn run(budget: Budget) -> Results {
    let server = RedisServer::start_with(&["--maxclients", "10000"]);
    let mut results = Results::default();
    let url = server.url();

    // 1. The limit: the simplest pipelined client, 64 cycles in flight.
    progress("limit");
    let limit = raw_pipelined_cycles(&server, 64, budget).await;
    results.rows.push(Measured {
        name: "limit: raw pipelined ACQUIRE+RELEASE, 64 in flight".into(),
        cycles_per_sec: limit,
        note: "no library in the way".into(),
    });

    // 2. inflight at 1, 64, 512 tasks, with 1 and 4 limiters.
    for limiters in [1usize, 4] {
        for tasks in [1usize, 64, 512] {
            progress(&format!("inflight {tasks} tasks {limiters} limiters"));
            let (rate, _, _) = inflight_cycles(&url, limiters, tasks, HIGH_LIMIT, "free", budget).await;
            results.rows.push(Measured {
                name: format!("inflight: {tasks} tasks, {limiters} limiter(s)"),
                cycles_per_sec: rate,
                note: String::new(),
            });
        }
    }
    let (rate, grants, denials) = inflight_cycles(&url, 1, 64, 10, "contended", budget).await;
    results.rows.push(Measured {
        name: "inflight: contended, limit 10, 64 tasks".into(),
        cycles_per_sec: rate,
        note: format!("{grants} grants, {denials} denials"),
    });

    // 3. The reference design's approach at the same concurrency.
    for tasks in [1usize, 64, 512] {
        progress(&format!("baseline {tasks} tasks"));
        let rate = baseline_cycles(&url, tasks, "baseline-free", 0, budget).await;
        results.rows.push(Measured {
            name: format!("baseline: {tasks} tasks"),
            cycles_per_sec: rate,
            note: "hash scan via redis::ConnectionManager".into(),
        });
    }

    // 4. Cost growth with live leases already on the key.
    for live in budget.growth {
        progress(&format!("growth {live}"));
        let subject = format!("grow{live}");
        preload_sorted_set(&server, &subject, live);
        let (rate, _, _) = inflight_cycles(&url, 1, 64, HIGH_LIMIT, &subject, budget).await;
        results.rows.push(Measured {
            name: format!("inflight: 64 tasks, {live} live leases"),
            cycles_per_sec: rate,
            note: String::new(),
        });
        let base_subject = format!("basegrow{live}");
        preload_hash(&server, &base_subject, live);
        let rate = baseline_cycles(&url, 64, &base_subject, live, budget).await;
        results.rows.push(Measured {
            name: format!("baseline: 64 tasks, {live} live leases"),
            cycles_per_sec: rate,
            note: String::new(),
        });
    }

    // 5. Latency at half the measured peak, open loop.
    let peak = results.rate("inflight: 64 tasks, 1 limiter(s)");
    let offered = (peak * 0.5).max(100.0);
    progress("latency");
    let (p50, p99, p999) = open_loop_latency(&url, offered, budget).await;
    results.latency = Some((offered, p50, p99, p999));

    // 6. Client memory per held permit.
    progress("memory");
    results.bytes_per_permit = Some(bytes_per_permit(&url, budget.held_permits, false).await);

    let [small, _, large] = budget.growth;
    let r = |name: &str| results.rate(name);
    results.ratios = vec![
        (
            "inflight ÷ limit (64 tasks, 1 limiter)".into(),
            r("inflight: 64 tasks, 1 limiter(s)") / limit,
            "≥ 0.60".into(),
        ),
        (
            format!("inflight ÷ baseline (64 tasks, {small} live)"),
            r(&format!("inflight: 64 tasks, {small} live leases"))
                / r(&format!("baseline: 64 tasks, {small} live leases")),
            "≥ 3".into(),
        ),
        (
            format!("inflight ÷ baseline (64 tasks, {large} live)"),
            r(&format!("inflight: 64 tasks, {large} live leases"))
                / r(&format!("baseline: 64 tasks, {large} live leases")),
            "≥ 100".into(),
        ),
        (
            format!("inflight cost {large} ÷ {small} live (time per cycle)"),
            r(&format!("inflight: 64 tasks, {small} live leases"))
                / r(&format!("inflight: 64 tasks, {large} live leases")),
            "≤ 1.3".into(),
        ),
        ("p99 ÷ p50 at 50% load".into(), p99 / p50, "≤ 4".into()),
    ];
    results
}

fn progress(stage: &str) {
    eprintln!("bench: {stage}");
}

/// A limiter that never refuses for load or time in these runs: generous
/// timeout and in-flight cap, leases that outlive the bench.
async fn bench_limiter(url: &str, keep_alive: bool) -> Limiter {
    Limiter::builder(url)
        .keep_alive(keep_alive)
        .key_prefix("bench")
        .lease_ttl(Duration::from_millis(TTL_MS))
        .timeout(Duration::from_secs(5))
        .max_in_flight(8192)
        .connect()
        .await
        .expect("connect the bench limiter")
}

fn key_of(subject: &str) -> Key {
    Key::new("bench", subject).expect("valid key")
}

/// Acquire+release cycles per second through `Limiter`/`Permit`.
async fn inflight_cycles(
    url: &str,
    limiters: usize,
    tasks: usize,
    limit: u32,
    subject: &str,
    budget: Budget,
) -> (f64, u64, u64) {
    let mut handles = Vec::new();
    for _ in 0..limiters {
        handles.push(bench_limiter(url, false).await);
    }
    let cycles = Arc::new(AtomicU64::new(0));
    let denials = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for task in 0..tasks {
        let limiter = handles[task % limiters].clone();
        let (cycles, denials, counting, stop) = (cycles.clone(), denials.clone(), counting.clone(), stop.clone());
        let key = key_of(subject);
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match limiter.acquire_with(&key, limit).await {
                    Ok(permit) => {
                        permit.release().await.expect("release");
                        if counting.load(Ordering::Relaxed) {
                            cycles.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(Error::Exceeded { .. }) => {
                        if counting.load(Ordering::Relaxed) {
                            denials.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(other) => panic!("bench acquire failed: {other}"),
                }
            }
        }));
    }
    let elapsed = measure_window(budget, &counting, &stop, workers).await;
    for limiter in handles {
        limiter.drain().await;
    }
    let grants = cycles.load(Ordering::Relaxed);
    (grants as f64 / elapsed, grants, denials.load(Ordering::Relaxed))
}

/// The simplest possible client: one connection, `window` acquire+release
/// cycles pipelined, replies read in order.
async fn raw_pipelined_cycles(server: &RedisServer, window: usize, budget: Budget) -> f64 {
    let scripts = Scripts::default();
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut out = BytesMut::new();
    scripts.encode_load(&mut out, ScriptKind::Acquire);
    scripts.encode_load(&mut out, ScriptKind::Release);
    stream.write_all(&out).await.expect("write");
    let mut reader = ReplyReader::new(ReplyLimits::default());
    let mut buf = vec![0u8; 64 * 1024];
    read_replies(&mut stream, &mut reader, &mut buf, 2).await;

    let keys = SubjectKeys::new("bench", &key_of("raw"));
    // The same script and arguments the client sends (standalone, with the
    // recovery hold key); this baseline is never late, so its valid-until
    // is far ahead, and its leases end a TTL after the run starts at most.
    let expiry_ms = server.client().server_ms() + TTL_MS;
    let mut next = 0u64;
    let mut encode_cycle = |out: &mut BytesMut| {
        next += 1;
        let id = LeaseId::from_parts(0xbe7c4, next).to_string();
        let call = LeaseCall {
            keys: &keys,
            id: id.as_bytes(),
            expiry_ms,
            valid_until_ms: 99_999_999_999_999,
            // As the limiter sends it by default.
            fenced: false,
        };
        scripts.encode_acquire(out, Eval::Sha, call, HIGH_LIMIT, b"bench:recovery", None);
        scripts.encode_release(out, &keys, Eval::Sha, Some(1), b"bench:recovery", [id.as_bytes()]);
    };
    let warm_until = Instant::now() + budget.warmup;
    let mut started = None;
    let mut done = 0u64;
    out.clear();
    for _ in 0..window {
        encode_cycle(&mut out);
    }
    stream.write_all(&out).await.expect("write");
    let mut in_flight = window;
    loop {
        // Take every reply already here, then refill the window in one write.
        let completed = read_available_cycles(&mut stream, &mut reader, &mut buf).await;
        in_flight -= completed;
        let now = Instant::now();
        match started {
            None if now >= warm_until => started = Some(now),
            Some(at) if now.duration_since(at) >= budget.measure => break,
            Some(_) => done += completed as u64,
            None => {}
        }
        out.clear();
        for _ in 0..completed {
            encode_cycle(&mut out);
        }
        in_flight += completed;
        stream.write_all(&out).await.expect("write");
    }
    let elapsed = started.expect("measured").elapsed().as_secs_f64();
    // Drain what is still in flight so the server is idle for the next run.
    read_replies(&mut stream, &mut reader, &mut buf, 2 * in_flight).await;
    done as f64 / elapsed
}

/// Reads at least one whole cycle (two replies) and returns how many whole
/// cycles are complete, leaving any half cycle in the reader.
async fn read_available_cycles(stream: &mut tokio::net::TcpStream, reader: &mut ReplyReader, buf: &mut [u8]) -> usize {
    let mut replies = 0;
    loop {
        while let Some(frame) = reader.next_frame().expect("valid reply") {
            if let Frame::Error(e) = frame {
                panic!("redis error in the bench: {e}");
            }
            replies += 1;
            if replies % 2 == 0 && reader.buffered() == 0 {
                return replies / 2;
            }
        }
        if replies >= 2 && replies % 2 == 0 {
            return replies / 2;
        }
        let n = stream.read(buf).await.expect("read");
        assert!(n > 0, "redis closed the bench connection");
        reader.push(&buf[..n]);
    }
}

async fn read_replies(stream: &mut tokio::net::TcpStream, reader: &mut ReplyReader, buf: &mut [u8], count: usize) {
    let mut seen = 0;
    while seen < count {
        match reader.next_frame().expect("valid reply") {
            Some(Frame::Error(e)) => panic!("redis error in the bench: {e}"),
            Some(_) => seen += 1,
            None => {
                let n = stream.read(buf).await.expect("read");
                assert!(n > 0, "redis closed the bench connection");
                reader.push(&buf[..n]);
            }
        }
    }
}

/// The minimal acquire, the least a correct TTL lease needs: prune the
/// expired, count, add. `KEYS[1]` the lease set; `ARGV` now (the client's
/// clock, ms), the expiry, the limit, the id. Released by a plain `ZREM`.
pub const MINIMAL_ACQUIRE: &str = r#"
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
return 1
"#;

/// The reference (seed) design's acquire: scan the whole hash on every call.
pub const BASELINE_ACQUIRE: &str = r#"
local now = tonumber(ARGV[1])
local ttl_ms = tonumber(ARGV[2])
local max = tonumber(ARGV[3])
local lease_id = ARGV[4]
local leases = redis.call('HGETALL', KEYS[1])
local live = 0
for i = 1, #leases, 2 do
  if tonumber(leases[i + 1]) <= now then
    redis.call('HDEL', KEYS[1], leases[i])
  else
    live = live + 1
  end
end
if live >= max then
  return {0, lease_id}
end
redis.call('HSET', KEYS[1], lease_id, now + ttl_ms)
redis.call('PEXPIRE', KEYS[1], ttl_ms * 2)
return {1, lease_id}
"#;

pub const BASELINE_RELEASE: &str = "redis.call('HDEL', KEYS[1], ARGV[1]); return 1";

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// Cycles per second of the baseline: `redis::ConnectionManager`, one acquire
/// script and one release script per cycle.
async fn baseline_cycles(url: &str, tasks: usize, subject: &str, preloaded: usize, budget: Budget) -> f64 {
    let client = redis::Client::open(url).expect("baseline url");
    let manager = redis::aio::ConnectionManager::new(client)
        .await
        .expect("baseline connect");
    let acquire = redis::Script::new(BASELINE_ACQUIRE);
    let release = redis::Script::new(BASELINE_RELEASE);
    let key = format!("base:{{bench|{subject}}}:leases");
    let cycles = Arc::new(AtomicU64::new(0));
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let limit = (preloaded + tasks + 10) as u64 * 1000;
    let mut workers = Vec::new();
    for _ in 0..tasks {
        let (mut manager, acquire, release, key) = (manager.clone(), acquire.clone(), release.clone(), key.clone());
        let (cycles, counting, stop, next) = (cycles.clone(), counting.clone(), stop.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let id = format!("base-{}", next.fetch_add(1, Ordering::Relaxed));
                let (granted, _): (i64, String) = acquire
                    .key(&key)
                    .arg(wall_ms())
                    .arg(TTL_MS)
                    .arg(limit)
                    .arg(&id)
                    .invoke_async(&mut manager)
                    .await
                    .expect("baseline acquire");
                assert_eq!(granted, 1, "the baseline is never limited here");
                let _: i64 = release
                    .key(&key)
                    .arg(&id)
                    .invoke_async(&mut manager)
                    .await
                    .expect("baseline release");
                if counting.load(Ordering::Relaxed) {
                    cycles.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let elapsed = measure_window(budget, &counting, &stop, workers).await;
    cycles.load(Ordering::Relaxed) as f64 / elapsed
}

/// Lets the workers warm up, counts for `budget.measure`, stops them, and
/// returns how many seconds were counted.
async fn measure_window(
    budget: Budget,
    counting: &AtomicBool,
    stop: &AtomicBool,
    workers: Vec<tokio::task::JoinHandle<()>>,
) -> f64 {
    tokio::time::sleep(budget.warmup).await;
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(budget.measure).await;
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("bench worker");
    }
    elapsed
}

/// Puts `count` long-lived leases on inflight's sorted set for `subject`.
fn preload_sorted_set(server: &RedisServer, subject: &str, count: usize) {
    let keys = SubjectKeys::new("bench", &key_of(subject));
    let far = far_expiry();
    preload(server, [b"ZADD", keys.leases()], count, |i| {
        [far.clone(), Bytes::from(format!("preloaded-{i}"))]
    });
    server
        .client()
        .call(&[b"PEXPIRE", keys.leases(), b"3600000"])
        .expect("PEXPIRE");
}

/// Puts `count` long-lived leases on the baseline's hash for `subject`.
fn preload_hash(server: &RedisServer, subject: &str, count: usize) {
    let key = format!("base:{{bench|{subject}}}:leases");
    let far = far_expiry();
    preload(server, [b"HSET", key.as_bytes()], count, |i| {
        [Bytes::from(format!("preloaded-{i}")), far.clone()]
    });
}

/// An expiry an hour from now, in milliseconds.
fn far_expiry() -> Bytes {
    Bytes::from((wall_ms() + 3_600_000).to_string())
}

/// Sends `command key pair(0).. pair(count-1)` in chunks of 500 pairs.
fn preload(server: &RedisServer, command: [&[u8]; 2], count: usize, pair: impl Fn(usize) -> [Bytes; 2]) {
    let mut client = server.client();
    for start in (0..count).step_by(500) {
        let pairs: Vec<[Bytes; 2]> = (start..count.min(start + 500)).map(&pair).collect();
        let mut args: Vec<&[u8]> = command.to_vec();
        args.extend(pairs.iter().flatten().map(|b| &b[..]));
        let mut out = BytesMut::new();
        encode_many(&mut out, &args);
        client.call_raw(&out).expect("preload");
    }
}

/// `encode_command` takes at most 8 arguments; preloading needs more.
fn encode_many(out: &mut BytesMut, args: &[&[u8]]) {
    let _ = write!(Utf8(out), "*{}\r\n", args.len());
    for arg in args {
        let _ = write!(Utf8(out), "${}\r\n", arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

struct Utf8<'a>(&'a mut BytesMut);

impl std::fmt::Write for Utf8<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// p50/p99/p99.9 acquire latency (µs) with cycles started at a fixed rate,
/// whatever the previous ones are doing (open loop, so queueing shows).
async fn open_loop_latency(url: &str, rate: f64, budget: Budget) -> (f64, f64, f64) {
    let limiter = bench_limiter(url, false).await;
    let key = key_of("latency");
    let total = ((rate * budget.measure.as_secs_f64()) as usize).clamp(100, 200_000);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let started = tokio::time::Instant::now();
    let mut handles = Vec::with_capacity(total);
    for i in 0..total {
        tokio::time::sleep_until(started + interval.mul_f64(i as f64)).await;
        let (limiter, key) = (limiter.clone(), key.clone());
        handles.push(tokio::spawn(async move {
            let begun = Instant::now();
            let permit = limiter.acquire_with(&key, HIGH_LIMIT).await.expect("acquire");
            let took = begun.elapsed();
            permit.release().await.expect("release");
            took
        }));
    }
    let mut samples = Vec::with_capacity(total);
    for handle in handles {
        samples.push(handle.await.expect("latency task").as_secs_f64() * 1e6);
    }
    limiter.drain().await;
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.50), at(0.99), at(0.999))
}

/// Heap bytes the process holds per permit, with `count` permits held: the
/// median of three rounds, each measured between quiet points of the heap, so
/// that memory freed late by earlier phases (a dropped limiter's driver, a
/// closed connection) is not charged to, or credited against, the permits.
/// With `keep_alive`, every permit is kept alive by the driver.
pub async fn bytes_per_permit(url: &str, count: usize, keep_alive: bool) -> f64 {
    let limiter = bench_limiter(url, keep_alive).await;
    let key = key_of("memory");
    // Warm the driver's maps and buffers so they are not counted as per-permit.
    let warm: Vec<_> = acquire_many(&limiter, &key, count.max(4096)).await;
    drop(warm);
    limiter.clone().drain().await;
    let mut rounds = Vec::with_capacity(3);
    for _ in 0..3 {
        let before = quiet_heap().await;
        let permits = acquire_many(&limiter, &key, count).await;
        let after = quiet_heap().await;
        rounds.push((after as f64 - before as f64) / count as f64);
        drop(permits);
        limiter.clone().drain().await;
    }
    limiter.drain().await;
    rounds.sort_by(|a, b| a.total_cmp(b));
    rounds[1]
}

/// Live heap bytes once they stop moving (three equal-ish samples 20 ms
/// apart), waiting at most two seconds.
async fn quiet_heap() -> isize {
    const STEADY: isize = 1024;
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut last = crate::alloc_counter::live_bytes();
    let mut steady = 0;
    while steady < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = crate::alloc_counter::live_bytes();
        steady = if (now - last).abs() <= STEADY { steady + 1 } else { 0 };
        last = now;
    }
    last
}

async fn acquire_many(limiter: &Limiter, key: &Key, count: usize) -> Vec<inflight_tokio::Permit> {
    let mut permits = Vec::with_capacity(count);
    // 256 at a time, as a busy service would.
    while permits.len() < count {
        let batch = (count - permits.len()).min(256);
        let mut pending = Vec::with_capacity(batch);
        for _ in 0..batch {
            let (limiter, key) = (limiter.clone(), key.clone());
            pending.push(tokio::spawn(
                async move { limiter.acquire_with(&key, HIGH_LIMIT).await },
            ));
        }
        for handle in pending {
            permits.push(handle.await.expect("task").expect("acquire"));
        }
    }
    permits
}

/// The measured block of docs/performance.md: the machine and the table.
pub fn report(table: &str) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let redis = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("Machine: {cpu}, {cores} cores, shared by Redis, the client and the bench. {redis}.\n\n{table}")
}

const BEGIN: &str = "<!-- bench:begin -->";
const END: &str = "<!-- bench:end -->";

/// Replaces the measured block of `document` (between the bench markers) with
/// `block`, keeping the hand-written analysis around it.
pub fn splice(document: &str, block: &str) -> String {
    match (document.find(BEGIN), document.find(END)) {
        (Some(begin), Some(end)) if begin < end => {
            format!("{}{BEGIN}\n{block}\n{}", &document[..begin], &document[end..])
        }
        _ => format!("# Performance\n\n{BEGIN}\n{block}\n{END}\n"),
    }
}
