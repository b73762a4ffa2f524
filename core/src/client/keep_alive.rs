//! Keep-alive: the client renews the leases whose holders asked for it, on
//! one schedule for all of them (a heap of due times, not a timer per
//! lease), and says when one is lost.
//!
//! A kept-alive lease is renewed once a third of its TTL has passed since
//! it was granted or last extended, so two thirds of the TTL remain for
//! that renewal and its retries (every sixth of the TTL, each bounded by
//! the acquire timeout): one failed attempt still leaves time for another.
//! A renewal that finds the lease gone, or a lease whose expiry passes with
//! no renewal confirmed, is reported lost.
//!
//! It also confirms the slots releases hand to this client's waiters: a
//! hand-over writes a reservation that lasts until the waiter's queue entry
//! would have expired, and one renewal makes it a whole lease. That renewal
//! is due an eighth of the way into the reservation, not at once, so a
//! holder that gives the slot back sooner (most, where waits are short)
//! never sends it; the rest of the reservation is its margin. Once
//! extended, the lease is kept no longer unless its holder asked.
//!
//! A sub-machine: it owns its schedule and its one timer, and answers with
//! [`Effect`]s that the client applies (send a renewal, report a lease kept
//! or lost). It knows nothing of the client, its connections or its counts.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crate::event::{Lease, LeaseLost, Renewal, RequestId};
use crate::lease_id::LeaseId;

/// What the client is to do for the kept-alive leases.
#[derive(Debug)]
pub(super) enum Effect {
    /// Renew this lease now, then say with which request
    /// ([`KeepAlive::sent`]).
    Renew(Lease),
    /// Redis extended the lease to `expires_at`.
    Kept { lease: LeaseId, expires_at: Instant },
    /// Redis extended a handed-over slot to a whole lease, until
    /// `expires_at`: it is not kept any more (unless its holder asks).
    Confirmed { lease: LeaseId, expires_at: Instant },
    /// The lease is lost: no longer held.
    Lost { lease: LeaseId, reason: LeaseLost },
}

/// The kept-alive leases and when each is next due.
#[derive(Debug)]
pub(super) struct KeepAlive {
    /// How long before its expiry a lease is renewed (two thirds of the
    /// TTL), and how long after a failed attempt the next one goes (a
    /// sixth).
    margin: Duration,
    retry_after: Duration,
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
    /// A hand-over to confirm, not a lease its holder asked to keep alive:
    /// renewed once (or not at all, if its holder renews it first).
    once: bool,
}

impl KeepAlive {
    /// For leases of `lease_ttl`.
    pub(super) fn new(lease_ttl: Duration) -> Self {
        Self {
            margin: lease_ttl * 2 / 3,
            retry_after: lease_ttl / 6,
            due: BinaryHeap::new(),
            kept: HashMap::new(),
            in_flight: HashMap::new(),
        }
    }

    /// An injected bug for the simulator: renew only at the expiry itself.
    #[cfg(feature = "fault-injection")]
    pub(super) fn without_margin(&mut self) {
        self.margin = Duration::ZERO;
    }

    /// The leases kept alive (not counting hand-overs still to confirm).
    pub(super) fn len(&self) -> usize {
        self.kept.values().filter(|kept| !kept.once).count()
    }

    /// When [`KeepAlive::handle_timeout`] has something to do.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    /// Keeps `lease` alive from `now` on (nothing if it already is; a
    /// hand-over still to confirm is kept on after its confirmation).
    pub(super) fn keep(&mut self, now: Instant, lease: &Lease) {
        let counter = lease.id.parts().1;
        if let Some(kept) = self.kept.get_mut(&counter) {
            kept.once = false;
            return;
        }
        let next = self.renewal_due(lease.expires_at).max(now);
        self.add(now, lease, next, false);
    }

    /// Confirms `lease`, a slot handed over until its `expires_at`: one
    /// renewal, an eighth of the way into what is left of it.
    pub(super) fn confirm(&mut self, now: Instant, lease: &Lease) {
        let counter = lease.id.parts().1;
        if self.kept.contains_key(&counter) {
            return;
        }
        let due = now + lease.expires_at.saturating_duration_since(now) / 8;
        self.add(now, lease, due, true);
    }

    fn add(&mut self, now: Instant, lease: &Lease, next: Instant, once: bool) {
        let counter = lease.id.parts().1;
        let kept = Kept {
            lease: lease.clone(),
            next,
            renewing: None,
            sent_at: now,
            once,
        };
        self.kept.insert(counter, kept);
        self.schedule(counter, next);
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

    /// Its holder renewed `lease` by itself: a hand-over still to confirm
    /// needs no confirmation any more; a kept lease is next due from its
    /// new expiry.
    pub(super) fn extended(&mut self, lease: &Lease) {
        let counter = lease.id.parts().1;
        let Some(kept) = self.kept.get_mut(&counter) else {
            return;
        };
        if kept.once {
            if let Some(request) = kept.renewing {
                self.in_flight.remove(&request);
            }
            self.kept.remove(&counter);
            return;
        }
        if kept.renewing.is_none() && lease.expires_at > kept.lease.expires_at {
            kept.lease = lease.clone();
            let due = self.renewal_due(lease.expires_at);
            self.schedule(counter, due);
        }
    }

    /// Whether `request` is a keep-alive renewal.
    pub(super) fn is_renewal(&self, request: RequestId) -> bool {
        self.in_flight.contains_key(&request)
    }

    /// The next thing due at `now`: a renewal to send, or a lease whose
    /// expiry passed without one. `None` once nothing more is due.
    pub(super) fn handle_timeout(&mut self, now: Instant) -> Option<Effect> {
        while let Some(&Reverse((at, counter))) = self.due.peek() {
            if at > now {
                return None;
            }
            self.due.pop();
            let Some(kept) = self.kept.get(&counter) else {
                continue;
            };
            if kept.next != at || kept.renewing.is_some() {
                continue;
            }
            if now >= kept.lease.expires_at {
                return self.lose(counter, LeaseLost::Expired);
            }
            return Some(Effect::Renew(kept.lease.clone()));
        }
        None
    }

    /// The renewal of `lease` that [`Effect::Renew`] asked for went out as
    /// `request` at `now`.
    pub(super) fn sent(&mut self, lease: &LeaseId, request: RequestId, now: Instant) {
        let counter = lease.parts().1;
        if let Some(kept) = self.kept.get_mut(&counter) {
            kept.renewing = Some(request);
            kept.sent_at = now;
            self.in_flight.insert(request, counter);
        }
    }

    /// The outcome of keep-alive renewal `request`: what it means for its
    /// lease, if it is still kept.
    pub(super) fn on_renewed(&mut self, request: RequestId, renewal: Renewal) -> Option<Effect> {
        let counter = self.in_flight.remove(&request)?;
        let kept = self.kept.get_mut(&counter)?;
        kept.renewing = None;
        match renewal {
            Renewal::Extended(lease) if kept.once => {
                self.kept.remove(&counter);
                let (lease, expires_at) = (lease.id, lease.expires_at);
                Some(Effect::Confirmed { lease, expires_at })
            }
            Renewal::Extended(lease) => {
                let (id, expires_at) = (lease.id.clone(), lease.expires_at);
                kept.lease = lease;
                let due = self.renewal_due(expires_at);
                self.schedule(counter, due);
                Some(Effect::Kept { lease: id, expires_at })
            }
            Renewal::Lost => self.lose(counter, LeaseLost::Gone),
            // No trustworthy answer: tried again, until the lease's expiry.
            Renewal::Unavailable(_) => {
                // Another attempt a sixth of the TTL after this one was sent,
                // or halfway to the expiry if that is sooner (a hand-over's
                // reservation), never at the same instant; past the expiry,
                // `handle_timeout` reports the lease lost.
                let (sent_at, expires_at) = (kept.sent_at, kept.lease.expires_at);
                let halfway = expires_at.saturating_duration_since(sent_at) / 2;
                let wait = self.retry_after.min(halfway).max(Duration::from_millis(1));
                self.schedule(counter, (sent_at + wait).min(expires_at));
                None
            }
        }
    }

    /// When a lease extended until `expires_at` is renewed: once a third of
    /// the TTL has passed, two thirds before it ends.
    fn renewal_due(&self, expires_at: Instant) -> Instant {
        expires_at.checked_sub(self.margin).unwrap_or(expires_at)
    }

    fn schedule(&mut self, counter: u64, at: Instant) {
        if let Some(kept) = self.kept.get_mut(&counter) {
            kept.next = at;
            self.due.push(Reverse((at, counter)));
        }
    }

    fn lose(&mut self, counter: u64, reason: LeaseLost) -> Option<Effect> {
        let kept = self.kept.remove(&counter)?;
        if let Some(request) = kept.renewing {
            self.in_flight.remove(&request);
        }
        Some(Effect::Lost {
            lease: kept.lease.id,
            reason,
        })
    }
}
