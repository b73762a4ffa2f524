//! Where a fail-fast cycle's cost goes on Redis's thread, in the shape that
//! batches least: many tenants, each acquire on a subject of its own (64
//! subjects in turn) with its release right behind it, as the client sends
//! it (`ZREM` and `EXISTS` of the queue), 32 cycles pipelined on one
//! connection. The same cycles run in variants: `ACQUIRE` as shipped; with
//! one of its pieces taken out by editing its text (what that piece costs);
//! the same acquires in `ACQUIRE_ACROSS` calls of 4 and of 16 (what a script
//! call costs); and the minimal TTL lease (prune, count, add; a plain
//! `ZREM`) as the floor; and `ACQUIRE` registered as a Redis function
//! (`FUNCTION LOAD`, `FCALL`), its helpers defined once at load rather than
//! at every call. Rounds rotate which variant runs first; each
//! variant is compared with `ACQUIRE` measured in the same round. Redis CPU
//! from `INFO cpu`, commands from `INFO commandstats`. Starts its own
//! redis-server; bounded in count.
//!
//!     cargo run --release -p inflight-tests --bin script_cost -- [rounds, default 5]

use std::io::Write;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{ACQUIRE, ACQUIRE_ACROSS};
use inflight_tests::bench::MINIMAL_ACQUIRE;
use inflight_tests::resp_client::{read_replies, RespClient};
use inflight_tests::{cpu, RedisServer};

const CYCLES: u64 = 64_000;
const WINDOW: usize = 32;
const SUBJECTS: usize = 64;

/// How a variant's acquires go out.
#[derive(Clone, Copy)]
enum Call {
    /// One `ACQUIRE`-shaped call per acquire.
    One,
    /// `ACQUIRE_ACROSS` calls of this many acquires.
    Across(usize),
    /// The minimal script, released by a `ZREM` alone.
    Minimal,
    /// `FCALL` of the function the variant's library registers.
    Function,
}

struct Variant {
    name: &'static str,
    text: String,
    call: Call,
    /// Its acquires' fencing argument.
    fencing: &'static [u8],
}

/// `ACQUIRE` with `from` replaced by `to` everywhere (the piece taken out).
fn without(from: &str, to: &str) -> String {
    assert!(
        ACQUIRE.contains(from),
        "{from:?} is no longer in ACQUIRE: update this benchmark"
    );
    ACQUIRE.replace(from, to)
}

/// `ACQUIRE` with ten more helper functions, never called: what a helper
/// costs a script call that only defines it (a script's `local function`s
/// are made anew at every `EVALSHA`; a function library makes them once).
fn ten_more_helpers() -> String {
    let helpers: String = (0..10)
        .map(|i| format!("local function unused_{i}(a, b)\n  return a + b + {i}\nend\n"))
        .collect();
    format!("{helpers}{ACQUIRE}")
}

/// `ACQUIRE` as a function library: its helpers defined once, at load.
fn as_function() -> String {
    let body_at = ACQUIRE.find("-- ACQUIRE: take a lease").expect("ACQUIRE's own text");
    format!(
        "#!lua name=cost\n{}\nredis.register_function('acquire', function(KEYS, ARGV)\n{}\nend)\n",
        &ACQUIRE[..body_at],
        &ACQUIRE[body_at..]
    )
}

fn variants() -> Vec<Variant> {
    let variant = |name, text: &str, call, fencing| Variant {
        name,
        text: text.to_string(),
        call,
        fencing,
    };
    // The pieces are taken out of the acquire with a token, as it was
    // before tokens were asked for.
    let one = |name, text: String| variant(name, &text, Call::One, b"1");
    vec![
        one("ACQUIRE with a fencing token", ACQUIRE.to_string()),
        variant("ACQUIRE without a token (the default)", ACQUIRE, Call::One, b"0"),
        one(
            "without the fast path (tombstone, hold, queue one by one)",
            without(
                "plain = redis.call('EXISTS', tombstone, queue, hold) == 0",
                "plain = false",
            ),
        ),
        variant(
            "ACQUIRE without a token, pruning on every grant (as before)",
            &without(
                "local live, reclaimed = redis.call('ZCARD', leases), 0\n    if live + w > limit then",
                "local live, reclaimed = redis.call('ZCARD', leases), 0\n    if true then",
            ),
            Call::One,
            b"0",
        ),
        one(
            "without the lease set's expiry (`PEXPIRE`)",
            without("redis.call('PEXPIRE', leases, expiry - now + 1, 'GT')", "do end")
                .replace("redis.call('PEXPIRE', leases, expiry - now + 1)", "do end"),
        ),
        one(
            "without the check for tombstone, queue and hold (`EXISTS`)",
            without(
                "plain = redis.call('EXISTS', tombstone, queue, hold) == 0",
                "plain = true",
            ),
        ),
        variant(
            "ACQUIRE_ACROSS of 4, with tokens",
            ACQUIRE_ACROSS,
            Call::Across(4),
            b"1",
        ),
        variant(
            "ACQUIRE_ACROSS of 16, with tokens",
            ACQUIRE_ACROSS,
            Call::Across(16),
            b"1",
        ),
        variant(
            "ACQUIRE_ACROSS of 16, without tokens",
            ACQUIRE_ACROSS,
            Call::Across(16),
            b"0",
        ),
        variant(
            "ACQUIRE without a token, its expiry formatted by Lua (as before)",
            &without(
                "local added = add_units(leases, at, id, 'NX')",
                "local added = add_units(leases, expiry, id, 'NX')",
            ),
            Call::One,
            b"0",
        ),
        variant(
            "ACQUIRE without a token, and ten more helpers defined (never called)",
            &ten_more_helpers(),
            Call::One,
            b"0",
        ),
        variant(
            "ACQUIRE as a function (`FCALL`), without a token",
            &as_function(),
            Call::Function,
            b"0",
        ),
        variant(
            "minimal (prune, count, add; `ZREM`)",
            MINIMAL_ACQUIRE,
            Call::Minimal,
            b"",
        ),
    ]
}

/// One subject's keys, written once.
struct Subject {
    keys: SubjectKeys,
    fence: Bytes,
    queue: Bytes,
    waiters: Bytes,
    holds: Bytes,
}

/// What every cycle shares: the subjects, the lease's absolute expiry, the
/// hold key, the next lease number.
struct Cycles {
    subjects: Vec<Subject>,
    expiry: String,
    now_ms: String,
    hold: String,
    next: u64,
}

impl Cycles {
    /// Encodes `WINDOW` cycles of `variant` (script `sha`) and returns how
    /// many replies they ask for.
    fn encode_window(&mut self, out: &mut BytesMut, variant: &Variant, sha: &str) -> u64 {
        let call = variant.call;
        let mut leases = Vec::with_capacity(WINDOW);
        for _ in 0..WINDOW {
            self.next += 1;
            let subject = (self.next as usize) % SUBJECTS;
            leases.push((subject, LeaseId::from_parts(0xc057, self.next)));
        }
        let ids: Vec<String> = leases.iter().map(|(_, lease)| lease.to_string()).collect();
        let tombstones: Vec<Bytes> = leases
            .iter()
            .map(|(s, lease)| self.subjects[*s].keys.tombstone(lease))
            .collect();
        let per_call = match call {
            Call::Across(n) => n,
            Call::One | Call::Minimal | Call::Function => 1,
        };
        let mut replies = 0;
        for chunk in (0..WINDOW).collect::<Vec<_>>().chunks(per_call) {
            let mut args: Vec<&[u8]> = match call {
                Call::Function => vec![b"FCALL", b"acquire", b""],
                _ => vec![b"EVALSHA", sha.as_bytes(), b""],
            };
            let mut argv: Vec<&[u8]> = Vec::new();
            for &i in chunk {
                let subject = &self.subjects[leases[i].0];
                let id = ids[i].as_bytes();
                match call {
                    Call::Minimal => {
                        args.push(subject.keys.leases());
                        argv.extend([self.now_ms.as_bytes(), self.expiry.as_bytes(), b"1000", id]);
                    }
                    Call::One | Call::Across(_) | Call::Function => {
                        args.extend([
                            &subject.keys.leases()[..],
                            &tombstones[i],
                            &subject.fence,
                            &subject.queue,
                            &subject.waiters,
                            &subject.holds,
                        ]);
                        argv.extend([
                            self.expiry.as_bytes(),
                            b"1000",
                            id,
                            b"99999999999999",
                            self.hold.as_bytes(),
                            variant.fencing,
                        ]);
                    }
                }
            }
            let keys = (args.len() - 3).to_string();
            args[2] = keys.as_bytes();
            args.extend(argv);
            encode_command(out, &args);
            replies += 1;
        }
        for (i, (s, _)) in leases.iter().enumerate() {
            let subject = &self.subjects[*s];
            encode_command(out, &[b"ZREM", subject.keys.leases(), ids[i].as_bytes()]);
            replies += 1;
            if !matches!(call, Call::Minimal) {
                encode_command(out, &[b"EXISTS", &subject.queue]);
                replies += 1;
            }
        }
        replies
    }
}

/// Every acquire in a reply granted (`ACQUIRE`'s `{1, id, token, n}`,
/// `ACQUIRE_ACROSS`'s triples, the minimal `1`); a release's count.
fn check(reply: Frame) {
    match reply {
        Frame::Array(items) => {
            for status in items.chunks(3).filter(|c| c.len() == 3).map(|c| &c[0]) {
                assert_eq!(status, &Frame::Integer(1), "not granted: {items:?}");
            }
        }
        Frame::Integer(0 | 1) => {}
        other => panic!("unexpected reply {other:?}"),
    }
}

fn server_time(client: &mut RespClient) -> (u64, u64) {
    match client.call(&[b"TIME"]).unwrap() {
        Frame::Array(time) => match &time[..] {
            [Frame::BulkString(s), Frame::BulkString(us)] => {
                let number = |b: &bytes::Bytes| String::from_utf8_lossy(b).parse::<u64>().unwrap();
                (number(s), number(us))
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(5, |s| s.parse().expect("rounds"));
    let server = RedisServer::start();
    let mut client = server.client();
    let (seconds, micros) = server_time(&mut client);
    let now_ms = seconds * 1000 + micros / 1000;
    let variants = variants();
    let shas: Vec<String> = variants
        .iter()
        .map(|v| {
            let verb: &[&[u8]] = match v.call {
                Call::Function => &[b"FUNCTION", b"LOAD"],
                _ => &[b"SCRIPT", b"LOAD"],
            };
            match client.call(&[verb[0], verb[1], v.text.as_bytes()]).unwrap() {
                Frame::BulkString(sha) => String::from_utf8(sha.to_vec()).unwrap(),
                other => panic!("{}: {other:?}", v.name),
            }
        })
        .collect();
    let subjects = (0..SUBJECTS)
        .map(|i| {
            let keys = SubjectKeys::new("cost", &Key::new("tier", format!("t{i}")).unwrap());
            Subject {
                fence: keys.fence(),
                queue: keys.queue(),
                waiters: keys.waiters(),
                holds: keys.holds(),
                keys,
            }
        })
        .collect();
    let mut cycles = Cycles {
        subjects,
        // Absolute, as the client writes it: an hour from now.
        expiry: (now_ms + 3_600_000).to_string(),
        now_ms: now_ms.to_string(),
        // The hold key a standalone limiter passes (the variants edit the
        // fast path's form with it).
        hold: "cost:recovery".into(),
        next: 0,
    };
    let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = ReplyReader::new(ReplyLimits::default());
    let mut buf = vec![0u8; 256 * 1024];
    println!(
        "{CYCLES} cycles per variant and round on {SUBJECTS} subjects in turn, {WINDOW} pipelined, one connection"
    );
    // Per variant: Redis µs per cycle, commands per cycle, ratio to ACQUIRE, each per round.
    let mut micros_per_cycle = vec![Vec::new(); variants.len()];
    let mut commands = vec![Vec::new(); variants.len()];
    let mut ratios = vec![Vec::new(); variants.len()];
    for round in 0..rounds {
        let mut this_round = vec![0.0; variants.len()];
        for k in 0..variants.len() {
            let v = (k + round) % variants.len();
            let commands_before = cpu::redis_commands(&server);
            let redis_before = cpu::redis_seconds(&server);
            let started = Instant::now();
            let mut sent = 0;
            while sent < CYCLES {
                let mut out = BytesMut::new();
                let replies = cycles.encode_window(&mut out, &variants[v], &shas[v]);
                stream.write_all(&out).unwrap();
                read_replies(&mut stream, &mut reader, &mut buf, replies, check);
                sent += WINDOW as u64;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let us = (cpu::redis_seconds(&server) - redis_before) * 1e6 / CYCLES as f64;
            // Less the `INFO` reads of the measurement itself.
            let ran = (cpu::redis_commands(&server) - commands_before - 3.0) / CYCLES as f64;
            this_round[v] = us;
            micros_per_cycle[v].push(us);
            commands[v].push(ran);
            eprintln!(
                "round {}: {:<60} {us:>6.2} µs/cycle {ran:>5.2} commands/cycle {:>7.0} cycles/s",
                round + 1,
                variants[v].name,
                CYCLES as f64 / elapsed
            );
        }
        for (v, us) in this_round.iter().enumerate() {
            ratios[v].push(us / this_round[0]);
        }
    }
    println!("\n{rounds} rounds, medians (Redis CPU per cycle in each round in brackets)\n");
    println!("| variant | Redis CPU µs/cycle | ÷ ACQUIRE | saves µs/cycle | Redis commands/cycle |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let shipped = median(micros_per_cycle[0].clone());
    for (v, variant) in variants.iter().enumerate() {
        let us = median(micros_per_cycle[v].clone());
        let each: Vec<String> = micros_per_cycle[v].iter().map(|x| format!("{x:.1}")).collect();
        println!(
            "| {} | {us:.2} ({}) | {:.3} | {:.2} | {:.2} |",
            variant.name,
            each.join(", "),
            median(ratios[v].clone()),
            shipped - us,
            median(commands[v].clone())
        );
    }
}
