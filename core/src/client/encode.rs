//! What each request puts on the wire. Every command the client sends is
//! written here, through [`Client::send`], and nowhere else.

use std::time::Instant;

use bytes::BytesMut;

use super::request::{AcquireOp, ReleaseJob, ReleaseKind, Request, Step};
use super::Client;
use crate::config::Config;
use crate::resp::encode_command;
use crate::script::{ScriptKind, Scripts};

impl Request {
    /// Appends this request's command to `out`. `ttl_ms` is the lease TTL in
    /// milliseconds, as the scripts take it.
    fn encode(&self, config: &Config, scripts: &Scripts, ttl_ms: &[u8], out: &mut BytesMut) {
        match self {
            Request::Handshake(step) => encode_step(*step, config, scripts, out),
            Request::Reload(kind) => scripts.encode_load(out, *kind),
            Request::Acquire(op) => encode_acquire(op, scripts, ttl_ms, out),
            Request::AcquireMany(ops) => encode_acquire_many(ops, scripts, ttl_ms, out),
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
            Request::Release(job) => encode_command(out, &[b"ZREM", job.keys.leases(), &job.lease_bytes]),
            Request::ReleaseMany(jobs) => {
                let mut command: Vec<&[u8]> = Vec::with_capacity(2 + jobs.len());
                command.extend([b"ZREM".as_slice(), jobs[0].keys.leases()]);
                command.extend(jobs.iter().map(|job| &job.lease_bytes[..]));
                encode_command(out, &command);
            }
            Request::Compensate(job) => encode_compensate(job, scripts, out),
            Request::Asking => encode_command(out, &[b"ASKING"]),
        }
    }
}

fn encode_step(step: Step, config: &Config, scripts: &Scripts, out: &mut BytesMut) {
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
        Step::ClusterCheck => encode_command(out, &[b"INFO", b"cluster"]),
        Step::Shards => encode_command(out, &[b"CLUSTER", b"SHARDS"]),
        Step::Slots => encode_command(out, &[b"CLUSTER", b"SLOTS"]),
        Step::Time => encode_command(out, &[b"TIME"]),
        Step::Load(kind) => scripts.encode_load(out, kind),
    }
}

fn encode_acquire(op: &AcquireOp, scripts: &Scripts, ttl_ms: &[u8], out: &mut BytesMut) {
    let call = &op.call;
    let tombstone = call.keys.tombstone(&call.lease);
    let limit = op.limit.to_string();
    let valid_until = call.valid_until_ms.to_string();
    scripts.encode_call(
        out,
        ScriptKind::Acquire,
        call.by_text,
        &[call.keys.leases(), &tombstone],
        &[ttl_ms, limit.as_bytes(), &call.lease_bytes, valid_until.as_bytes()],
    );
}

fn encode_acquire_many(ops: &[AcquireOp], scripts: &Scripts, ttl_ms: &[u8], out: &mut BytesMut) {
    let leases = ops[0].call.keys.leases();
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
    scripts.encode_acquire_many(
        out,
        leases,
        &tombstones,
        ttl_ms,
        limit.as_bytes(),
        valid_until.as_bytes(),
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
    scripts.encode_call(
        out,
        ScriptKind::Compensate,
        job.by_text,
        &[job.keys.leases(), &tombstone],
        &[until.as_bytes(), &job.lease_bytes],
    );
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
        let (config, scripts, ttl_ms) = (&self.config, &self.scripts, &self.ttl_ms);
        conn.pipeline.send(request, deadline, |request, out| {
            request.encode(config, scripts, ttl_ms, out)
        });
    }
}
