//! The core's Lua scripts, run on a real redis-server through the core's own
//! RESP encoder and decoder.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::Frame;
use inflight_core::scripts::{Eval, LeaseCall, ScriptKind, Scripts, WaitArgs};
use inflight_core::slot::hash_tag;
use inflight_tests::{RedisServer, RespClient};

struct Leases {
    client: RespClient,
    scripts: Scripts,
    keys: SubjectKeys,
    /// The recovery hold key acquires check (empty: none).
    hold: Vec<u8>,
    /// The fencing token of the last grant (or, for a waiter the last
    /// call queued, 1 if it entered the queue with it).
    token: i64,
    /// The units the last acquire or renewal said its prune reclaimed.
    reclaimed: i64,
}

impl Leases {
    fn new(server: &RedisServer, subject: &str) -> Self {
        let mut client = server.client();
        let scripts = Scripts::default();
        for kind in ScriptKind::LOADED {
            let mut out = BytesMut::new();
            scripts.encode_load(&mut out, kind);
            let reply = client.call_raw(&out).unwrap();
            assert_eq!(
                reply,
                Frame::BulkString(Bytes::from(scripts.get(kind).sha.clone())),
                "SCRIPT LOAD returns our SHA1"
            );
        }
        let keys = SubjectKeys::new("test", &Key::new("tier", subject).unwrap());
        Self {
            client,
            scripts,
            keys,
            hold: Vec::new(),
            token: 0,
            reclaimed: 0,
        }
    }

    /// The server's clock, in milliseconds.
    fn server_ms(&mut self) -> u64 {
        self.client.server_ms()
    }

    /// A valid-until an hour from now: these tests' requests are never late.
    fn fresh(&mut self) -> u64 {
        self.server_ms() + 3_600_000
    }

    fn acquire(&mut self, id: u64, limit: u32, ttl_ms: u64) -> (i64, Bytes) {
        let valid_until = self.fresh();
        self.acquire_until(id, limit, ttl_ms, valid_until)
    }

    fn acquire_until(&mut self, id: u64, limit: u32, ttl_ms: u64, valid_until: u64) -> (i64, Bytes) {
        let id = lease(id).to_string();
        let expiry_ms = self.server_ms() + ttl_ms;
        let call = LeaseCall {
            keys: &self.keys,
            id: id.as_bytes(),
            expiry_ms,
            valid_until_ms: valid_until,
            fenced: true,
        };
        let mut out = BytesMut::new();
        self.scripts
            .encode_acquire(&mut out, Eval::Sha, call, limit, &self.hold, None);
        match self.client.call_raw(&out).unwrap() {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(token), Frame::Integer(reclaimed)] => {
                    assert_eq!(*status == 1, *token > 0, "a token exactly with a grant");
                    self.reclaimed = *reclaimed;
                    if *status == 1 {
                        assert!(
                            *token > self.token,
                            "tokens strictly increase: {token} after {}",
                            self.token
                        );
                        self.token = *token;
                    }
                    (*status, echo.clone())
                }
                other => panic!("unexpected acquire reply {other:?}"),
            },
            other => panic!("unexpected acquire reply {other:?}"),
        }
    }

    fn granted(&mut self, id: u64, limit: u32, ttl_ms: u64) -> bool {
        let (status, echo) = self.acquire(id, limit, ttl_ms);
        assert_eq!(echo, lease(id).to_string().as_bytes(), "the script echoes the lease id");
        match status {
            1 => true,
            0 => false,
            other => panic!("status {other}"),
        }
    }

    /// A plain `ZREM` of the lease's units (the release during a slot
    /// migration): how many units were removed.
    fn release(&mut self, id: u64) -> i64 {
        let units: Vec<Vec<u8>> = inflight_core::lease_id::units(&lease(id).to_bytes()).collect();
        let mut command: Vec<&[u8]> = vec![b"ZREM", self.keys.leases()];
        command.extend(units.iter().map(Vec::as_slice));
        match self.client.call(&command).unwrap() {
            Frame::Integer(n) => n,
            other => panic!("unexpected ZREM reply {other:?}"),
        }
    }

    /// Compensates `id`, whose acquire stays valid `valid_for_ms` more (0: it
    /// has run, no tombstone).
    fn compensate(&mut self, id: u64, valid_for_ms: u64) {
        let id_text = lease(id).to_string();
        let until = if valid_for_ms == 0 {
            0
        } else {
            self.server_ms() + valid_for_ms
        };
        let mut out = BytesMut::new();
        self.scripts
            .encode_compensate(&mut out, Eval::Sha, &self.keys, id_text.as_bytes(), until);
        let reply = self.client.call_raw(&out).unwrap();
        assert_eq!(
            reply,
            Frame::BulkString(Bytes::from(id_text)),
            "compensation echoes the id"
        );
    }

    fn renew(&mut self, id: u64, ttl_ms: u64) -> i64 {
        let valid_until = self.fresh();
        self.renew_until(id, ttl_ms, valid_until)
    }

    fn renew_until(&mut self, id: u64, ttl_ms: u64, valid_until: u64) -> i64 {
        let id_text = lease(id).to_string();
        let expiry_ms = self.server_ms() + ttl_ms;
        let call = LeaseCall {
            keys: &self.keys,
            id: id_text.as_bytes(),
            expiry_ms,
            valid_until_ms: valid_until,
            fenced: true,
        };
        let mut out = BytesMut::new();
        self.scripts.encode_renew(&mut out, Eval::Sha, call);
        match self.client.call_raw(&out).unwrap() {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(reclaimed)]
                    if echo[..] == *id_text.as_bytes() =>
                {
                    self.reclaimed = *reclaimed;
                    *status
                }
                other => panic!("unexpected renew reply {other:?}"),
            },
            other => panic!("unexpected renew reply {other:?}"),
        }
    }

    /// A lease's score: its expiry in the server's milliseconds.
    fn expiry(&mut self, id: u64) -> Option<u64> {
        let id = lease(id).to_string();
        match self
            .client
            .call(&[b"ZSCORE", self.keys.leases(), id.as_bytes()])
            .unwrap()
        {
            Frame::BulkString(score) => Some(std::str::from_utf8(&score).unwrap().parse().unwrap()),
            Frame::Null => None,
            other => panic!("unexpected ZSCORE reply {other:?}"),
        }
    }

    fn live(&mut self) -> i64 {
        match self.client.call(&[b"ZCARD", self.keys.leases()]).unwrap() {
            Frame::Integer(n) => n,
            other => panic!("unexpected ZCARD reply {other:?}"),
        }
    }

    fn pttl(&mut self) -> i64 {
        match self.client.call(&[b"PTTL", self.keys.leases()]).unwrap() {
            Frame::Integer(n) => n,
            other => panic!("unexpected PTTL reply {other:?}"),
        }
    }
}

impl Leases {
    /// `ACQUIRE_WAITING` for `id`: `(status, ahead, expected)`.
    fn wait(&mut self, id: u64, limit: u32, lifetime_ms: u64, patience_ms: u64) -> (i64, i64, i64) {
        self.wait_from(id, None, limit, lifetime_ms, patience_ms)
    }

    /// [`Leases::wait`] by a waiter that went on under `id` from `previous`.
    fn wait_from(
        &mut self,
        id: u64,
        previous: Option<u64>,
        limit: u32,
        lifetime_ms: u64,
        patience_ms: u64,
    ) -> (i64, i64, i64) {
        let id_text = lease(id).to_string();
        let previous = previous.map(|p| lease(p).to_string()).unwrap_or_default();
        let now = self.server_ms();
        let call = LeaseCall {
            keys: &self.keys,
            id: id_text.as_bytes(),
            expiry_ms: now + LONG,
            valid_until_ms: now + 3_600_000,
            fenced: true,
        };
        let wait = WaitArgs {
            lifetime_ms,
            patience_ms,
            previous: previous.as_bytes(),
        };
        let mut out = BytesMut::new();
        self.scripts
            .encode_acquire(&mut out, Eval::Sha, call, limit, &self.hold, Some(wait));
        match self.client.call_raw(&out).unwrap() {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(token), Frame::Integer(ahead), Frame::Integer(expected), Frame::Integer(reclaimed)]
                    if echo[..] == *id_text.as_bytes() =>
                {
                    self.reclaimed = *reclaimed;
                    match *status {
                        1 => assert!(*token > 0, "a grant's token"),
                        2 => assert!(*token == 0 || *token == 1, "entered or kept its place"),
                        _ => assert_eq!(*token, 0, "no token without a grant"),
                    }
                    self.token = *token;
                    (*status, *ahead, *expected)
                }
                other => panic!("unexpected wait reply {other:?}"),
            },
            other => panic!("unexpected wait reply {other:?}"),
        }
    }

    /// `RELEASE` of `ids`, held `held_ms` (`None`: not known, as a
    /// recovery's repeat sends): how many were removed.
    fn release_script(&mut self, ids: &[u64], held_ms: Option<u64>) -> i64 {
        let ids: Vec<String> = ids.iter().map(|id| lease(*id).to_string()).collect();
        let mut out = BytesMut::new();
        let ids = ids.iter().map(|id| id.as_bytes());
        self.scripts
            .encode_release(&mut out, &self.keys, Eval::Sha, held_ms, &self.hold, ids);
        match self.client.call_raw(&out).unwrap() {
            Frame::Integer(n) => n,
            other => panic!("unexpected RELEASE reply {other:?}"),
        }
    }

    /// `LEAVE` of waiter `id`: 1 if it was queued or held a slot.
    fn leave(&mut self, id: u64) -> i64 {
        let mut out = BytesMut::new();
        self.scripts
            .encode_leave(&mut out, &self.keys, lease(id).to_string().as_bytes());
        match self.client.call_raw(&out).unwrap() {
            Frame::Integer(n) => n,
            other => panic!("unexpected LEAVE reply {other:?}"),
        }
    }

    fn queued(&mut self) -> Vec<Bytes> {
        match self.client.call(&[b"ZRANGE", &self.keys.queue(), b"0", b"-1"]).unwrap() {
            Frame::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Frame::BulkString(id) => id,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }
}

/// Lease `n`: from 1000 on, `n / 1000` is its weight (3001 weighs 3).
fn lease(n: u64) -> LeaseId {
    LeaseId::from_parts(0xfeed, n).with_claim((n / 1000).max(1) as u32, None)
}

/// Lease `n`'s id as Redis stores it (a queue's or a lease set's member).
fn id(n: u64) -> Bytes {
    Bytes::from(lease(n).to_string())
}

const LONG: u64 = 60_000;

#[test]
fn grants_up_to_the_limit_and_denies_past_it() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "limit");
    assert!(leases.granted(1, 3, LONG));
    assert!(leases.granted(2, 3, LONG));
    assert!(leases.granted(3, 3, LONG));
    assert!(!leases.granted(4, 3, LONG));
    assert_eq!(leases.live(), 3);
    // A per-call limit: a larger tier on the same key admits more.
    assert!(leases.granted(5, 4, LONG));
    assert!(!leases.granted(6, 4, LONG));
}

#[test]
fn re_acquiring_a_live_id_is_granted_without_a_second_slot() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "idempotent");
    assert!(leases.granted(1, 2, LONG));
    assert!(leases.granted(1, 2, LONG));
    assert!(leases.granted(1, 2, LONG));
    assert_eq!(leases.live(), 1);
    assert!(leases.granted(2, 2, LONG));
    // At the limit, the holder of a live lease still gets "granted".
    assert!(leases.granted(1, 2, LONG));
    assert!(!leases.granted(3, 2, LONG));
}

#[test]
fn release_frees_the_slot_and_is_idempotent() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "release");
    assert!(leases.granted(1, 1, LONG));
    assert!(!leases.granted(2, 1, LONG));
    assert_eq!(leases.release(1), 1);
    assert_eq!(leases.release(1), 0);
    assert!(leases.granted(2, 1, LONG));
}

#[test]
fn expired_leases_are_reclaimed_and_the_key_ttl_covers_the_longest_lease() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "expiry");
    assert!(leases.granted(1, 2, 300));
    let short = leases.pttl();
    assert!(
        (1..=301).contains(&short),
        "key TTL {short} should cover the 300 ms lease"
    );
    assert!(leases.granted(2, 2, 5_000));
    let long = leases.pttl();
    assert!(
        (300..=5_001).contains(&long),
        "key TTL {long} should follow the longest lease"
    );
    assert!(!leases.granted(3, 2, 5_000));
    std::thread::sleep(Duration::from_millis(400)); // the server's clock must pass the first lease
    assert!(leases.granted(3, 2, 5_000), "the expired lease's slot is reclaimed");
    assert_eq!(leases.live(), 2);
    // A short lease added later does not shorten the key below the long one.
    assert!(leases.release(3) == 1 && leases.granted(4, 3, 100));
    assert!(leases.pttl() > 1_000);
}

#[test]
fn renew_extends_a_live_lease_and_its_key_but_never_creates_one() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "renew");
    assert!(leases.granted(1, 1, 1_000));
    let before = leases.expiry(1).unwrap();
    assert!(leases.pttl() <= 1_001);
    assert_eq!(leases.renew(1, LONG), 1);
    let after = leases.expiry(1).unwrap();
    assert!(after >= before + LONG - 1_000, "{before} -> {after}");
    assert!(leases.pttl() > 1_001, "the key's TTL follows the renewed lease");
    assert_eq!(leases.live(), 1);
    // An id with no lease (never acquired, or released) is not brought back.
    assert_eq!(leases.renew(2, LONG), 0);
    assert_eq!(leases.release(1), 1);
    assert_eq!(leases.renew(1, LONG), 0);
    assert_eq!(leases.live(), 0);
    // Nor is an expired one: its slot went back at its expiry.
    assert!(leases.granted(3, 1, 50));
    std::thread::sleep(Duration::from_millis(100)); // the server's clock must pass the lease
    assert_eq!(leases.renew(3, LONG), 0);
    assert!(leases.granted(4, 1, LONG));
}

#[test]
fn an_idle_key_disappears_with_its_last_lease() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "idle");
    assert!(leases.granted(1, 1, 150));
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(leases.pttl(), -2, "the key should be gone");
}

#[test]
fn a_compensated_id_is_refused_by_a_late_acquire() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "tombstone");
    assert!(leases.granted(1, 1, LONG));
    leases.compensate(1, LONG);
    assert_eq!(leases.live(), 0);
    // The acquire's bytes were delayed on a dead connection and land now.
    let (status, echo) = leases.acquire(1, 1, LONG);
    assert_eq!((status, &echo[..]), (-1, lease(1).to_string().as_bytes()));
    assert_eq!(leases.live(), 0);
    // Others are unaffected.
    assert!(leases.granted(2, 1, LONG));
    // A compensation before any acquire also guards the id.
    leases.compensate(3, LONG);
    assert_eq!(leases.acquire(3, 5, LONG).0, -1);
}

#[test]
fn injective_keys_keep_subjects_apart_and_share_one_hash_tag() {
    let server = RedisServer::start();
    let mut client = server.client();
    let scripts = Scripts::default();
    let pairs = [("a|b", "c"), ("a", "b|c")];
    for (i, (ns, subject)) in pairs.iter().enumerate() {
        let keys = SubjectKeys::new("test", &Key::new(*ns, *subject).unwrap());
        let lease = lease(i as u64);
        let tombstone = keys.tombstone(&lease);
        assert_eq!(hash_tag(keys.leases()), hash_tag(&tombstone));
        let mut out = BytesMut::new();
        let id = lease.to_string();
        let call = LeaseCall {
            keys: &keys,
            id: id.as_bytes(),
            expiry_ms: client.server_ms() + LONG,
            valid_until_ms: 99_999_999_999_999,
            fenced: true,
        };
        scripts.encode_acquire(&mut out, Eval::Text, call, 1, b"", None);
        let reply = client.call_raw(&out).unwrap();
        assert!(
            matches!(&reply, Frame::Array(items) if items.first() == Some(&Frame::Integer(1))),
            "limit 1 on {ns:?}/{subject:?} must grant: the subjects must not share a key ({reply:?})"
        );
    }
}

#[test]
fn evalsha_of_an_unloaded_script_answers_noscript() {
    let server = RedisServer::start();
    let mut client = server.client();
    client.call(&[b"SCRIPT", b"FLUSH"]).unwrap();
    let keys = SubjectKeys::new("test", &Key::new("n", "s").unwrap());
    let mut out = BytesMut::new();
    let call = LeaseCall {
        keys: &keys,
        id: b"x",
        expiry_ms: 1,
        valid_until_ms: 1,
        fenced: true,
    };
    Scripts::default().encode_acquire(&mut out, Eval::Sha, call, 1, b"", None);
    match client.call_raw(&out).unwrap() {
        Frame::Error(message) => assert!(message.starts_with("NOSCRIPT"), "{message}"),
        other => panic!("expected NOSCRIPT, got {other:?}"),
    }
}

#[test]
fn a_request_that_runs_after_its_valid_until_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "stale");
    let past = leases.server_ms() - 1;
    let (status, echo) = leases.acquire_until(1, 5, LONG, past);
    assert_eq!((status, &echo[..]), (-2, lease(1).to_string().as_bytes()));
    assert_eq!(leases.live(), 0, "a stale acquire takes no slot");
    // A renewal that runs late extends nothing, even a live lease.
    assert!(leases.granted(2, 5, 2_000));
    let before = leases.expiry(2);
    assert_eq!(leases.renew_until(2, LONG, past), -2);
    assert_eq!(leases.expiry(2), before);
    // A batch refuses every member at once.
    let ids: Vec<String> = [3, 4].iter().map(|n| lease(*n).to_string()).collect();
    let ids_bytes: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
    let mut out = BytesMut::new();
    let expiry = leases.server_ms() + LONG;
    leases
        .scripts
        .encode_acquire_many(&mut out, &leases.keys, &ids_bytes, expiry, 5, past, b"");
    let reply = leases.client.call_raw(&out).unwrap();
    let expected = Frame::Array(vec![
        Frame::Integer(-2),
        Frame::BulkString(Bytes::from(ids[0].clone())),
        Frame::Integer(0),
        Frame::Integer(-2),
        Frame::BulkString(Bytes::from(ids[1].clone())),
        Frame::Integer(0),
        Frame::Integer(0), // nothing reclaimed: a stale call prunes nothing
    ]);
    assert_eq!(reply, expected);
    assert_eq!(leases.live(), 1, "only lease 2");
}

#[test]
fn a_tombstone_lives_until_its_acquire_turns_stale_and_no_longer() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "tomb-life");
    let tombstone = |leases: &Leases, id: u64| leases.keys.tombstone(&lease(id)).to_vec();
    // The acquire's reply was read: no tombstone is written at all.
    assert!(leases.granted(1, 5, LONG));
    leases.compensate(1, 0);
    let key = tombstone(&leases, 1);
    assert_eq!(leases.client.call(&[b"EXISTS", &key]).unwrap(), Frame::Integer(0));
    // An acquire that may still run for 300 ms: a tombstone for that long.
    leases.compensate(2, 300);
    let key = tombstone(&leases, 2);
    match leases.client.call(&[b"PTTL", &key]).unwrap() {
        Frame::Integer(ms) => assert!((1..=301).contains(&ms), "tombstone PTTL {ms}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(leases.acquire(2, 5, LONG).0, -1, "refused while it could still run");
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(leases.client.call(&[b"EXISTS", &key]).unwrap(), Frame::Integer(0));
}

impl Leases {
    /// Runs one of the scripts sent by text (`REASSERT`, `MARK`, `HOLD`).
    fn by_text(&mut self, kind: ScriptKind, keys: &[&[u8]], args: &[&[u8]]) -> Frame {
        let mut out = BytesMut::new();
        self.scripts.encode_call(&mut out, kind, Eval::Text, keys, args);
        self.client.call_raw(&out).unwrap()
    }

    fn reassert(&mut self, id: u64, remaining_ms: u64, limit: u32) -> i64 {
        let valid_until_ms = self.fresh();
        self.reassert_until(id, remaining_ms, limit, valid_until_ms)
    }

    fn reassert_until(&mut self, id: u64, remaining_ms: u64, limit: u32, valid_until_ms: u64) -> i64 {
        let id_text = lease(id).to_string();
        let expiry_ms = self.server_ms() + remaining_ms;
        let call = LeaseCall {
            keys: &self.keys,
            id: id_text.as_bytes(),
            expiry_ms,
            valid_until_ms,
            fenced: true,
        };
        let mut out = BytesMut::new();
        self.scripts.encode_reassert(&mut out, call, limit);
        match self.client.call_raw(&out).unwrap() {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo)] if echo[..] == *id_text.as_bytes() => *status,
                other => panic!("unexpected reassert reply {other:?}"),
            },
            other => panic!("unexpected reassert reply {other:?}"),
        }
    }
}

#[test]
fn fencing_tokens_increase_per_subject_and_stay_above_the_clock_after_a_flush() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "fence");
    let before_us = leases.server_ms() * 1000;
    assert!(leases.granted(1, 10, LONG));
    assert!(leases.token >= before_us as i64, "the first token is the clock in µs");
    for id in 2..6 {
        assert!(leases.granted(id, 10, LONG)); // each checked to increase
    }
    let after_us = leases.server_ms() * 1000 + 1000;
    assert!(
        leases.token <= after_us as i64,
        "tokens follow the clock while grants are slower than 1/µs"
    );
    // The data is gone (an empty restart looks the same to the script).
    leases.client.call(&[b"FLUSHALL"]).unwrap();
    std::thread::sleep(Duration::from_millis(2));
    assert!(
        leases.granted(9, 10, LONG),
        "checked: above every token before the flush"
    );
    // Another subject has its own counter.
    let mut other = Leases::new(&server, "fence-2");
    assert!(other.granted(1, 10, LONG));
    assert!(other.token < leases.token + 1_000_000, "both start near the clock");
}

#[test]
fn the_recovery_hold_refuses_new_leases_but_not_held_ones_nor_their_write_back() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "hold");
    assert!(leases.granted(1, 2, LONG));
    leases.hold = b"test:recovery".to_vec();
    assert!(leases.granted(1, 2, LONG), "no hold key yet: business as usual");
    let hold = leases.hold.clone();
    assert_eq!(
        leases.by_text(ScriptKind::Hold, &[&hold], &[b"60000"]),
        Frame::Integer(60000)
    );
    // A shorter hold never shortens it.
    match leases.by_text(ScriptKind::Hold, &[&hold], &[b"10"]) {
        Frame::Integer(left) => assert!(left > 59_000, "{left}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(leases.acquire(2, 2, LONG).0, -3, "a new lease waits for the recovery");
    assert!(leases.granted(1, 2, LONG), "a lease already held is granted again");
    assert_eq!(leases.live(), 1);
    // Writing back ignores the hold: survived, restored, restored over the limit.
    assert_eq!(leases.reassert(1, LONG, 2), 1);
    assert_eq!(leases.reassert(7, LONG, 2), 2);
    assert_eq!(leases.reassert(8, LONG, 2), 3, "3 leases under a limit of 2: detected");
    assert_eq!(leases.live(), 3);
    assert!(leases.expiry(8).is_some());
    assert!(leases.pttl() > 0, "the key's TTL covers the written-back leases");
}

#[test]
fn the_marker_is_written_once_and_read_back() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "marker");
    let mut mark = |value: &[u8]| {
        let mut out = BytesMut::new();
        leases.scripts.encode_mark(&mut out, b"test:node", value);
        leases.client.call_raw(&out).unwrap()
    };
    assert_eq!(
        mark(b"first"),
        Frame::Array(vec![Frame::Integer(1), Frame::BulkString(Bytes::from_static(b"first"))])
    );
    assert_eq!(
        mark(b"second"),
        Frame::Array(vec![Frame::Integer(0), Frame::BulkString(Bytes::from_static(b"first"))])
    );
    // Like every key the library writes, it expires (30 days after the
    // last handshake that read it).
    match leases.client.call(&[b"PTTL", b"test:node"]).unwrap() {
        Frame::Integer(ms) => assert!(ms > 29 * 24 * 3600 * 1000 && ms <= 30 * 24 * 3600 * 1000, "{ms}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn waiters_are_served_in_arrival_order_and_newcomers_wait_behind_them() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "fifo");
    assert!(leases.granted(1, 2, LONG));
    assert!(leases.granted(2, 2, LONG));
    // Three waiters queue in order 10, 11, 12: one slot must free for the
    // first, two for the second...
    for (id, ahead) in [(10, 1), (11, 2), (12, 3)] {
        assert_eq!(leases.wait(id, 2, LONG, LONG), (2, ahead, 0));
    }
    assert_eq!(leases.queued(), vec![id(10), id(11), id(12)]);
    // One slot frees: a fail-fast newcomer is refused (three waiters are
    // owed slots first), the last waiter still waits, the first is served.
    assert_eq!(leases.release_script(&[1], Some(40)), 1);
    assert!(!leases.granted(3, 2, LONG), "a newcomer never takes a waiter's slot");
    assert_eq!(leases.wait(12, 2, LONG, LONG).0, 2);
    assert_eq!(leases.wait(11, 2, LONG, LONG).0, 2);
    assert_eq!(leases.wait(10, 2, LONG, LONG).0, 1);
    // Asking again is idempotent: the grant stands, no second slot.
    assert_eq!(leases.wait(10, 2, LONG, LONG).0, 1);
    assert_eq!(leases.live(), 2);
    assert_eq!(leases.queued().len(), 2);
}

#[test]
fn a_waiter_that_stops_calling_is_forgotten_and_stops_blocking_the_queue() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "dead");
    assert!(leases.granted(1, 1, LONG));
    // Waiter 10 lives 50 ms without calling again; 11 is behind it.
    assert_eq!(leases.wait(10, 1, 50, LONG).0, 2);
    assert_eq!(leases.wait(11, 1, LONG, LONG), (2, 2, 0));
    assert_eq!(leases.release_script(&[1], Some(5)), 1);
    assert_eq!(leases.wait(11, 1, LONG, LONG), (2, 1, 5), "10 is still owed the slot");
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(leases.wait(11, 1, LONG, LONG).0, 1, "10 expired: 11 is served");
}

#[test]
fn a_release_drops_its_ids_from_the_queue_and_hands_the_slot_to_the_next_waiter() {
    // A failover to a lagging replica brings back waiter 10's queue entry
    // after 10 was served and given back: 10's release must not hand 10 the
    // slot again (nobody would claim it) but to 11.
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "restored");
    assert!(leases.granted(1, 1, LONG));
    assert_eq!(leases.wait(10, 1, LONG, LONG).0, 2);
    assert_eq!(leases.wait(11, 1, LONG, LONG).0, 2);
    assert_eq!(leases.release_script(&[1, 10], Some(5)), 1);
    assert_eq!(leases.queued(), Vec::<Bytes>::new(), "10 left, 11 was handed the slot");
    assert_eq!(leases.wait(11, 1, LONG, LONG).0, 1, "11 holds it");
    assert_eq!(leases.live(), 1);
}

#[test]
fn a_wait_that_cannot_fit_its_patience_is_shed_at_once() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "shed");
    for id in 1..=2 {
        assert!(leases.granted(id, 2, LONG));
    }
    assert_eq!(leases.wait(10, 2, LONG, LONG).0, 2);
    // No hold time is known yet: nothing is shed. Two releases while the
    // queue exists teach the subject that holds last about 400 ms.
    assert_eq!(leases.release_script(&[1], Some(400)), 1);
    assert_eq!(leases.release_script(&[2], Some(400)), 1);
    assert_eq!(leases.wait(10, 2, LONG, LONG).0, 1);
    assert!(leases.granted(3, 2, LONG));
    // Full again, one waiter ahead: the fourth in line needs 2 slots to
    // free, about 2 × 400 / 2 = 400 ms.
    assert_eq!(leases.wait(11, 2, LONG, LONG), (2, 1, 200));
    assert_eq!(
        leases.wait(12, 2, LONG, 399),
        (0, 2, 400),
        "shed: 400 ms expected, 399 allowed"
    );
    assert_eq!(leases.queued().len(), 1, "the shed waiter left the queue");
    assert_eq!(
        leases.wait(12, 2, LONG, 400),
        (2, 2, 400),
        "with patience enough it queues"
    );
}

#[test]
fn releases_sent_again_without_a_hold_time_leave_the_estimate_alone() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "again");
    for id in 1..=2 {
        assert!(leases.granted(id, 2, LONG));
    }
    assert_eq!(leases.wait(10, 2, LONG, LONG).0, 2);
    assert_eq!(leases.release_script(&[1], Some(400)), 1);
    assert_eq!(leases.release_script(&[2], Some(400)), 1);
    // A recovery repeats them (they are gone: nothing removed), with no
    // hold time to teach: the subject still expects holds of 400 ms.
    for _ in 0..4 {
        assert_eq!(leases.release_script(&[1, 2], None), 0);
    }
    assert_eq!(leases.wait(10, 2, LONG, LONG).0, 1);
    assert!(leases.granted(3, 2, LONG));
    assert_eq!(leases.wait(11, 2, LONG, LONG), (2, 1, 200));
}

#[test]
fn a_release_on_a_subject_with_waiters_wakes_them_on_its_shard_channel() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "wake");
    let mut subscriber = server.client();
    let channel = leases.keys.wake_channel();
    match subscriber.call(&[b"SSUBSCRIBE", &channel]).unwrap() {
        Frame::Array(items) => assert_eq!(items[0], Frame::BulkString(Bytes::from_static(b"ssubscribe"))),
        other => panic!("{other:?}"),
    }
    assert!(leases.granted(1, 1, LONG));
    assert!(leases.granted(2, 2, LONG));
    // No waiter: a release publishes nothing (checked below: the first
    // message is the one after the waiter queued).
    assert_eq!(leases.release_script(&[2], Some(1)), 1);
    assert_eq!(leases.wait(10, 1, LONG, LONG).0, 2);
    assert_eq!(leases.release_script(&[1], Some(1)), 1);
    match subscriber.read_reply().unwrap() {
        Frame::Array(items) => {
            assert_eq!(items[0], Frame::BulkString(Bytes::from_static(b"smessage")));
            assert_eq!(items[1], Frame::BulkString(channel.clone()));
            // The slot handed to the waiter first in line: its id and a
            // fencing token.
            let Frame::BulkString(payload) = &items[2] else {
                panic!("{items:?}")
            };
            let text = String::from_utf8_lossy(payload);
            let words: Vec<&str> = text.split(' ').collect();
            assert_eq!(words[..2], ["H", lease(10).to_string().as_str()], "{text}");
            assert!(words[2].parse::<u64>().unwrap() > 0, "{text}");
        }
        other => panic!("{other:?}"),
    }
}

/// A waiter handed a slot whose reservation runs out before it checks again
/// (another caller takes the slot) is queued again as a new entry, and says
/// so: it lost its place and the slot, and the client goes on under a new
/// id. A check that keeps its place says it kept it.
#[test]
fn a_waiter_that_lost_its_place_is_told_it_entered_the_queue_again() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "entered");
    assert!(leases.granted(1, 1, LONG));
    // Waiter 10 lives 50 ms without calling again.
    assert_eq!(leases.wait(10, 1, 50, LONG).0, 2);
    assert_eq!(leases.token, 1, "entered");
    assert_eq!(leases.wait(10, 1, 50, LONG).0, 2);
    assert_eq!(leases.token, 0, "kept its place");
    assert_eq!(leases.release_script(&[1], Some(5)), 1);
    assert_eq!(leases.queued(), Vec::<Bytes>::new(), "handed the slot");
    // The reservation runs out with the entry's lifetime; 2 takes the slot.
    std::thread::sleep(Duration::from_millis(60));
    assert!(leases.granted(2, 1, LONG));
    assert_eq!(leases.wait(10, 1, LONG, LONG).0, 2);
    assert_eq!(leases.token, 1, "entered again: its place and its slot are gone");
}

/// A waiter that went on under a new id names the old one once: whatever
/// the old id has by then, its place in the queue or a slot a release
/// handed it, is the new id's, and the old id is gone from everywhere. With
/// nothing under the old id, the new one queues as any newcomer.
#[test]
fn a_waiter_gone_on_under_a_new_id_takes_over_the_old_ids_place_or_slot() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "taken-over");
    assert!(leases.granted(1, 1, LONG));
    assert_eq!(leases.wait(10, 1, LONG, LONG).0, 2);
    assert_eq!(leases.wait(11, 1, LONG, LONG).0, 2);
    // 10 goes on as 20: 20 keeps 10's place, ahead of 11.
    assert_eq!(leases.wait_from(20, Some(10), 1, LONG, LONG).0, 2);
    assert_eq!(leases.token, 0, "kept the old id's place");
    assert_eq!(leases.queued(), vec![id(20), id(11)]);
    let (waiters, holds) = (leases.keys.waiters(), leases.keys.holds());
    let old = id(10);
    let entry = leases.client.call(&[b"ZSCORE", &waiters, &old]).unwrap();
    let limit = leases.client.call(&[b"HGET", &holds, &old]).unwrap();
    assert_eq!((entry, limit), (Frame::Null, Frame::Null), "10 is gone");
    let new = id(20);
    let limit = leases.client.call(&[b"HGET", &holds, &new]).unwrap();
    assert_eq!(
        limit,
        Frame::BulkString(Bytes::from("1")),
        "20 waits under its own limit"
    );
    // A release hands the slot to 20; 20 goes on as 30 before it heard:
    // 30 holds the slot, with a whole TTL, and 20 holds nothing.
    assert_eq!(leases.release_script(&[1], Some(5)), 1);
    assert_eq!(leases.queued(), vec![id(11)], "handed the slot");
    let before = leases.server_ms();
    assert_eq!(leases.wait_from(30, Some(20), 1, LONG, LONG).0, 1);
    assert!(leases.token > 0, "a grant's token");
    assert!(leases.expiry(30).unwrap() >= before + LONG, "a whole TTL");
    assert_eq!(leases.expiry(20), None);
    assert_eq!(leases.live(), 1, "one slot, held by 30");
    assert_eq!(leases.queued(), vec![id(11)]);
    // Nothing under the old id (left already): a newcomer's place, behind 11.
    assert_eq!(leases.wait_from(40, Some(25), 1, LONG, LONG).0, 2);
    assert_eq!(leases.token, 1, "entered");
    assert_eq!(leases.queued(), vec![id(11), id(40)]);
}

/// Only a reservation moves to a new id (it ends within a lifetime of now;
/// a lease confirmed under the old id runs a TTL and stays its holder's),
/// and nothing moves to an id that holds a lease already.
#[test]
fn a_take_over_moves_no_lease_and_nothing_to_a_holder() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "not-taken");
    assert!(leases.granted(60, 2, LONG));
    assert!(leases.granted(62, 2, LONG));
    assert_eq!(leases.wait(64, 2, LONG, LONG).0, 2);
    // 62 holds: the queued 64 is not merged into it.
    assert_eq!(leases.wait_from(62, Some(64), 2, LONG, LONG).0, 1);
    assert_eq!(leases.queued(), vec![id(64)]);
    assert_eq!(leases.live(), 2);
    // 60's lease (a TTL past the waiters' 1 s lifetime) is not taken.
    let held = leases.expiry(60);
    assert_eq!(leases.wait_from(66, Some(60), 2, 1_000, LONG).0, 2);
    assert_eq!(leases.expiry(60), held, "still 60's");
    assert_eq!(leases.expiry(66), None);
    assert_eq!(leases.queued(), vec![id(64), id(66)]);
}

/// Only a live waiter's place moves: an old id whose waiter expired (not
/// pruned yet) leaves the queue, and the new id enters behind the live
/// waiters that came after it (an outside review found the place moved).
#[test]
fn a_dead_waiters_place_is_not_taken_over() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "dead-place");
    assert!(leases.granted(70, 1, LONG));
    assert_eq!(leases.wait(72, 1, 100, LONG).0, 2);
    assert_eq!(leases.wait(74, 1, LONG, LONG).0, 2);
    std::thread::sleep(Duration::from_millis(150)); // 72's entry expires
    assert_eq!(leases.wait_from(76, Some(72), 1, LONG, LONG).0, 2);
    assert_eq!(leases.token, 1, "entered the queue, with no place kept");
    assert_eq!(leases.queued(), vec![id(74), id(76)]);
}

/// A release that can let none of its first waiters through reads on: a
/// unit owed to a waiter under a higher limit, behind more waiters held
/// back by their lower one than the release's first look holds (`freed` +
/// 15), is handed over, not left free until that waiter's own check (an
/// outside review's finding).
#[test]
fn a_unit_owed_past_the_releases_first_look_is_handed_over() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "far-owed");
    let mut subscriber = server.client();
    subscriber.call(&[b"SSUBSCRIBE", &leases.keys.wake_channel()]).unwrap();
    for holder in 1..=3 {
        assert!(leases.granted(holder, 3, LONG));
    }
    // Sixteen waiters under limit 1, then one under limit 3.
    for waiter in 101..=116 {
        assert_eq!(leases.wait(waiter, 1, LONG, LONG).0, 2);
    }
    assert_eq!(leases.wait(200, 3, LONG, LONG).0, 2);
    assert_eq!(leases.release_script(&[1], Some(400)), 1);
    assert!(
        next_message(&mut subscriber).starts_with(&format!("H {} ", lease(200))),
        "the unit went to the waiter it is owed to"
    );
    assert!(leases.expiry(200).is_some(), "reserved for it");
}

/// The next message on `subscriber`'s channel, as text.
fn next_message(subscriber: &mut RespClient) -> String {
    match subscriber.read_reply().unwrap() {
        Frame::Array(items) => match &items[..] {
            [Frame::BulkString(kind), _, Frame::BulkString(payload)] if &kind[..] == b"smessage" => {
                String::from_utf8_lossy(payload).into_owned()
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// `N` and the ids of leases `ids`: the message that sends exactly those
/// waiters to check.
fn named(ids: &[u64]) -> String {
    let mut text = String::from("N");
    for id in ids {
        text.push(' ');
        text.push_str(&lease(*id).to_string());
    }
    text
}

#[test]
fn a_waiter_that_leaves_or_is_shed_names_every_waiter_that_fits_now() {
    // A bare wake-up sends one waiter per client to check: a second waiter
    // of the same client that fits would wait for its own periodic check
    // (the simulator's S9 found both cases).
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "named");
    let mut subscriber = server.client();
    let channel = leases.keys.wake_channel();
    subscriber.call(&[b"SSUBSCRIBE", &channel]).unwrap();
    assert!(leases.granted(1, 2, LONG));
    assert!(leases.granted(2, 2, LONG));
    // A heavy waiter (2 units) first in line, two light ones behind it.
    for id in [2010, 11, 12] {
        assert_eq!(leases.wait(id, 2, LONG, LONG).0, 2);
    }
    // Both slots are handed to the heavy one, whose caller has left: its
    // `LEAVE` gives them back, and both light waiters fit.
    assert_eq!(leases.release_script(&[1, 2], Some(400)), 2);
    assert!(next_message(&mut subscriber).starts_with(&format!("H {} ", lease(2010))));
    assert_eq!(leases.leave(2010), 1);
    assert_eq!(next_message(&mut subscriber), named(&[11, 12]));
    // Granted, 11 leaves room behind it: 12 is named again (its check may
    // have run first and been refused).
    assert_eq!(leases.wait(11, 2, LONG, LONG).0, 1);
    assert_eq!(next_message(&mut subscriber), named(&[12]));
    assert_eq!(leases.wait(12, 2, LONG, LONG).0, 1);
    // One unit free again, a heavy waiter first in line blocks a light one
    // behind it; shed on its next call, it names the light one.
    assert_eq!(leases.release_script(&[11], Some(400)), 1);
    assert_eq!(leases.wait(3010, 3, LONG, LONG).0, 2);
    assert_eq!(leases.wait(13, 2, LONG, LONG).0, 2, "behind a heavier waiter");
    assert_eq!(leases.wait(3010, 3, LONG, 1).0, 0, "shed: it cannot wait long enough");
    assert_eq!(next_message(&mut subscriber), named(&[13]));
    assert_eq!(leases.wait(13, 2, LONG, LONG).0, 1);
    // A compensation of a lease no caller got names the waiter it lets in.
    assert_eq!(leases.wait(14, 2, LONG, LONG).0, 2);
    leases.compensate(12, 0);
    assert_eq!(next_message(&mut subscriber), named(&[14]));
}

#[test]
fn the_waiters_named_are_counted_without_expired_leases_or_dead_waiters() {
    // An outside review's findings: counted with an expired lease, no
    // waiter fit and nothing was published; a dead waiter at the head was
    // named in place of the live one behind it.
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "pruned");
    let mut subscriber = server.client();
    subscriber.call(&[b"SSUBSCRIBE", &leases.keys.wake_channel()]).unwrap();
    assert!(leases.granted(1, 1, 100));
    assert_eq!(leases.wait(10, 1, LONG, LONG).0, 2);
    assert_eq!(leases.wait(11, 1, LONG, LONG).0, 2);
    std::thread::sleep(Duration::from_millis(150)); // lease 1 expires, unpruned
    assert_eq!(leases.leave(11), 1);
    assert_eq!(next_message(&mut subscriber), named(&[10]));
    assert_eq!(leases.wait(10, 1, LONG, LONG).0, 1);
    // 20 stops calling and dies at the head; 21 behind it lives.
    assert_eq!(leases.wait(20, 1, 100, LONG).0, 2);
    assert_eq!(leases.wait(21, 1, LONG, LONG).0, 2);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(leases.leave(10), 1, "10 gives its slot back");
    assert_eq!(next_message(&mut subscriber), named(&[21]));
}

#[test]
fn a_waiter_named_with_others_and_refused_is_named_again_when_the_one_ahead_is_granted() {
    // Named together, a waiter under a higher limit that checks first is
    // refused the units the one ahead (under a lower limit) is owed; that
    // one's grant names it again.
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "order");
    let mut subscriber = server.client();
    subscriber.call(&[b"SSUBSCRIBE", &leases.keys.wake_channel()]).unwrap();
    for id in 1..=4 {
        assert!(leases.granted(id, 10, LONG));
    }
    assert_eq!(leases.wait(7010, 10, LONG, LONG).0, 2, "7 units: no room");
    assert_eq!(leases.wait(20, 5, LONG, LONG).0, 2);
    assert_eq!(leases.wait(21, 10, LONG, LONG).0, 2);
    assert_eq!(leases.leave(7010), 1);
    assert_eq!(next_message(&mut subscriber), named(&[20, 21]));
    assert_eq!(leases.wait(21, 10, LONG, LONG).0, 2, "20 is owed the fifth unit");
    assert_eq!(leases.wait(20, 5, LONG, LONG).0, 1);
    assert_eq!(next_message(&mut subscriber), named(&[21]));
    assert_eq!(leases.wait(21, 10, LONG, LONG).0, 1);
}

// ---- weighted leases --------------------------------------------------------

#[test]
fn weighted_leases_take_their_units_all_or_nothing_and_mixed_weights_share_the_limit() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "weights");
    // Limit 5: a weight-3 lease, then a weight-1 lease (4 units held).
    assert!(leases.granted(3001, 5, LONG));
    assert_eq!(leases.live(), 3, "three units");
    assert!(leases.granted(1, 5, LONG));
    // A weight-2 lease would make 6: refused, and nothing of it is taken.
    assert!(!leases.granted(2002, 5, LONG));
    assert_eq!(leases.live(), 4, "all or nothing");
    assert!(leases.granted(2, 5, LONG), "the last unit is still free");
    // A weight above the limit is never granted.
    assert!(!leases.granted(6003, 5, LONG));
    // Re-acquiring a live weighted id takes nothing more.
    assert!(leases.granted(3001, 5, LONG));
    assert_eq!(leases.live(), 5);
}

#[test]
fn a_weighted_release_gives_back_exactly_its_own_units_and_never_more() {
    // Redisson #6664 / #6687 / #6343: a multi-permit release freeing another
    // holder's permits, or releasing more than it took.
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "over-release");
    assert!(leases.granted(3001, 6, LONG));
    assert!(leases.granted(3002, 6, LONG));
    assert_eq!(leases.live(), 6);
    assert_eq!(leases.release_script(&[3001], Some(5)), 3, "its three units");
    assert_eq!(leases.live(), 3, "the other holder's three stay");
    assert_eq!(
        leases.release_script(&[3001], Some(5)),
        0,
        "a second release frees nothing"
    );
    assert_eq!(leases.release(3001), 0, "nor does a plain ZREM of its units");
    assert_eq!(leases.live(), 3);
    assert!(leases.expiry(3002).is_some());
    // Mixed weights released in one call.
    assert!(leases.granted(1, 6, LONG));
    assert!(leases.granted(2005, 6, LONG));
    assert_eq!(leases.release_script(&[1, 2005, 3002], Some(5)), 6);
    assert_eq!(leases.live(), 0);
}

#[test]
fn renewal_keeps_every_unit_and_expired_units_are_reclaimed_and_counted() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "weighted-expiry");
    assert!(leases.granted(4001, 5, 300));
    assert!(leases.granted(1, 5, LONG));
    assert_eq!(leases.renew(4001, 300), 1);
    let units: Vec<Vec<u8>> = inflight_core::lease_id::units(&lease(4001).to_bytes()).collect();
    let scores: Vec<Frame> = units
        .iter()
        .map(|unit| leases.client.call(&[b"ZSCORE", leases.keys.leases(), unit]).unwrap())
        .collect();
    assert!(
        scores.iter().all(|score| *score == scores[0]),
        "one expiry for all units: {scores:?}"
    );
    std::thread::sleep(Duration::from_millis(350));
    // The dead holder's four units are pruned by the next acquire, which
    // says so, and their room is free again.
    assert!(leases.granted(4002, 5, LONG));
    assert_eq!(leases.reclaimed, 4, "the prune reports the units it removed");
    assert_eq!(leases.live(), 5);
    assert!(leases.granted(1, 5, LONG));
    assert_eq!(leases.reclaimed, 0);
}

#[test]
fn a_heavy_waiter_is_served_in_its_turn_and_not_overtaken_by_lighter_ones() {
    let server = RedisServer::start();
    let mut leases = Leases::new(&server, "weighted-queue");
    assert!(leases.granted(1, 4, LONG));
    assert!(leases.granted(2, 4, LONG));
    assert!(leases.granted(3, 4, LONG));
    // One unit free: a weight-3 waiter queues, needing 2 more units.
    assert_eq!(leases.wait(3010, 4, LONG, LONG), (2, 2, 0));
    // A weight-1 waiter behind it fits the free unit by count, but the
    // heavy one came first: it waits too (FIFO, no barging).
    assert_eq!(leases.wait(11, 4, LONG, LONG).0, 2);
    // And a fail-fast newcomer of weight 1 is refused: the free unit is owed.
    assert!(!leases.granted(12, 4, LONG));
    // One release frees a second unit: still not enough for the head.
    assert_eq!(leases.release_script(&[1], Some(10)), 1);
    assert_eq!(leases.queued().len(), 2, "nobody served yet");
    // The next makes three: the head is handed its three units (the light
    // waiter behind it stays queued: nothing is left).
    assert_eq!(leases.release_script(&[2], Some(10)), 1);
    assert_eq!(leases.queued(), vec![id(11)]);
    assert_eq!(leases.live(), 4, "three handed over, plus lease 3");
    assert!(leases.expiry(3010).is_some());
}

// ---- what only eviction or another writer leaves ---------------------------

/// Subject `s` under `prefix`, its scripts loaded, its one slot (limit 1)
/// held by `holder`.
fn held_once(server: &RedisServer, prefix: &str) -> (RespClient, inflight_tests::subject::Subject) {
    let mut redis = server.client();
    let subject = inflight_tests::subject::Subject::new(prefix, "s");
    subject.load(&mut redis);
    assert_eq!(subject.acquire(&mut redis, "holder", 1, LONG).status, 1);
    (redis, subject)
}

/// A queue entry with no expiry beside it in the waiters' set has no waiter
/// to confirm a hand-over: `RELEASE` takes it out of the queue and serves it
/// nothing, where it used to fail on it (after its removal), every time,
/// while the entry blocked the queue.
#[test]
fn a_queue_entry_without_a_waiter_leaves_the_queue_instead_of_failing_every_release() {
    let server = RedisServer::start();
    let (mut redis, subject) = held_once(&server, "orphan");
    let (queue, holds) = (subject.keys.queue(), subject.keys.holds());
    redis.call(&[b"ZADD", &queue, b"1", b"orphan"]).unwrap();
    redis.call(&[b"PEXPIRE", &queue, b"20000"]).unwrap();
    redis.call(&[b"HSET", &holds, b"limit", b"1", b"orphan", b"1"]).unwrap();
    redis.call(&[b"PEXPIRE", &holds, b"20000"]).unwrap();
    assert_eq!(subject.release(&mut redis, &["holder"]), 1);
    assert!(subject.queue(&mut redis).is_empty(), "the orphan left the queue");
    assert_eq!(subject.score(&mut redis, "orphan"), None, "and holds nothing");
    // The slot is free for the next caller.
    assert_eq!(subject.acquire(&mut redis, "next", 1, LONG).status, 1);
}

/// Every key a script writes expires: the held hash `RELEASE` creates to
/// keep the hold time gets one even beside a queue without an expiry (only
/// another writer leaves one; a queue in its last millisecond reads the
/// same way to the script: no time left).
#[test]
fn the_held_hash_a_release_creates_expires_whatever_the_queue_says() {
    let server = RedisServer::start();
    let (mut redis, subject) = held_once(&server, "persisted");
    assert_eq!(subject.wait(&mut redis, "waiter", 1, LONG, 5_000).status, 2);
    let (queue, holds) = (subject.keys.queue(), subject.keys.holds());
    redis.call(&[b"PERSIST", &queue]).unwrap();
    redis.call(&[b"DEL", &holds]).unwrap();
    assert_eq!(subject.release(&mut redis, &["holder"]), 1);
    let pttl = inflight_tests::subject::Subject::pttl(&mut redis, &holds);
    assert!(pttl > 0 || pttl == -2, "the held hash expires: PTTL {pttl}");
}
