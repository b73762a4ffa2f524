//! How requests end for their callers: outcomes delivered (and counted),
//! withdrawn, failed by policy, or left ambiguous.

use std::time::Instant;

use super::callers::Awaits;
use super::keep_alive::Renewed;
use super::releases::Ran;
use super::request::{Op, ReleaseJob, ReleaseKind};
use super::Client;
use crate::event::{ConnectionError, Event, Inspection, KeysPage, Outcome, Renewal, RequestId, Unavailable};
use crate::UnavailablePolicy;

impl Client {
    /// Forgets `request`'s caller; whether it was still waiting.
    pub(super) fn stop_waiting(&mut self, now: Instant, request: RequestId) -> bool {
        // A waiter that leaves without a grant gives its queue place back.
        self.waiters.remove(request, false, now);
        self.callers.remove(request).is_some()
    }

    /// Delivers `outcome` if the caller still waits. Returns whether it did.
    pub(super) fn finish(&mut self, now: Instant, request: RequestId, outcome: Outcome) -> bool {
        if !self.stop_waiting(now, request) {
            return false;
        }
        self.out.event(Event::Acquired(request, outcome));
        true
    }

    /// Takes back an outcome whose caller left before seeing it (never
    /// delivered, so never counted): the lease of a grant is compensated.
    pub(super) fn withdraw(&mut self, now: Instant, outcome: Outcome) {
        if let Outcome::Granted(lease) = outcome {
            self.recovery.held.remove(&lease.id);
            self.out.stats.compensations += 1;
            let compensation = ReleaseKind::Compensation { tombstone_until_ms: 0 };
            self.submit_release(now, ReleaseJob::of(lease, compensation, now));
        }
    }

    /// Delivers a renewal's outcome if its caller still waits.
    pub(super) fn finish_renewal(&mut self, now: Instant, request: RequestId, renewal: Renewal) {
        if self.callers.awaits(request) == Some(Awaits::HandOver) {
            self.stop_waiting(now, request);
            return self.handed_confirmed(now, request, matches!(renewal, Renewal::Extended(_)));
        }
        if !self.stop_waiting(now, request) {
            return;
        }
        if self.keep_alive.is_renewal(request) {
            let renewed = match renewal {
                Renewal::Extended(lease) => Renewed::Extended(lease),
                Renewal::Lost => Renewed::Gone,
                Renewal::Unavailable(_) => Renewed::Unanswered,
            };
            if let Some(effect) = self.keep_alive.on_renewed(request, renewed) {
                self.apply_keep_alive(now, effect);
            }
            return;
        }
        self.out.event(Event::Renewed(request, renewal));
    }

    /// Delivers an inspection's outcome if its caller still waits.
    pub(super) fn finish_inspection(
        &mut self,
        now: Instant,
        request: RequestId,
        inspection: Result<Inspection, Unavailable>,
    ) {
        if self.stop_waiting(now, request) {
            self.out.event(Event::Inspected(request, inspection));
        }
    }

    /// Delivers a page of keys if its caller still waits.
    pub(super) fn finish_scan(&mut self, now: Instant, request: RequestId, page: Result<KeysPage, Unavailable>) {
        if self.stop_waiting(now, request) {
            self.out.event(Event::Scanned(request, page));
        }
    }

    /// No trustworthy answer for `request`: deny or fail open, by policy (a
    /// renewal or an inspection is simply unavailable).
    pub(super) fn fail(&mut self, now: Instant, request: RequestId, reason: Unavailable) {
        match self.callers.awaits(request) {
            Some(Awaits::Inspection) => return self.finish_inspection(now, request, Err(reason)),
            Some(Awaits::Scan) => return self.finish_scan(now, request, Err(reason)),
            _ => {}
        }
        if matches!(
            self.callers.awaits(request),
            Some(Awaits::Renewal | Awaits::KeepAlive | Awaits::HandOver)
        ) {
            return self.finish_renewal(now, request, Renewal::Unavailable(reason));
        }
        let outcome = match self.config.unavailable_policy {
            UnavailablePolicy::Deny => Outcome::Unavailable(reason),
            UnavailablePolicy::Allow => Outcome::FailOpen(reason),
        };
        self.finish(now, request, outcome);
    }

    /// The request's fate is unknown: tell the caller, and release what an
    /// acquire may have created (a renewal creates nothing).
    pub(super) fn ambiguous(&mut self, now: Instant, op: Op, error: ConnectionError) -> ConnectionError {
        self.fail(now, op.call().request, Unavailable::ConnectionLost(error.clone()));
        if let Op::Acquire(op) = op {
            self.compensate(now, op, Ran::MayStillRun);
        }
        error
    }
}
