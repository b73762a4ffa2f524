//! What one acquire over several subjects must be to go out as one
//! all-or-nothing `ACQUIRE_ALL` call: checked before anything is sent.

use std::num::NonZeroU32;

use crate::key::SubjectKeys;
use crate::lease_id::{Claim, ClaimError};

/// Why [`Client::acquire_all`](crate::Client::acquire_all) refused its
/// subjects before sending anything. Indexes are those of the subjects as
/// given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompositeError {
    /// No subject at all.
    #[error("an acquire of several keys needs at least one key")]
    Empty,
    /// More subjects than one call takes.
    #[error("an acquire of several keys takes at most {most} keys, not {given}")]
    TooMany {
        /// Subjects given.
        given: usize,
        /// The most one call takes.
        most: usize,
    },
    /// One subject given twice: its two leases would each be checked
    /// against the same room.
    #[error("key {second} repeats key {first}")]
    Repeated {
        /// The first time it was given.
        first: usize,
        /// The repeat.
        second: usize,
    },
    /// In a cluster, one call takes subjects of one slot only (a hash tag,
    /// `{tenant-7}:route`, puts keys in one slot on purpose).
    #[error("keys {first} and {other} live in different cluster slots")]
    CrossSlot {
        /// The first subject.
        first: usize,
        /// One in another slot.
        other: usize,
    },
    /// The weight does not fit one of the limits.
    #[error("key {index}: {source}")]
    Claim {
        /// The subject whose limit the weight exceeds.
        index: usize,
        /// Why.
        source: ClaimError,
    },
    /// The request was named by an id another client drew.
    #[error(transparent)]
    Foreign(#[from] crate::request_ids::ForeignRequest),
}

/// Checks `parts` for one call of at most `most` subjects (all of one slot
/// in a `cluster`) under `claim`.
pub fn check(
    parts: &[(SubjectKeys, NonZeroU32)],
    claim: &Claim,
    most: usize,
    cluster: bool,
) -> Result<(), CompositeError> {
    let Some((first, _)) = parts.first() else {
        return Err(CompositeError::Empty);
    };
    if parts.len() > most {
        return Err(CompositeError::TooMany {
            given: parts.len(),
            most,
        });
    }
    for (second, (keys, limit)) in parts.iter().enumerate() {
        claim
            .fits(*limit)
            .map_err(|source| CompositeError::Claim { index: second, source })?;
        if cluster && keys.slot() != first.slot() {
            return Err(CompositeError::CrossSlot {
                first: 0,
                other: second,
            });
        }
        if let Some(first) = parts[..second].iter().position(|(k, _)| k.leases() == keys.leases()) {
            return Err(CompositeError::Repeated { first, second });
        }
    }
    Ok(())
}
