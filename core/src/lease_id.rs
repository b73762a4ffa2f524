//! Lease ids: globally unique without a clock or an RNG of the core's own.
//!
//! Each `Client` is given 128 bits of entropy when it is built; every lease id
//! is that value plus a per-client counter. Two processes (or one process
//! before and after a restart) collide only if their entropy does, which for
//! 128 random bits does not happen in practice. Uniqueness matters because the
//! id is the member of the Redis sorted set: a collision would merge two
//! leases into one slot and over-admit.

use std::fmt;
use std::sync::Arc;

/// The most units one lease may weigh: a weighted lease is that many members
/// of its subject's lease set (see `script`), so its scripts' work grows with
/// it; this bounds a call's time on Redis's thread.
pub const MAX_WEIGHT: u32 = 1000;

/// The longest holder label accepted, in bytes.
pub const MAX_LABEL_LEN: usize = 64;

/// One lease's id: the member of the Redis sorted set.
///
/// Rendered as 32 hex digits, `-`, the counter in hex; then `*` and the
/// weight when it weighs more than one unit, then `@` and the holder's label
/// when it has one. The weight and the label travel in the member itself, so
/// every script (and `redis-cli ZRANGE`) reads them from the lease without a
/// second key to keep consistent, and they expire with it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId {
    instance: u128,
    counter: u64,
    weight: u32,
    label: Option<Label>,
}

impl LeaseId {
    /// The id made of a client's instance bits and a counter (for tests).
    #[doc(hidden)]
    pub fn from_parts(instance: u128, counter: u64) -> Self {
        Self {
            instance,
            counter,
            weight: 1,
            label: None,
        }
    }

    /// The same id carrying `weight` units (`1..=MAX_WEIGHT`, checked by
    /// the caller: see `Claim`) and `label`.
    #[doc(hidden)]
    pub fn with_claim(mut self, weight: u32, label: Option<Label>) -> Self {
        debug_assert!((1..=MAX_WEIGHT).contains(&weight));
        self.weight = weight.clamp(1, MAX_WEIGHT);
        self.label = label;
        self
    }

    /// The client's instance bits and the counter: the id's two parts.
    pub(crate) fn parts(&self) -> (u128, u64) {
        (self.instance, self.counter)
    }

    /// How many units of its key's limit the lease takes (1 unless weighted).
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The holder's label, if it was given one.
    pub fn label(&self) -> Option<&Label> {
        self.label.as_ref()
    }

    /// The id's bytes as they appear in Redis.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_string().into_bytes()
    }

    /// Parses the rendering produced by `Display`.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (text, label) = match text.split_once('@') {
            Some((id, label)) => (id, Some(Label::new(label).ok()?)),
            None => (text, None),
        };
        let (text, weight) = match text.split_once('*') {
            Some((id, weight)) => (id, weight.parse::<u32>().ok().filter(|w| (2..=MAX_WEIGHT).contains(w))?),
            None => (text, 1),
        };
        let (instance, counter) = text.split_once('-')?;
        if instance.len() != 32 || counter.is_empty() || counter.len() > 16 {
            return None;
        }
        let instance = u128::from_str_radix(instance, 16).ok()?;
        let counter = u64::from_str_radix(counter, 16).ok()?;
        let id = Self {
            instance,
            counter,
            weight,
            label,
        };
        // Only the canonical rendering counts, so `parse` is the inverse of `Display`.
        (id.to_string().as_bytes() == bytes).then_some(id)
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}-{:x}", self.instance, self.counter)?;
        if self.weight > 1 {
            write!(f, "*{}", self.weight)?;
        }
        if let Some(label) = &self.label {
            write!(f, "@{label}")?;
        }
        Ok(())
    }
}

/// The members a lease takes in its lease set, one per unit of its weight:
/// the lease's own id, then `id#2` … `id#w`. All carry the lease's expiry,
/// so the expiry prune drops them together, and `ZCARD` counts units.
pub fn units(member: &[u8]) -> impl Iterator<Item = Vec<u8>> + '_ {
    let weight = weight_of(member);
    (1..=weight).map(move |unit| {
        let mut bytes = member.to_vec();
        if unit > 1 {
            bytes.extend_from_slice(format!("#{unit}").as_bytes());
        }
        bytes
    })
}

/// The weight a member names (`…*w…`), 1 if none: as the scripts read it.
pub fn weight_of(member: &[u8]) -> u32 {
    let Some(star) = member.iter().position(|&b| b == b'*') else {
        return 1;
    };
    let digits = member[star + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&member[star + 1..star + 1 + digits])
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1)
}

/// Whether a lease-set member is an extra unit of a weighted lease (`…#k`)
/// rather than a lease's own id.
pub fn is_extra_unit(member: &[u8]) -> bool {
    member.contains(&b'#')
}

/// Who holds a lease, as its holder chose to say: a host or pod name, a
/// request id. Shown by `holders`; stored in the lease's member, so it
/// expires with the lease.
///
/// 1 to [`MAX_LABEL_LEN`] bytes of ASCII letters, digits and `. _ : / + = -`
/// (no spaces or the characters the member's rendering uses).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(Arc<str>);

/// Why a [`Label`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LabelError {
    /// The label is empty.
    #[error("a holder label cannot be empty")]
    Empty,
    /// The label is longer than [`MAX_LABEL_LEN`].
    #[error("the holder label is {0} bytes; at most {MAX_LABEL_LEN} are accepted")]
    TooLong(usize),
    /// The label holds a character outside the accepted set.
    #[error("the holder label holds {0:?}; use ASCII letters, digits and . _ : / + = -")]
    Character(char),
}

impl Label {
    /// A label, refusing an empty, oversized or oddly spelt one.
    pub fn new(label: &str) -> Result<Self, LabelError> {
        if label.is_empty() {
            return Err(LabelError::Empty);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(LabelError::TooLong(label.len()));
        }
        if let Some(bad) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || ".-_:/+=".contains(*c)))
        {
            return Err(LabelError::Character(bad));
        }
        Ok(Self(Arc::from(label)))
    }

    /// The label's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// What one acquire asks for besides its key and limit: how many units of
/// the limit it takes (its weight, 1 by default) and who holds it (a label,
/// none by default: the client's `holder_label`, if it has one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    weight: u32,
    label: Option<Label>,
}

impl Default for Claim {
    fn default() -> Self {
        Self { weight: 1, label: None }
    }
}

/// Why a [`Claim`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// A weight of 0 takes nothing: it would be a permit that limits nothing.
    #[error("a permit's weight must be at least 1")]
    ZeroWeight,
    /// Heavier than [`MAX_WEIGHT`].
    #[error("a permit's weight is {0}; at most {MAX_WEIGHT} is accepted")]
    TooHeavy(u32),
    /// Heavier than the key's limit: it could never be granted.
    #[error("a permit of weight {weight} can never fit under a limit of {limit}")]
    AboveLimit {
        /// The weight asked for.
        weight: u32,
        /// The limit it was asked under.
        limit: u32,
    },
    /// The request was named by an id another client drew.
    #[error(transparent)]
    Foreign(#[from] crate::request_ids::ForeignRequest),
}

impl Claim {
    /// A claim of `weight` units: `1..=MAX_WEIGHT`.
    pub fn weighing(weight: u32) -> Result<Self, ClaimError> {
        match weight {
            0 => Err(ClaimError::ZeroWeight),
            w if w > MAX_WEIGHT => Err(ClaimError::TooHeavy(w)),
            weight => Ok(Self { weight, label: None }),
        }
    }

    /// The same claim, held under `label`.
    pub fn labelled(mut self, label: Label) -> Self {
        self.label = Some(label);
        self
    }

    /// Its weight in units.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// Its label, if it has one of its own.
    pub fn label(&self) -> Option<&Label> {
        self.label.as_ref()
    }

    /// Refuses a weight above `limit`.
    pub fn fits(&self, limit: std::num::NonZeroU32) -> Result<(), ClaimError> {
        if self.weight > limit.get() {
            return Err(ClaimError::AboveLimit {
                weight: self.weight,
                limit: limit.get(),
            });
        }
        Ok(())
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

    /// Whether `id` is one of these ids (this client's, not another's).
    pub fn issued(&self, id: &LeaseId) -> bool {
        id.instance == self.instance
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

    #[test]
    fn weight_and_label_render_into_the_member_and_back() {
        let label = Label::new("pod-7.eu:req/42").unwrap();
        let id = LeaseId::from_parts(0xabc, 0x1f).with_claim(3, Some(label.clone()));
        let text = id.to_string();
        assert_eq!(text, "00000000000000000000000000000abc-1f*3@pod-7.eu:req/42");
        assert_eq!(LeaseId::parse(text.as_bytes()), Some(id.clone()));
        assert_eq!((id.weight(), id.label()), (3, Some(&label)));
        assert_eq!(weight_of(text.as_bytes()), 3);
        let units: Vec<Vec<u8>> = units(text.as_bytes()).collect();
        assert_eq!(units.len(), 3);
        assert_eq!(units[2], format!("{text}#3").into_bytes());
        assert!(is_extra_unit(&units[1]) && !is_extra_unit(&units[0]));
        // Weight 1 is not written; a weight out of range does not parse.
        let plain = LeaseId::from_parts(0xabc, 0x1f).with_claim(1, None);
        assert_eq!(plain.to_string(), "00000000000000000000000000000abc-1f");
        assert_eq!(LeaseId::parse(b"00000000000000000000000000000abc-1f*1"), None);
        assert_eq!(LeaseId::parse(b"00000000000000000000000000000abc-1f*1001"), None);
        assert_eq!(LeaseId::parse(b"00000000000000000000000000000abc-1f@a b"), None);
    }

    #[test]
    fn bad_labels_are_refused() {
        assert_eq!(Label::new(""), Err(LabelError::Empty));
        assert_eq!(Label::new(&"x".repeat(65)), Err(LabelError::TooLong(65)));
        for bad in ["a b", "a*b", "a@b", "a#b", "é"] {
            assert!(matches!(Label::new(bad), Err(LabelError::Character(_))), "{bad}");
        }
        assert!(Label::new(&"x".repeat(64)).is_ok());
    }
}
