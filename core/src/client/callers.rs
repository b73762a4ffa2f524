//! The callers still waiting for an outcome, each with its deadline.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use crate::event::{RequestId, Unavailable};

/// What a caller waits for: the event its outcome comes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Awaits {
    /// `Event::Acquired`.
    Acquire,
    /// `Event::Renewed`.
    Renewal,
    /// Nobody: the client renews a kept-alive lease on its own.
    KeepAlive,
    /// `Event::Inspected`.
    Inspection,
    /// `Event::Scanned`.
    Scan,
    /// Nobody: the renewal that confirms a slot a release handed to a
    /// waiter, which (with `replica_acks`) is delivered only once a `WAIT`
    /// after it says the replicas have it.
    HandOver,
}

/// Who still waits, and until when. The map and the deadline order are kept
/// in step here and nowhere else.
#[derive(Debug, Default)]
pub(super) struct Callers {
    waiting: HashMap<RequestId, (Instant, Awaits)>,
    by_deadline: BTreeSet<(Instant, RequestId)>,
}

impl Callers {
    /// `request`'s caller waits until `deadline`.
    pub(super) fn insert(&mut self, request: RequestId, deadline: Instant, awaits: Awaits) {
        self.waiting.insert(request, (deadline, awaits));
        self.by_deadline.insert((deadline, request));
    }

    /// Forgets `request`'s caller; what it was waiting for, if it still was.
    pub(super) fn remove(&mut self, request: RequestId) -> Option<Awaits> {
        let (deadline, awaits) = self.waiting.remove(&request)?;
        self.by_deadline.remove(&(deadline, request));
        Some(awaits)
    }

    pub(super) fn contains(&self, request: RequestId) -> bool {
        self.waiting.contains_key(&request)
    }

    pub(super) fn awaits(&self, request: RequestId) -> Option<Awaits> {
        self.waiting.get(&request).map(|(_, awaits)| *awaits)
    }

    /// The caller whose deadline came first, if it has passed at `now`. It
    /// stays until answered (and so removed).
    pub(super) fn overdue(&self, now: Instant) -> Option<RequestId> {
        self.by_deadline
            .first()
            .filter(|(deadline, _)| *deadline <= now)
            .map(|(_, request)| *request)
    }

    /// Why `request` must fail before it is written, if it must: its
    /// caller's deadline has passed already (a timeout that ran out before
    /// the call reached the client, its driver running late), or the client
    /// is `overloaded`.
    pub(super) fn refused(&self, request: RequestId, now: Instant, overloaded: bool) -> Option<Unavailable> {
        match self.waiting.get(&request) {
            Some((deadline, _)) if *deadline <= now => Some(Unavailable::Timeout),
            _ => overloaded.then_some(Unavailable::Overloaded),
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.by_deadline.first().map(|(deadline, _)| *deadline)
    }
}
