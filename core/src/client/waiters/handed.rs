//! Hand-overs: a release moved a slot to a waiter, and the message saying
//! so is read here (delivered, checked again if heard late, or left to the
//! check of a waiter that went on under a new id), with the confirmations
//! `replica_acks` waits for.

use std::time::Instant;

use bytes::Bytes;

use super::{Effect, Waiters};
use crate::client::request::AcquireOp;
use crate::event::RequestId;
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use crate::server_clock::lease_expiry;

impl Waiters {
    /// A release handed slots to these waiters (lease id, fencing token).
    /// One parked here gets its permit at once, from the message: the slot
    /// is already its own in Redis, reserved until its queue entry would
    /// have expired (a renewal then extends it to a whole TTL). One whose
    /// check is in flight gets it from that check's reply, or from the
    /// next check. A slot handed to one of ours that is done waiting
    /// (`done_waiting` says which: issued here, not held) is a queue entry
    /// a failover brought back and a release has just turned into a
    /// reservation: nobody will claim it, so it goes now instead of
    /// blocking the slot for a waiter's lifetime.
    pub(in crate::client) fn handed(
        &mut self,
        now: Instant,
        channel: &[u8],
        handed: Vec<(Bytes, u64)>,
        done_waiting: impl Fn(&LeaseId) -> bool,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.deaf {
            return effects;
        }
        for (lease, token) in handed {
            let Some(request) = self.find(channel, &lease) else {
                // An id a waiter went on from: its check takes the slot over.
                if self.went_on_from(channel, &lease) {
                    continue;
                }
                let ours = LeaseId::parse(&lease).is_some_and(|id| done_waiting(&id));
                if let Some(keys) = SubjectKeys::of_wake_channel(channel).filter(|_| ours) {
                    self.leave(keys, lease, now);
                }
                continue;
            };
            match self.unpark(request) {
                Some(op) if self.heard_late(&op, now) => effects.push(Effect::CheckLate(op.resend())),
                Some(op) => effects.push(Effect::Handed { op, token }),
                // Its check is in flight: it checks again once answered (its
                // slot is reserved, and the check that runs after the
                // hand-over gets it).
                None => {
                    if let Some(entry) = self.entries.get_mut(&request) {
                        entry.rewake = true;
                    }
                }
            }
        }
        effects
    }

    /// Whether a hand-over to `op` was heard with less than half its
    /// reservation left (a stalled driver, a slow wake-up connection). The
    /// release ran after the waiter's last check (which queued it) was
    /// sent, so the slot is reserved a lifetime from then at least; with
    /// under half of that left, the renewal that confirms it would have
    /// little time to get through, and a permit must never reach its caller
    /// already spent. A check again gets the slot with a whole TTL while it
    /// is still reserved (or queues the waiter again if it is gone),
    /// answered within the acquire timeout as any grant.
    fn heard_late(&self, op: &AcquireOp, now: Instant) -> bool {
        if self.trusts_late {
            return false;
        }
        let reserved_until = lease_expiry(op.call.sent_at.unwrap_or(now), self.lifetime);
        reserved_until.saturating_duration_since(now) < self.lifetime / 2
    }

    /// Whether a waiter of `channel` went on from lease id `lease` and its
    /// check naming it has not run yet.
    fn went_on_from(&self, channel: &[u8], lease: &[u8]) -> bool {
        let Some(waiting) = self.by_channel.get(channel) else {
            return false;
        };
        waiting.iter().any(|request| {
            self.entries
                .get(request)
                .is_some_and(|entry| entry.previous.as_deref() == Some(lease))
        })
    }

    /// The waiter of `channel` holding lease id `lease`, if it waits here.
    fn find(&self, channel: &[u8], lease: &[u8]) -> Option<RequestId> {
        self.by_channel
            .get(channel)?
            .iter()
            .find(|request| self.entries.get(request).is_some_and(|entry| entry.lease == lease))
            .copied()
    }

    /// A hand-over waits for its confirming renewal `renewal` (with
    /// `replica_acks`).
    pub(in crate::client) fn confirming(&mut self, renewal: RequestId, op: AcquireOp, token: u64) {
        self.confirming.insert(renewal, (op, token));
    }

    /// The hand-over confirming renewal `renewal` was for, if any.
    pub(in crate::client) fn confirmed(&mut self, renewal: RequestId) -> Option<(AcquireOp, u64)> {
        self.confirming.remove(&renewal)
    }
}
