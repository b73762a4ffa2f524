//! Acquires and renewals held back by the cluster: a `TRYAGAIN` (retry
//! shortly), a replica that turned out to be read-only, or a request made
//! before any slot table is known. None of them reached a script, so
//! nothing needs compensating; each is routed again at its time, or when
//! the caller's deadline fails it first.

use std::time::Instant;

use super::request::Op;
use crate::event::RequestId;

#[derive(Debug, Default)]
pub(super) struct Deferred {
    /// Ops to route again at their instant.
    timed: Vec<(Instant, Op)>,
    /// Ops to route once a slot table is known.
    topology: Vec<Op>,
}

impl Deferred {
    /// Routes `op` again at `at`.
    pub(super) fn until(&mut self, at: Instant, op: Op) {
        self.timed.push((at, op));
    }

    /// Routes `op` again once a slot table is known.
    pub(super) fn until_topology(&mut self, op: Op) {
        self.topology.push(op);
    }

    /// The ops whose time has come at `now`, in order.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Op> {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.timed)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.timed = later;
        due.into_iter().map(|(_, op)| op).collect()
    }

    /// The ops that waited for a slot table, in order.
    pub(super) fn take_awaiting_topology(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.topology)
    }

    /// Forgets `request` (its caller is gone); whether it was here.
    pub(super) fn remove(&mut self, request: RequestId) -> bool {
        let before = self.len();
        self.timed.retain(|(_, op)| op.call().request != request);
        self.topology.retain(|op| op.call().request != request);
        before != self.len()
    }

    pub(super) fn len(&self) -> usize {
        self.timed.len() + self.topology.len()
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.timed.iter().map(|(at, _)| *at).min()
    }
}
