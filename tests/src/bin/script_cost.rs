//! The fail-fast acquire script's cost on Redis's thread, with and without
//! its one-`EXISTS` fast path (a subject with no queue, no tombstone and no
//! recovery hold; the hold key given, as a standalone limiter does): the
//! same acquire + release cycles, pipelined on one connection, alternating
//! the two in rounds on one server (which runs first alternates too), with
//! the Redis commands each cycle ran (`INFO commandstats`). Starts its own
//! redis-server; bounded in count.
//!
//!     cargo run --release -p inflight-tests --bin script_cost -- [rounds, default 5]

use std::io::Write;
use std::time::Instant;

use bytes::BytesMut;
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::ACQUIRE;
use inflight_tests::resp_client::read_replies;
use inflight_tests::{cpu, RedisServer};

/// `ACQUIRE` with the fast path switched off: every acquire takes the full
/// path (tombstone, `ZSCORE`, hold, queue checked one by one, `PTTL`), as
/// every acquire did before it.
fn without_fast_path() -> String {
    let text = ACQUIRE.replace(
        "plain = redis.call('EXISTS', tombstone, queue, hold) == 0",
        "plain = false",
    );
    let text = text.replace("plain = redis.call('EXISTS', tombstone, queue) == 0", "plain = false");
    assert_ne!(text, ACQUIRE, "the fast path's text moved: update this benchmark");
    text
}

const CYCLES: u64 = 100_000;
const WINDOW: u64 = 32;

fn main() {
    let rounds: u32 = std::env::args().nth(1).map_or(5, |s| s.parse().expect("rounds"));
    let server = RedisServer::start();
    let mut client = server.client();
    let mut sha = |text: &str| match client.call(&[b"SCRIPT", b"LOAD", text.as_bytes()]).unwrap() {
        Frame::BulkString(sha) => String::from_utf8(sha.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    };
    let (before, after) = (sha(&without_fast_path()), sha(ACQUIRE));
    let server_ms = match client.call(&[b"TIME"]).unwrap() {
        Frame::Array(time) => match &time[..] {
            [Frame::BulkString(s), Frame::BulkString(us)] => {
                let number = |b: &bytes::Bytes| String::from_utf8_lossy(b).parse::<u64>().unwrap();
                number(s) * 1000 + number(us) / 1000
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    // Absolute, as the client writes it: an hour from now.
    let expiry = (server_ms + 3_600_000).to_string();
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let keys = SubjectKeys::new("cost", &Key::new("tier", "s").unwrap());
    let mut next = 0u64;
    // The hold key a standalone limiter passes; `HOLD= ` for none (a cluster).
    let hold = std::env::var("HOLD").unwrap_or_else(|_| "cost:recovery".into());
    println!("{CYCLES} acquire + release cycles per round, {WINDOW} pipelined, one connection");
    println!(
        "{:>6} {:>12} {:>12} {:>8} {:>14} {:>14} {:>10} {:>10}",
        "round", "full cyc/s", "fast cyc/s", "ratio", "full Redis µs", "fast Redis µs", "full cmds", "fast cmds"
    );
    let mut cpu_ratios = Vec::new();
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let mut rate = |sha: &str| {
            let commands_before = cpu::redis_commands(&server);
            let redis_before = cpu::redis_seconds(&server);
            let started = Instant::now();
            let mut reader = ReplyReader::new(ReplyLimits::default());
            let mut buf = vec![0u8; 64 * 1024];
            let mut sent = 0;
            while sent < CYCLES {
                let mut out = BytesMut::new();
                for _ in 0..WINDOW {
                    next += 1;
                    let lease = LeaseId::from_parts(0xc057, next);
                    let id = lease.to_string();
                    let (tombstone, fence) = (keys.tombstone(&lease), keys.fence());
                    let (queue, waiters) = (keys.queue(), keys.waiters());
                    let holds = keys.holds();
                    let args: Vec<&[u8]> = vec![
                        b"EVALSHA",
                        sha.as_bytes(),
                        b"6",
                        keys.leases(),
                        &tombstone,
                        &fence,
                        &queue,
                        &waiters,
                        &holds,
                        expiry.as_bytes(),
                        b"1000",
                        id.as_bytes(),
                        b"99999999999999",
                        hold.as_bytes(),
                    ];
                    encode_command(&mut out, &args);
                    encode_command(&mut out, &[b"ZREM", keys.leases(), id.as_bytes()]);
                }
                stream.write_all(&out).unwrap();
                read_replies(&mut stream, &mut reader, &mut buf, 2 * WINDOW, |reply| {
                    if let Frame::Array(items) = reply {
                        assert_eq!(items.first(), Some(&Frame::Integer(1)), "not granted: {items:?}");
                    }
                });
                sent += WINDOW;
            }
            let rate = CYCLES as f64 / started.elapsed().as_secs_f64();
            // Less the two `INFO` reads of the measurement itself.
            let redis_us = (cpu::redis_seconds(&server) - redis_before) * 1e6 / CYCLES as f64;
            let commands = cpu::redis_commands(&server) - commands_before - 3.0;
            (rate, commands / CYCLES as f64, redis_us)
        };
        // Which goes first alternates, so a warming or cooling machine
        // favours neither.
        let ((old, old_cmds, old_us), (new, new_cmds, new_us)) = if round % 2 == 1 {
            let old = rate(&before);
            (old, rate(&after))
        } else {
            let new = rate(&after);
            (rate(&before), new)
        };
        ratios.push(new / old);
        cpu_ratios.push(new_us / old_us);
        println!(
            "{round:>6} {old:>12.0} {new:>12.0} {:>8.3} {old_us:>14.2} {new_us:>14.2} {old_cmds:>10.2} {new_cmds:>10.2}",
            new / old
        );
    }
    ratios.sort_by(f64::total_cmp);
    cpu_ratios.sort_by(f64::total_cmp);
    println!(
        "median fast ÷ full: cycles/s {:.3}, Redis CPU per cycle {:.3}",
        ratios[ratios.len() / 2],
        cpu_ratios[cpu_ratios.len() / 2]
    );
}
