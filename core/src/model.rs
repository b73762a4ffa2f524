//! A reference model of the Redis that `inflight` talks to.
//!
//! It speaks RESP (decoded with the core's own reader), keeps its own clock in
//! milliseconds, and executes natively what our scripts do, so property tests,
//! fuzzers and the simulator run the real `Client` against one agreed meaning
//! of "the lease set". It implements only what the client sends: `PING`,
//! `AUTH`, `SELECT`, `INFO cluster`, `TIME`, `SCRIPT LOAD`, `EVALSHA`, `EVAL` (of our four
//! scripts) and `ZREM`, plus `SCRIPT FLUSH` to exercise `NOSCRIPT`.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::{Bytes, BytesMut};

use crate::resp::{Frame, ReplyLimits, ReplyReader};
use crate::script::{Scripts, ACQUIRE, ACQUIRE_MANY, COMPENSATE, HOLD, MARK, REASSERT, RECOVERING, RENEW, STALE};

/// What one acquire did, in execution order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRecord {
    pub key: Bytes,
    pub lease: Bytes,
    pub status: i64,
    /// The fencing token of a grant; 0 otherwise.
    pub token: u64,
}

#[derive(Clone, Debug, Default)]
pub struct RedisModel {
    /// The server clock, in milliseconds.
    pub now_ms: u64,
    /// Lease sets: key -> member -> expiry ms.
    sets: HashMap<Bytes, BTreeMap<Bytes, u64>>,
    /// Plain keys (tombstones, the recovery hold) -> expiry ms.
    strings: HashMap<Bytes, u64>,
    /// Fencing counters -> (value, expiry ms).
    counters: HashMap<Bytes, (u64, u64)>,
    /// Keys without expiry (the lease-data marker) -> value.
    values: HashMap<Bytes, Bytes>,
    /// SHAs of the scripts in the script cache.
    cached: HashSet<String>,
    scripts: Scripts,
    /// Password required by `AUTH`, if any (legacy single-password form).
    pub password: Option<String>,
    /// Answer `INFO` as a Redis Cluster node would.
    pub cluster_enabled: bool,
    /// Answer `ROLE` as a replica would (and refuse writes).
    pub replica: bool,
    /// Replicas `WAIT` says acknowledged (the model has none of its own).
    pub replicas: i64,
    /// `INFO`'s `run_id`, new for every model (every server start).
    pub run_id: String,
    /// `INFO`'s `master_replid` and `master_replid2`.
    pub replid: String,
    pub replid2: String,
    /// Every acquire executed, in order.
    pub acquires: Vec<AcquireRecord>,
    /// `ACQUIRE_MANY` calls executed.
    pub batches: usize,
    /// `ZREM` calls executed.
    pub zrems: usize,
    /// `TIME` calls executed.
    pub times: usize,
    /// Every renewal's status, in order.
    pub renewals: Vec<i64>,
    /// Every lease written back after a loss: (lease set, id, status).
    pub reasserts: Vec<(Bytes, Bytes, i64)>,
}

/// One client connection's state on the model server.
#[derive(Debug)]
pub struct ModelConnection {
    reader: ReplyReader,
    authenticated: bool,
}

impl ModelConnection {
    pub fn new() -> Self {
        Self {
            reader: ReplyReader::new(ReplyLimits {
                max_frame_bytes: 1 << 20,
                max_line_bytes: 4 * 1024,
                // Room for the longest command we send: a ZREM of MAX_RELEASE_BATCH ids.
                max_array_len: 2 + crate::script::MAX_RELEASE_BATCH,
                max_depth: 2,
            }),
            authenticated: false,
        }
    }
}

impl Default for ModelConnection {
    fn default() -> Self {
        Self::new()
    }
}

/// The model refused the client's bytes; like Redis, it drops the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelProtocolError;

impl RedisModel {
    /// A server started at `now_ms` with no data: its run id and replication
    /// id are derived from that instant, so each start has its own.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms,
            run_id: format!("{now_ms:040x}"),
            replid: format!("{:040x}", now_ms.wrapping_mul(31).wrapping_add(7)),
            replid2: "0".repeat(40),
            ..Self::default()
        }
    }

    /// Takes over from `old` as a promoted replica that received its data
    /// up to now: the same lease data (all of it, or what `keep` keeps of
    /// the lease sets), a new replication id that continues `old`'s.
    pub fn promoted_from(old: &RedisModel, now_ms: u64, keep: impl Fn(&Bytes, &Bytes) -> bool) -> Self {
        let mut model = RedisModel::new(now_ms);
        model.replid2 = old.replid.clone();
        model.sets = old
            .sets
            .iter()
            .map(|(key, set)| {
                let kept = set
                    .iter()
                    .filter(|(id, _)| keep(key, id))
                    .map(|(id, at)| (id.clone(), *at));
                (key.clone(), kept.collect())
            })
            .collect();
        model.strings = old.strings.clone();
        model.counters = old.counters.clone();
        model.values = old.values.clone();
        model.cluster_enabled = old.cluster_enabled;
        model.password = old.password.clone();
        model.replicas = old.replicas;
        model
    }

    /// Feeds bytes from a client and returns the reply bytes.
    pub fn handle(&mut self, conn: &mut ModelConnection, data: &[u8]) -> Result<Bytes, ModelProtocolError> {
        let mut out = BytesMut::new();
        for reply in self.handle_each(conn, data)? {
            out.extend_from_slice(&reply);
        }
        Ok(out.freeze())
    }

    /// Feeds bytes from a client and returns each reply separately, so a
    /// simulator can lose exactly one of them.
    pub fn handle_each(&mut self, conn: &mut ModelConnection, data: &[u8]) -> Result<Vec<Bytes>, ModelProtocolError> {
        self.handle_each_with(conn, data, |_, _| None)
    }

    /// As [`RedisModel::handle_each`], with `intercept` asked first about
    /// every command: a reply it gives is sent instead of executing the
    /// command (a cluster node's `MOVED`, say; see `model_cluster`).
    pub fn handle_each_with(
        &mut self,
        conn: &mut ModelConnection,
        data: &[u8],
        mut intercept: impl FnMut(&mut RedisModel, &[Bytes]) -> Option<Frame>,
    ) -> Result<Vec<Bytes>, ModelProtocolError> {
        conn.reader.push(data);
        let mut replies = Vec::new();
        while let Some(frame) = conn.reader.next_frame().map_err(|_| ModelProtocolError)? {
            let Frame::Array(items) = frame else {
                return Err(ModelProtocolError);
            };
            let mut args = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Frame::BulkString(b) => args.push(b),
                    _ => return Err(ModelProtocolError),
                }
            }
            let reply = match intercept(self, &args) {
                Some(reply) => reply,
                None => self.execute(conn, &args),
            };
            let mut out = BytesMut::new();
            redis_protocol::resp2::encode::extend_encode(&mut out, &reply, false).map_err(|_| ModelProtocolError)?;
            replies.push(out.freeze());
        }
        Ok(replies)
    }

    fn execute(&mut self, conn: &mut ModelConnection, args: &[Bytes]) -> Frame {
        let Some(name) = args.first() else {
            return error("ERR empty command");
        };
        let name = String::from_utf8_lossy(name).to_ascii_uppercase();
        if self.password.is_some() && !conn.authenticated && name != "AUTH" {
            return error("NOAUTH Authentication required.");
        }
        match (name.as_str(), args.len()) {
            ("PING", 1) => Frame::SimpleString(Bytes::from_static(b"PONG")),
            ("AUTH", 2) => {
                if self.password.as_deref().map(str::as_bytes) == Some(&args[1][..]) {
                    conn.authenticated = true;
                    ok()
                } else {
                    error("WRONGPASS invalid username-password pair or user is disabled.")
                }
            }
            ("SELECT", 2) => ok(),
            ("WAIT", 3) => Frame::Integer(self.replicas),
            ("INFO", 1) => {
                let enabled = u8::from(self.cluster_enabled);
                let role = if self.replica { "slave" } else { "master" };
                Frame::BulkString(Bytes::from(format!(
                    "# Server\r\nredis_version:7.0.0\r\nrun_id:{}\r\n\r\n# Replication\r\nrole:{role}\r\n\
                     master_replid:{}\r\nmaster_replid2:{}\r\n\r\n# Cluster\r\ncluster_enabled:{enabled}\r\n",
                    self.run_id, self.replid, self.replid2
                )))
            }
            ("ROLE", 1) if self.replica => Frame::Array(vec![
                Frame::BulkString(Bytes::from_static(b"slave")),
                Frame::BulkString(Bytes::from_static(b"127.0.0.1")),
                Frame::Integer(6379),
                Frame::BulkString(Bytes::from_static(b"connected")),
                Frame::Integer(0),
            ]),
            ("ROLE", 1) => Frame::Array(vec![
                Frame::BulkString(Bytes::from_static(b"master")),
                Frame::Integer(0),
                Frame::Array(vec![]),
            ]),
            ("EVALSHA" | "EVAL" | "ZREM", _) if self.replica => {
                error("READONLY You can't write against a read only replica.")
            }
            ("TIME", 1) => {
                self.times += 1;
                Frame::Array(vec![
                    Frame::BulkString(Bytes::from((self.now_ms / 1000).to_string())),
                    Frame::BulkString(Bytes::from((self.now_ms % 1000 * 1000).to_string())),
                ])
            }
            ("SCRIPT", 2) if args[1].eq_ignore_ascii_case(b"FLUSH") => {
                self.cached.clear();
                ok()
            }
            ("SCRIPT", 3) if args[1].eq_ignore_ascii_case(b"LOAD") => match self.sha_of_text(&args[2]) {
                Some(sha) => {
                    self.cached.insert(sha.clone());
                    Frame::BulkString(Bytes::from(sha))
                }
                None => error("ERR the model knows only inflight's scripts"),
            },
            ("EVALSHA", n) if n >= 3 => {
                let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
                if !self.cached.contains(&sha) {
                    return error("NOSCRIPT No matching script. Please use EVAL.");
                }
                self.run_script(&sha, &args[2..])
            }
            ("EVAL", n) if n >= 3 => match self.sha_of_text(&args[1]) {
                Some(sha) => {
                    self.cached.insert(sha.clone());
                    self.run_script(&sha, &args[2..])
                }
                None => error("ERR the model knows only inflight's scripts"),
            },
            ("ZREM", n) if n >= 3 => {
                self.zrems += 1;
                self.expire();
                let removed = match self.sets.get_mut(&args[1]) {
                    Some(set) => args[2..].iter().filter(|id| set.remove(*id).is_some()).count(),
                    None => 0,
                };
                Frame::Integer(removed as i64)
            }
            _ => error("ERR unknown command or wrong number of arguments"),
        }
    }

    fn sha_of_text(&self, text: &[u8]) -> Option<String> {
        if text == ACQUIRE.as_bytes() {
            Some(self.scripts.acquire.sha.clone())
        } else if text == COMPENSATE.as_bytes() {
            Some(self.scripts.compensate.sha.clone())
        } else if text == RENEW.as_bytes() {
            Some(self.scripts.renew.sha.clone())
        } else if text == ACQUIRE_MANY.as_bytes() {
            Some(self.scripts.acquire_many.sha.clone())
        } else if text == REASSERT.as_bytes() {
            Some(self.scripts.reassert.sha.clone())
        } else if text == MARK.as_bytes() {
            Some(self.scripts.mark.sha.clone())
        } else if text == HOLD.as_bytes() {
            Some(self.scripts.hold.sha.clone())
        } else {
            None
        }
    }

    /// `numkeys keys.. args..` for one of our scripts, identified by its SHA.
    fn run_script(&mut self, sha: &str, rest: &[Bytes]) -> Frame {
        self.expire();
        if sha == self.scripts.acquire.sha && rest.len() == 9 && &rest[0][..] == b"3" {
            let (leases, tombstone, fence) = (&rest[1], &rest[2], &rest[3]);
            let (Some(ttl), Some(limit), Some(valid_until)) = (number(&rest[4]), number(&rest[5]), number(&rest[7]))
            else {
                return error("ERR Error running script: bad arguments");
            };
            let (id, hold) = (rest[6].clone(), &rest[8]);
            let held = !hold.is_empty() && self.strings.contains_key(hold);
            let status = if self.now_ms > valid_until {
                STALE
            } else {
                self.acquire(leases, tombstone, ttl, limit, &id, held)
            };
            let token = if status == 1 {
                self.fencing_tokens(fence, 1, ttl)
            } else {
                0
            };
            self.acquires.push(AcquireRecord {
                key: leases.clone(),
                lease: id.clone(),
                status,
                token,
            });
            Frame::Array(vec![
                Frame::Integer(status),
                Frame::BulkString(id),
                Frame::Integer(token as i64),
            ])
        } else if sha == self.scripts.compensate.sha && rest.len() == 5 && &rest[0][..] == b"2" {
            let Some(valid_until) = number(&rest[3]) else {
                return error("ERR Error running script: bad arguments");
            };
            if let Some(set) = self.sets.get_mut(&rest[1]) {
                set.remove(&rest[4]);
            }
            // The tombstone outlives the acquire's valid-until by 1 ms, as the
            // script's `PX valid_until - now + 1`.
            if self.now_ms <= valid_until {
                self.strings.insert(rest[2].clone(), valid_until.saturating_add(1));
            }
            Frame::BulkString(rest[4].clone())
        } else if sha == self.scripts.acquire_many.sha {
            // numkeys, the lease set, the fence, N tombstones, ttl, limit,
            // valid-until, hold, N ids.
            let batch = number(&rest[0]).map(|keys| keys.saturating_sub(2) as usize);
            let Some(n) = batch.filter(|&n| n >= 1 && rest.len() == 2 * n + 7) else {
                return error("ERR Error running script: bad arguments");
            };
            let (leases, fence, tombstones, ids) = (&rest[1], &rest[2], &rest[3..3 + n], &rest[7 + n..]);
            let (Some(ttl), Some(limit), Some(valid_until)) =
                (number(&rest[3 + n]), number(&rest[4 + n]), number(&rest[5 + n]))
            else {
                return error("ERR Error running script: bad arguments");
            };
            let hold = &rest[6 + n];
            let held = !hold.is_empty() && self.strings.contains_key(hold);
            self.batches += 1;
            let stale = self.now_ms > valid_until;
            let statuses: Vec<i64> = tombstones
                .iter()
                .zip(ids)
                .map(|(tombstone, id)| {
                    if stale {
                        STALE
                    } else {
                        self.acquire(leases, tombstone, ttl, limit, id, held)
                    }
                })
                .collect();
            let granted = statuses.iter().filter(|s| **s == 1).count() as u64;
            let mut token = if granted > 0 {
                self.fencing_tokens(fence, granted, ttl)
            } else {
                0
            };
            let mut reply = Vec::with_capacity(3 * n);
            for (status, id) in statuses.into_iter().zip(ids) {
                let this = if status == 1 {
                    token += 1;
                    token - 1
                } else {
                    0
                };
                self.acquires.push(AcquireRecord {
                    key: leases.clone(),
                    lease: id.clone(),
                    status,
                    token: this,
                });
                reply.extend([
                    Frame::Integer(status),
                    Frame::BulkString(id.clone()),
                    Frame::Integer(this as i64),
                ]);
            }
            Frame::Array(reply)
        } else if sha == self.scripts.reassert.sha && rest.len() == 5 && &rest[0][..] == b"1" {
            let (Some(remaining), Some(limit)) = (number(&rest[3]), number(&rest[4])) else {
                return error("ERR Error running script: bad arguments");
            };
            let id = rest[2].clone();
            let now = self.now_ms;
            let set = self.sets.entry(rest[1].clone()).or_default();
            let status = if let Some(expiry) = set.get_mut(&id) {
                *expiry = (*expiry).max(now + remaining);
                1
            } else {
                set.insert(id.clone(), now + remaining);
                if set.len() as u64 > limit {
                    3
                } else {
                    2
                }
            };
            self.reasserts.push((rest[1].clone(), id.clone(), status));
            Frame::Array(vec![Frame::Integer(status), Frame::BulkString(id)])
        } else if sha == self.scripts.mark.sha && rest.len() == 3 && &rest[0][..] == b"1" {
            match self.values.get(&rest[1]) {
                Some(value) => Frame::Array(vec![Frame::Integer(0), Frame::BulkString(value.clone())]),
                None => {
                    self.values.insert(rest[1].clone(), rest[2].clone());
                    Frame::Array(vec![Frame::Integer(1), Frame::BulkString(rest[2].clone())])
                }
            }
        } else if sha == self.scripts.hold.sha && rest.len() == 3 && &rest[0][..] == b"1" {
            let Some(window) = number(&rest[2]) else {
                return error("ERR Error running script: bad arguments");
            };
            let until = self.now_ms + window;
            let at = self.strings.entry(rest[1].clone()).or_insert(until);
            *at = (*at).max(until);
            Frame::Integer((*at - self.now_ms) as i64)
        } else if sha == self.scripts.renew.sha && rest.len() == 5 && &rest[0][..] == b"1" {
            let (Some(ttl), Some(valid_until)) = (number(&rest[2]), number(&rest[4])) else {
                return error("ERR Error running script: bad arguments");
            };
            let id = rest[3].clone();
            if self.now_ms > valid_until {
                self.renewals.push(STALE);
                return Frame::Array(vec![Frame::Integer(STALE), Frame::BulkString(id)]);
            }
            let expiry = self.now_ms + ttl;
            let status = match self.sets.get_mut(&rest[1]).and_then(|set| set.get_mut(&id)) {
                Some(live) => {
                    *live = expiry;
                    1
                }
                None => 0,
            };
            self.renewals.push(status);
            Frame::Array(vec![Frame::Integer(status), Frame::BulkString(id)])
        } else {
            error("ERR Error running script: unknown script or arguments")
        }
    }

    /// The acquire script's semantics: tombstone, prune, idempotent id,
    /// recovery hold, limit.
    fn acquire(&mut self, leases: &Bytes, tombstone: &Bytes, ttl: u64, limit: u64, id: &Bytes, held: bool) -> i64 {
        if self.strings.contains_key(tombstone) {
            return -1;
        }
        let now = self.now_ms;
        let set = self.sets.entry(leases.clone()).or_default();
        if set.contains_key(id) {
            return 1;
        }
        if held {
            return RECOVERING;
        }
        if set.len() as u64 >= limit {
            return 0;
        }
        set.insert(id.clone(), now + ttl);
        1
    }

    /// `count` consecutive fencing tokens of the counter `fence` (the
    /// first returned): the counter's next values, never below the clock in
    /// microseconds; the counter lives `ttl` past the last grant (`SET … PX`).
    fn fencing_tokens(&mut self, fence: &Bytes, count: u64, ttl: u64) -> u64 {
        let floor = self.now_ms * 1000;
        let counter = self.counters.entry(fence.clone()).or_insert((0, 0));
        let first = (counter.0 + 1).max(floor);
        *counter = (first + count - 1, self.now_ms + ttl);
        first
    }

    /// Empties the data set (`FLUSHALL`): lease sets, tombstones, counters,
    /// the marker and the hold.
    pub fn flush_all(&mut self) {
        self.sets.clear();
        self.strings.clear();
        self.counters.clear();
        self.values.clear();
    }

    /// Drops what has expired, as Redis would on access.
    fn expire(&mut self) {
        let now = self.now_ms;
        self.strings.retain(|_, expiry| *expiry > now);
        self.counters.retain(|_, (_, expiry)| *expiry > now);
        for set in self.sets.values_mut() {
            set.retain(|_, expiry| *expiry > now);
        }
        self.sets.retain(|_, set| !set.is_empty());
    }

    /// Live lease ids of one lease-set key.
    pub fn live_leases(&mut self, key: &[u8]) -> Vec<Bytes> {
        self.expire();
        self.sets
            .get(key)
            .map(|set| set.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every live lease as (key, id), sorted.
    pub fn all_live_leases(&mut self) -> Vec<(Bytes, Bytes)> {
        self.expire();
        let mut all: Vec<_> = self
            .sets
            .iter()
            .flat_map(|(key, set)| set.keys().map(move |id| (key.clone(), id.clone())))
            .collect();
        all.sort();
        all
    }

    /// Whether `key` (a lease set or a tombstone) is alive now.
    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.expire();
        self.sets.contains_key(key) || self.strings.contains_key(key)
    }

    /// Keys alive now: lease sets and tombstones.
    pub fn key_count(&mut self) -> usize {
        self.expire();
        self.sets.len() + self.strings.len()
    }

    pub fn flush_scripts(&mut self) {
        self.cached.clear();
    }
}

fn number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn ok() -> Frame {
    Frame::SimpleString(Bytes::from_static(b"OK"))
}

fn error(message: &str) -> Frame {
    Frame::Error(message.into())
}
