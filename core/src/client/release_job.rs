//! A lease to give back, across its attempts: the holder's release or the
//! compensation of an acquire no caller received, and what each attempt
//! puts on a connection.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::held::HeldLeases;
use super::keep_alive::KeepAlive;
use super::request::{AcquireOp, Request};
use crate::event::Lease;
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::scripts::{Eval, ScriptKind};

/// Whether an acquire to compensate has run: its reply was read, or it was
/// not (its bytes may still reach Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ran {
    Answered,
    MayStillRun,
}

/// Which release a job makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReleaseKind {
    /// The holder gives its lease back: a plain `ZREM` of its units, then
    /// the subject's waiters are looked after (see `hand_over.rs`).
    Release,
    /// The holder gives it back to a subject this client has waiters on
    /// (so a queue, most likely): `RELEASE` removes it and hands the freed
    /// units to the first in line in the same call, with no round trip in
    /// which the slot stands free and no check of the queue first.
    ToWaiters,
    /// A lease no caller received: `COMPENSATE`, with a tombstone until
    /// `tombstone_until_ms` (the acquire's valid-until while it may still
    /// run; 0 when its reply was read).
    Compensation { tombstone_until_ms: u64 },
}

/// One lease to give back, across its attempts.
#[derive(Debug)]
pub(super) struct ReleaseJob {
    pub(super) lease: LeaseId,
    /// `lease` as written to Redis, rendered once for every attempt.
    pub(super) lease_bytes: Bytes,
    pub(super) keys: SubjectKeys,
    pub(super) kind: ReleaseKind,
    /// How long the lease was held, in ms (the release script keeps the
    /// subject's average while it has waiters).
    pub(super) held_ms: u64,
    /// Failed attempts so far.
    pub(super) failures: u32,
    /// `TRYAGAIN`s so far (its slot moving): no failure, but the retries
    /// back off as after failures, so that a move that stalls does not draw
    /// a call every few milliseconds until the deadline.
    pub(super) refusals: u32,
    /// Retries stop here: the lease has expired by then anyway.
    pub(super) deadline: Instant,
    /// Next attempt not before.
    pub(super) not_before: Instant,
    /// How a compensation's script is named: by text after a `NOSCRIPT`.
    pub(super) eval: Eval,
    /// An `ASK` redirect names this node for the next attempt only.
    pub(super) ask: Option<usize>,
    /// Redirects followed so far (they are not failures: a slot may move
    /// while its leases are held).
    pub(super) redirects: u8,
}

impl ReleaseJob {
    /// The first attempt at giving `lease` back, due at once. A
    /// compensation for a grant that was read: the acquire ran, so nothing
    /// is left to refuse.
    pub(super) fn of(lease: Lease, kind: ReleaseKind, now: Instant) -> Self {
        let held_ms = now.saturating_duration_since(lease.granted_at).as_millis() as u64;
        let deadline = lease.expires_at.max(lease.release_until);
        let lease_bytes = Bytes::from(lease.id.to_bytes());
        Self::first(lease.id, lease_bytes, lease.keys, kind, held_ms, deadline, now)
    }

    /// A caller's release of `lease`. A write-back of it (after a data
    /// loss) that may still run would bring it back: the release then
    /// leaves a tombstone until that write-back's valid-until, as a
    /// compensation does. Kept alive, Redis may hold it longer than the
    /// holder's copy says: the release keeps trying until then.
    /// Otherwise it goes as `plain` says (`Release`, or `ToWaiters` when
    /// this client has waiters on its subject: the slot goes to the first in
    /// line, here or not, in the release's own call).
    pub(super) fn given_back(
        now: Instant,
        mut lease: Lease,
        plain: ReleaseKind,
        held: &mut HeldLeases,
        kept: &mut KeepAlive,
    ) -> Self {
        let kind = match held.give_back(now, &lease.id) {
            Some(tombstone_until_ms) => ReleaseKind::Compensation { tombstone_until_ms },
            None => plain,
        };
        if let Some(expires_at) = kept.remove(&lease.id) {
            lease.release_until = lease.release_until.max(expires_at);
        }
        Self::of(lease, kind, now)
    }

    /// A job whose first attempt is due at `now`.
    fn first(
        lease: LeaseId,
        lease_bytes: Bytes,
        keys: SubjectKeys,
        kind: ReleaseKind,
        held_ms: u64,
        deadline: Instant,
        now: Instant,
    ) -> Self {
        Self {
            lease,
            lease_bytes,
            keys,
            kind,
            held_ms,
            failures: 0,
            refusals: 0,
            deadline,
            not_before: now,
            eval: Eval::Sha,
            ask: None,
            redirects: 0,
        }
    }

    /// The release of a lease `op` may have made, which no caller will
    /// hold. [`Ran::MayStillRun`]: no reply was read for the acquire, so its
    /// bytes may still reach Redis (held in a buffer, a stalled server, a
    /// proxy): until its valid-until a tombstone refuses it, and the release
    /// keeps trying until any lease it could have made has expired (it runs
    /// no later than `runnable_until`, and lives a TTL from there). An
    /// acquire whose reply was read has run; its lease lives a TTL from that
    /// reply at most.
    pub(super) fn compensation(op: AcquireOp, ran: Ran, now: Instant, lease_ttl: Duration) -> Self {
        let call = op.call;
        let (ran_by, tombstone_until_ms) = match ran {
            Ran::MayStillRun => (call.runnable_until.unwrap_or(now).max(now), call.valid_until_ms),
            Ran::Answered => (now, 0),
        };
        let kind = ReleaseKind::Compensation { tombstone_until_ms };
        // Nobody held it: it says nothing about hold times (0).
        Self::first(
            call.lease,
            call.lease_bytes,
            call.keys,
            kind,
            0,
            ran_by + lease_ttl,
            now,
        )
    }

    /// The script an attempt runs, if it is not a plain `ZREM`.
    pub(super) fn script(&self) -> Option<ScriptKind> {
        match self.kind {
            ReleaseKind::Release => None,
            ReleaseKind::ToWaiters => Some(ScriptKind::Release),
            ReleaseKind::Compensation { .. } => Some(ScriptKind::Compensate),
        }
    }

    pub(super) fn is_compensation(&self) -> bool {
        matches!(self.kind, ReleaseKind::Compensation { .. })
    }

    /// Whose lease it gives back, as its events say.
    pub(super) fn whose(&self) -> crate::event::ReleaseOf {
        match self.kind {
            ReleaseKind::Release | ReleaseKind::ToWaiters => crate::event::ReleaseOf::Holder,
            ReleaseKind::Compensation { .. } => crate::event::ReleaseOf::Compensation,
        }
    }

    /// The request for one attempt.
    pub(super) fn into_request(self) -> Request {
        match self.kind {
            ReleaseKind::Release => Request::Release(self),
            ReleaseKind::ToWaiters => Request::ReleaseToWaiters(vec![self]),
            ReleaseKind::Compensation { tombstone_until_ms } => Request::Compensate(self, tombstone_until_ms),
        }
    }
}

/// The waiters of a subject whose leases a `ZREM` just gave back.
#[derive(Debug)]
pub(super) struct HandOver {
    pub(super) keys: SubjectKeys,
    pub(super) ids: Vec<Bytes>,
    /// The leases' average hold, in ms (the subject's estimate for its
    /// waiters folds it in).
    pub(super) held_ms: u64,
    pub(super) eval: Eval,
}

impl HandOver {
    /// After the `ZREM` of `jobs` (one subject's), or in its place. By
    /// text if any of them met a `NOSCRIPT`.
    pub(super) fn after(jobs: &[ReleaseJob]) -> Self {
        let text = jobs.iter().any(|job| job.eval == Eval::Text);
        Self {
            keys: jobs[0].keys.clone(),
            ids: jobs.iter().map(|job| job.lease_bytes.clone()).collect(),
            held_ms: jobs.iter().map(|job| job.held_ms).sum::<u64>() / jobs.len().max(1) as u64,
            eval: if text { Eval::Text } else { Eval::Sha },
        }
    }
}
