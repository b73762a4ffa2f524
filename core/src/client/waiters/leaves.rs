//! The `LEAVE`s owed: queue entries whose waiters are done with them (the
//! caller left, or a hand-over went to an id nobody waits on any more),
//! kept until their node is ready to take them or they stop mattering.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::key::SubjectKeys;

/// A `LEAVE` to write now, on `node`.
#[derive(Debug)]
pub(in crate::client) struct Leave {
    pub(in crate::client) node: usize,
    pub(in crate::client) keys: SubjectKeys,
    pub(in crate::client) lease: Bytes,
    /// When it stops mattering.
    pub(in crate::client) until: Instant,
}

/// A `LEAVE` owed for a queue entry whose waiter is done with it.
#[derive(Debug)]
struct Owed {
    keys: SubjectKeys,
    lease: Bytes,
    /// When it is to be sent (owed, or tried again after a refusal):
    /// `poll_timeout` names it, so a driver sends it then whatever call
    /// made it owed. `None`: when its node is ready.
    due: Option<Instant>,
    /// When it stops mattering: the entry, or a slot a release handed it,
    /// has expired on its own by then.
    until: Instant,
}

#[derive(Debug)]
pub(super) struct OwedLeaves {
    /// How long a queue entry lives without its waiter's call.
    lifetime: Duration,
    owed: Vec<Owed>,
}

impl OwedLeaves {
    pub(super) fn new(lifetime: Duration) -> Self {
        Self {
            lifetime,
            owed: Vec::new(),
        }
    }

    /// Owed from `now`; it stops mattering a waiter's lifetime later.
    pub(super) fn owe(&mut self, keys: SubjectKeys, lease: Bytes, now: Instant) {
        self.owed.push(Owed {
            keys,
            lease,
            due: Some(now),
            until: now + self.lifetime,
        });
    }

    /// One that did not get through at `now` (refused, or its connection
    /// lost), to try again until `until`: after a sixteenth of a lifetime,
    /// so that a refusal that lasts (a busy server, a slot migrating) is
    /// not asked again at every turn of the driver.
    pub(super) fn again(&mut self, keys: SubjectKeys, lease: Bytes, until: Instant, now: Instant) {
        self.owed.push(Owed {
            keys,
            lease,
            due: Some(now + (self.lifetime / 16).max(Duration::from_millis(1))),
            until,
        });
    }

    /// The next one owed and not tried yet (due at once), or the next one
    /// that stops mattering (so that a limiter waiting to drain is woken to
    /// drop it).
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.owed.iter().map(|owed| owed.due.unwrap_or(owed.until)).min()
    }

    /// Those to write now: those due whose node `ready_node` names. One
    /// not due yet waits for its time; one whose node is not ready waits
    /// for it; one past its `until` is dropped (the
    /// entry, or a slot a release handed it, expired on its own by then). A
    /// lost `LEAVE` costs little, but it would block the queue that long,
    /// and a limiter that drains owes them like releases.
    pub(super) fn take(&mut self, now: Instant, ready_node: impl Fn(&SubjectKeys) -> Option<usize>) -> Vec<Leave> {
        let mut sendable = Vec::new();
        let mut waiting = Vec::new();
        for mut owed in std::mem::take(&mut self.owed) {
            if owed.until <= now {
                continue;
            }
            if owed.due.is_some_and(|due| due > now) {
                waiting.push(owed);
                continue;
            }
            match ready_node(&owed.keys) {
                Some(node) => sendable.push(Leave {
                    node,
                    keys: owed.keys,
                    lease: owed.lease,
                    until: owed.until,
                }),
                None => {
                    owed.due = None; // until the node is ready, or the entry gone
                    waiting.push(owed);
                }
            }
        }
        self.owed = waiting;
        sendable
    }

    pub(super) fn len(&self) -> usize {
        self.owed.len()
    }
}
