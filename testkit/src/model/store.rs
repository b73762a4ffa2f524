//! The keyspace of the model: the few Redis types and commands the scripts
//! use, with Redis's own rules for what the scripts can observe: a key
//! expires once the clock passes its expiry (`now > when`), an emptied
//! sorted set or hash is deleted (and its expiry with it), `ZADD XX` never
//! creates a key, `PTTL` answers -2 for a missing key and -1 for one without
//! an expiry, members of equal score are ordered by their bytes.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

#[derive(Clone, Debug)]
enum Value {
    Set(BTreeMap<Bytes, u64>),
    Str(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
}

/// Keys with their values and expiries (Unix ms), read at `now`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Store {
    keys: HashMap<Bytes, (Value, Option<u64>)>,
    /// The clock every command reads (frozen for a script's run, as in Redis).
    pub(crate) now: u64,
}

/// `ZADD`'s flags the scripts use.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ZaddFlags {
    /// Only update members that exist (`XX`).
    pub(crate) xx: bool,
    /// Only move a score up (`GT`).
    pub(crate) gt: bool,
}

impl Store {
    /// Drops `key` if it has expired; whether it is there.
    fn alive(&mut self, key: &[u8]) -> bool {
        let now = self.now;
        match self.keys.get(key) {
            Some((_, Some(when))) if now > *when => {
                self.keys.remove(key);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    fn set_of(&mut self, key: &[u8]) -> Option<&mut BTreeMap<Bytes, u64>> {
        if !self.alive(key) {
            return None;
        }
        match self.keys.get_mut(key) {
            Some((Value::Set(set), _)) => Some(set),
            _ => None,
        }
    }

    fn hash_of(&mut self, key: &[u8]) -> Option<&mut BTreeMap<Bytes, Bytes>> {
        if !self.alive(key) {
            return None;
        }
        match self.keys.get_mut(key) {
            Some((Value::Hash(hash), _)) => Some(hash),
            _ => None,
        }
    }

    /// Deletes `key` if it is an empty collection (Redis never keeps one).
    fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.keys.get(key) {
            Some((Value::Set(set), _)) => set.is_empty(),
            Some((Value::Hash(hash), _)) => hash.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    pub(crate) fn exists(&mut self, key: &[u8]) -> bool {
        self.alive(key)
    }

    pub(crate) fn del(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }

    /// Every live key.
    pub(crate) fn keys(&mut self) -> Vec<Bytes> {
        let now = self.now;
        self.keys.retain(|_, (_, when)| when.is_none_or(|when| now <= when));
        self.keys.keys().cloned().collect()
    }

    pub(crate) fn pttl(&mut self, key: &[u8]) -> i64 {
        if !self.alive(key) {
            return -2;
        }
        match self.keys[key].1 {
            Some(when) => (when - self.now) as i64,
            None => -1,
        }
    }

    pub(crate) fn pexpire(&mut self, key: &[u8], ms: i64) {
        if !self.alive(key) {
            return;
        }
        if ms <= 0 {
            self.keys.remove(key);
        } else {
            let now = self.now;
            self.keys.get_mut(key).expect("alive").1 = Some(now + ms as u64);
        }
    }

    pub(crate) fn get(&mut self, key: &[u8]) -> Option<Bytes> {
        if !self.alive(key) {
            return None;
        }
        match &self.keys[key].0 {
            Value::Str(value) => Some(value.clone()),
            _ => None,
        }
    }

    /// `SET key value [PX ms]`; the old value (`GET`).
    pub(crate) fn set(&mut self, key: &Bytes, value: Bytes, px: Option<u64>) -> Option<Bytes> {
        let old = self.get(key);
        let when = px.map(|ms| self.now + ms);
        self.keys.insert(key.clone(), (Value::Str(value), when));
        old
    }

    /// `ZADD key [XX] [GT] score member ...`: how many members were added.
    pub(crate) fn zadd(&mut self, key: &Bytes, flags: ZaddFlags, pairs: &[(u64, Bytes)]) -> usize {
        if self.set_of(key).is_none() {
            if flags.xx {
                return 0;
            }
            self.keys.insert(key.clone(), (Value::Set(BTreeMap::new()), None));
        }
        let set = self.set_of(key).expect("made above");
        let mut added = 0;
        for (score, member) in pairs {
            match set.get_mut(member) {
                Some(old) => {
                    if !flags.gt || *score > *old {
                        *old = *score;
                    }
                }
                None if flags.xx => {}
                None => {
                    set.insert(member.clone(), *score);
                    added += 1;
                }
            }
        }
        self.drop_if_empty(key);
        added
    }

    pub(crate) fn zrem(&mut self, key: &[u8], members: &[Bytes]) -> usize {
        let Some(set) = self.set_of(key) else {
            return 0;
        };
        let removed = members.iter().filter(|m| set.remove(*m).is_some()).count();
        self.drop_if_empty(key);
        removed
    }

    pub(crate) fn zcard(&mut self, key: &[u8]) -> usize {
        self.set_of(key).map_or(0, |set| set.len())
    }

    pub(crate) fn zscore(&mut self, key: &[u8], member: &[u8]) -> Option<u64> {
        self.set_of(key)?.get(member).copied()
    }

    /// Members in rank order: by score, then by their bytes.
    fn ranked(&mut self, key: &[u8]) -> Vec<(u64, Bytes)> {
        let mut all: Vec<(u64, Bytes)> = self
            .set_of(key)
            .map(|set| set.iter().map(|(m, s)| (*s, m.clone())).collect())
            .unwrap_or_default();
        all.sort();
        all
    }

    pub(crate) fn zrank(&mut self, key: &[u8], member: &[u8]) -> Option<usize> {
        self.ranked(key).iter().position(|(_, m)| m == member)
    }

    /// `ZRANGE key start stop` (ranks, `stop` inclusive, both >= 0).
    pub(crate) fn zrange(&mut self, key: &[u8], start: usize, stop: usize) -> Vec<Bytes> {
        self.ranked(key)
            .into_iter()
            .skip(start)
            .take((stop + 1).saturating_sub(start))
            .map(|(_, m)| m)
            .collect()
    }

    /// The last member and its score (`ZRANGE key -1 -1 WITHSCORES`).
    pub(crate) fn zlast(&mut self, key: &[u8]) -> Option<(u64, Bytes)> {
        self.ranked(key).pop()
    }

    /// `ZRANGEBYSCORE key -inf max [LIMIT 0 count]`.
    pub(crate) fn zrangebyscore(&mut self, key: &[u8], max: u64, count: usize) -> Vec<Bytes> {
        self.ranked(key)
            .into_iter()
            .take_while(|(s, _)| *s <= max)
            .take(count)
            .map(|(_, m)| m)
            .collect()
    }

    /// `ZREMRANGEBYSCORE key -inf max`: how many.
    pub(crate) fn zremrangebyscore(&mut self, key: &[u8], max: u64) -> usize {
        let Some(set) = self.set_of(key) else {
            return 0;
        };
        let before = set.len();
        set.retain(|_, s| *s > max);
        let removed = before - set.len();
        self.drop_if_empty(key);
        removed
    }

    /// Members with scores above `min`, in rank order (`ZRANGEBYSCORE key
    /// (min +inf WITHSCORES`).
    pub(crate) fn zabove(&mut self, key: &[u8], min: u64) -> Vec<(u64, Bytes)> {
        self.ranked(key).into_iter().filter(|(s, _)| *s > min).collect()
    }

    pub(crate) fn hset(&mut self, key: &Bytes, pairs: &[(Bytes, Bytes)]) {
        if self.hash_of(key).is_none() {
            self.keys.insert(key.clone(), (Value::Hash(BTreeMap::new()), None));
        }
        let hash = self.hash_of(key).expect("made above");
        for (field, value) in pairs {
            hash.insert(field.clone(), value.clone());
        }
    }

    pub(crate) fn hget(&mut self, key: &[u8], field: &[u8]) -> Option<Bytes> {
        self.hash_of(key)?.get(field).cloned()
    }

    pub(crate) fn hdel(&mut self, key: &[u8], fields: &[Bytes]) {
        if let Some(hash) = self.hash_of(key) {
            for field in fields {
                hash.remove(field);
            }
            self.drop_if_empty(key);
        }
    }

    /// Every live key, sorted, with its value rendered (`zset:` members in
    /// rank order as `member=score`, `hash:` fields sorted as
    /// `field=value`, `str:` the value) and its absolute expiry.
    pub(crate) fn dump(&mut self) -> Vec<(Bytes, String, Option<u64>)> {
        let mut keys = self.keys();
        keys.sort();
        keys.into_iter()
            .map(|key| {
                let ranked = self.ranked(&key);
                let (value, when) = &self.keys[&key];
                let text = match value {
                    Value::Set(_) => {
                        let members: Vec<String> = ranked
                            .iter()
                            .map(|(score, member)| format!("{}={score}", String::from_utf8_lossy(member)))
                            .collect();
                        format!("zset:{}", members.join(","))
                    }
                    Value::Hash(hash) => {
                        let fields: Vec<String> = hash
                            .iter()
                            .map(|(f, v)| format!("{}={}", String::from_utf8_lossy(f), String::from_utf8_lossy(v)))
                            .collect();
                        format!("hash:{}", fields.join(","))
                    }
                    Value::Str(value) => format!("str:{}", String::from_utf8_lossy(value)),
                };
                (key, text, *when)
            })
            .collect()
    }

    /// Sets `key`'s absolute expiry, if it exists.
    pub(crate) fn set_expiry(&mut self, key: &[u8], when: Option<u64>) {
        if let Some((_, at)) = self.keys.get_mut(key) {
            *at = when;
        }
    }

    /// Empties the keyspace (`FLUSHALL`).
    pub(crate) fn flush(&mut self) {
        self.keys.clear();
    }

    /// A copy in which each sorted set keeps only the members `keep` says
    /// (a replica that missed some writes).
    pub(crate) fn filtered(&self, keep: impl Fn(&Bytes, &Bytes) -> bool) -> Store {
        let mut copy = self.clone();
        for (key, (value, _)) in copy.keys.iter_mut() {
            if let Value::Set(set) = value {
                set.retain(|member, _| keep(key, member));
            }
        }
        let emptied: Vec<Bytes> = copy
            .keys
            .iter()
            .filter(|(_, (value, _))| matches!(value, Value::Set(set) if set.is_empty()))
            .map(|(key, _)| key.clone())
            .collect();
        for key in emptied {
            copy.keys.remove(&key);
        }
        copy
    }
}
