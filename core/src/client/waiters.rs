//! Waiting acquires between their checks.
//!
//! A waiting acquire runs `ACQUIRE_WAITING`: granted, or queued in its
//! subject's queue on the server (first come, first served across the
//! fleet). A queued one is *parked* here until something says a slot may be
//! free: a wake-up on its subject's shard channel (a release, a compensation
//! or a waiter leaving), the subscription to that channel being confirmed
//! (a hand-over may have gone by before: every waiter parked there checks),
//! or its periodic check, which also
//! keeps its queue entry alive. Then it is sent again, with the same lease
//! id, which is its place in the queue.
//!
//! Per channel the waiters are kept in local arrival order: a wake-up goes
//! to the first one parked (the server's queue has them in the same order),
//! and one that arrives while every waiter of the channel is in flight is
//! not lost: the first in flight checks again as soon as its answer is
//! "queued".
//!
//! A sub-machine: it owns the waiters, their checks (its one timer) and the
//! `LEAVE`s owed, and answers with [`Effect`]s (send this check again,
//! deliver this hand-over) that the client applies. It knows nothing of
//! the client, its connections or its counts.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::request::{AcquireOp, ReleaseKind};
use super::subscriber::Heard;
use crate::event::RequestId;
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;

mod handed;
mod leaves;

pub(super) use leaves::Leave;
use leaves::OwedLeaves;

/// What the client is to do for a waiter.
#[derive(Debug)]
pub(super) enum Effect {
    /// Send this waiting acquire again, as a fresh write: the same lease
    /// id, so the same place in the queue.
    Check(AcquireOp),
    /// A release handed a slot to this waiter, but the message came with
    /// under half its reservation left: send it again as a check, which
    /// takes the slot with a whole TTL while it is still reserved.
    CheckLate(AcquireOp),
    /// A release handed a slot to this waiter, with its fencing token:
    /// deliver it (and then remove the waiter), or confirm it first. It is
    /// no longer parked.
    Handed { op: AcquireOp, token: u64 },
}

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
    /// Its current lease id was answered "queued": it has a place to lose.
    placed: bool,
    /// The lease id it went on from, until a check naming it has run (that
    /// check takes over what the old id has).
    previous: Option<Bytes>,
}

/// Every waiting acquire (parked or in flight), by request and by channel,
/// and the queue entries to take back.
#[derive(Debug)]
pub(super) struct Waiters {
    /// How often a parked waiter checks on its own, and how long a queue
    /// entry lives without one.
    recheck: Duration,
    /// How long a queue entry lives without a check: a hand-over reserves
    /// the slot until then.
    lifetime: Duration,
    /// An injected bug for the simulator: wake-ups are ignored.
    deaf: bool,
    /// An injected bug for the simulator: a hand-over heard late is
    /// delivered from the message all the same.
    trusts_late: bool,
    entries: HashMap<RequestId, Entry>,
    by_channel: HashMap<Bytes, VecDeque<RequestId>>,
    checks: BTreeSet<(Instant, RequestId)>,
    /// Queue entries whose callers left: `LEAVE`s to send, kept while
    /// their node is not ready, until they are moot.
    leaving: OwedLeaves,
    /// Channels that gained their first waiter or lost their last one.
    changed: HashSet<Bytes>,
    /// Hand-overs waiting for their confirmation (with `replica_acks`): by
    /// the confirming renewal, the waiter's acquire and its fencing token.
    confirming: HashMap<RequestId, (AcquireOp, u64)>,
}

impl Waiters {
    pub(super) fn new(recheck: Duration, lifetime: Duration) -> Self {
        Self {
            recheck,
            lifetime,
            deaf: false,
            trusts_late: false,
            entries: HashMap::new(),
            by_channel: HashMap::new(),
            checks: BTreeSet::new(),
            leaving: OwedLeaves::new(lifetime),
            changed: HashSet::new(),
            confirming: HashMap::new(),
        }
    }

    /// Injected bugs for the simulator: wake-ups and hand-overs go unheard
    /// (only the waiters' own checks serve them), or a hand-over heard
    /// with under half its reservation left is delivered from the message
    /// as any other.
    #[cfg(feature = "fault-injection")]
    pub(super) fn inject_bugs(&mut self, bugs: &crate::fault::InjectedBugs) {
        self.deaf = bugs.skip_wake_up;
        self.trusts_late = bugs.trust_late_hand_overs;
    }

    #[cfg(test)]
    pub(super) fn ignore_wake_ups_for_test(&mut self) {
        self.deaf = true;
    }

    /// Starts waiting acquire `op` (in flight until it is answered).
    pub(super) fn start(&mut self, op: &AcquireOp) {
        let (request, keys) = (op.call.request, &op.call.keys);
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
                lease: op.call.lease_bytes.clone(),
                parked: None,
                rewake: false,
                queued: false,
                placed: false,
                previous: None,
            },
        );
    }

    /// Whether the server ever answered `request` "queued": its deadline
    /// passing is then the limit's answer (`Exceeded`), not silence.
    pub(super) fn was_queued(&self, request: RequestId) -> bool {
        self.entries.get(&request).is_some_and(|entry| entry.queued)
    }

    /// Forgets `request`. If the server may still queue it, a `LEAVE` is
    /// owed from `now`, unless `granted` (the grant took it out of the
    /// queue).
    pub(super) fn remove(&mut self, request: RequestId, granted: bool, now: Instant) {
        let Some(entry) = self.entries.remove(&request) else {
            return;
        };
        if let Some((_, at)) = entry.parked {
            self.checks.remove(&(at, request));
        }
        if !granted {
            // Its renamed check may not have run: the old id is taken back.
            if let Some(previous) = entry.previous {
                self.leave(entry.keys.clone(), previous, now);
            }
            if entry.queued {
                self.leave(entry.keys, entry.lease, now);
            }
        }
        if let Some(waiting) = self.by_channel.get_mut(&entry.channel) {
            waiting.retain(|r| *r != request);
            if waiting.is_empty() {
                self.by_channel.remove(&entry.channel);
                self.changed.insert(entry.channel);
            }
        }
    }

    /// The server queued `op` (`entered`: as a new entry): it is parked
    /// until a wake-up or its own check; or checks again at once if a
    /// wake-up came while it was in flight. If its caller left meanwhile,
    /// its queue entry is taken back instead.
    ///
    /// One queued before that enters again lost its place, and any slot a
    /// release handed it (its reservation ran out first). That hand-over's
    /// message may still be on its way, on the other connection, and read
    /// now it would give the caller a permit with no slot in Redis: so the
    /// waiter goes on under a `fresh` lease id, checking at once. That
    /// check names the old id (`Wait::previous`) and takes over what it
    /// has in Redis by then: its new place, or a slot handed to it since.
    /// A message naming the old id finds no waiter and is left to that
    /// check (`handed`); if the waiter ends before the check ran, a
    /// `LEAVE` takes the old id back.
    pub(super) fn queued(
        &mut self,
        now: Instant,
        mut op: AcquireOp,
        entered: bool,
        fresh: impl FnOnce(&LeaseId) -> LeaseId,
    ) -> Option<Effect> {
        let request = op.call.request;
        let Some(entry) = self.entries.get_mut(&request) else {
            self.leave(op.call.keys, op.call.lease_bytes, now);
            return None;
        };
        let previous = op.wait.as_mut().map(|wait| &mut wait.previous);
        if entered && entry.placed {
            let old = op.call.renamed(fresh(&op.call.lease));
            entry.lease = op.call.lease_bytes.clone();
            (entry.placed, entry.rewake) = (false, false);
            if let Some(previous) = previous {
                *previous = Some(old.clone());
            }
            entry.previous = Some(old);
            return Some(Effect::Check(op.resend()));
        }
        // A check naming the old id ran: nothing is left under it.
        if let Some(previous) = previous {
            *previous = None;
        }
        entry.previous = None;
        let next_check = now + self.recheck;
        (entry.queued, entry.placed) = (true, true);
        entry.parked = Some((op, next_check));
        self.checks.insert((next_check, request));
        if std::mem::take(&mut entry.rewake) {
            return self.check(request);
        }
        None
    }

    /// Takes `request` out of its parking to be sent again, as a fresh
    /// write (its lease, if granted, lives a TTL from then).
    fn check(&mut self, request: RequestId) -> Option<Effect> {
        Some(Effect::Check(self.unpark(request)?.resend()))
    }

    fn unpark(&mut self, request: RequestId) -> Option<AcquireOp> {
        let (op, at) = self.entries.get_mut(&request)?.parked.take()?;
        self.checks.remove(&(at, request));
        Some(op)
    }

    /// A wake-up on `channel` for `slots` freed slots (or its subscription
    /// confirmed: one): the first `slots` parked waiters check again.
    /// Those before them are in flight, and their checks may have run
    /// before the slots freed: each checks again as soon as it is answered
    /// "queued".
    pub(super) fn woken(&mut self, channel: &[u8], slots: usize) -> Vec<Effect> {
        let woken = self.wake(channel, slots.max(1), |_| true);
        woken.into_iter().filter_map(|request| self.check(request)).collect()
    }

    /// A release named the waiters first in line: those that wait here
    /// check again (the others are some other replica's).
    pub(super) fn named(&mut self, channel: &[u8], ids: &[Bytes]) -> Vec<Effect> {
        let woken = self.wake(channel, usize::MAX, |lease| ids.contains(lease));
        woken.into_iter().filter_map(|request| self.check(request)).collect()
    }

    /// Walks `channel`'s waiters in order, those whose lease `wanted`
    /// says: parked ones are returned (at most `most`) to check again, and
    /// in-flight ones met before that check again once answered.
    fn wake(&mut self, channel: &[u8], most: usize, wanted: impl Fn(&Bytes) -> bool) -> Vec<RequestId> {
        let mut woken = Vec::new();
        if self.deaf {
            return woken;
        }
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

    /// The next parked waiter's own check, a `LEAVE` owed and not tried
    /// yet (due at once), or the next one that stops mattering (so that a
    /// limiter waiting to drain is woken to drop it).
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let leave = self.leaving.poll_timeout();
        self.checks.first().map(|(at, _)| *at).into_iter().chain(leave).min()
    }

    /// The next parked waiter whose own check is due at `now`, to send
    /// again. (`LEAVE`s due are taken by [`Waiters::take_leaves`].)
    pub(super) fn handle_timeout(&mut self, now: Instant) -> Option<Effect> {
        let (at, request) = *self.checks.first().filter(|(at, _)| *at <= now)?;
        match self.check(request) {
            Some(effect) => Some(effect),
            None => {
                // Not parked any more: a stale check, dropped.
                self.checks.remove(&(at, request));
                self.handle_timeout(now)
            }
        }
    }

    /// Waiting acquires, parked or in flight.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// How a release on the subject of `keys` goes: to its first waiter in
    /// its own call if anyone here waits on it (else plain, no name built).
    pub(super) fn release_kind(&self, keys: &SubjectKeys) -> ReleaseKind {
        match !self.by_channel.is_empty() && self.wants(&keys.wake_channel()) {
            true => ReleaseKind::ToWaiters,
            false => ReleaseKind::Release,
        }
    }

    /// Whether anyone here waits on `channel`.
    pub(super) fn wants(&self, channel: &[u8]) -> bool {
        self.by_channel.contains_key(channel)
    }

    /// What one message on a wake-up connection means for the waiters.
    pub(super) fn hear(&mut self, now: Instant, news: Heard, done_waiting: impl Fn(&LeaseId) -> bool) -> Vec<Effect> {
        match news {
            Heard::Wake(channel) => self.woken(&channel, 1),
            Heard::Subscribed(channel) => self.woken(&channel, usize::MAX),
            Heard::WakeThese(channel, ids) => self.named(&channel, &ids),
            Heard::Handed(channel, handed) => self.handed(now, &channel, handed, done_waiting),
        }
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
    /// `now`.
    pub(super) fn leave(&mut self, keys: SubjectKeys, lease: Bytes, now: Instant) {
        self.leaving.owe(keys, lease, now);
    }

    /// A `LEAVE` that did not get through (at `now`), to try again until
    /// `until`.
    pub(super) fn leave_again(&mut self, keys: SubjectKeys, lease: Bytes, until: Instant, now: Instant) {
        self.leaving.again(keys, lease, until, now);
    }

    /// The `LEAVE`s to write now (see [`OwedLeaves::take`]).
    pub(super) fn take_leaves(
        &mut self,
        now: Instant,
        ready_node: impl Fn(&SubjectKeys) -> Option<usize>,
    ) -> Vec<Leave> {
        self.leaving.take(now, ready_node)
    }

    /// `LEAVE`s not written yet.
    pub(super) fn leaves_owed(&self) -> usize {
        self.leaving.len()
    }

    /// Channels that gained their first waiter or lost their last one.
    pub(super) fn take_changed(&mut self) -> HashSet<Bytes> {
        std::mem::take(&mut self.changed)
    }
}
