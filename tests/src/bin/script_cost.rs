//! The acquire script's cost on Redis's thread, before and after it learned
//! to hand out fencing tokens and honour the recovery hold (issue 13; the
//! hold key given, as a standalone limiter does): the same acquire + release cycles,
//! pipelined on one connection, alternating the two scripts in rounds on one
//! server (which runs first alternates too). Starts its own redis-server; bounded in count.
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
use inflight_tests::RedisServer;

/// `ACQUIRE` as it was before fencing tokens and the recovery hold (commit
/// 4687ac6, session 4), kept here only as this benchmark's baseline.
const ACQUIRE_BEFORE: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local leases, tombstone = KEYS[1], KEYS[2]
local ttl, limit, id, valid_until = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now > valid_until then
  return {-2, id}
end
if redis.call('EXISTS', tombstone) == 1 then
  return {-1, id}
end
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if redis.call('ZSCORE', leases, id) then
  return {1, id}
end
if redis.call('ZCARD', leases) >= limit then
  return {0, id}
end
redis.call('ZADD', leases, now + ttl, id)
if redis.call('PTTL', leases) < ttl then
  redis.call('PEXPIRE', leases, ttl + 1)
end
return {1, id}
"#;

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
    let (before, after) = (sha(ACQUIRE_BEFORE), sha(ACQUIRE));
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let keys = SubjectKeys::new("cost", &Key::new("tier", "s").unwrap());
    let mut next = 0u64;
    // The hold key a standalone limiter passes; `HOLD= ` for none (a cluster).
    let hold = std::env::var("HOLD").unwrap_or_else(|_| "cost:recovery".into());
    println!("{CYCLES} acquire + release cycles per round, {WINDOW} pipelined, one connection");
    println!(
        "{:>6} {:>16} {:>16} {:>8}",
        "round", "before cycles/s", "after cycles/s", "ratio"
    );
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let mut rate = |sha: &str, with_fencing: bool| {
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
                    let args: Vec<&[u8]> = if with_fencing {
                        vec![
                            b"EVALSHA",
                            sha.as_bytes(),
                            b"5",
                            keys.leases(),
                            &tombstone,
                            &fence,
                            &queue,
                            &waiters,
                            b"60000",
                            b"1000",
                            id.as_bytes(),
                            b"99999999999999",
                            hold.as_bytes(),
                        ]
                    } else {
                        vec![
                            b"EVALSHA",
                            sha.as_bytes(),
                            b"2",
                            keys.leases(),
                            &tombstone,
                            b"60000",
                            b"1000",
                            id.as_bytes(),
                            b"99999999999999",
                        ]
                    };
                    encode_command(&mut out, &args);
                    encode_command(&mut out, &[b"ZREM", keys.leases(), id.as_bytes()]);
                }
                stream.write_all(&out).unwrap();
                read_replies(&mut stream, &mut reader, &mut buf, 2 * WINDOW, |_| {});
                sent += WINDOW;
            }
            CYCLES as f64 / started.elapsed().as_secs_f64()
        };
        // Which goes first alternates, so a warming or cooling machine
        // favours neither.
        let (old, new) = if round % 2 == 1 {
            let old = rate(&before, false);
            (old, rate(&after, true))
        } else {
            let new = rate(&after, true);
            (rate(&before, false), new)
        };
        ratios.push(new / old);
        println!("{round:>6} {old:>16.0} {new:>16.0} {:>8.3}", new / old);
    }
    ratios.sort_by(f64::total_cmp);
    println!("median after/before: {:.3}", ratios[ratios.len() / 2]);
}
