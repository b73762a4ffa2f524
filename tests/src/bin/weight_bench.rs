//! What weights cost Redis, and what keep-alive costs the client (issue 16).
//!
//! 1. Redis's thread: acquire + release cycles (the `ACQUIRE` and `RELEASE`
//!    scripts the client sends, pipelined 32 deep on one connection) of
//!    weight 1, 3 and 10, on a subject already holding 10 or 10,000 live
//!    leases; the weights interleaved in each round, three rounds, medians.
//!    Reports cycles/s and Redis CPU per cycle (`INFO cpu` deltas), and each
//!    weight's cost against weight 1 measured in the same round.
//! 2. The client: heap bytes per held permit, plain and kept alive.
//!
//!     cargo run --release -p inflight-tests --bin weight_bench -- [rounds, default 3]
//!
//! Starts its own redis-server on a free loopback port; bounded in count.

use std::io::Write;
use std::time::Instant;

use bytes::BytesMut;
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{Eval, LeaseCall, ScriptKind, Scripts};
use inflight_tests::alloc_counter::CountingAlloc;
use inflight_tests::resp_client::read_replies;
use inflight_tests::{bench, cpu, RedisServer};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const CYCLES: u64 = 30_000;
const WINDOW: u64 = 32;
const WEIGHTS: [u32; 3] = [1, 3, 10];
const LIVE: [usize; 2] = [10, 10_000];
const PERMITS: usize = 2_000;

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(3, |s| s.parse().expect("rounds"));
    let server = RedisServer::start();
    let scripts = Scripts::default();
    let mut client = server.client();
    for kind in ScriptKind::LOADED {
        let mut out = BytesMut::new();
        scripts.encode_load(&mut out, kind);
        client.call_raw(&out).expect("SCRIPT LOAD");
    }
    println!("{CYCLES} acquire + release cycles per measurement, {WINDOW} pipelined, one connection, {rounds} rounds");
    println!(
        "{:>7} {:>7} {:>12} {:>14} {:>16} {:>14}",
        "live", "weight", "cycles/s", "Redis µs/cycle", "cost vs weight 1", "(per round)"
    );
    let mut next = 0u64;
    for live in LIVE {
        let keys = SubjectKeys::new("weights", &Key::new("bench", format!("live-{live}")).unwrap());
        preload(&server, &keys, live);
        // [weight] -> per round (cycles/s, Redis µs per cycle)
        let mut measured: Vec<Vec<(f64, f64)>> = vec![Vec::new(); WEIGHTS.len()];
        for round in 0..rounds {
            for index in 0..WEIGHTS.len() {
                // Rotate which weight runs first in each round.
                let at = (index + round) % WEIGHTS.len();
                measured[at].push(cycles(&server, &scripts, &keys, WEIGHTS[at], &mut next));
            }
        }
        let median = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let unweighted: Vec<f64> = measured[0].iter().map(|(_, cpu)| *cpu).collect();
        for (index, weight) in WEIGHTS.iter().enumerate() {
            let rates = measured[index].iter().map(|(rate, _)| *rate).collect();
            let cpus: Vec<f64> = measured[index].iter().map(|(_, cpu)| *cpu).collect();
            let ratios: Vec<f64> = cpus.iter().zip(&unweighted).map(|(w, u)| w / u).collect();
            let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "{live:>7} {weight:>7} {:>12.0} {:>14.2} {:>16.2} {:>14}",
                median(rates),
                median(cpus),
                median(ratios.clone()),
                shown.join(" ")
            );
        }
    }
    drop(client);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let url = server.url();
    let (plain, kept) = runtime.block_on(async {
        let plain = bench::bytes_per_permit(&url, PERMITS, false).await;
        let kept = bench::bytes_per_permit(&url, PERMITS, true).await;
        (plain, kept)
    });
    println!("\nclient heap per held permit ({PERMITS} held, median of 3): plain {plain:.0} B, kept alive {kept:.0} B");
}

/// Fills the subject with `live` leases that outlive the run (one member each).
fn preload(server: &RedisServer, keys: &SubjectKeys, live: usize) {
    let mut client = server.client();
    for chunk in (0..live).collect::<Vec<_>>().chunks(1000) {
        let ids: Vec<String> = chunk
            .iter()
            .map(|n| LeaseId::from_parts(0x9e1d, *n as u64).to_string())
            .collect();
        let mut args: Vec<&[u8]> = vec![b"ZADD", keys.leases()];
        for id in &ids {
            args.extend([b"99999999999999".as_slice(), id.as_bytes()]);
        }
        let mut out = BytesMut::new();
        encode_command(&mut out, &args);
        client.call_raw(&out).expect("ZADD");
    }
    client.call(&[b"PEXPIRE", keys.leases(), b"3600000"]).expect("PEXPIRE");
}

/// Cycles per second and Redis CPU µs per cycle, for leases of `weight`.
fn cycles(server: &RedisServer, scripts: &Scripts, keys: &SubjectKeys, weight: u32, next: &mut u64) -> (f64, f64) {
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let expiry_ms = server.client().server_ms() + 60_000;
    let mut reader = ReplyReader::new(ReplyLimits::default());
    let mut buf = vec![0u8; 64 * 1024];
    let cpu_before = cpu::redis_seconds(server);
    let started = Instant::now();
    let mut sent = 0;
    while sent < CYCLES {
        let mut out = BytesMut::new();
        for _ in 0..WINDOW {
            *next += 1;
            let id = LeaseId::from_parts(0xc057, *next).with_claim(weight, None).to_string();
            let call = LeaseCall {
                keys,
                id: id.as_bytes(),
                expiry_ms,
                valid_until_ms: 99_999_999_999_999,
                // As the limiter sends it by default.
                fenced: false,
            };
            scripts.encode_acquire(&mut out, Eval::Sha, call, 1_000_000_000, b"weights:recovery", None);
            scripts.encode_release(&mut out, keys, Eval::Sha, Some(1), b"weights:recovery", [id.as_bytes()]);
        }
        stream.write_all(&out).unwrap();
        read_replies(&mut stream, &mut reader, &mut buf, 2 * WINDOW, |frame| match frame {
            Frame::Array(items) if items.first() != Some(&Frame::Integer(1)) => panic!("not granted: {items:?}"),
            Frame::Integer(removed) if removed != i64::from(weight) => panic!("released {removed} units of {weight}"),
            _ => {}
        });
        sent += WINDOW;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu::redis_seconds(server) - cpu_before;
    (sent as f64 / elapsed, cpu * 1e6 / sent as f64)
}
