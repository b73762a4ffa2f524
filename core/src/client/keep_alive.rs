//! Keep-alive: the client renews the leases whose holders asked for it, on
//! one schedule for all of them (a heap of due times, not a timer per
//! lease), and says when one is lost.
//!
//! A kept-alive lease is renewed once a third of its TTL has passed since
//! it was granted or last extended, so two thirds of the TTL remain for
//! that renewal and its retries (every sixth of the TTL, each bounded by
//! the acquire timeout): one failed attempt still leaves time for another.
//! A renewal that finds the lease gone, or a lease whose expiry passes with
//! no renewal confirmed, is reported lost (`Event::LeaseLost`) and dropped
//! from the held leases.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

use super::callers::Awaits;
use super::request::{Call, Op, RenewOp};
use super::Client;
use crate::event::{Event, Lease, LeaseLost, RequestId};
use crate::lease_id::LeaseId;

/// The kept-alive leases and when each is next due.
#[derive(Debug, Default)]
pub(super) struct KeepAlive {
    /// `(due, counter)`; an entry whose time no longer matches its lease's
    /// `next` (renewed, retried or released since) is skipped when popped.
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    /// By lease counter (one client's ids share their instance bits).
    kept: HashMap<u64, Kept>,
    /// The renewals on their way, to the lease counter each is for.
    in_flight: HashMap<RequestId, u64>,
}

#[derive(Debug)]
struct Kept {
    /// The lease as last extended.
    lease: Lease,
    /// When it is next renewed.
    next: Instant,
    /// The renewal on its way, if any.
    renewing: Option<RequestId>,
    /// When the last attempt was sent.
    sent_at: Instant,
}

impl KeepAlive {
    pub(super) fn len(&self) -> usize {
        self.kept.len()
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// Stops keeping `lease` alive (released, lost, withdrawn); its expiry
    /// as last extended, if it was kept.
    pub(super) fn remove(&mut self, lease: &LeaseId) -> Option<Instant> {
        if self.kept.is_empty() {
            return None; // every release asks: most clients keep nothing alive
        }
        let kept = self.kept.remove(&lease.parts().1)?;
        if let Some(request) = kept.renewing {
            self.in_flight.remove(&request);
        }
        Some(kept.lease.expires_at)
    }

    /// Whether `request` is a keep-alive renewal.
    pub(super) fn is_renewal(&self, request: RequestId) -> bool {
        self.in_flight.contains_key(&request)
    }

    fn schedule(&mut self, counter: u64, at: Instant) {
        if let Some(kept) = self.kept.get_mut(&counter) {
            kept.next = at;
            self.due.push(Reverse((at, counter)));
        }
    }
}

impl Client {
    /// When a lease extended until `expires_at` is renewed: once a third of
    /// the TTL has passed, two thirds before it ends.
    fn renewal_due(&self, expires_at: Instant) -> Instant {
        let margin = self.config.lease_ttl * 2 / 3;
        #[cfg(feature = "fault-injection")]
        if self.bugs.keep_alive_without_margin {
            return expires_at;
        }
        expires_at.checked_sub(margin).unwrap_or(expires_at)
    }

    /// Keeps `lease` alive: from now on the client renews it on its own
    /// until it is released, and reports `Event::KeptAlive` at each renewal
    /// and `Event::LeaseLost` if it is lost. Nothing happens for a lease
    /// this client does not hold (released, or lost already).
    pub fn keep_alive(&mut self, now: Instant, lease: &Lease) {
        if !self.held.contains(&lease.id) {
            return;
        }
        let counter = lease.id.parts().1;
        if self.keep_alive.kept.contains_key(&counter) {
            return;
        }
        let next = self.renewal_due(lease.expires_at).max(now);
        self.keep_alive.kept.insert(
            counter,
            Kept {
                lease: lease.clone(),
                next,
                renewing: None,
                sent_at: now,
            },
        );
        self.keep_alive.schedule(counter, next);
    }

    /// Leases kept alive now.
    pub fn kept_alive(&self) -> usize {
        self.keep_alive.len()
    }

    /// Sends the renewals that are due; reports the leases whose expiry
    /// passed without one.
    pub(super) fn renew_kept(&mut self, now: Instant) {
        while let Some(&Reverse((at, counter))) = self.keep_alive.due.peek() {
            if at > now {
                break;
            }
            self.keep_alive.due.pop();
            let Some(kept) = self.keep_alive.kept.get(&counter) else {
                continue;
            };
            if kept.next != at || kept.renewing.is_some() {
                continue;
            }
            if now >= kept.lease.expires_at {
                self.lose_kept(counter, LeaseLost::Expired);
                continue;
            }
            let request = RequestId(self.next_request);
            self.next_request += 1;
            let deadline = (now + self.config.acquire_timeout).min(kept.lease.expires_at);
            self.callers.insert(request, deadline, Awaits::KeepAlive);
            let lease = &kept.lease;
            let renewal = RenewOp {
                call: Call::new(request, lease.id.clone(), lease.keys.clone()),
                token: lease.fencing_token,
                granted_at: lease.granted_at,
            };
            let kept = self.keep_alive.kept.get_mut(&counter).expect("looked up above");
            kept.renewing = Some(request);
            self.keep_alive.in_flight.insert(request, counter);
            kept.sent_at = now;
            self.submit(now, Op::Renew(renewal));
        }
    }

    /// The outcome of a keep-alive renewal: `Some(lease)` extended, `None`
    /// with `gone` found gone, else no trustworthy answer (retried, until
    /// the lease's expiry).
    pub(super) fn kept_renewed(&mut self, request: RequestId, extended: Option<Lease>, gone: bool) {
        let Some(counter) = self.keep_alive.in_flight.remove(&request) else {
            return; // released meanwhile
        };
        let Some(kept) = self.keep_alive.kept.get_mut(&counter) else {
            return;
        };
        kept.renewing = None;
        let ttl = self.config.lease_ttl;
        match extended {
            Some(lease) => {
                self.stats.kept_alive += 1;
                let (id, expires_at) = (lease.id.clone(), lease.expires_at);
                kept.lease = lease;
                let due = self.renewal_due(expires_at);
                self.keep_alive.schedule(counter, due);
                self.events.push_back(Event::KeptAlive { lease: id, expires_at });
            }
            None if gone => self.lose_kept(counter, LeaseLost::Gone),
            None => {
                // Another attempt a sixth of the TTL after this one was sent;
                // past the expiry, `renew_kept` reports the lease lost.
                let retry = (kept.sent_at + ttl / 6).min(kept.lease.expires_at);
                self.keep_alive.schedule(counter, retry);
            }
        }
    }

    fn lose_kept(&mut self, counter: u64, reason: LeaseLost) {
        let Some(kept) = self.keep_alive.kept.remove(&counter) else {
            return;
        };
        if let Some(request) = kept.renewing {
            self.keep_alive.in_flight.remove(&request);
        }
        self.stats.keep_alive_lost += 1;
        self.held.remove(&kept.lease.id);
        self.events.push_back(Event::LeaseLost {
            lease: kept.lease.id,
            reason,
        });
    }
}
