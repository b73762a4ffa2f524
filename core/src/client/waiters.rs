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

use super::request::{AcquireOp, Call, Op, RenewOp, Request};
use super::topology::Route;
use super::Client;
use crate::event::{Lease, Outcome, RequestId};
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::server_clock::lease_expiry;

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

/// A `LEAVE` owed for a queue entry whose waiter is done with it.
#[derive(Debug)]
struct OwedLeave {
    keys: SubjectKeys,
    lease: Bytes,
    /// When it was owed, until a first attempt: `poll_timeout` names it, so
    /// a driver sends it at once whatever call made it owed.
    due: Option<Instant>,
    /// When it stops mattering: the entry, or a slot a release handed it,
    /// has expired on its own by then.
    until: Instant,
}

/// Every waiting acquire (parked or in flight), by request and by channel,
/// and the queue entries to take back.
#[derive(Debug, Default)]
pub(super) struct Waiters {
    entries: HashMap<RequestId, Entry>,
    by_channel: HashMap<Bytes, VecDeque<RequestId>>,
    checks: BTreeSet<(Instant, RequestId)>,
    /// Queue entries whose callers left: `LEAVE`s to send, kept while
    /// their node is not ready, until they are moot.
    leaving: Vec<OwedLeave>,
    /// Channels that gained their first waiter or lost their last one.
    changed: HashSet<Bytes>,
    /// Hand-overs waiting for their confirmation (with `replica_acks`): by
    /// the confirming renewal, the waiter's acquire and its fencing token.
    confirming: HashMap<RequestId, (AcquireOp, u64)>,
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
    /// owed from `now` until `until`, unless `granted` (the grant took it
    /// out of the queue).
    pub(super) fn remove(&mut self, request: RequestId, granted: bool, now: Instant, until: Instant) {
        let Some(entry) = self.entries.remove(&request) else {
            return;
        };
        if let Some((_, at)) = entry.parked {
            self.checks.remove(&(at, request));
        }
        if entry.queued && !granted {
            self.leave(entry.keys, entry.lease, now, until);
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
        self.wake(channel, slots, |_| true)
    }

    /// The waiters of `channel` with these lease ids: parked ones to check
    /// again; in-flight ones check again once answered.
    fn named(&mut self, channel: &[u8], ids: &[Bytes]) -> Vec<RequestId> {
        self.wake(channel, usize::MAX, |lease| ids.contains(lease))
    }

    /// Walks `channel`'s waiters in order, those whose lease `wanted`
    /// says: parked ones are returned (at most `most`) to check again, and
    /// in-flight ones met before that check again once answered.
    fn wake(&mut self, channel: &[u8], most: usize, wanted: impl Fn(&Bytes) -> bool) -> Vec<RequestId> {
        let mut woken = Vec::new();
        let Some(waiting) = self.by_channel.get(channel) else {
            return woken;
        };
        for request in waiting {
            if woken.len() == most {
                break;
            }
            let Some(entry) = self.entries.get_mut(request) else {
                continue;
            };
            if !wanted(&entry.lease) {
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

    /// The waiter of `channel` holding lease id `lease`, if it waits here.
    fn find(&self, channel: &[u8], lease: &[u8]) -> Option<RequestId> {
        self.by_channel
            .get(channel)?
            .iter()
            .find(|request| self.entries.get(request).is_some_and(|entry| entry.lease == lease))
            .copied()
    }

    /// Its check is in flight: it checks again once answered (its slot is
    /// reserved, and the check that runs after the hand-over gets it).
    fn rewake(&mut self, request: RequestId) {
        if let Some(entry) = self.entries.get_mut(&request) {
            entry.rewake = true;
        }
    }

    /// A parked waiter whose own check is due at `now`.
    fn due(&self, now: Instant) -> Option<RequestId> {
        self.checks
            .first()
            .filter(|(at, _)| *at <= now)
            .map(|(_, request)| *request)
    }

    /// The next parked waiter's own check, a `LEAVE` owed and not tried
    /// yet (due at once), or the next one that stops mattering (so that a
    /// limiter waiting to drain is woken to drop it).
    pub(super) fn next_check(&self) -> Option<Instant> {
        let leave = self.leaving.iter().map(|owed| owed.due.unwrap_or(owed.until)).min();
        self.checks.first().map(|(at, _)| *at).into_iter().chain(leave).min()
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

    /// A queue entry to take back (its waiter is done with it), owed from
    /// `now`; it stops mattering at `until`.
    pub(super) fn leave(&mut self, keys: SubjectKeys, lease: Bytes, now: Instant, until: Instant) {
        self.leaving.push(OwedLeave {
            keys,
            lease,
            due: Some(now),
            until,
        });
    }

    /// A `LEAVE` that did not get through, to try again until `until`.
    pub(super) fn leave_again(&mut self, keys: SubjectKeys, lease: Bytes, until: Instant) {
        self.leaving.push(OwedLeave {
            keys,
            lease,
            due: None,
            until,
        });
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
            let until = self.leave_until(now);
            self.waiters.leave(op.call.keys, op.call.lease_bytes, now, until);
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

    /// A release handed slots to these waiters (lease id, fencing token).
    /// One parked here gets its permit at once, from the message: the slot
    /// is already its own in Redis, reserved until its queue entry would
    /// have expired, and a renewal sent right away extends it to a whole
    /// TTL (a renewal never creates a lease: if the caller gave the permit
    /// back first, it finds nothing). One whose check is in flight gets it
    /// from that check's reply, or from the next check.
    pub(super) fn take_handed(&mut self, now: Instant, channel: &[u8], handed: Vec<(Bytes, u64)>) {
        if self.bug_skip_wake_up() {
            return;
        }
        for (lease, token) in handed {
            let Some(request) = self.waiters.find(channel, &lease) else {
                self.leave_unclaimed(now, channel, lease);
                continue;
            };
            match self.waiters.unpark(request) {
                Some(op) => self.deliver_handed(now, op, token),
                None => self.waiters.rewake(request),
            }
        }
    }

    /// A slot handed to an id no waiter here waits with: another client's
    /// (its own to claim), one held already (the same lease, handed again),
    /// or one of ours that is done waiting. That last is a queue entry a
    /// failover brought back (the replica had not seen it served or leave)
    /// and a release has just turned into a reservation: nobody will claim
    /// it, so it goes now instead of blocking the slot for a waiter's
    /// lifetime.
    fn leave_unclaimed(&mut self, now: Instant, channel: &[u8], lease: Bytes) {
        let Some(id) = LeaseId::parse(&lease) else {
            return;
        };
        if !self.lease_ids.issued(&id) || self.held.contains(&id) {
            return;
        }
        if let Some(keys) = SubjectKeys::of_wake_channel(channel) {
            let until = self.leave_until(now);
            self.waiters.leave(keys, lease, now, until);
        }
    }

    fn deliver_handed(&mut self, now: Instant, op: AcquireOp, token: u64) {
        self.stats.handed_over += 1;
        if self.config.replica_acks.is_some() {
            return self.confirm_handed(now, op, token);
        }
        let request = op.call.request;
        // The release ran after this waiter's last check (which queued it)
        // was sent: the reservation lives its lifetime from then at least.
        let sent = op.call.sent_at.unwrap_or(now);
        let lease = Lease {
            id: op.call.lease,
            keys: op.call.keys.clone(),
            expires_at: lease_expiry(sent, self.config.waiter_lifetime()),
            fencing_token: token,
            granted_at: now,
            // The renewal sent now runs within its liveness, and extends
            // the lease a TTL from then: releases keep trying until that.
            release_until: now + self.config.request_liveness + self.config.lease_ttl,
        };
        self.waiters.remove(request, true, now, now);
        self.held.insert(now, &lease, op.limit);
        // The renewal answers no caller: its outcome only updates the held
        // lease (or finds it given back already).
        let renewal = RequestId(self.next_request);
        self.next_request += 1;
        let call = Call::new(renewal, lease.id.clone(), lease.keys.clone());
        let confirm = RenewOp {
            call,
            token,
            granted_at: now,
        };
        self.finish(now, request, Outcome::Granted(lease));
        self.route_op(now, Op::Renew(confirm));
    }

    /// With `replica_acks`, a hand-over is delivered as any grant is: once a
    /// `WAIT` says enough replicas have it. The release that made it ran on
    /// another client's connection, which `WAIT` here does not cover; the
    /// renewal that confirms it runs on this one, after it in the
    /// replication stream, so a `WAIT` after the renewal covers both.
    fn confirm_handed(&mut self, now: Instant, op: AcquireOp, token: u64) {
        let renewal = RequestId(self.next_request);
        self.next_request += 1;
        self.callers.insert(
            renewal,
            now + self.config.request_liveness,
            super::callers::Awaits::HandOver,
        );
        let call = Call::new(renewal, op.call.lease.clone(), op.call.keys.clone());
        let confirm = RenewOp {
            call,
            token,
            granted_at: now,
        };
        self.waiters.confirming.insert(renewal, (op, token));
        self.route_op(now, Op::Renew(confirm));
    }

    /// The renewal that confirms a hand-over ended (see `confirm_handed`).
    /// Extended: the grant waits for a `WAIT` written at once on that node.
    /// Otherwise the reservation is gone (or unconfirmed): the waiter checks
    /// again, keeping its place if it still has one.
    pub(super) fn handed_confirmed(&mut self, now: Instant, renewal: RequestId, extended: bool) {
        let Some((mut op, token)) = self.waiters.confirming.remove(&renewal) else {
            return;
        };
        let node = match self.topology.route(op.call.keys.slot()) {
            Route::Node(node) if extended && self.nodes[node].is_ready() => node,
            _ => {
                op.call.sent_at = None;
                op.call.ask = None;
                op.call.redirects = 0;
                return self.route_op(now, Op::Acquire(op));
            }
        };
        let acks = self
            .config
            .replica_acks
            .expect("confirmations wait only with replica_acks");
        let conn = self.nodes[node].connection.as_mut().expect("ready");
        conn.unreplicated.push((op, token));
        let deadline = now + self.config.request_liveness + acks.timeout;
        self.send(node, Request::Wait, deadline);
    }

    /// Parked waiters whose own check is due.
    pub(super) fn check_due_waiters(&mut self, now: Instant) {
        while let Some(request) = self.waiters.due(now) {
            self.check_again(now, request);
        }
    }

    /// Writes the `LEAVE`s owed, on the nodes that serve them; one whose
    /// node is not ready waits for it. A lost `LEAVE` costs little (the
    /// entry, or a slot a release handed it, lasts the waiter's lifetime at
    /// most), but it would block the queue that long, and a limiter that
    /// drains owes them like releases.
    pub(super) fn send_leaves(&mut self, now: Instant) {
        let mut waiting = Vec::new();
        for mut owed in std::mem::take(&mut self.waiters.leaving) {
            if owed.until <= now {
                continue; // expired on its own by now
            }
            let ready = match self.topology.route(owed.keys.slot()) {
                Route::Node(node) => Some(node).filter(|node| self.nodes[*node].is_ready()),
                Route::AwaitTopology | Route::NoOwner => None,
            };
            let Some(node) = ready else {
                owed.due = None; // until the node is ready, or the entry gone
                waiting.push(owed);
                continue;
            };
            self.stats.waiters_left += 1;
            let deadline = now + self.config.request_liveness;
            self.send(node, Request::Leave(owed.keys, owed.lease, owed.until), deadline);
        }
        self.waiters.leaving = waiting;
    }

    /// How long a queue entry may outlive its waiter: its lifetime.
    pub(super) fn leave_until(&self, now: Instant) -> Instant {
        now + self.config.waiter_lifetime()
    }

    /// `LEAVE`s not written yet.
    pub(super) fn leaves_owed(&self) -> usize {
        self.waiters.leaving.len()
    }
}
