//! Lease ids: globally unique without a clock or an RNG of the core's own.
//!
//! Each `Client` is given 128 bits of entropy when it is built; every lease id
//! is that value plus a per-client counter. Two processes (or one process
//! before and after a restart) collide only if their entropy does, which for
//! 128 random bits does not happen in practice. Uniqueness matters because the
//! id is the member of the Redis sorted set: a collision would merge two
//! leases into one slot and over-admit.

use std::fmt;

/// One lease's id, rendered as 32 hex digits, `-`, and the counter in hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId {
    instance: u128,
    counter: u64,
}

impl LeaseId {
    /// The id made of a client's instance bits and a counter (for tests).
    #[doc(hidden)]
    pub fn from_parts(instance: u128, counter: u64) -> Self {
        Self { instance, counter }
    }

    /// The client's instance bits and the counter: the id's two parts.
    pub(crate) fn parts(&self) -> (u128, u64) {
        (self.instance, self.counter)
    }

    /// The id's bytes as they appear in Redis.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }

    /// Parses the rendering produced by `Display`.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (instance, counter) = text.split_once('-')?;
        if instance.len() != 32 || counter.is_empty() || counter.len() > 16 {
            return None;
        }
        let instance = u128::from_str_radix(instance, 16).ok()?;
        let counter = u64::from_str_radix(counter, 16).ok()?;
        let id = Self { instance, counter };
        // Only the canonical rendering counts, so `parse` is the inverse of `Display`.
        (id.to_string().as_bytes() == bytes).then_some(id)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}-{:x}", self.instance, self.counter)
    }
}

/// Lease ids of one client: construction-time entropy plus a counter. The
/// client uses its request number as the counter, so request `n` always holds
/// lease `instance-n`, across retries of the same request.
#[derive(Clone, Copy, Debug)]
#[doc(hidden)]
pub struct LeaseIds {
    instance: u128,
}

impl LeaseIds {
    /// Ids built on `entropy`: 16 random bytes, fresh for every client.
    pub fn new(entropy: [u8; 16]) -> Self {
        Self {
            instance: u128::from_be_bytes(entropy),
        }
    }

    /// The `counter`-th id.
    pub fn id(&self, counter: u64) -> LeaseId {
        LeaseId::from_parts(self.instance, counter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_within_and_across_instances() {
        let a = LeaseIds::new([1; 16]);
        let b = LeaseIds::new([2; 16]);
        let mut seen = std::collections::HashSet::new();
        for n in 0..1000 {
            assert!(seen.insert(a.id(n)));
            assert!(seen.insert(b.id(n)));
        }
    }

    #[test]
    fn rendering_round_trips_and_is_canonical() {
        let id = LeaseId::from_parts(0xabc, 0x1f);
        let text = id.to_string();
        assert_eq!(text, "00000000000000000000000000000abc-1f");
        assert_eq!(LeaseId::parse(text.as_bytes()), Some(id));
        assert_eq!(LeaseId::parse(b"00000000000000000000000000000ABC-1f"), None);
        assert_eq!(LeaseId::parse(b"00000000000000000000000000000abc-01f"), None);
        assert_eq!(LeaseId::parse(b"abc-1f"), None);
        assert_eq!(LeaseId::parse(b""), None);
    }
}
