//! The leases this client's callers hold now: what a server that lost its
//! data is given back. A grant enters when its outcome is delivered; a
//! release, a lost renewal or a withdrawn grant takes it out, and one whose
//! expiry has passed is dropped on the next sweep.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Instant;

use crate::event::Lease;
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;

#[derive(Debug, Default)]
pub(super) struct HeldLeases {
    leases: HashMap<LeaseId, Held>,
    /// The size at the last sweep: the next sweep comes once it has doubled,
    /// so that leases dropped without a release (outside a runtime) cannot
    /// pile up, at an amortised O(1) per grant.
    swept_at: usize,
}

/// One held lease: enough to write it back.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) keys: SubjectKeys,
    pub(super) limit: NonZeroU32,
    pub(super) expires_at: Instant,
}

impl HeldLeases {
    pub(super) fn insert(&mut self, now: Instant, lease: &Lease, limit: NonZeroU32) {
        if self.leases.len() >= 2 * self.swept_at.max(32) {
            self.leases.retain(|_, held| held.expires_at > now);
            self.swept_at = self.leases.len();
        }
        let held = Held {
            keys: lease.keys.clone(),
            limit,
            expires_at: lease.expires_at,
        };
        self.leases.insert(lease.id, held);
    }

    /// A renewal moved `lease`'s expiry.
    pub(super) fn renewed(&mut self, lease: &Lease) {
        if let Some(held) = self.leases.get_mut(&lease.id) {
            held.expires_at = lease.expires_at;
        }
    }

    pub(super) fn remove(&mut self, lease: LeaseId) {
        self.leases.remove(&lease);
    }

    pub(super) fn len(&self) -> usize {
        self.leases.len()
    }

    /// The live leases `owns` says belong on one server, oldest first (the
    /// order does not matter to Redis; it keeps runs reproducible).
    pub(super) fn on(&self, now: Instant, owns: impl Fn(&SubjectKeys) -> bool) -> Vec<(LeaseId, &Held)> {
        let mut found: Vec<(LeaseId, &Held)> = self
            .leases
            .iter()
            .filter(|(_, held)| held.expires_at > now && owns(&held.keys))
            .map(|(id, held)| (*id, held))
            .collect();
        found.sort_by_key(|(id, _)| *id);
        found
    }
}
