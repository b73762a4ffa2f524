//! Redis key layout for lease sets.
//!
//! A subject's leases live at `{prefix}:{{ns|subject}}:leases`, or, for a key
//! kept in a group's slot ([`Key::in_group`]), at
//! `{prefix}:{{group}}ns|subject:leases`. Every component is percent-encoded
//! for `%`, `|`, `{` and `}` so that:
//! - the encoding is injective: `("a|b", "c")` and `("a", "b|c")` never share a key,
//!   and a grouped key (whose tag holds no `|`) never shares one with a key
//!   without a group;
//! - the key holds exactly one `{...}` section, so Redis Cluster hashes every key
//!   of a subject (its lease set and its tombstones) to one slot, and a script
//!   that touches both never fails with `CROSSSLOT`.

use std::io::Write as _;

use bytes::Bytes;

use crate::lease_id::LeaseId;
use crate::slot::{hash_tag, slot_of, SLOTS};

/// Longest namespace or subject accepted, in bytes, before encoding.
pub const MAX_COMPONENT_LEN: usize = 512;

/// What a limit is counted against: a namespace (for example a tenant tier or a
/// route) and a subject within it (for example a tenant id).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    namespace: String,
    subject: String,
    /// Whose Redis Cluster slot the key lives in (`None`: its own).
    group: Option<String>,
}

/// Why a [`Key`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The namespace or the subject is empty.
    #[error("the key's {0} is empty; give every key a non-empty namespace and subject")]
    Empty(&'static str),
    /// A component is too long to be a reasonable Redis key.
    #[error("the key's {component} is {len} bytes; at most {MAX_COMPONENT_LEN} are accepted")]
    TooLong {
        /// `namespace` or `subject`.
        component: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}

impl Key {
    /// Builds a key, refusing empty or oversized components.
    pub fn new(namespace: impl Into<String>, subject: impl Into<String>) -> Result<Self, KeyError> {
        let namespace = namespace.into();
        let subject = subject.into();
        check_component("namespace", &namespace)?;
        check_component("subject", &subject)?;
        Ok(Self {
            namespace,
            subject,
            group: None,
        })
    }

    /// The same key, kept in `group`'s Redis Cluster slot: keys of one
    /// group share a slot, so an acquire over several of them is one
    /// all-or-nothing call in a cluster too, as it always is on a standalone
    /// server (say the group `acme` for `tenant/acme` and `route/acme:/upload`).
    /// Every key of a group lives on one node: group keys that are used
    /// together, not a whole fleet's. A grouped key is another key than the
    /// same one without a group (another lease set). `group` is checked as
    /// a namespace is.
    pub fn in_group(mut self, group: impl Into<String>) -> Result<Self, KeyError> {
        let group = group.into();
        check_component("group", &group)?;
        self.group = Some(group);
        Ok(self)
    }

    /// The group whose slot the key lives in, if it was given one.
    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    /// What kind of thing is limited (`tenant`, `route`…).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Which one of them (`acme`, `/upload`…).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The key whose lease set is `name` under `prefix`; `None` if `name`
    /// is not one (a key written by someone else that a scan matched).
    pub fn of_leases_key(prefix: &str, name: &[u8]) -> Option<Self> {
        let name = std::str::from_utf8(name).ok()?;
        let rest = name.strip_prefix(prefix)?.strip_prefix(":{")?.strip_suffix(":leases")?;
        let (tag, after) = rest.split_once('}')?;
        let (group, pair) = match tag.contains('|') {
            true if after.is_empty() => (None, tag),
            false => (Some(tag), after),
            true => return None,
        };
        let (namespace, subject) = pair.split_once('|')?;
        let mut key = Self::new(decode_component(namespace)?, decode_component(subject)?).ok()?;
        if let Some(group) = group {
            key = key.in_group(decode_component(group)?).ok()?;
        }
        // Only what this library writes: the encoding round-trips.
        (SubjectKeys::new(prefix, &key).leases() == name.as_bytes()).then_some(key)
    }
}

/// The glob (`SCAN MATCH`) of every lease set under `prefix`, its glob
/// characters escaped.
pub fn leases_pattern(prefix: &str) -> Bytes {
    let mut pattern = String::with_capacity(prefix.len() + 12);
    for character in prefix.chars() {
        if matches!(character, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(character);
    }
    pattern.push_str(":{*:leases");
    Bytes::from(pattern)
}

/// The inverse of `push_encoded`; `None` for an escape it never writes.
fn decode_component(encoded: &str) -> Option<String> {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        out.push(match escape {
            "%25" => '%',
            "%7C" => '|',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn check_component(component: &'static str, value: &str) -> Result<(), KeyError> {
    if value.is_empty() {
        return Err(KeyError::Empty(component));
    }
    if value.len() > MAX_COMPONENT_LEN {
        return Err(KeyError::TooLong {
            component,
            len: value.len(),
        });
    }
    Ok(())
}

/// The Redis keys of one subject: its lease set and its tombstones.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SubjectKeys {
    /// `{prefix}:{{ns|subject}}:leases`.
    leases: Bytes,
    /// Length of the `{prefix}:{{ns|subject}}` part that every key of the subject shares.
    base_len: usize,
    /// The Redis Cluster slot of every key of the subject (one hash tag).
    slot: u16,
}

impl SubjectKeys {
    /// The Redis keys of `key` under `prefix`.
    pub fn new(prefix: &str, key: &Key) -> Self {
        let mut text = String::with_capacity(prefix.len() + key.namespace.len() + key.subject.len() + 12);
        text.push_str(prefix);
        text.push_str(":{");
        if let Some(group) = &key.group {
            push_encoded(&mut text, group);
            text.push('}');
        }
        push_encoded(&mut text, &key.namespace);
        text.push('|');
        push_encoded(&mut text, &key.subject);
        if key.group.is_none() {
            text.push('}');
        }
        let base_len = text.len();
        text.push_str(":leases");
        let slot = slot_of(text.as_bytes());
        Self {
            leases: Bytes::from(text),
            base_len,
            slot,
        }
    }

    /// The keys of some subject in `slot`: where a request about the node
    /// that serves the slot, not about a subject, is routed.
    pub fn in_slot(slot: u16) -> Self {
        (0u32..)
            .map(|n| Self::new("", &Key::new("inflight-slot", n.to_string()).expect("a valid key")))
            .find(|keys| keys.slot == slot % SLOTS)
            .expect("every slot has a subject")
    }

    /// The keys of the subject whose wake channel (`wake_channel`) is
    /// `channel`; `None` if it is not one.
    pub fn of_wake_channel(channel: &[u8]) -> Option<Self> {
        let base = channel.strip_suffix(b":wake")?;
        hash_tag(base)?;
        let mut leases = Vec::with_capacity(base.len() + 7);
        leases.extend_from_slice(base);
        leases.extend_from_slice(b":leases");
        let slot = slot_of(&leases);
        Some(Self {
            leases: Bytes::from(leases),
            base_len: base.len(),
            slot,
        })
    }

    /// The sorted set of live leases, scored by expiry (server milliseconds).
    pub fn leases(&self) -> &Bytes {
        &self.leases
    }

    /// The Redis Cluster slot all of the subject's keys live in.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The subject's fencing counter: the last token granted.
    pub fn fence(&self) -> Bytes {
        self.with_suffix(b":fence")
    }

    /// The subject's wait queue: waiter ids scored by arrival.
    pub fn queue(&self) -> Bytes {
        self.with_suffix(b":queue")
    }

    /// The waiters' expiries: the queue's ids scored by when each waiter is
    /// forgotten unless its client calls again.
    pub fn waiters(&self) -> Bytes {
        self.with_suffix(b":waiters")
    }

    /// The subject's average hold time (ms), kept while it has waiters.
    pub fn holds(&self) -> Bytes {
        self.with_suffix(b":held")
    }

    /// The shard channel on which a release wakes the subject's waiters.
    pub fn wake_channel(&self) -> Bytes {
        self.with_suffix(b":wake")
    }

    fn with_suffix(&self, suffix: &[u8]) -> Bytes {
        let mut key = Vec::with_capacity(self.base_len + suffix.len());
        key.extend_from_slice(&self.leases[..self.base_len]);
        key.extend_from_slice(suffix);
        Bytes::from(key)
    }

    /// The tombstone left by a compensating release of `lease`.
    pub fn tombstone(&self, lease: &LeaseId) -> Bytes {
        let mut key = Vec::with_capacity(self.base_len + 60);
        key.extend_from_slice(&self.leases[..self.base_len]);
        let _ = write!(key, ":gone:{lease}");
        Bytes::from(key)
    }

    /// The tombstone of the lease rendered as `id` (see
    /// [`SubjectKeys::tombstone`]).
    pub fn tombstone_of(&self, id: &[u8]) -> Bytes {
        let mut key = Vec::with_capacity(self.base_len + 6 + id.len());
        key.extend_from_slice(&self.leases[..self.base_len]);
        key.extend_from_slice(b":gone:");
        key.extend_from_slice(id);
        Bytes::from(key)
    }
}

fn push_encoded(out: &mut String, component: &str) {
    for character in component.chars() {
        match character {
            '%' => out.push_str("%25"),
            '|' => out.push_str("%7C"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ns: &str, subject: &str) -> SubjectKeys {
        SubjectKeys::new("inflight", &Key::new(ns, subject).unwrap())
    }

    #[test]
    fn a_lease_set_names_its_key_back_and_nothing_else_does() {
        for (ns, subject) in [
            ("api", "tenant-1"),
            ("a|b", "{x}:leases"),
            ("%7C", "100%"),
            ("ünï", "c:o:d"),
        ] {
            let key = Key::new(ns, subject).unwrap();
            let name = SubjectKeys::new("pre*fix", &key).leases().clone();
            assert_eq!(Key::of_leases_key("pre*fix", &name), Some(key));
        }
        for stranger in [
            &b"inflight:{a|b}:queue"[..],
            b"inflight:{ab}:leases",
            b"other:{a|b}:leases",
            b"inflight:{a|%zz}:leases",
            b"inflight:{a|}:leases",
        ] {
            assert_eq!(Key::of_leases_key("inflight", stranger), None, "{stranger:?}");
        }
        assert_eq!(&leases_pattern("p*[x]")[..], &b"p\\*\\[x\\]:{*:leases"[..]);
    }

    #[test]
    fn keys_of_one_group_share_a_slot_and_name_themselves_back() {
        let tenant = Key::new("tenant", "acme").unwrap().in_group("acme").unwrap();
        let route = Key::new("route", "acme:/upload").unwrap().in_group("acme").unwrap();
        let (t, r) = (
            SubjectKeys::new("inflight", &tenant),
            SubjectKeys::new("inflight", &route),
        );
        assert_eq!(&t.leases()[..], b"inflight:{acme}tenant|acme:leases");
        assert_eq!(t.slot(), r.slot());
        assert_eq!(t.slot(), slot_of(b"{acme}"));
        assert_eq!(hash_tag(&t.tombstone(&LeaseId::from_parts(1, 2))), Some(&b"acme"[..]));
        for key in [tenant, route, Key::new("a|b", "{c}").unwrap().in_group("g|{}").unwrap()] {
            let keys = SubjectKeys::new("inflight", &key);
            assert_eq!(Key::of_leases_key("inflight", keys.leases()), Some(key.clone()));
            assert_eq!(SubjectKeys::of_wake_channel(&keys.wake_channel()), Some(keys));
        }
        // Grouped or not, never one key for two.
        let plain = SubjectKeys::new("inflight", &Key::new("g", "a|b").unwrap());
        let grouped = SubjectKeys::new("inflight", &Key::new("a", "b").unwrap().in_group("g").unwrap());
        assert_ne!(plain.leases(), grouped.leases());
        assert_eq!(Key::new("a", "b").unwrap().in_group(""), Err(KeyError::Empty("group")));
    }

    #[test]
    fn a_wake_channel_names_its_subject_back() {
        for (ns, subject) in [("api", "tenant-1"), ("a|b", "{x}:wake"), ("n", "")] {
            let Ok(key) = Key::new(ns, subject) else { continue };
            let subject = SubjectKeys::new("inflight", &key);
            assert_eq!(SubjectKeys::of_wake_channel(&subject.wake_channel()), Some(subject));
        }
        assert_eq!(SubjectKeys::of_wake_channel(b"inflight:{api|t}:leases"), None);
        assert_eq!(SubjectKeys::of_wake_channel(b"no-tag:wake"), None);
    }

    #[test]
    fn layout_is_prefix_tag_leases() {
        assert_eq!(&keys("acme", "user-1").leases()[..], b"inflight:{acme|user-1}:leases");
    }

    #[test]
    fn reserved_characters_are_percent_encoded() {
        assert_eq!(
            &keys("a|b{c}", "100%").leases()[..],
            b"inflight:{a%7Cb%7Bc%7D|100%25}:leases"
        );
    }

    #[test]
    fn encoding_is_injective_on_separator_shuffles() {
        let pairs = [("a|b", "c"), ("a", "b|c"), ("a%7Cb", "c"), ("a{", "}b"), ("a%", "7Cb")];
        let mut seen = std::collections::HashSet::new();
        for (ns, subject) in pairs {
            assert!(
                seen.insert(keys(ns, subject).leases().clone()),
                "{ns:?} {subject:?} collides"
            );
        }
    }

    #[test]
    fn lease_set_and_tombstones_share_exactly_one_hash_tag() {
        let k = keys("te{n}ant", "sub}{ject");
        let leases = k.leases().clone();
        let tomb = k.tombstone(&LeaseId::from_parts(7, 9));
        assert_eq!(hash_tag(&leases), Some(&b"te%7Bn%7Dant|sub%7D%7Bject"[..]));
        assert_eq!(hash_tag(&leases), hash_tag(&tomb));
        assert_eq!(hash_tag(&leases), hash_tag(&k.fence()));
        assert_eq!(leases.iter().filter(|&&b| b == b'{').count(), 1);
        assert_eq!(leases.iter().filter(|&&b| b == b'}').count(), 1);
    }

    #[test]
    fn empty_and_oversized_components_are_refused() {
        assert_eq!(Key::new("", "x"), Err(KeyError::Empty("namespace")));
        assert_eq!(Key::new("x", ""), Err(KeyError::Empty("subject")));
        let long = "x".repeat(MAX_COMPONENT_LEN + 1);
        assert!(matches!(
            Key::new("x", long),
            Err(KeyError::TooLong {
                component: "subject",
                ..
            })
        ));
        assert!(Key::new("x", "y".repeat(MAX_COMPONENT_LEN)).is_ok());
    }
}
