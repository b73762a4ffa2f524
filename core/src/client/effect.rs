//! What the client's parts ask of it. A reply read, a connection retired,
//! a slot table learnt or a timer due comes to a list of effects, which the
//! router applies in order, and nowhere else: the parts never call back
//! into the client, so each can be read (and tested) on its own.

use std::time::Instant;

use bytes::Bytes;

use super::error_class::Redirect;
use super::request::{AcquireOp, Bundle, Op, Ran, ReleaseJob, Request};
use crate::event::{ConnectionError, Event, Renewal, RequestId, Unavailable};
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::scripts::ScriptKind;

/// One thing for the client to do.
#[derive(Debug)]
pub(super) enum Effect {
    /// Send an acquire, renewal or inspection to the node that serves its
    /// slot (or keep it until one is known).
    Route(Op),
    /// Write a call again at once on `node` (by text, after a `NOSCRIPT`).
    Resend(usize, Op),
    /// A call `node` redirected: follow the redirect, hold it back, or fail it.
    Redirect(Box<Redirected<Op>>),
    /// `request`'s outcome (an acquire's, an inspection's, a page of
    /// keys), for its caller if it still waits.
    Deliver(RequestId, Event),
    /// No trustworthy answer for `request`: unavailable, by its kind and
    /// the client's policy.
    Fail(RequestId, Unavailable),
    /// A renewal's outcome: for its caller, keep-alive or a hand-over.
    Renewed(RequestId, Renewal),
    /// Redis no longer holds `LeaseId`, as renewal `RequestId` found: it
    /// is kept alive no more (keep-alive's own renewals say so themselves).
    Gone(RequestId, LeaseId),
    /// A grant Redis made and the client trusts: the caller's lease, or
    /// released if the caller is gone.
    Grant(AcquireOp, u64),
    /// A bundle's grant (every part granted), with each part's token.
    GrantAll(Bundle, Vec<u64>),
    /// A hand-over whose confirming renewal extended the slot: delivered
    /// once a `WAIT` says enough replicas have it.
    AwaitReplicas(AcquireOp, u64),
    /// A waiting acquire Redis queued (`entered`: as a new entry): it waits
    /// for a wake-up or its check.
    Queued { op: AcquireOp, entered: bool },
    /// A waiter that needs no queue entry any more: `LEAVE` it.
    Leave(SubjectKeys, Bytes),
    /// A `LEAVE` not done: owed until `Instant`, when it stops mattering.
    LeaveAgain(SubjectKeys, Bytes, Instant),
    /// Release the lease an acquire may have made, which no caller holds.
    Compensate(AcquireOp, Ran),
    /// A release to send where its subject lives (or to queue until then).
    Release(ReleaseJob),
    /// Write a release again at once on `node` (by text, after a `NOSCRIPT`).
    ResendRelease(usize, ReleaseJob),
    /// A release `node` redirected.
    RedirectRelease(Box<Redirected<ReleaseJob>>),
    /// A release attempt failed: back off and try again, or give up.
    RetryRelease(ReleaseJob),
    /// A release refused unrun while its slot moves (`TRYAGAIN`): send it
    /// again after a backoff, no attempt spent (its deadline bounds it).
    DeferRelease(ReleaseJob),
    /// `SCRIPT LOAD` again on `node`, once per script at a time.
    Reload(usize, ScriptKind),
    /// Write `Request` on `node`'s current connection, its reply due by `Instant`.
    Send(usize, Request, Instant),
    /// Read the slot table again, if now is the time.
    RefreshTopology,
    /// Every handshake step of `node`'s connection is answered: check for
    /// lost lease data, then make it ready.
    HandshakeDone(usize),
    /// Open a connection to `node`, unless it has one.
    Connect(usize),
}

/// A request some node redirected, with what it said.
#[derive(Debug)]
pub(super) struct Redirected<T> {
    pub(super) node: usize,
    pub(super) request: T,
    pub(super) redirect: Redirect,
    pub(super) message: String,
}

/// The effects of a call whose fate is unknown: its caller is told, and
/// what an acquire may have created is released (a renewal or an
/// inspection creates nothing).
pub(super) fn ambiguous(fx: &mut Vec<Effect>, op: Op, error: &ConnectionError) {
    fx.push(Effect::Fail(
        op.call().request,
        Unavailable::ConnectionLost(error.clone()),
    ));
    compensate(fx, op, Ran::MayStillRun);
}

/// Releases what `op` may have taken (nothing for a renewal or an
/// inspection; every part of a bundle).
pub(super) fn compensate(fx: &mut Vec<Effect>, op: Op, ran: Ran) {
    match op {
        Op::Acquire(op) => fx.push(Effect::Compensate(op, ran)),
        Op::AcquireAll(bundle) => {
            let parts = bundle.into_parts().into_iter();
            fx.extend(parts.map(|part| Effect::Compensate(part, ran)));
        }
        Op::Renew(_) | Op::Inspect(_) => {}
    }
}
