//! Waiting acquires between their checks.
//!
//! A waiting acquire runs `ACQUIRE_WAITING`: granted, or queued in its
//! subject's queue on the server (first come, first served across the
//! fleet). A queued one is *parked* here until something says a slot may be
//! free: a wake-up on its subject's shard channel (a release, a compensation
//! or a waiter leaving), the subscription to that channel being confirmed
//! (a wake-up may have gone by before), or its periodic check, which also
//! keeps its queue entry alive. Then it is sent again, with the same lease
//! id, which is its place in the queue.
//!
//! Per channel the waiters are kept in local arrival order: a wake-up goes
//! to the first one parked (the server's queue has them in the same order),
//! and one that arrives while every waiter of the channel is in flight is
//! not lost: the first in flight checks again as soon as its answer is
//! "queued".

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use super::request::{AcquireOp, Op, Request};
use super::topology::Route;
use super::Client;
use crate::event::RequestId;
use crate::key::SubjectKeys;

#[derive(Debug)]
struct Entry {
    /// Its subject's wake channel.
    channel: Bytes,
    keys: SubjectKeys,
    lease: Bytes,
    /// Between checks: the request, and when it checks again on its own.
    parked: Option<(AcquireOp, Instant)>,
    /// A wake-up came while it was in flight: check again at once.
    rewake: bool,
    /// The server may hold a queue entry for it (it was answered "queued").
    queued: bool,
}

/// Every waiting acquire (parked or in flight), by request and by channel,
/// and the queue entries to take back.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    entries: HashMap<RequestId, Entry>,
    by_channel: HashMap<Bytes, VecDeque<RequestId>>,
    checks: BTreeSet<(Instant, RequestId)>,
    /// Queue entries whose callers left: `LEAVE`s to send.
    leaving: Vec<(SubjectKeys, Bytes)>,
    /// Channels that gained their first waiter or lost their last one.
    changed: HashSet<Bytes>,
}

impl Waiters {
    fn insert(&mut self, request: RequestId, keys: &SubjectKeys, lease: Bytes) {
        let channel = keys.wake_channel();
        let waiting = self.by_channel.entry(channel.clone()).or_default();
        if waiting.is_empty() {
            self.changed.insert(channel.clone());
        }
        waiting.push_back(request);
        self.entries.insert(
            request,
            Entry {
                channel,
                keys: keys.clone(),
                lease,
                parked: None,
                rewake: false,
                queued: false,
            },
        );
    }

    pub(super) fn contains(&self, request: RequestId) -> bool {
        self.entries.contains_key(&request)
    }

    /// Whether the server ever answered `request` "queued": its deadline
    /// passing is then the limit's answer (`Exceeded`), not silence.
    pub(super) fn was_queued(&self, request: RequestId) -> bool {
        self.entries.get(&request).is_some_and(|entry| entry.queued)
    }

    /// Forgets `request`. If the server may still queue it, a `LEAVE` is
    /// owed, unless `granted` (the grant took it out of the queue).
    pub(super) fn remove(&mut self, request: RequestId, granted: bool) {
        let Some(entry) = self.entries.remove(&request) else {
            return;
        };
        if let Some((_, at)) = entry.parked {
            self.checks.remove(&(at, request));
        }
        if entry.queued && !granted {
            self.leaving.push((entry.keys, entry.lease));
        }
        if let Some(waiting) = self.by_channel.get_mut(&entry.channel) {
            waiting.retain(|r| *r != request);
            if waiting.is_empty() {
                self.by_channel.remove(&entry.channel);
                self.changed.insert(entry.channel);
            }
        }
    }

    /// Parks `op` until `next_check`; true if a wake-up came while it was
    /// in flight (it should check again at once).
    fn park(&mut self, op: AcquireOp, next_check: Instant) -> bool {
        let request = op.call.request;
        let Some(entry) = self.entries.get_mut(&request) else {
            return false;
        };
        entry.queued = true;
        entry.parked = Some((op, next_check));
        self.checks.insert((next_check, request));
        std::mem::take(&mut entry.rewake)
    }

    /// Takes `request` out of its parking to be sent.
    fn unpark(&mut self, request: RequestId) -> Option<AcquireOp> {
        let (op, at) = self.entries.get_mut(&request)?.parked.take()?;
        self.checks.remove(&(at, request));
        Some(op)
    }

    /// Who a wake-up on `channel` for `slots` freed slots goes to: the
    /// first `slots` parked waiters. Those before them are in flight, and
    /// their checks may have run before the slots freed: each checks again
    /// as soon as it is answered "queued".
    fn woken(&mut self, channel: &[u8], slots: usize) -> Vec<RequestId> {
        let mut woken = Vec::new();
        let Some(waiting) = self.by_channel.get(channel) else {
            return woken;
        };
        for request in waiting {
            if woken.len() == slots {
                break;
            }
            let Some(entry) = self.entries.get_mut(request) else {
                continue;
            };
            if entry.parked.is_some() {
                woken.push(*request);
            } else {
                entry.rewake = true;
            }
        }
        woken
    }

    /// The waiters of `channel` with these lease ids: parked ones to check
    /// again; in-flight ones check again once answered.
    fn named(&mut self, channel: &[u8], ids: &[Bytes]) -> Vec<RequestId> {
        let mut woken = Vec::new();
        let Some(waiting) = self.by_channel.get(channel) else {
            return woken;
        };
        for request in waiting {
            let Some(entry) = self.entries.get_mut(request) else {
                continue;
            };
            if !ids.contains(&entry.lease) {
                continue;
            }
            if entry.parked.is_some() {
                woken.push(*request);
            } else {
                entry.rewake = true;
            }
        }
        woken
    }

    /// A parked waiter whose own check is due at `now`.
    fn due(&self, now: Instant) -> Option<RequestId> {
        self.checks
            .first()
            .filter(|(at, _)| *at <= now)
            .map(|(_, request)| *request)
    }

    pub(super) fn next_check(&self) -> Option<Instant> {
        self.checks.first().map(|(at, _)| *at)
    }

    /// Waiting acquires, parked or in flight.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether anyone here waits on `channel`.
    pub(super) fn wants(&self, channel: &[u8]) -> bool {
        self.by_channel.contains_key(channel)
    }

    /// Every channel someone waits on, with a waiter's subject keys (for
    /// routing).
    pub(super) fn channels(&self) -> impl Iterator<Item = (&Bytes, &SubjectKeys)> + '_ {
        self.by_channel.iter().filter_map(|(channel, waiting)| {
            let first = waiting.front()?;
            Some((channel, &self.entries.get(first)?.keys))
        })
    }

    /// A queue entry to take back (its waiter is done with it).
    pub(super) fn leave(&mut self, keys: SubjectKeys, lease: Bytes) {
        self.leaving.push((keys, lease));
    }

    pub(super) fn take_changed(&mut self) -> HashSet<Bytes> {
        std::mem::take(&mut self.changed)
    }
}

impl Client {
    /// Starts a waiting acquire (see [`Client::acquire_waiting`]).
    pub(super) fn start_waiting(&mut self, request: RequestId, op: &AcquireOp) {
        self.waiters.insert(request, &op.call.keys, op.call.lease_bytes.clone());
    }

    /// The server queued `op`: park it until a wake-up or its own check;
    /// if its caller left meanwhile, take it out of the queue instead.
    pub(super) fn park(&mut self, now: Instant, op: AcquireOp) {
        let request = op.call.request;
        if !self.waiters.contains(request) {
            self.waiters.leaving.push((op.call.keys, op.call.lease_bytes));
            return;
        }
        let next_check = now + self.config.waiter_recheck();
        if self.waiters.park(op, next_check) {
            self.check_again(now, request);
        }
    }

    /// Sends a parked waiter again: the same lease id, so the same place.
    pub(super) fn check_again(&mut self, now: Instant, request: RequestId) {
        let Some(mut op) = self.waiters.unpark(request) else {
            return;
        };
        let call = &mut op.call;
        // A fresh write: its lease, if granted, lives a TTL from now.
        call.sent_at = None;
        call.ask = None;
        call.redirects = 0;
        self.route_op(now, Op::Acquire(op));
    }

    /// A wake-up arrived on `channel` for `slots` freed slots (or its
    /// subscription was confirmed: one).
    pub(super) fn on_wake(&mut self, now: Instant, channel: &[u8], slots: usize) {
        if self.bug_skip_wake_up() {
            return;
        }
        for request in self.waiters.woken(channel, slots.max(1)) {
            self.check_again(now, request);
        }
    }

    /// A release named the waiters first in line: those that wait here
    /// check again (the others are some other replica's).
    pub(super) fn wake_these(&mut self, now: Instant, channel: &[u8], ids: &[Bytes]) {
        if self.bug_skip_wake_up() {
            return;
        }
        for request in self.waiters.named(channel, ids) {
            self.check_again(now, request);
        }
    }

    /// Parked waiters whose own check is due.
    pub(super) fn check_due_waiters(&mut self, now: Instant) {
        while let Some(request) = self.waiters.due(now) {
            self.check_again(now, request);
        }
    }

    /// Writes the `LEAVE`s owed, on the nodes that serve them; one whose
    /// node is not ready is dropped (its queue entry expires on its own).
    pub(super) fn send_leaves(&mut self, now: Instant) {
        for (keys, lease) in std::mem::take(&mut self.waiters.leaving) {
            let Route::Node(node) = self.topology.route(keys.slot()) else {
                continue;
            };
            if self.nodes[node].is_ready() {
                self.stats.waiters_left += 1;
                let deadline = now + self.config.request_liveness;
                self.send(node, Request::Leave(keys, lease), deadline);
            }
        }
    }
}
