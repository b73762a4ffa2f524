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
    let mut model = RedisModel::new(1_700_000_000_000);
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
        match rng.below(11) {
            // Acquire (sometimes by text), with a small limit so denials happen.
            0..=4 => {
                let limit = (1 + rng.below(4)).to_string();
                let by_text = rng.below(4) == 0;
                scripts.encode_call(
                    &mut command,
                    ScriptKind::Acquire,
                    by_text,
                    &[keys.leases(), &tombstone],
                    &[b"3600000", limit.as_bytes(), id.as_bytes()],
                );
            }
            5..=7 => encode_command(&mut command, &[b"ZREM", keys.leases(), id.as_bytes()]),
            8 => scripts.encode_call(
                &mut command,
                ScriptKind::Compensate,
                false,
                &[keys.leases(), &tombstone],
                &[b"3600000", id.as_bytes()],
            ),
            9 => scripts.encode_call(
                &mut command,
                ScriptKind::Renew,
                rng.below(4) == 0,
                &[keys.leases()],
                &[b"3600000", id.as_bytes()],
            ),
            _ => {
                let kind = ScriptKind::ALL[rng.below(3) as usize];
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
