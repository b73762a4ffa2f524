//! One subject's scripts, called directly on a real redis-server (or on the
//! model: any [`Wire`]), with every argument in the caller's hands: the
//! tests of how the scripts compose, and the stateful script test, build
//! their sequences from these calls.

use bytes::{Bytes, BytesMut};
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::units;
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{Eval, LeaseCall, ScriptKind, Scripts, WaitArgs};
use inflight_testkit::model::{ModelConnection, RedisModel};

use crate::RespClient;

/// Where commands go: a real server or the model.
pub trait Wire {
    /// Sends one encoded command and reads its reply.
    fn send(&mut self, command: &[u8]) -> Frame;
}

impl Wire for RespClient {
    fn send(&mut self, command: &[u8]) -> Frame {
        self.call_raw(command).expect("redis answers")
    }
}

/// The model as a server, on one connection.
pub struct ModelWire {
    pub model: RedisModel,
    connection: ModelConnection,
}

impl ModelWire {
    pub fn new(model: RedisModel) -> Self {
        Self {
            model,
            connection: ModelConnection::new(),
        }
    }
}

impl Wire for ModelWire {
    fn send(&mut self, command: &[u8]) -> Frame {
        let reply = self
            .model
            .handle(&mut self.connection, command)
            .expect("the model answers");
        let mut reader = ReplyReader::new(ReplyLimits {
            max_frame_bytes: 1 << 22,
            ..ReplyLimits::default()
        });
        reader.push(&reply);
        reader.next_frame().expect("a valid reply").expect("one whole reply")
    }
}

/// What an acquire script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: i64,
    pub token: i64,
    /// `ACQUIRE_WAITING`'s units ahead and expected wait (0 otherwise).
    pub ahead: i64,
    pub expected: i64,
}

/// A subject's keys, its scripts and a recovery hold key, for calls by hand.
pub struct Subject {
    pub keys: SubjectKeys,
    pub scripts: Scripts,
    /// The recovery hold key the acquires and releases check (empty: none).
    pub hold: Vec<u8>,
    /// The prefix every key of this subject (and its hold) starts with.
    pub prefix: String,
    /// Fail-fast acquires draw a fencing token (on unless set off).
    pub fenced: bool,
}

impl Subject {
    /// Subject `name` under key prefix `prefix`; its hold key is
    /// `{prefix}:recovery`, as the client names it.
    pub fn new(prefix: &str, name: &str) -> Self {
        Self::with_scripts(prefix, name, Scripts::default())
    }

    /// As [`Subject::new`], running `scripts` (see `mutations`).
    pub fn with_scripts(prefix: &str, name: &str, scripts: Scripts) -> Self {
        Self {
            keys: SubjectKeys::new(prefix, &Key::new("t", name).unwrap()),
            scripts,
            hold: format!("{prefix}:recovery").into_bytes(),
            prefix: prefix.to_string(),
            fenced: true,
        }
    }

    /// Loads every script (`SCRIPT LOAD`).
    pub fn load(&self, wire: &mut impl Wire) {
        for kind in ScriptKind::LOADED {
            let mut out = BytesMut::new();
            self.scripts.encode_load(&mut out, kind);
            wire.send(&out);
        }
    }

    /// The server's clock in ms (`TIME`).
    pub fn now(wire: &mut impl Wire) -> u64 {
        let mut out = BytesMut::new();
        encode_command(&mut out, &[b"TIME"]);
        match wire.send(&out) {
            Frame::Array(parts) => match &parts[..] {
                [Frame::BulkString(s), Frame::BulkString(us)] => {
                    let number = |b: &[u8]| std::str::from_utf8(b).unwrap().parse::<u64>().unwrap();
                    number(s) * 1000 + number(us) / 1000
                }
                other => panic!("TIME: {other:?}"),
            },
            other => panic!("TIME: {other:?}"),
        }
    }

    fn call<'a>(&'a self, id: &'a str, expiry_ms: u64, valid_until_ms: u64) -> LeaseCall<'a> {
        LeaseCall {
            keys: &self.keys,
            id: id.as_bytes(),
            expiry_ms,
            valid_until_ms,
            fenced: self.fenced,
        }
    }

    /// `ACQUIRE` (or, with `wait`, `ACQUIRE_WAITING`) of `id` under `limit`.
    pub fn encode_acquire(
        &self,
        id: &str,
        limit: u32,
        expiry_ms: u64,
        valid_until_ms: u64,
        wait: Option<WaitArgs>,
    ) -> Bytes {
        let mut out = BytesMut::new();
        let call = self.call(id, expiry_ms, valid_until_ms);
        self.scripts
            .encode_acquire(&mut out, Eval::Sha, call, limit, &self.hold, wait);
        out.freeze()
    }

    pub fn encode_acquire_many(&self, ids: &[&str], limit: u32, expiry_ms: u64, valid_until_ms: u64) -> Bytes {
        let mut out = BytesMut::new();
        let ids: Vec<&[u8]> = ids.iter().map(|id| id.as_bytes()).collect();
        self.scripts
            .encode_acquire_many(&mut out, &self.keys, &ids, expiry_ms, limit, valid_until_ms, &self.hold);
        out.freeze()
    }

    /// `ACQUIRE_ACROSS` of `(id, limit)` pairs of this subject, with one
    /// expiry and valid-until.
    pub fn encode_acquire_across(&self, acquires: &[(&str, u32)], expiry_ms: u64, valid_until_ms: u64) -> Bytes {
        let mut out = BytesMut::new();
        let calls: Vec<(LeaseCall, u32)> = acquires
            .iter()
            .map(|(id, limit)| (self.call(id, expiry_ms, valid_until_ms), *limit))
            .collect();
        self.scripts.encode_acquire_across(&mut out, &calls, &self.hold);
        out.freeze()
    }

    pub fn encode_release(&self, ids: &[&str], held_ms: Option<u64>) -> Bytes {
        let mut out = BytesMut::new();
        let ids = ids.iter().map(|id| id.as_bytes());
        self.scripts
            .encode_release(&mut out, &self.keys, Eval::Sha, held_ms, &self.hold, ids);
        out.freeze()
    }

    /// A release as the client sends it: a plain `ZREM` of every unit of
    /// `ids` (then [`Subject::encode_queue_check`], and `RELEASE` of the same
    /// ids only if the queue exists).
    pub fn encode_removal(&self, ids: &[&str]) -> Bytes {
        let units: Vec<Vec<u8>> = ids.iter().flat_map(|id| units(id.as_bytes())).collect();
        let mut command: Vec<&[u8]> = vec![b"ZREM", self.keys.leases()];
        command.extend(units.iter().map(Vec::as_slice));
        let mut out = BytesMut::new();
        encode_command(&mut out, &command);
        out.freeze()
    }

    /// `EXISTS` of the subject's wait queue.
    pub fn encode_queue_check(&self) -> Bytes {
        let mut out = BytesMut::new();
        encode_command(&mut out, &[b"EXISTS", &self.keys.queue()]);
        out.freeze()
    }

    pub fn encode_compensate(&self, id: &str, tombstone_until_ms: u64) -> Bytes {
        let mut out = BytesMut::new();
        self.scripts
            .encode_compensate(&mut out, Eval::Sha, &self.keys, id.as_bytes(), tombstone_until_ms);
        out.freeze()
    }

    pub fn encode_leave(&self, id: &str) -> Bytes {
        let mut out = BytesMut::new();
        self.scripts.encode_leave(&mut out, &self.keys, id.as_bytes());
        out.freeze()
    }

    pub fn encode_renew(&self, id: &str, expiry_ms: u64, valid_until_ms: u64) -> Bytes {
        let mut out = BytesMut::new();
        self.scripts
            .encode_renew(&mut out, Eval::Sha, self.call(id, expiry_ms, valid_until_ms));
        out.freeze()
    }

    pub fn encode_reassert(&self, id: &str, limit: u32, expiry_ms: u64, valid_until_ms: u64) -> Bytes {
        let mut out = BytesMut::new();
        self.scripts
            .encode_reassert(&mut out, self.call(id, expiry_ms, valid_until_ms), limit);
        out.freeze()
    }

    pub fn encode_hold(&self, window_ms: u64) -> Bytes {
        let mut out = BytesMut::new();
        self.scripts.encode_hold(&mut out, &self.hold, window_ms);
        out.freeze()
    }

    pub fn encode_inspect(&self, holders: u32) -> Bytes {
        let mut out = BytesMut::new();
        self.scripts.encode_inspect(&mut out, &self.keys, holders);
        out.freeze()
    }

    // ---- calls that send and read -----------------------------------------

    /// A fail-fast acquire valid for an hour, its lease `ttl_ms` long.
    pub fn acquire(&self, wire: &mut impl Wire, id: &str, limit: u32, ttl_ms: u64) -> Answer {
        let now = Self::now(wire);
        answer(wire.send(&self.encode_acquire(id, limit, now + ttl_ms, now + 3_600_000, None)))
    }

    /// A waiting acquire (first call or a check again) valid for an hour.
    pub fn wait(&self, wire: &mut impl Wire, id: &str, limit: u32, ttl_ms: u64, lifetime_ms: u64) -> Answer {
        self.wait_going_on_from(wire, id, "", limit, ttl_ms, lifetime_ms)
    }

    /// [`Subject::wait`] by a waiter that went on under `id` from
    /// `previous` (empty for none): it takes over what `previous` has.
    pub fn wait_going_on_from(
        &self,
        wire: &mut impl Wire,
        id: &str,
        previous: &str,
        limit: u32,
        ttl_ms: u64,
        lifetime_ms: u64,
    ) -> Answer {
        let now = Self::now(wire);
        let wait = WaitArgs {
            lifetime_ms,
            patience_ms: 3_600_000,
            previous: previous.as_bytes(),
        };
        answer(wire.send(&self.encode_acquire(id, limit, now + ttl_ms, now + 3_600_000, Some(wait))))
    }

    /// `RELEASE` of `ids`: the units removed.
    pub fn release(&self, wire: &mut impl Wire, ids: &[&str]) -> i64 {
        match wire.send(&self.encode_release(ids, Some(10))) {
            Frame::Integer(n) => n,
            other => panic!("RELEASE: {other:?}"),
        }
    }

    /// `REASSERT` of `id` until `expiry_ms`, valid until `valid_until_ms`.
    pub fn reassert(&self, wire: &mut impl Wire, id: &str, limit: u32, expiry_ms: u64, valid_until_ms: u64) -> i64 {
        match wire.send(&self.encode_reassert(id, limit, expiry_ms, valid_until_ms)) {
            Frame::Array(items) => match &items[..] {
                [Frame::Integer(status), Frame::BulkString(echo)] if &echo[..] == id.as_bytes() => *status,
                other => panic!("REASSERT: {other:?}"),
            },
            other => panic!("REASSERT: {other:?}"),
        }
    }

    /// The recovery hold for `window_ms`.
    pub fn hold_for(&self, wire: &mut impl Wire, window_ms: u64) {
        wire.send(&self.encode_hold(window_ms));
    }

    /// A lease's score (its expiry), if its id is in the lease set.
    pub fn score(&self, wire: &mut impl Wire, id: &str) -> Option<u64> {
        match command(wire, &[b"ZSCORE", self.keys.leases(), id.as_bytes()]) {
            Frame::BulkString(score) => Some(std::str::from_utf8(&score).unwrap().parse().unwrap()),
            Frame::Null => None,
            other => panic!("ZSCORE: {other:?}"),
        }
    }

    /// The ids in the wait queue, in order.
    pub fn queue(&self, wire: &mut impl Wire) -> Vec<String> {
        strings(command(wire, &[b"ZRANGE", &self.keys.queue(), b"0", b"-1"]))
    }

    /// Units live in the lease set now (score after the server's clock).
    pub fn units(&self, wire: &mut impl Wire) -> i64 {
        let now = format!("({}", Self::now(wire));
        match command(wire, &[b"ZCOUNT", self.keys.leases(), now.as_bytes(), b"+inf"]) {
            Frame::Integer(n) => n,
            other => panic!("ZCOUNT: {other:?}"),
        }
    }

    /// `PTTL` of one key.
    pub fn pttl(wire: &mut impl Wire, key: &[u8]) -> i64 {
        match command(wire, &[b"PTTL", key]) {
            Frame::Integer(n) => n,
            other => panic!("PTTL: {other:?}"),
        }
    }
}

/// Sends one command.
pub fn command(wire: &mut impl Wire, args: &[&[u8]]) -> Frame {
    let mut out = BytesMut::new();
    encode_command(&mut out, args);
    wire.send(&out)
}

/// The strings of an array reply.
pub fn strings(frame: Frame) -> Vec<String> {
    match frame {
        Frame::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Frame::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// An acquire script's reply: `{status, id, token, reclaimed}` or, waiting,
/// `{status, id, token, ahead, expected, reclaimed}`.
pub fn answer(frame: Frame) -> Answer {
    match &frame {
        Frame::Array(items) => match &items[..] {
            [Frame::Integer(status), Frame::BulkString(_), Frame::Integer(token), Frame::Integer(_)] => Answer {
                status: *status,
                token: *token,
                ahead: 0,
                expected: 0,
            },
            [Frame::Integer(status), Frame::BulkString(_), Frame::Integer(token), Frame::Integer(ahead), Frame::Integer(expected), Frame::Integer(_)] => {
                Answer {
                    status: *status,
                    token: *token,
                    ahead: *ahead,
                    expected: *expected,
                }
            }
            _ => panic!("not an acquire reply: {frame:?}"),
        },
        _ => panic!("not an acquire reply: {frame:?}"),
    }
}

/// A subject's data at one moment: what a lagging replica would hold. Every
/// key under the subject's prefix with its `DUMP` and absolute expiry.
#[derive(Clone, Debug, Default)]
pub struct Snapshot(Vec<(Bytes, Bytes, i64)>);

impl Snapshot {
    /// The keys taken, each with its absolute expiry (`None`: none).
    pub fn expiries(&self) -> Vec<(Bytes, Option<u64>)> {
        self.0
            .iter()
            .map(|(key, _, at)| (key.clone(), u64::try_from(*at).ok()))
            .collect()
    }
}

impl Subject {
    /// Every key under this subject's prefix (its keys and its hold).
    pub fn all_keys(&self, wire: &mut impl Wire) -> Vec<Bytes> {
        let pattern = format!("{}:*", self.prefix);
        match command(wire, &[b"KEYS", pattern.as_bytes()]) {
            Frame::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Frame::BulkString(b) => b,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("KEYS: {other:?}"),
        }
    }

    /// The keys as they are now (`DUMP`, `PEXPIRETIME`).
    pub fn snapshot(&self, wire: &mut impl Wire) -> Snapshot {
        let mut taken = Vec::new();
        for key in self.all_keys(wire) {
            let Frame::BulkString(data) = command(wire, &[b"DUMP", &key]) else {
                continue; // expired meanwhile
            };
            let at = match command(wire, &[b"PEXPIRETIME", &key]) {
                Frame::Integer(-2) => continue, // expired since its DUMP
                Frame::Integer(at) => at,
                other => panic!("PEXPIRETIME: {other:?}"),
            };
            taken.push((key, data, at));
        }
        Snapshot(taken)
    }

    /// Puts back only `keys` as `snapshot` had them (dropping them if it
    /// had none).
    pub fn restore_only(&self, wire: &mut impl Wire, snapshot: &Snapshot, keys: &[Bytes]) {
        for key in keys {
            command(wire, &[b"DEL", key]);
        }
        for (key, data, at) in snapshot.0.iter().filter(|(key, _, _)| keys.contains(key)) {
            let ttl = if *at < 0 { "0".to_string() } else { at.to_string() };
            command(wire, &[b"RESTORE", key, ttl.as_bytes(), data, b"REPLACE", b"ABSTTL"]);
        }
    }

    /// Puts the keys back as `snapshot` had them (each with its absolute
    /// expiry; one past it is gone), and drops every key written since: a
    /// failover to a replica that had received the writes up to then.
    pub fn restore(&self, wire: &mut impl Wire, snapshot: &Snapshot) {
        for key in self.all_keys(wire) {
            command(wire, &[b"DEL", &key]);
        }
        for (key, data, at) in &snapshot.0 {
            let ttl = if *at < 0 { "0".to_string() } else { at.to_string() };
            match command(wire, &[b"RESTORE", key, ttl.as_bytes(), data, b"REPLACE", b"ABSTTL"]) {
                Frame::SimpleString(_) => {}
                other => panic!("RESTORE: {other:?}"),
            }
        }
    }
}
