//! What the client puts on a connection: one type per kind of request, over
//! shared records, so that the rules that differ by kind are kept by the
//! types (a renewal is not an acquire, so it can never be compensated).

use std::num::NonZeroU32;
use std::time::Instant;

use bytes::Bytes;

mod bundle;

use super::names::Names;
pub(super) use super::release_job::{HandOver, Ran, ReleaseJob, ReleaseKind};
use crate::event::{Lease, RequestId};
use crate::key::SubjectKeys;
use crate::lease_id::{Label, LeaseId};
use crate::resp::ReplyLimits;
use crate::scripts::{Eval, ScriptKind};
pub(super) use bundle::Bundle;

/// One request in a connection's FIFO, with what its reply means.
#[derive(Debug)]
pub(super) enum Request {
    /// A step of opening the connection.
    Handshake(Step),
    /// `SCRIPT LOAD` again, after a `NOSCRIPT` on a ready connection.
    Reload(ScriptKind),
    Acquire(AcquireOp),
    /// Reads what a subject holds (`INSPECT`), for operators.
    Inspect(InspectOp),
    /// Two or more acquires of one subject and limit, in one script call.
    AcquireMany(Vec<AcquireOp>),
    /// Two or more fail-fast acquires of different subjects (or limits),
    /// each as `ACQUIRE` takes it, in one script call.
    AcquireAcross(Vec<AcquireOp>),
    /// One caller's leases on several subjects, all or nothing (`ACQUIRE_ALL`).
    AcquireAll(Bundle),
    Renew(RenewOp),
    /// An ordinary release: a plain `ZREM` of the lease's units.
    Release(ReleaseJob),
    /// Two or more ordinary releases of one subject, in one `ZREM`.
    ReleaseMany(Vec<ReleaseJob>),
    /// Releases of one subject this client has waiters on, in one `RELEASE`
    /// that hands the freed units over (no queue check, no `HandOver`).
    ReleaseToWaiters(Vec<ReleaseJob>),
    /// After the `ZREM`s of a write: do their subjects have a queue (one
    /// `EXISTS` of them all, in one slot)?
    QueueCheck(Vec<HandOver>),
    /// The subject has one: `RELEASE` of the same ids hands its waiters
    /// what is free. Best effort, as `LEAVE` is.
    HandOver(HandOver),
    /// A release of a lease no caller got: the `COMPENSATE` script, with
    /// its tombstone's end (server ms; 0 for none).
    Compensate(ReleaseJob, u64),
    /// `ASKING`, right before the one command an `ASK` redirect sent here.
    Asking,
    /// Writes back a lease this client holds, after the server lost data:
    /// part of the handshake that found the loss.
    Reassert(Reassert),
    /// Releases again, after a failover, leases whose release Redis had
    /// confirmed lately (the replica may not have had it): one `ZREM` per
    /// subject, part of the handshake that found the loss.
    ReleaseAgain(SubjectKeys, Vec<LeaseId>),
    /// `WAIT replicas timeout` after a write of acquires: the grants read
    /// since the last one are delivered when it answers enough.
    Wait,
    /// `PING` on a connection idle for `idle_probe`: a server that died
    /// without closing it is found by this request's liveness deadline.
    Probe,
    /// Takes a waiter out of its subject's queue (`LEAVE`): its caller is
    /// gone. Best effort: if it is lost, the entry expires on its own.
    /// Until when it matters (the entry has expired on its own by then).
    Leave(SubjectKeys, Bytes, Instant),
}

impl Request {
    /// Whether an `ASK` redirect sent it here, which it answers once:
    /// `ASKING` is written right before it, and the mark is used up.
    pub(super) fn take_ask(&mut self) -> bool {
        match self {
            Request::Acquire(AcquireOp { call, .. })
            | Request::Renew(RenewOp { call, .. })
            | Request::Inspect(InspectOp { call, .. }) => call.ask.take().is_some(),
            Request::AcquireAll(bundle) => bundle.call_mut().ask.take().is_some(),
            _ => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Auth,
    Select,
    Ping,
    /// `ROLE`: a replica is refused (it cannot take writes, or with
    /// `replica-read-only no` takes leases the primary never sees).
    Role,
    /// `INFO`: the server must be in cluster mode exactly when the client
    /// is (a cluster node reached as a standalone server would answer
    /// `MOVED` for most subjects, and the reverse cannot route); its run id
    /// and replication ids tell a restart or a failover from the same server.
    Info,
    /// The lease-data marker (`MARK`, standalone): missing or new means the
    /// data is gone.
    Marker,
    /// Sets the recovery hold after a loss (`HOLD`, standalone).
    Hold,
    /// `CLUSTER SHARDS`: the slot table (Redis 7 and later).
    Shards,
    /// `CLUSTER SLOTS`: the slot table, from servers without `SHARDS`.
    Slots,
    /// Reads the server's clock (see `server_clock`).
    Time,
    Load(ScriptKind),
}

/// What an acquire and a renewal share: the caller's request, the lease it
/// names and how it was written.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) request: RequestId,
    pub(super) lease: LeaseId,
    /// `lease` as written to Redis and echoed back, rendered once.
    pub(super) lease_bytes: Bytes,
    pub(super) keys: SubjectKeys,
    /// When it was first written: the script runs no earlier, so a lease it
    /// grants or extends lives at least until about `sent_at + ttl`.
    pub(super) sent_at: Option<Instant>,
    /// The last write's valid-until in the server's milliseconds: a script
    /// run after it refuses (stale). 0 before any write.
    pub(super) valid_until_ms: u64,
    /// The expiry the last write asks for, in the server's milliseconds: a
    /// lease TTL after the write, counted with the upper bound of the
    /// server's clock (so at least until our `write + ttl`). Absolute, so a
    /// request that reaches Redis late does not make a longer lease.
    pub(super) expiry_ms: u64,
    /// Our instant by which the server has surely passed `valid_until_ms`:
    /// from then on the request cannot act any more.
    pub(super) runnable_until: Option<Instant>,
    /// How a compensation's script is named: by text after a `NOSCRIPT`.
    pub(super) eval: Eval,
    /// An `ASK` redirect names this node for the next attempt only.
    pub(super) ask: Option<usize>,
    /// Redirects followed so far; a request bounced around too often fails.
    pub(super) redirects: u8,
}

impl Call {
    /// Goes on under `lease` instead (a waiter that lost its place); the old
    /// id as written.
    pub(super) fn renamed(&mut self, lease: LeaseId) -> Bytes {
        let old = std::mem::replace(&mut self.lease_bytes, Bytes::from(lease.to_bytes()));
        self.lease = lease;
        old
    }

    pub(super) fn new(request: RequestId, lease: LeaseId, keys: SubjectKeys) -> Self {
        Self {
            request,
            lease_bytes: Bytes::from(lease.to_bytes()),
            lease,
            keys,
            sent_at: None,
            valid_until_ms: 0,
            expiry_ms: 1,
            runnable_until: None,
            eval: Eval::Sha,
            ask: None,
            redirects: 0,
        }
    }
}

impl Call {
    /// The lease this call made, with `token`, as its holder sees it.
    pub(super) fn into_lease(
        self,
        token: u64,
        granted_at: Instant,
        expires_at: Instant,
        release_until: Instant,
    ) -> Lease {
        Lease {
            id: self.lease,
            keys: self.keys,
            expires_at,
            fencing_token: token,
            granted_at,
            release_until,
        }
    }
}

/// Takes a lease under `limit`.
#[derive(Debug)]
pub(super) struct AcquireOp {
    pub(super) call: Call,
    pub(super) limit: NonZeroU32,
    /// A waiting acquire: it queues for a slot until then, instead of
    /// being denied at once.
    pub(super) wait: Option<Box<Wait>>,
    /// Its grant carries a fencing token (`Config::fencing_tokens`).
    pub(super) fenced: bool,
}

/// What a waiting acquire sends besides an acquire's arguments.
#[derive(Debug, Clone)]
pub(super) struct Wait {
    /// The caller's deadline.
    pub(super) until: Instant,
    /// How long it may still wait when written (ms): the script sheds it
    /// at once if the expected wait is longer.
    pub(super) patience_ms: u64,
    /// The lease id it went on from (`Waiters::queued`), until a check
    /// naming it has run: that check takes over what the old id has.
    pub(super) previous: Option<Bytes>,
}

impl Wait {
    /// Waits until `until` (boxed: most acquires fail fast, and carry none).
    pub(super) fn until(until: Instant) -> Box<Self> {
        Box::new(Self {
            until,
            patience_ms: 0,
            previous: None,
        })
    }
}

/// Extends a lease its caller holds (`RENEW`). It never creates a lease, so
/// there is never anything to compensate for it.
#[derive(Debug)]
pub(super) struct RenewOp {
    pub(super) call: Call,
    /// The lease's fencing token: a renewal keeps it.
    pub(super) token: u64,
    /// When the lease was granted: a renewal keeps that too.
    pub(super) granted_at: Instant,
}

impl RenewOp {
    /// A renewal, as request `request`, of lease `lease` of `keys` that
    /// keeps its fencing `token` and its `granted_at`.
    pub(super) fn new(request: RequestId, lease: LeaseId, keys: SubjectKeys, token: u64, granted_at: Instant) -> Self {
        Self {
            call: Call::new(request, lease, keys),
            token,
            granted_at,
        }
    }
}

impl AcquireOp {
    /// A fail-fast acquire, as request `request`, of `weight` units of
    /// `limit` on `keys` under `label`; its lease named after `request`.
    pub(super) fn of(
        request: RequestId,
        names: &Names,
        keys: SubjectKeys,
        limit: NonZeroU32,
        weight: u32,
        label: Option<Label>,
        fenced: bool,
    ) -> Self {
        let lease = names.lease_id(request).with_claim(weight, label);
        Self {
            call: Call::new(request, lease, keys),
            limit,
            wait: None,
            fenced,
        }
    }

    /// The token its lease keeps of the one Redis `drawn` (a waiting grant,
    /// a batch or a hand-over draws one always): none (0) unless it asked.
    pub(super) fn kept_token(&self, drawn: u64) -> u64 {
        if self.fenced {
            drawn
        } else {
            0
        }
    }

    /// Readied to be sent again as a fresh write (a waiter's next check):
    /// its lease, if granted, lives a TTL from then, and it starts with no
    /// redirect behind it.
    pub(super) fn resend(mut self) -> Self {
        self.call.sent_at = None;
        self.call.ask = None;
        self.call.redirects = 0;
        self
    }
}

/// Reads what a subject holds. Writes nothing, so whatever happens to it
/// there is nothing to undo. Its call's lease id is never used in Redis.
#[derive(Debug)]
pub(super) struct InspectOp {
    pub(super) call: Call,
    pub(super) reading: Reading,
}

impl InspectOp {
    /// Reads `call`'s subject with up to `holders` of its leases, no more
    /// than a reply within `limits` holds (two items per holder after four
    /// counts: never ask for a reply the limits would refuse, and drop the
    /// connection for).
    pub(super) fn subject(call: Call, holders: u32, limits: ReplyLimits) -> Self {
        let fits = limits.max_array_len.saturating_sub(4) / 2;
        let holders = holders.min(u32::try_from(fits).unwrap_or(u32::MAX));
        Self {
            call,
            reading: Reading::Subject { holders },
        }
    }

    /// Reads a page of the keys matching `pattern` on the node of `call`'s
    /// slot, about `count` of them: `COUNT` is a hint a page may overshoot
    /// a little, so a quarter of the array limit leaves the margin.
    pub(super) fn keys(call: Call, cursor: u64, count: u32, pattern: Bytes, limits: ReplyLimits) -> Self {
        let fits = (limits.max_array_len / 4).max(1);
        let count = count.min(u32::try_from(fits).unwrap_or(u32::MAX));
        Self {
            call,
            reading: Reading::Keys { cursor, count, pattern },
        }
    }
}

/// What an inspection reads.
#[derive(Debug)]
pub(super) enum Reading {
    /// One subject (`INSPECT`), with up to this many holders (0: only the
    /// counts).
    Subject { holders: u32 },
    /// One page of the lease sets of the node its call's slot lives on
    /// (`SCAN cursor MATCH pattern COUNT count TYPE zset`).
    Keys { cursor: u64, count: u32, pattern: Bytes },
}

/// An acquire, a renewal or an inspection on its way to a connection:
/// waiting for the handshake, or staged for the next write.
#[derive(Debug)]
pub(super) enum Op {
    Acquire(AcquireOp),
    AcquireAll(Bundle),
    Renew(RenewOp),
    Inspect(InspectOp),
}

impl Op {
    pub(super) fn call(&self) -> &Call {
        match self {
            Op::Acquire(op) => &op.call,
            Op::AcquireAll(bundle) => bundle.call(),
            Op::Renew(op) => &op.call,
            Op::Inspect(op) => &op.call,
        }
    }

    pub(super) fn call_mut(&mut self) -> &mut Call {
        match self {
            Op::Acquire(op) => &mut op.call,
            Op::AcquireAll(bundle) => bundle.call_mut(),
            Op::Renew(op) => &mut op.call,
            Op::Inspect(op) => &mut op.call,
        }
    }

    /// The script it runs.
    pub(super) fn script(&self) -> ScriptKind {
        match self {
            Op::Acquire(AcquireOp { wait: Some(_), .. }) => ScriptKind::AcquireWaiting,
            Op::Acquire(_) => ScriptKind::Acquire,
            Op::AcquireAll(_) => ScriptKind::AcquireAll,
            Op::Renew(_) => ScriptKind::Renew,
            Op::Inspect(_) => ScriptKind::Inspect,
        }
    }

    /// Every call it makes: one, or a bundle's parts (each dated when
    /// written, each naming its lease).
    pub(super) fn calls_mut(&mut self) -> impl Iterator<Item = &mut Call> {
        let (one, parts) = match self {
            Op::AcquireAll(bundle) => (None, bundle.parts_mut()),
            op => (Some(op.call_mut()), &mut [][..]),
        };
        one.into_iter().chain(parts.iter_mut().map(|part| &mut part.call))
    }

    /// Whether it may take a lease (and is refused while a recovery holds
    /// its node).
    pub(super) fn acquires(&self) -> bool {
        matches!(self, Op::Acquire(_) | Op::AcquireAll(_))
    }

    /// The request that writes it alone.
    pub(super) fn into_request(self) -> Request {
        match self {
            Op::Acquire(op) => Request::Acquire(op),
            Op::AcquireAll(bundle) => Request::AcquireAll(bundle),
            Op::Renew(op) => Request::Renew(op),
            Op::Inspect(op) => Request::Inspect(op),
        }
    }
}

/// One held lease to write back after a data loss.
#[derive(Debug)]
pub(super) struct Reassert {
    pub(super) lease: LeaseId,
    pub(super) lease_bytes: Bytes,
    pub(super) keys: SubjectKeys,
    pub(super) limit: NonZeroU32,
    /// Its expiry as its holder counts it, in the server's milliseconds
    /// (the upper bound of that instant: the server keeps it at least as
    /// long as its holder believes).
    pub(super) expiry_ms: u64,
    /// The server's milliseconds after which it does nothing.
    pub(super) valid_until_ms: u64,
}
