//! What an inspection reads of a subject, and a page of busy keys.

use std::time::{Duration, Instant};

/// What a subject holds, as `Client::inspect` read it from Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// Units held by live leases now (a weight-`w` lease is `w` units).
    pub units: u64,
    /// The limit the subject's waiters last recorded in Redis, if any did
    /// (fail-fast acquires record none: each call brings its own limit).
    pub limit_recorded: Option<u32>,
    /// Waiting acquires queued for a slot whose clients still call.
    pub waiting: u64,
    /// The live leases, in expiry order (up to the number asked for).
    pub holders: Vec<Holder>,
}

/// One page of the keys one node holds leases for (see `Client::scan_keys`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeysPage {
    /// Where the next page starts; 0 when this was the last.
    pub cursor: u64,
    /// The keys whose lease sets this page found (expired or not: the set
    /// goes with its last lease's expiry). A key may show on two pages.
    pub keys: Vec<crate::Key>,
}

/// One live lease, as Redis holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Its id as Redis stores it and [`LeaseId`](crate::LeaseId) displays
    /// it: `instance-counter`, then `*weight` above 1 and `@label` if it
    /// has one (one rendering in the API, the CLI and Redis).
    pub lease_id: String,
    /// Units it takes.
    pub weight: u32,
    /// Its holder's label, if it has one.
    pub label: Option<String>,
    /// When Redis forgets it unless renewed (server time turned into this
    /// client's clock when the reply was read).
    pub expires_at: Instant,
}

impl Holder {
    /// A lease-set member and its expiry, `expires_in` from `now`.
    pub(crate) fn from_member(member: &[u8], now: Instant, expires_in: Duration) -> Self {
        let text = String::from_utf8_lossy(member);
        let label = text.split_once('@').map(|(_, label)| label.to_string());
        Self {
            lease_id: text.into_owned(),
            weight: crate::lease_id::weight_of(member),
            label,
            expires_at: now + expires_in,
        }
    }
}
