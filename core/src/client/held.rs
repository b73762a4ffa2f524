//! The leases this client's callers hold now: what a server that lost its
//! data is given back. A grant enters when its outcome is delivered; a
//! release, a lost renewal or a withdrawn grant takes it out, and one whose
//! expiry has passed is dropped on the next sweep.
//!

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Instant;

use crate::event::Lease;
use crate::key::SubjectKeys;
use crate::lease_id::{Label, LeaseId};

#[derive(Debug, Default)]
pub(super) struct HeldLeases {
    /// The instance bits every id of this client shares (see `lease_id`):
    /// the table is keyed by the counter alone, 24 bytes less per entry.
    instance: u128,
    leases: HashMap<u64, Held>,
    /// The size at the last sweep: the next sweep comes once it has doubled,
    /// so that leases dropped without a release (outside a runtime) cannot
    /// pile up, at an amortised O(1) per grant.
    swept_at: usize,
    /// Held leases written back after a loss: the latest valid-until
    /// (server ms) of those write-backs, and our instant by which the
    /// server has surely passed it. Until then one of them may still run
    /// (a reply read says nothing of an earlier one cut off with its
    /// connection), so a release meanwhile leaves a tombstone against them.
    reasserting: HashMap<u64, (u64, Instant)>,
}

/// One held lease: enough to write it back.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) keys: SubjectKeys,
    pub(super) limit: NonZeroU32,
    pub(super) expires_at: Instant,
    /// The id's weight and label (the table keeps only its counter).
    weight: u32,
    label: Option<Label>,
}

impl HeldLeases {
    pub(super) fn insert(&mut self, now: Instant, lease: &Lease, limit: NonZeroU32) {
        if self.leases.len() >= 2 * self.swept_at.max(32) {
            self.leases.retain(|_, held| held.expires_at > now);
            self.reasserting.retain(|_, (_, runnable_until)| *runnable_until > now);
            self.swept_at = self.leases.len();
        }
        let held = Held {
            keys: lease.keys.clone(),
            limit,
            expires_at: lease.expires_at,
            weight: lease.id.weight(),
            label: lease.id.label().cloned(),
        };
        let (instance, counter) = lease.id.parts();
        debug_assert!(self.leases.is_empty() || instance == self.instance, "one client's ids");
        self.instance = instance;
        self.leases.insert(counter, held);
    }

    /// A renewal moved `lease`'s expiry.
    pub(super) fn renewed(&mut self, lease: &Lease) {
        if let Some(held) = self.leases.get_mut(&lease.id.parts().1) {
            held.expires_at = lease.expires_at;
        }
    }

    /// Whether `lease` is held (granted and not let go).
    pub(super) fn contains(&self, lease: &LeaseId) -> bool {
        let (instance, counter) = lease.parts();
        instance == self.instance && self.leases.contains_key(&counter)
    }

    /// `lease` as last extended (its caller's copy may predate a renewal
    /// the client made on its own: a hand-over's confirmation), if held.
    pub(super) fn latest(&self, lease: &Lease) -> Option<Lease> {
        let (instance, counter) = lease.id.parts();
        let held = self.leases.get(&counter).filter(|_| instance == self.instance)?;
        let expires_at = held.expires_at.max(lease.expires_at);
        Some(Lease {
            expires_at,
            ..lease.clone()
        })
    }

    pub(super) fn remove(&mut self, lease: &LeaseId) {
        let (instance, counter) = lease.parts();
        if instance == self.instance {
            self.leases.remove(&counter);
            self.reasserting.remove(&counter);
        }
    }

    /// A write-back of `lease` is on its way, valid until `valid_until_ms`
    /// (the server's), which the server has surely passed at our
    /// `runnable_until`.
    pub(super) fn reasserting(&mut self, lease: &LeaseId, valid_until_ms: u64, runnable_until: Instant) {
        let latest = self
            .reasserting
            .entry(lease.parts().1)
            .or_insert((valid_until_ms, runnable_until));
        *latest = (latest.0.max(valid_until_ms), latest.1.max(runnable_until));
    }

    /// Takes `lease` out of the table for good (its holder gave it back):
    /// the valid-until of a write-back of it that may still run at `now`,
    /// which its release must then outlast with a tombstone.
    pub(super) fn give_back(&mut self, now: Instant, lease: &LeaseId) -> Option<u64> {
        self.remove(lease);
        let (valid_until_ms, runnable_until) = self.reasserting.remove(&lease.parts().1)?;
        (runnable_until > now).then_some(valid_until_ms)
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
            .map(|(counter, held)| {
                let id = LeaseId::from_parts(self.instance, *counter).with_claim(held.weight, held.label.clone());
                (id, held)
            })
            .collect();
        found.sort_by(|(a, _), (b, _)| a.cmp(b));
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_stays_small() {
        // What one held lease costs the registry's table (plus hashbrown's one
        // control byte and its spare capacity): printed for docs/performance.md.
        let entry = std::mem::size_of::<(u64, Held)>();
        println!("registry entry: {entry} bytes");
        assert!(entry <= 104, "{entry}");
    }
}
