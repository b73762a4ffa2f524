//! What each request puts on the wire. Every command the client sends is
//! written here, through [`Connection::send`], and nowhere else.

use std::time::Instant;

use bytes::BytesMut;

use super::connection::Connection;
use super::names::Names;
use super::recovery::RecoveryKeys;
use super::request::{AcquireOp, Call, HandOver, Reading, Request, Step};
use crate::config::Config;
use crate::event::ConnectionId;
use crate::key::SubjectKeys;
use crate::lease_id::units;
use crate::resp::encode_command;
use crate::scripts::{Eval, LeaseCall, Scripts, WaitArgs};

/// What commands are written with, besides the request itself.
pub(super) struct Wire<'a> {
    pub(super) config: &'a Config,
    pub(super) scripts: &'a Scripts,
    /// The recovery hold key the acquire scripts check (empty: none).
    pub(super) hold: &'a [u8],
    /// The lease-data marker's key.
    pub(super) marker: &'a [u8],
    /// The client's entropy: with the connection written on, what the
    /// marker is set to if it is missing (see [`marker_value`]).
    pub(super) entropy: &'a [u8; 16],
}

impl<'a> Wire<'a> {
    /// What the client writes with: its settings, the shared scripts, the
    /// recovery keys and its entropy.
    pub(super) fn new(config: &'a Config, keys: &'a RecoveryKeys, names: &'a Names) -> Self {
        Self {
            config,
            scripts: Scripts::shared(),
            hold: &keys.hold,
            marker: &keys.marker,
            entropy: names.entropy(),
        }
    }
}

impl Request {
    /// Appends this request's command, written on `connection`, to `out`.
    fn encode(&self, wire: &Wire, connection: ConnectionId, out: &mut BytesMut) {
        let scripts = wire.scripts;
        match self {
            Request::Handshake(step) => encode_step(*step, wire, connection, out),
            Request::Reload(kind) => scripts.encode_load(out, *kind),
            Request::Acquire(op) => encode_acquire(op, wire, out),
            Request::AcquireMany(ops) => encode_acquire_many(ops, wire, out),
            Request::AcquireAcross(ops) => {
                let calls: Vec<_> = ops
                    .iter()
                    .map(|op| (lease_call(&op.call, op.fenced), op.limit.get()))
                    .collect();
                scripts.encode_acquire_across(out, &calls, wire.hold)
            }
            Request::AcquireAll(bundle) => {
                let calls: Vec<_> = bundle
                    .parts()
                    .iter()
                    .map(|op| (lease_call(&op.call, op.fenced), op.limit.get()))
                    .collect();
                scripts.encode_acquire_all(out, bundle.call().eval, &calls, wire.hold)
            }
            Request::Reassert(job) => {
                let call = LeaseCall {
                    keys: &job.keys,
                    id: &job.lease_bytes,
                    expiry_ms: job.expiry_ms,
                    valid_until_ms: job.valid_until_ms,
                    fenced: false,
                };
                scripts.encode_reassert(out, call, job.limit.get())
            }
            // The same script as any release: the ids leave the queue too,
            // and while the hold lasts it hands over no more than it frees.
            Request::ReleaseAgain(keys, leases) => {
                let ids: Vec<Vec<u8>> = leases.iter().map(|lease| lease.to_bytes()).collect();
                scripts.encode_release(out, keys, Eval::Text, None, wire.hold, ids.iter().map(|id| &id[..]));
            }
            Request::Renew(op) => scripts.encode_renew(out, op.call.eval, lease_call(&op.call, false)),
            Request::Inspect(op) => match &op.reading {
                Reading::Subject { holders } => scripts.encode_inspect(out, &op.call.keys, *holders),
                Reading::Keys { cursor, count, pattern } => {
                    let (cursor, count) = (cursor.to_string(), count.to_string());
                    encode_command(
                        out,
                        &[
                            b"SCAN",
                            cursor.as_bytes(),
                            b"MATCH",
                            pattern,
                            b"COUNT",
                            count.as_bytes(),
                            b"TYPE",
                            b"zset",
                        ],
                    )
                }
            },
            Request::Release(job) => encode_removal(&job.keys, [&job.lease_bytes[..]], out),
            Request::ReleaseMany(jobs) => {
                encode_removal(&jobs[0].keys, jobs.iter().map(|job| &job.lease_bytes[..]), out)
            }
            Request::ReleaseToWaiters(jobs) => encode_hand_over(&HandOver::after(jobs), wire, out),
            Request::QueueCheck(hand_overs) => {
                let queues: Vec<_> = hand_overs.iter().map(|hand_over| hand_over.keys.queue()).collect();
                let args: Vec<&[u8]> = std::iter::once(&b"EXISTS"[..])
                    .chain(queues.iter().map(|q| &q[..]))
                    .collect();
                encode_command(out, &args);
            }
            Request::HandOver(hand_over) => encode_hand_over(hand_over, wire, out),
            Request::Compensate(job, tombstone_until_ms) => {
                scripts.encode_compensate(out, job.eval, &job.keys, &job.lease_bytes, *tombstone_until_ms)
            }
            Request::Asking => encode_command(out, &[b"ASKING"]),
            Request::Probe => encode_command(out, &[b"PING"]),
            Request::Leave(keys, lease, _) => scripts.encode_leave(out, keys, lease),
            Request::Wait => {
                let acks = wire.config.replica_acks.expect("WAIT is sent only with replica_acks");
                let (replicas, timeout) = (acks.replicas.to_string(), acks.timeout.as_millis().to_string());
                encode_command(out, &[b"WAIT", replicas.as_bytes(), timeout.as_bytes()])
            }
        }
    }
}

/// The script arguments of `call`; `fenced`: an acquire that draws a
/// fencing token (renewals and write-backs keep theirs).
fn lease_call(call: &Call, fenced: bool) -> LeaseCall<'_> {
    LeaseCall {
        keys: &call.keys,
        id: &call.lease_bytes,
        expiry_ms: call.expiry_ms,
        valid_until_ms: call.valid_until_ms,
        fenced,
    }
}

fn encode_step(step: Step, wire: &Wire, connection: ConnectionId, out: &mut BytesMut) {
    let (config, scripts) = (wire.config, wire.scripts);
    match step {
        Step::Auth => {
            let credentials = config.credentials.as_ref().expect("AUTH is sent only with credentials");
            let password = credentials.password.as_bytes();
            match &credentials.username {
                Some(user) => encode_command(out, &[b"AUTH", user.as_bytes(), password]),
                None => encode_command(out, &[b"AUTH", password]),
            }
        }
        Step::Select => encode_command(out, &[b"SELECT", config.database.to_string().as_bytes()]),
        Step::Ping => encode_command(out, &[b"PING"]),
        Step::Role => encode_command(out, &[b"ROLE"]),
        // The default sections: server (run id), memory (eviction),
        // replication, cluster.
        Step::Info => encode_command(out, &[b"INFO"]),
        Step::Marker => {
            let value = marker_value(wire.entropy, connection);
            scripts.encode_mark(out, wire.marker, value.as_bytes())
        }
        Step::Hold => {
            let window = config.recovery_window().unwrap_or_default().as_millis();
            scripts.encode_hold(out, wire.hold, u64::try_from(window).unwrap_or(u64::MAX))
        }
        Step::Shards => encode_command(out, &[b"CLUSTER", b"SHARDS"]),
        Step::Slots => encode_command(out, &[b"CLUSTER", b"SLOTS"]),
        Step::Time => encode_command(out, &[b"TIME"]),
        Step::Load(kind) => scripts.encode_load(out, kind),
    }
}

fn encode_acquire(op: &AcquireOp, wire: &Wire, out: &mut BytesMut) {
    // A waiting acquire adds its lifetime and patience (and the id it went
    // on from, once).
    let wait = op.wait.as_ref().map(|wait| WaitArgs {
        lifetime_ms: u64::try_from(wire.config.waiter_lifetime().as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
        patience_ms: wait.patience_ms,
        previous: wait.previous.as_deref().unwrap_or_default(),
    });
    let call = &op.call;
    wire.scripts.encode_acquire(
        out,
        call.eval,
        lease_call(call, op.fenced),
        op.limit.get(),
        wire.hold,
        wait,
    )
}

fn encode_acquire_many(ops: &[AcquireOp], wire: &Wire, out: &mut BytesMut) {
    let ids: Vec<&[u8]> = ops.iter().map(|op| &op.call.lease_bytes[..]).collect();
    // One deadline and one expiry for the batch: the earliest of its
    // members'.
    let valid_until = ops.iter().map(|op| op.call.valid_until_ms).min().unwrap_or(0);
    let expiry = ops.iter().map(|op| op.call.expiry_ms).min().unwrap_or(1);
    wire.scripts.encode_acquire_many(
        out,
        &ops[0].call.keys,
        &ids,
        expiry,
        ops[0].limit.get(),
        valid_until,
        wire.hold,
    );
}

/// `RELEASE` of a subject's ids: removes them, and hands what is free to
/// its waiters.
fn encode_hand_over(hand_over: &HandOver, wire: &Wire, out: &mut BytesMut) {
    let ids = hand_over.ids.iter().map(|id| &id[..]);
    let (keys, eval, held) = (&hand_over.keys, hand_over.eval, hand_over.held_ms);
    wire.scripts.encode_release(out, keys, eval, Some(held), wire.hold, ids)
}

/// A release: a plain `ZREM` of leases of one subject, every unit of each
/// (see `lease_id::units`), so a weighted lease goes whole.
fn encode_removal<'a>(keys: &SubjectKeys, ids: impl IntoIterator<Item = &'a [u8]>, out: &mut BytesMut) {
    let units: Vec<Vec<u8>> = ids.into_iter().flat_map(units).collect();
    let mut command: Vec<&[u8]> = Vec::with_capacity(2 + units.len());
    command.extend([b"ZREM".as_slice(), keys.leases()]);
    command.extend(units.iter().map(Vec::as_slice));
    encode_command(out, &command);
}

impl Connection {
    /// Writes `request` here; its reply is due by `deadline`.
    pub(super) fn send(&mut self, request: Request, deadline: Instant, wire: &Wire) {
        let connection = self.id();
        self.pipeline
            .send(request, deadline, |request, out| request.encode(wire, connection, out));
    }
}

/// A marker value no other client or connection writes: this client's
/// entropy and the connection's number. Unique per connection, so that every
/// client that reconnects to an emptied server finds a value it never saw.
fn marker_value(entropy: &[u8; 16], connection: ConnectionId) -> String {
    let mut value = String::with_capacity(48);
    for byte in entropy {
        value.push_str(&format!("{byte:02x}"));
    }
    value.push_str(&format!(":{}", connection.get()));
    value
}
