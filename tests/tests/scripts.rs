//! The core's Lua scripts, run on a real redis-server through the core's own
//! RESP encoder and decoder.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use inflight_core::key::{hash_tag, Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::Frame;
use inflight_core::script::{ScriptKind, Scripts};
use inflight_tests::{RedisServer, RespClient};

struct Leases {
    client: RespClient,
    scripts: Scripts,
    keys: SubjectKeys,
}

impl Leases {
    fn new(server: &RedisServer, subject: &str) -> Self {
        let mut client = server.client();
        let scripts = Scripts::default();
        for kind in ScriptKind::ALL {
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
        Self { client, scripts, keys }
    }

    fn acquire(&mut self, id: u64, limit: u32, ttl_ms: u64) -> (i64, Bytes) {
        let lease = lease(id);
        let tombstone = self.keys.tombstone(&lease);
        let mut out = BytesMut::new();
        let (ttl, limit, id) = (ttl_ms.to_string(), limit.to_string(), lease.to_string());
        self.scripts.encode_call(
            &mut out,
            ScriptKind::Acquire,
            false,
            &[self.keys.leases(), &tombstone],
            &[ttl.as_bytes(), limit.as_bytes(), id.as_bytes()],
        );
        match self.client.call_raw(&out).unwrap() {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo)] => (*status, echo.clone()),
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

    fn release(&mut self, id: u64) -> i64 {
        let lease = lease(id).to_string();
        match self
            .client
            .call(&[b"ZREM", self.keys.leases(), lease.as_bytes()])
            .unwrap()
        {
            Frame::Integer(n) => n,
            other => panic!("unexpected ZREM reply {other:?}"),
        }
    }

    fn compensate(&mut self, id: u64, tombstone_ttl_ms: u64) {
        let lease = lease(id);
        let tombstone = self.keys.tombstone(&lease);
        let (ttl, id_text) = (tombstone_ttl_ms.to_string(), lease.to_string());
        let mut out = BytesMut::new();
        self.scripts.encode_call(
            &mut out,
            ScriptKind::Compensate,
            false,
            &[self.keys.leases(), &tombstone],
            &[ttl.as_bytes(), id_text.as_bytes()],
        );
        let reply = self.client.call_raw(&out).unwrap();
        assert_eq!(
            reply,
            Frame::BulkString(Bytes::from(id_text)),
            "compensation echoes the id"
        );
    }

    fn renew(&mut self, id: u64, ttl_ms: u64) -> i64 {
        let (ttl, id_text) = (ttl_ms.to_string(), lease(id).to_string());
        let mut out = BytesMut::new();
        self.scripts.encode_call(
            &mut out,
            ScriptKind::Renew,
            false,
            &[self.keys.leases()],
            &[ttl.as_bytes(), id_text.as_bytes()],
        );
        match self.client.call_raw(&out).unwrap() {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo)] if echo[..] == *id_text.as_bytes() => *status,
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

fn lease(n: u64) -> LeaseId {
    LeaseId::from_parts(0xfeed, n)
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
        scripts.encode_call(
            &mut out,
            ScriptKind::Acquire,
            true,
            &[keys.leases(), &tombstone],
            &[b"60000", b"1", id.as_bytes()],
        );
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
    Scripts::default().encode_call(
        &mut out,
        ScriptKind::Acquire,
        false,
        &[keys.leases(), b"t"],
        &[b"1", b"1", b"x"],
    );
    match client.call_raw(&out).unwrap() {
        Frame::Error(message) => assert!(message.starts_with("NOSCRIPT"), "{message}"),
        other => panic!("expected NOSCRIPT, got {other:?}"),
    }
}
