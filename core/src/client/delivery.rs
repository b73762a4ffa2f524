//! How a request ends for its caller: an outcome delivered (or, with the
//! caller gone, a grant released), a failure read by the request's kind and
//! the client's policy, a renewal's answer taken to its caller, to
//! keep-alive or to the hand-over it confirms, a slot handed to a waiter.
//! It works on the client's callers, waiters, kept and held leases, and
//! answers with effects for whatever must go on the wire.

use std::num::NonZeroU32;
use std::time::Instant;

use super::callers::{Awaits, Callers};
use super::effect::{compensate, Effect};
use super::held::HeldLeases;
use super::keep_alive::{self, KeepAlive};
use super::names::Names;
use super::outbox::Outbox;
use super::request::{AcquireOp, Bundle, Op, Ran, ReleaseJob, ReleaseKind, RenewOp};
use super::waiters::{self, Waiters};
use crate::config::Config;
use crate::event::{Event, Lease, Outcome, Renewal, RequestId, Unavailable};
use crate::server_clock::lease_expiry;
use crate::UnavailablePolicy;

/// The parts of the client an outcome touches, for one step.
pub(super) struct Delivery<'a> {
    pub(super) now: Instant,
    pub(super) config: &'a Config,
    pub(super) names: &'a mut Names,
    pub(super) callers: &'a mut Callers,
    pub(super) waiters: &'a mut Waiters,
    pub(super) keep_alive: &'a mut KeepAlive,
    pub(super) held: &'a mut HeldLeases,
    pub(super) out: &'a mut Outbox,
    pub(super) fx: &'a mut Vec<Effect>,
}

impl Delivery<'_> {
    /// Forgets `request`'s caller; whether it was still waiting.
    pub(super) fn stop_waiting(&mut self, request: RequestId) -> bool {
        // A waiter that leaves without a grant gives its queue place back.
        self.waiters.remove(request, false, self.now);
        self.callers.remove(request).is_some()
    }

    /// `request`'s caller's deadline passed.
    pub(super) fn time_out(&mut self, request: RequestId) {
        if self.waiters.was_queued(request) {
            // It was queued, and no slot came in time: that is the limit's
            // answer. (A waiter Redis never answered is as unavailable as
            // any other request.)
            self.deliver(request, Event::Acquired(request, Outcome::Exceeded));
        } else {
            self.fail(request, Unavailable::Timeout);
        }
    }

    /// `request`'s caller left: whether it was still waiting. If not, its
    /// answer may be queued, unseen: a grant's lease is given back; a
    /// renewed lease stays its holder's, with the expiry it knew.
    pub(super) fn abandon(&mut self, request: RequestId) -> bool {
        if self.stop_waiting(request) {
            return true;
        }
        if let Some(Event::Acquired(_, outcome)) = self.out.withdraw(request) {
            self.withdraw(outcome);
        }
        false
    }

    /// Hands `event`, `request`'s outcome, to its caller if it still waits.
    pub(super) fn deliver(&mut self, request: RequestId, event: Event) {
        if self.stop_waiting(request) {
            self.out.event(event);
        }
    }

    /// No trustworthy answer for `request`: deny or fail open, by policy (a
    /// renewal or an inspection is simply unavailable).
    pub(super) fn fail(&mut self, request: RequestId, reason: Unavailable) {
        let event = match self.callers.awaits(request) {
            Some(Awaits::Inspection) => Event::Inspected(request, Err(reason)),
            Some(Awaits::Scan) => Event::Scanned(request, Err(reason)),
            Some(Awaits::Renewal | Awaits::KeepAlive | Awaits::HandOver) => {
                return self.renewed(request, Renewal::Unavailable(reason));
            }
            _ => Event::Acquired(
                request,
                match self.config.unavailable_policy {
                    UnavailablePolicy::Deny => Outcome::Unavailable(reason),
                    UnavailablePolicy::Allow => Outcome::FailOpen(reason),
                },
            ),
        };
        self.deliver(request, event);
    }

    /// Hands a grant to its caller, or releases it if the caller is gone.
    pub(super) fn grant(&mut self, op: AcquireOp, token: u64) {
        let request = op.call.request;
        if !self.callers.contains(request) {
            return self.fx.push(Effect::Compensate(op, Ran::Answered));
        }
        let (lease, limit) = self.lease_of(op, token);
        self.granted(request, lease, limit);
    }

    /// The lease `op`'s grant made (with the token Redis `drawn`, kept if
    /// asked for), as its holder sees it, with its limit.
    fn lease_of(&self, op: AcquireOp, drawn: u64) -> (Lease, NonZeroU32) {
        let expires_at = lease_expiry(op.call.sent_at.unwrap_or(self.now), self.config.lease_ttl);
        let token = op.kept_token(drawn);
        (op.call.into_lease(token, self.now, expires_at, expires_at), op.limit)
    }

    /// A bundle's grant: every part's lease held, and delivered together,
    /// or each released if the caller is gone.
    pub(super) fn grant_all(&mut self, bundle: Bundle, tokens: Vec<u64>) {
        let request = bundle.call().request;
        if !self.callers.contains(request) {
            return compensate(self.fx, Op::AcquireAll(bundle), Ran::Answered);
        }
        let mut leases = Vec::with_capacity(tokens.len());
        for (op, token) in bundle.into_parts().into_iter().zip(tokens) {
            let (lease, limit) = self.lease_of(op, token);
            self.held.insert(self.now, &lease, limit);
            leases.push(lease);
        }
        if self.callers.remove(request).is_some() {
            self.out.event(Event::Acquired(request, Outcome::GrantedAll(leases)));
        }
    }

    /// `request`'s grant: it took the waiter (if any) out of its queue, so
    /// there is nothing to leave; the lease is held, and delivered if the
    /// caller still waits.
    fn granted(&mut self, request: RequestId, lease: Lease, limit: NonZeroU32) {
        self.waiters.remove(request, true, self.now);
        self.held.insert(self.now, &lease, limit);
        if self.callers.remove(request).is_some() {
            self.out.event(Event::Acquired(request, Outcome::Granted(lease)));
        }
    }

    /// A renewal's outcome: for its caller if it still waits, for
    /// keep-alive if it was its own, or for the hand-over it confirms.
    pub(super) fn renewed(&mut self, request: RequestId, renewal: Renewal) {
        let awaits = self.callers.awaits(request);
        if awaits == Some(Awaits::HandOver) {
            self.stop_waiting(request);
            return self.handed_confirmed(request, matches!(renewal, Renewal::Extended(_)));
        }
        if !self.stop_waiting(request) {
            return;
        }
        if self.keep_alive.is_renewal(request) {
            if let Some(effect) = self.keep_alive.on_renewed(request, renewal) {
                self.keep_alive(effect);
            }
            return;
        }
        // Keep-alive's, for a lease given back since: nobody asked.
        if awaits == Some(Awaits::KeepAlive) {
            return;
        }
        // The holder's own renewal did what keep-alive was due to do.
        if let Renewal::Extended(lease) = &renewal {
            self.keep_alive.extended(lease);
        }
        self.out.event(Event::Renewed(request, renewal));
    }

    /// What keep-alive asks for: a renewal sent (as any request, bounded by
    /// the acquire timeout and the lease's expiry), or a lease kept or lost
    /// reported and counted.
    pub(super) fn keep_alive(&mut self, effect: keep_alive::Effect) {
        match effect {
            keep_alive::Effect::Renew(lease) => {
                let request = self.names.request();
                let deadline = (self.now + self.config.acquire_timeout).min(lease.expires_at);
                self.callers.insert(request, deadline, Awaits::KeepAlive);
                self.keep_alive.sent(&lease.id, request, self.now);
                let renewal = RenewOp::new(request, lease.id, lease.keys, lease.fencing_token, lease.granted_at);
                // Routed past the in-flight cap: it keeps a lease already
                // granted (a hand-over's reservation lasts about a second),
                // and there is one at most per held lease.
                self.fx.push(Effect::Route(Op::Renew(renewal)));
            }
            keep_alive::Effect::Kept { lease, expires_at } => {
                self.out.stats.kept_alive += 1;
                self.out.event(Event::KeptAlive { lease, expires_at });
            }
            // Its holder learns the new expiry as from a keep-alive.
            keep_alive::Effect::Confirmed { lease, expires_at } => {
                self.out.event(Event::KeptAlive { lease, expires_at });
            }
            keep_alive::Effect::Lost { lease, reason } => {
                self.out.stats.keep_alive_lost += 1;
                self.held.remove(&lease);
                self.out.event(Event::LeaseLost { lease, reason });
            }
        }
    }

    /// What the waiters ask for: a check sent again, or a slot a release
    /// handed over delivered at once, from the message (or, with
    /// `replica_acks`, once the renewal that confirms it is replicated).
    pub(super) fn waiter(&mut self, effect: waiters::Effect) {
        let (op, token) = match effect {
            waiters::Effect::Check(op) => return self.fx.push(Effect::Route(Op::Acquire(op))),
            waiters::Effect::CheckLate(op) => {
                self.out.stats.handed_late += 1;
                return self.fx.push(Effect::Route(Op::Acquire(op)));
            }
            waiters::Effect::Handed { op, token } => (op, token),
        };
        let (request, now) = (op.call.request, self.now);
        // With `replica_acks` the renewal that confirms it goes at once, on
        // this client's connection, after the release (another client's) in
        // the replication stream: a `WAIT` after it covers both, and only
        // then is the grant delivered.
        if self.config.replica_acks.is_some() {
            self.out.stats.handed_over += 1;
            let renewal = self.names.request();
            let confirm = RenewOp::new(renewal, op.call.lease.clone(), op.call.keys.clone(), token, now);
            let deadline = now + self.config.request_liveness;
            self.callers.insert(renewal, deadline, Awaits::HandOver);
            self.waiters.confirming(renewal, op, token);
            return self.fx.push(Effect::Route(Op::Renew(confirm)));
        }
        // The release ran after this waiter's last check (which queued it)
        // was sent: the reservation lives its lifetime from then at least
        // (`Waiters::handed` checks again instead when little of it is left).
        let expires_at = lease_expiry(op.call.sent_at.unwrap_or(now), self.config.waiter_lifetime());
        self.out.stats.handed_over += 1;
        // Keep-alive confirms it before that, unless it is given back first
        // (`KeepAlive::confirm`); the renewal runs within its liveness and
        // extends the lease a TTL from then: releases keep trying until that.
        let release_until = expires_at + self.config.request_liveness + self.config.lease_ttl;
        let token = op.kept_token(token);
        let lease = op.call.into_lease(token, now, expires_at, release_until);
        self.keep_alive.confirm(now, &lease);
        self.granted(request, lease, op.limit);
    }

    /// The renewal that confirms a hand-over ended. Extended: the grant
    /// waits for the replicas. Otherwise the reservation is gone (or
    /// unconfirmed): the waiter checks again, keeping its place if it still
    /// has one.
    fn handed_confirmed(&mut self, renewal: RequestId, extended: bool) {
        let Some((op, token)) = self.waiters.confirmed(renewal) else {
            return;
        };
        self.fx.push(match extended {
            true => Effect::AwaitReplicas(op, token),
            false => Effect::Route(Op::Acquire(op.resend())),
        });
    }

    /// Takes back an outcome whose caller left before seeing it (never
    /// delivered, so never counted): the lease of a grant is compensated.
    fn withdraw(&mut self, outcome: Outcome) {
        let leases = match outcome {
            Outcome::Granted(lease) => vec![lease],
            Outcome::GrantedAll(leases) => leases,
            _ => return,
        };
        for lease in leases {
            self.held.remove(&lease.id);
            self.keep_alive.remove(&lease.id);
            self.out.stats.compensations += 1;
            let compensation = ReleaseKind::Compensation { tombstone_until_ms: 0 };
            self.fx
                .push(Effect::Release(ReleaseJob::of(lease, compensation, self.now)));
        }
    }
}
