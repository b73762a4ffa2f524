//! The simulator and the property tests trust `RedisModel` to mean what the
//! Lua scripts mean. This test holds it to that: the same random commands go to
//! a real redis-server and to the model, and every reply must match.

use bytes::BytesMut;
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::model::{ModelConnection, RedisModel};
use inflight_core::resp::{encode_command, ReplyLimits, ReplyReader};
use inflight_core::script::{ScriptKind, Scripts};
use inflight_tests::{RedisServer, Rng};

#[test]
fn the_model_answers_every_command_exactly_as_redis_does() {
    let server = RedisServer::start();
    let mut redis = server.client();
    // The model's clock stands still at the server's time when the test
    // starts; deadlines are drawn an hour ahead (valid on both) or a minute
    // behind (stale on both), so the seconds the test takes change nothing.
    let server_ms = match redis.call(&[b"TIME"]).unwrap() {
        inflight_core::resp::Frame::Array(parts) => match &parts[..] {
            [inflight_core::resp::Frame::BulkString(s), inflight_core::resp::Frame::BulkString(us)] => {
                let number = |b: &[u8]| std::str::from_utf8(b).unwrap().parse::<u64>().unwrap();
                number(s) * 1000 + number(us) / 1000
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let mut model = RedisModel::new(server_ms);
    let (valid, stale) = ((server_ms + 3_600_000).to_string(), (server_ms - 60_000).to_string());
    let mut model_connection = ModelConnection::new();
    let scripts = Scripts::default();
    let subjects: Vec<SubjectKeys> = ["a", "b", "c|d"]
        .iter()
        .map(|s| SubjectKeys::new("diff", &Key::new("ns", *s).unwrap()))
        .collect();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for compared in 0..3_000 {
        let keys = &subjects[rng.below(subjects.len() as u64) as usize];
        let lease = LeaseId::from_parts(0xd1ff, rng.below(40));
        let id = lease.to_string();
        let tombstone = keys.tombstone(&lease);
        let mut command = BytesMut::new();
        // One request in eight arrives after its valid-until.
        let valid_until = if rng.below(8) == 0 { &stale } else { &valid };
        match rng.below(12) {
            // Acquire (sometimes by text), with a small limit so denials happen.
            0..=4 => {
                let limit = (1 + rng.below(4)).to_string();
                let by_text = rng.below(4) == 0;
                scripts.encode_call(
                    &mut command,
                    ScriptKind::Acquire,
                    by_text,
                    &[keys.leases(), &tombstone],
                    &[b"3600000", limit.as_bytes(), id.as_bytes(), valid_until.as_bytes()],
                );
            }
            5..=6 => encode_command(&mut command, &[b"ZREM", keys.leases(), id.as_bytes()]),
            7 => {
                // Several at once, as a batch of releases goes.
                let more: Vec<String> = (0..1 + rng.below(3))
                    .map(|_| LeaseId::from_parts(0xd1ff, rng.below(40)).to_string())
                    .collect();
                let mut args: Vec<&[u8]> = vec![b"ZREM", keys.leases(), id.as_bytes()];
                args.extend(more.iter().map(|m| m.as_bytes()));
                encode_command(&mut command, &args);
            }
            8 => {
                // A tombstone until the acquire's valid-until, or none (0).
                let until = if rng.below(2) == 0 { "0" } else { valid_until.as_str() };
                scripts.encode_call(
                    &mut command,
                    ScriptKind::Compensate,
                    false,
                    &[keys.leases(), &tombstone],
                    &[until.as_bytes(), id.as_bytes()],
                )
            }
            10 => {
                // A batch of distinct ids (the client never repeats one).
                let mut leases: Vec<LeaseId> = Vec::new();
                while leases.len() < 2 + rng.below(4) as usize {
                    let lease = LeaseId::from_parts(0xd1ff, rng.below(40));
                    if !leases.contains(&lease) {
                        leases.push(lease);
                    }
                }
                let tombstones: Vec<_> = leases.iter().map(|l| keys.tombstone(l)).collect();
                let tombstones: Vec<&[u8]> = tombstones.iter().map(|t| &t[..]).collect();
                let ids: Vec<String> = leases.iter().map(|l| l.to_string()).collect();
                let ids: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
                let limit = (1 + rng.below(4)).to_string();
                scripts.encode_acquire_many(
                    &mut command,
                    keys.leases(),
                    &tombstones,
                    b"3600000",
                    limit.as_bytes(),
                    valid_until.as_bytes(),
                    &ids,
                );
            }
            9 => scripts.encode_call(
                &mut command,
                ScriptKind::Renew,
                rng.below(4) == 0,
                &[keys.leases()],
                &[b"3600000", id.as_bytes(), valid_until.as_bytes()],
            ),
            _ => {
                let kind = ScriptKind::ALL[rng.below(ScriptKind::ALL.len() as u64) as usize];
                scripts.encode_load(&mut command, kind);
            }
        }
        let real = redis.call_raw(&command).expect("redis answers");
        let modelled = model
            .handle(&mut model_connection, &command)
            .expect("the model answers");
        let mut reader = ReplyReader::new(ReplyLimits::default());
        reader.push(&modelled);
        let modelled = reader.next_frame().unwrap().expect("one whole reply");
        assert_eq!(
            real,
            modelled,
            "after {compared} matching replies, for {:?}",
            String::from_utf8_lossy(&command)
        );
    }
    // And the lease sets agree at the end.
    for keys in &subjects {
        let mut live = model.live_leases(keys.leases());
        live.sort();
        let real = match redis.call(&[b"ZRANGE", keys.leases(), b"0", b"-1"]).unwrap() {
            inflight_core::resp::Frame::Array(items) => items
                .into_iter()
                .map(|f| match f {
                    inflight_core::resp::Frame::BulkString(b) => b,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        let mut real = real;
        real.sort();
        assert_eq!(real, live, "lease sets differ for {:?}", keys.leases());
    }
}
