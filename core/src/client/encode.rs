//! What each request puts on the wire. Every command the client sends is
//! written here, through [`Client::send`], and nowhere else.

use std::time::Instant;

use bytes::BytesMut;

use super::request::{AcquireOp, ReleaseJob, ReleaseKind, Request, Step};
use super::Client;
use crate::config::Config;
use crate::event::ConnectionId;
use crate::key::SubjectKeys;
use crate::lease_id::units;
use crate::resp::encode_command;
use crate::script::{ScriptKind, Scripts};

/// What commands are written with, besides the request itself.
struct Wire<'a> {
    config: &'a Config,
    scripts: &'a Scripts,
    /// The lease TTL in milliseconds, as the scripts take it.
    ttl_ms: &'a [u8],
    /// The recovery hold key the acquire scripts check (empty: none).
    hold: &'a [u8],
    /// The lease-data marker's key.
    marker: &'a [u8],
    /// The client's entropy and the connection written on: what the marker
    /// is set to, if it is missing (see [`marker_value`]).
    entropy: &'a [u8; 16],
    connection: ConnectionId,
}

impl Request {
    /// Appends this request's command to `out`.
    fn encode(&self, wire: &Wire, out: &mut BytesMut) {
        let (scripts, ttl_ms) = (wire.scripts, wire.ttl_ms);
        match self {
            Request::Handshake(step) => encode_step(*step, wire, out),
            Request::Reload(kind) => scripts.encode_load(out, *kind),
            Request::Acquire(op) => encode_acquire(op, wire, out),
            Request::AcquireMany(ops) => encode_acquire_many(ops, wire, out),
            Request::Reassert(job) => {
                let (remaining, limit) = (job.remaining_ms.to_string(), job.limit.to_string());
                scripts.encode_call(
                    out,
                    ScriptKind::Reassert,
                    true,
                    &[job.keys.leases()],
                    &[&job.lease_bytes, remaining.as_bytes(), limit.as_bytes()],
                )
            }
            Request::ReleaseAgain(keys, leases) => {
                let ids: Vec<Vec<u8>> = leases.iter().map(|lease| lease.to_bytes()).collect();
                encode_plain_release(keys, ids.iter().map(|id| &id[..]), out);
            }
            Request::Renew(op) => {
                let call = &op.call;
                let valid_until = call.valid_until_ms.to_string();
                scripts.encode_call(
                    out,
                    ScriptKind::Renew,
                    call.by_text,
                    &[call.keys.leases()],
                    &[ttl_ms, &call.lease_bytes, valid_until.as_bytes()],
                )
            }
            Request::Inspect(op) => {
                let holders = op.holders.to_string();
                let keys = &op.call.keys;
                scripts.encode_call(
                    out,
                    ScriptKind::Inspect,
                    true,
                    &[keys.leases(), &keys.holds()],
                    &[holders.as_bytes()],
                )
            }
            Request::Release(job) => encode_release(std::slice::from_ref(job), scripts, out),
            Request::ReleaseMany(jobs) => encode_release(jobs, scripts, out),
            Request::Compensate(job) => encode_compensate(job, scripts, out),
            Request::Asking => encode_command(out, &[b"ASKING"]),
            Request::Leave(keys, lease, _) => scripts.encode_call(
                out,
                ScriptKind::Leave,
                false,
                &[&keys.queue(), &keys.waiters(), &keys.wake_channel(), keys.leases()],
                &[lease],
            ),
            Request::Wait => {
                let acks = wire.config.replica_acks.expect("WAIT is sent only with replica_acks");
                let (replicas, timeout) = (acks.replicas.to_string(), acks.timeout.as_millis().to_string());
                encode_command(out, &[b"WAIT", replicas.as_bytes(), timeout.as_bytes()])
            }
        }
    }
}

fn encode_step(step: Step, wire: &Wire, out: &mut BytesMut) {
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
        // The default sections: server (run id), replication, cluster.
        Step::Info => encode_command(out, &[b"INFO"]),
        Step::Marker => {
            let value = marker_value(wire.entropy, wire.connection);
            scripts.encode_call(out, ScriptKind::Mark, true, &[wire.marker], &[value.as_bytes()])
        }
        Step::Hold => {
            let window = config
                .recovery_window()
                .unwrap_or_default()
                .as_millis()
                .max(1)
                .to_string();
            scripts.encode_call(out, ScriptKind::Hold, true, &[wire.hold], &[window.as_bytes()])
        }
        Step::Shards => encode_command(out, &[b"CLUSTER", b"SHARDS"]),
        Step::Slots => encode_command(out, &[b"CLUSTER", b"SLOTS"]),
        Step::Time => encode_command(out, &[b"TIME"]),
        Step::Load(kind) => scripts.encode_load(out, kind),
    }
}

fn encode_acquire(op: &AcquireOp, wire: &Wire, out: &mut BytesMut) {
    let call = &op.call;
    let tombstone = call.keys.tombstone(&call.lease);
    let limit = op.limit.to_string();
    let valid_until = call.valid_until_ms.to_string();
    let keys = &call.keys;
    let (fence, queue, waiters) = (keys.fence(), keys.queue(), keys.waiters());
    // A waiting acquire adds the hold statistics key and two arguments
    // (its lifetime and patience) to those of a fail-fast one.
    // (Nothing is rendered for them on the fail-fast path.)
    let (holds, lifetime, patience) = match op.wait {
        Some(wait) => (
            keys.holds(),
            wire.config.waiter_lifetime.as_millis().max(1).to_string(),
            wait.patience_ms.to_string(),
        ),
        None => Default::default(),
    };
    let all_keys: [&[u8]; 6] = [keys.leases(), &tombstone, &fence, &queue, &waiters, &holds];
    let all_args: [&[u8]; 7] = [
        wire.ttl_ms,
        limit.as_bytes(),
        &call.lease_bytes,
        valid_until.as_bytes(),
        wire.hold,
        lifetime.as_bytes(),
        patience.as_bytes(),
    ];
    let (kind, used_keys, used_args) = match op.wait {
        Some(_) => (ScriptKind::AcquireWaiting, 6, 7),
        None => (ScriptKind::Acquire, 5, 5),
    };
    wire.scripts
        .encode_call(out, kind, call.by_text, &all_keys[..used_keys], &all_args[..used_args]);
}

fn encode_acquire_many(ops: &[AcquireOp], wire: &Wire, out: &mut BytesMut) {
    let keys = &ops[0].call.keys;
    let (fence, queue, waiters) = (keys.fence(), keys.queue(), keys.waiters());
    let tombstones: Vec<_> = ops.iter().map(|op| op.call.keys.tombstone(&op.call.lease)).collect();
    let tombstones: Vec<&[u8]> = tombstones.iter().map(|t| &t[..]).collect();
    let ids: Vec<&[u8]> = ops.iter().map(|op| &op.call.lease_bytes[..]).collect();
    let limit = ops[0].limit.to_string();
    // One deadline for the batch: the earliest of its members'.
    let valid_until = ops
        .iter()
        .map(|op| op.call.valid_until_ms)
        .min()
        .unwrap_or(0)
        .to_string();
    wire.scripts.encode_acquire_many(
        out,
        [keys.leases(), &fence, &queue, &waiters],
        &tombstones,
        wire.ttl_ms,
        limit.as_bytes(),
        valid_until.as_bytes(),
        wire.hold,
        &ids,
    );
}

fn encode_compensate(job: &ReleaseJob, scripts: &Scripts, out: &mut BytesMut) {
    let tombstone = job.keys.tombstone(&job.lease);
    let until = match job.kind {
        ReleaseKind::Compensation { tombstone_until_ms } => tombstone_until_ms,
        ReleaseKind::Release => 0,
    };
    let until = until.to_string();
    let keys = &job.keys;
    scripts.encode_call(
        out,
        ScriptKind::Compensate,
        job.by_text,
        &[
            keys.leases(),
            &tombstone,
            &keys.queue(),
            &keys.waiters(),
            &keys.wake_channel(),
        ],
        &[until.as_bytes(), &job.lease_bytes],
    );
}

/// `RELEASE` of leases of one subject: the subject's six keys, the
/// batch's average hold, the ids. Always by `EVALSHA`: a `NOSCRIPT` reply fails the
/// attempt, which is retried once the script is loaded again.
fn encode_release(jobs: &[ReleaseJob], scripts: &Scripts, out: &mut BytesMut) {
    let keys = &jobs[0].keys;
    if jobs[0].plain {
        return encode_plain_release(keys, jobs.iter().map(|job| &job.lease_bytes[..]), out);
    }
    let held = jobs.iter().map(|job| job.held_ms).sum::<u64>() / jobs.len() as u64;
    let ids = jobs.iter().map(|job| &job.lease_bytes[..]);
    scripts.encode_release(out, keys, jobs[0].by_text, held, ids);
}

/// A plain `ZREM` of leases of one subject: every unit of each (see
/// `lease_id::units`), so a weighted lease goes whole.
fn encode_plain_release<'a>(keys: &SubjectKeys, ids: impl Iterator<Item = &'a [u8]>, out: &mut BytesMut) {
    let units: Vec<Vec<u8>> = ids.flat_map(units).collect();
    let mut command: Vec<&[u8]> = Vec::with_capacity(2 + units.len());
    command.extend([b"ZREM".as_slice(), keys.leases()]);
    command.extend(units.iter().map(Vec::as_slice));
    encode_command(out, &command);
}

impl Client {
    /// Writes `request` on `node`, right after an `ASKING` when an `ASK`
    /// redirect sent it there (the flag holds for the next command only).
    pub(super) fn send_asking_if(&mut self, asked: bool, node: usize, request: Request, deadline: Instant) {
        if asked {
            self.send(node, Request::Asking, deadline);
        }
        self.send(node, request, deadline);
    }

    /// Writes `request` on `node`'s current connection; its reply is due by `deadline`.
    pub(super) fn send(&mut self, node: usize, request: Request, deadline: Instant) {
        let conn = self.nodes[node]
            .connection
            .as_mut()
            .expect("sent on the current connection");
        let wire = Wire {
            config: &self.config,
            scripts: &self.scripts,
            ttl_ms: &self.ttl_ms,
            hold: &self.recovery_keys.hold,
            marker: &self.recovery_keys.marker,
            entropy: &self.entropy,
            connection: conn.id(),
        };
        conn.pipeline
            .send(request, deadline, |request, out| request.encode(&wire, out));
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
