//! The simulator and the property tests trust `RedisModel` to mean what the
//! Lua scripts mean. This test holds it to that: the same random commands go to
//! a real redis-server and to the model, and every reply must match. Fencing
//! tokens come from each side's own clock, so they are compared by what they
//! promise (positive exactly on a grant, strictly increasing per subject)
//! rather than by value; everything else must be equal.

use bytes::BytesMut;
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{Eval, LeaseCall, ScriptKind, Scripts, WaitArgs, WITHHELD};
use inflight_testkit::model::{ModelConnection, RedisModel};
use inflight_tests::{RedisServer, Rng};

#[test]
fn the_model_answers_every_command_exactly_as_redis_does() {
    let server = RedisServer::start();
    let mut redis = server.client();
    // The model's clock stands still at the server's time when the test
    // starts; deadlines are drawn an hour ahead (valid on both) or a minute
    // behind (stale on both), so the seconds the test takes change nothing.
    let server_ms = redis.server_ms();
    let mut model = RedisModel::new(server_ms);
    // An hour ahead (valid on both) or a minute behind (stale on both).
    let (valid, stale) = (server_ms + 3_600_000, server_ms - 60_000);
    let expiry = server_ms + 3_600_000;
    let mut model_connection = ModelConnection::new();
    let scripts = Scripts::default();
    let subjects: Vec<SubjectKeys> = ["a", "b", "c|d"]
        .iter()
        .map(|s| SubjectKeys::new("diff", &Key::new("ns", *s).unwrap()))
        .collect();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    // The recovery hold goes on two thirds of the way through (for an hour:
    // it outlasts the test on both sides).
    let hold_key: &[u8] = b"diff:recovery";
    let mut hold: &[u8] = b"";
    let mut last_token: std::collections::HashMap<(bool, Vec<u8>), i64> = Default::default();
    for compared in 0..4_000 {
        if compared == 2_700 {
            let mut command = BytesMut::new();
            scripts.encode_hold(&mut command, hold_key, 3_600_000);
            let real = redis.call_raw(&command).expect("redis answers");
            let modelled = model.handle(&mut model_connection, &command).unwrap();
            assert!(matches!(real, Frame::Integer(n) if n > 3_590_000), "{real:?}");
            assert_eq!(&modelled[..], b":3600000\r\n");
            hold = hold_key;
        }
        let keys = &subjects[rng.below(subjects.len() as u64) as usize];
        let n = rng.below(40);
        let lease = test_lease(n);
        let id = lease.to_string();
        let mut command = BytesMut::new();
        // One request in eight arrives after its valid-until.
        let valid_until_ms = if rng.below(8) == 0 { stale } else { valid };
        // One fail-fast acquire in three draws no fencing token.
        let fenced = rng.below(3) != 0;
        let call = LeaseCall {
            keys,
            id: id.as_bytes(),
            expiry_ms: expiry,
            valid_until_ms,
            fenced,
        };
        // Limits differ per call, as during a rolling change of a limit:
        // waiters of several limits share a queue.
        let limit = 1 + rng.below(4) as u32;
        // The subject of each acquire's token, in the reply's order.
        let mut token_keys = vec![keys.leases().to_vec()];
        match rng.below(16) {
            // Acquire (sometimes by text), with a small limit so denials happen.
            0..=3 => scripts.encode_acquire(&mut command, text_sometimes(&mut rng), call, limit, hold, None),
            4 => {
                // Acquires of several subjects (a subject may come twice,
                // under another limit) in one call.
                let picked: Vec<(usize, String, u32)> = (0..2 + rng.below(3))
                    .map(|_| {
                        let subject = rng.below(subjects.len() as u64) as usize;
                        (subject, test_lease(rng.below(40)).to_string(), 1 + rng.below(4) as u32)
                    })
                    .collect();
                let calls: Vec<(LeaseCall, u32)> = picked
                    .iter()
                    .map(|(subject, id, limit)| {
                        let call = LeaseCall {
                            keys: &subjects[*subject],
                            id: id.as_bytes(),
                            expiry_ms: expiry,
                            valid_until_ms,
                            fenced,
                        };
                        (call, *limit)
                    })
                    .collect();
                token_keys = picked.iter().map(|(s, ..)| subjects[*s].leases().to_vec()).collect();
                // Half of them all or nothing (a repeated subject is refused).
                match rng.below(2) {
                    0 => scripts.encode_acquire_across(&mut command, &calls, hold),
                    _ => scripts.encode_acquire_all(&mut command, text_sometimes(&mut rng), &calls, hold),
                }
            }
            5..=6 => {
                // The plain release (during a slot migration): every unit.
                let units: Vec<Vec<u8>> = inflight_core::lease_id::units(id.as_bytes()).collect();
                let mut args: Vec<&[u8]> = vec![b"ZREM", keys.leases()];
                args.extend(units.iter().map(Vec::as_slice));
                encode_command(&mut command, &args);
            }
            7 | 14 => {
                // One or several at once, as a batch of releases goes, with
                // how long they were held (or, as a recovery's repeat, not).
                let more: Vec<String> = (0..rng.below(4))
                    .map(|_| test_lease(rng.below(40)).to_string())
                    .collect();
                let held = (rng.below(4) > 0).then(|| rng.below(300));
                let ids = std::iter::once(id.as_bytes()).chain(more.iter().map(|m| m.as_bytes()));
                scripts.encode_release(&mut command, keys, Eval::Sha, held, hold, ids);
            }
            12 | 15 => {
                // Acquire or wait in the queue, with a patience that sheds
                // once hold times are known.
                // One in four goes on from another id (of its weight, mostly;
                // one of another weight is refused): it takes over that
                // id's place or slot.
                let previous = match rng.below(16) {
                    0 => test_lease(rng.below(40)).to_string(),
                    1..=3 => test_lease((n + 4 * (1 + rng.below(9))) % 40).to_string(),
                    _ => String::new(),
                };
                let wait = WaitArgs {
                    lifetime_ms: 3_600_000,
                    patience_ms: rng.below(400),
                    previous: previous.as_bytes(),
                };
                scripts.encode_acquire(&mut command, text_sometimes(&mut rng), call, limit, hold, Some(wait));
            }
            13 => scripts.encode_leave(&mut command, keys, id.as_bytes()),
            8 => {
                // A tombstone until the acquire's valid-until, or none (0).
                let until = if rng.below(2) == 0 { 0 } else { valid_until_ms };
                scripts.encode_compensate(&mut command, Eval::Sha, keys, id.as_bytes(), until)
            }
            10 => {
                // A batch of ids, one in five repeating an earlier one (one
                // acquire, as the script counts it).
                let mut ids: Vec<String> = Vec::new();
                while ids.len() < 2 + rng.below(4) as usize {
                    let next = test_lease(rng.below(40)).to_string();
                    if !ids.contains(&next) || rng.below(5) == 0 {
                        ids.push(next);
                    }
                }
                let ids: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
                scripts.encode_acquire_many(&mut command, keys, &ids, expiry, limit, valid_until_ms, hold);
            }
            11 if rng.below(3) == 0 => {
                // What a subject holds (read only): compared without the
                // server's clock, its first item.
                // All of them or none: which few of several are listed
                // depends on their expiries, hence on each side's clock.
                scripts.encode_inspect(&mut command, keys, 100 * rng.below(2) as u32)
            }
            11 if rng.below(2) == 0 => {
                // A lease written back after a loss, under a small limit.
                scripts.encode_reassert(&mut command, call, limit)
            }
            11 => {
                let marker = format!("value-{}", rng.below(3));
                scripts.encode_mark(&mut command, b"diff:node", marker.as_bytes())
            }
            9 => scripts.encode_renew(&mut command, text_sometimes(&mut rng), call),
            _ => {
                let kind = ScriptKind::LOADED[rng.below(ScriptKind::LOADED.len() as u64) as usize];
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
        let kind = rng_kind(&command, &scripts);
        let acquire = matches!(
            kind,
            Some(
                ScriptKind::Acquire
                    | ScriptKind::AcquireMany
                    | ScriptKind::AcquireAcross
                    | ScriptKind::AcquireAll
                    | ScriptKind::AcquireWaiting
            )
        );
        // Only the fail-fast scripts take the fencing argument.
        let tokens = !fenced
            && matches!(
                kind,
                Some(ScriptKind::Acquire | ScriptKind::AcquireAcross | ScriptKind::AcquireAll)
            );
        let tokens = if tokens { Tokens::None } else { Tokens::OnGrants };
        let inspect = String::from_utf8_lossy(&command).contains(scripts.inspect.text);
        let (real, modelled) = if inspect {
            (without_clock(real), without_clock(modelled))
        } else if acquire {
            (
                tokens_checked(real, &mut last_token, true, &token_keys, tokens),
                tokens_checked(modelled, &mut last_token, false, &token_keys, tokens),
            )
        } else {
            (real, modelled)
        };
        // A script's own error, as Redis tells it: with where the script
        // raised it, which the model does not say.
        let real = match real {
            Frame::Error(text) => match text.find(" script: ") {
                Some(cut) => Frame::Error(text[..cut].to_string().into()),
                None => Frame::Error(text),
            },
            other => other,
        };
        assert_eq!(
            real,
            modelled,
            "after {compared} matching replies, for {:?}",
            String::from_utf8_lossy(&command)
        );
    }
    // The queue was exercised: waiters queued, and some shed.
    let queued = model.acquires.iter().filter(|a| a.status == 2).count();
    assert!(queued > 100, "only {queued} waits were queued");
    // And all-or-nothing calls held back subjects that had room.
    let withheld = model.acquires.iter().filter(|a| a.status == WITHHELD).count();
    assert!(withheld >= 5, "only {withheld} subjects were withheld");
    // And the lease sets and wait queues agree at the end.
    for keys in &subjects {
        let queued = match redis.call(&[b"ZRANGE", &keys.queue(), b"0", b"-1"]).unwrap() {
            inflight_core::resp::Frame::Array(items) => items
                .into_iter()
                .map(|f| match f {
                    inflight_core::resp::Frame::BulkString(b) => b,
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            queued,
            model.waiters(&keys.queue()),
            "queues differ for {:?}",
            keys.queue()
        );
        let mut live = model.live_members(keys.leases());
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

/// Lease `n` of the test: one in four weighs 2, one in four 3 (limits are 1
/// to 4, so some weights exceed them).
fn test_lease(n: u64) -> LeaseId {
    LeaseId::from_parts(0xd1ff, n).with_claim([1, 1, 2, 3][(n % 4) as usize], None)
}

/// An `INSPECT` reply without what each side's clock decides: the server's
/// time (its first item), the leases' expiries and so their order (the ids
/// listed are compared as a set).
fn without_clock(reply: Frame) -> Frame {
    match reply {
        Frame::Array(mut items) if items.len() >= 4 => {
            let mut ids: Vec<Vec<u8>> = items
                .iter()
                .skip(4)
                .step_by(2)
                .map(|id| match id {
                    Frame::BulkString(id) => id.to_vec(),
                    other => panic!("{other:?}"),
                })
                .collect();
            ids.sort();
            items.truncate(4);
            items.remove(0);
            items.extend(ids.into_iter().map(|id| Frame::BulkString(id.into())));
            Frame::Array(items)
        }
        other => other,
    }
}

/// Which of our scripts `command` runs, if any.
fn rng_kind(command: &[u8], scripts: &Scripts) -> Option<ScriptKind> {
    let text = String::from_utf8_lossy(command);
    [
        ScriptKind::Acquire,
        ScriptKind::AcquireMany,
        ScriptKind::AcquireAcross,
        ScriptKind::AcquireAll,
        ScriptKind::AcquireWaiting,
    ]
    .into_iter()
    .find(|kind| text.contains(&scripts.get(*kind).sha) || text.contains(scripts.get(*kind).text))
}

/// An acquire reply with each `{status, id, token}`'s token checked (positive
/// exactly on a grant, above the subject's last one on this side) and then
/// replaced by 1 or 0, so the two sides' replies compare equal. `keys` names
/// each group's subject (one for all of them when only one is given).
/// What an acquire's reply carries as tokens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tokens {
    /// One with every grant, and none otherwise.
    OnGrants,
    /// None at all (a fail-fast acquire that asked for none).
    None,
}

fn tokens_checked(
    reply: Frame,
    last: &mut std::collections::HashMap<(bool, Vec<u8>), i64>,
    side: bool,
    keys: &[Vec<u8>],
    tokens: Tokens,
) -> Frame {
    let Frame::Array(mut items) = reply else {
        return reply;
    };
    // `ACQUIRE_WAITING` answers one sextuple, `ACQUIRE` one quadruple, a
    // batch triples then one count: the token is each group's third item.
    let width = match items.len() {
        6 => 6,
        4 => 4,
        _ => 3,
    };
    for (i, triple) in items.chunks_exact_mut(width).enumerate() {
        let side_and_key = (side, keys[i.min(keys.len() - 1)].clone());
        let triple = &mut triple[..3];
        if let [Frame::Integer(status), _, Frame::Integer(token)] = triple {
            // A waiter queued says there whether it entered the queue (1)
            // or kept its place (0); the same on both sides, compared as is.
            if width == 6 && *status == 2 {
                assert!(*token == 0 || *token == 1, "entered or kept its place: {token}");
                continue;
            }
            assert_eq!(
                tokens == Tokens::OnGrants && *status == 1,
                *token > 0,
                "a token exactly with a grant that asked for one: {status} {token}"
            );
            if *token > 0 {
                let previous = last.entry(side_and_key.clone()).or_insert(0);
                assert!(
                    *token > *previous,
                    "tokens of a subject strictly increase: {token} after {previous}"
                );
                *previous = *token;
            }
            *token = i64::from(*token > 0);
        }
    }
    Frame::Array(items)
}

/// A script named by its text one call in four (as after a `NOSCRIPT`).
fn text_sometimes(rng: &mut Rng) -> Eval {
    if rng.below(4) == 0 {
        Eval::Text
    } else {
        Eval::Sha
    }
}
