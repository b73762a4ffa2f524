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

use crate::lease_id::{is_extra_unit, units, weight_of};
use crate::resp::{Frame, ReplyLimits, ReplyReader};
use crate::script::{
    Scripts, ACQUIRE, ACQUIRE_MANY, ACQUIRE_WAITING, COMPENSATE, HOLD, INSPECT, LEAVE, MARK, REASSERT, RECOVERING,
    RELEASE, RENEW, STALE,
};

/// What one acquire did, in execution order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRecord {
    pub key: Bytes,
    pub lease: Bytes,
    pub status: i64,
    /// The fencing token of a grant; 0 otherwise.
    pub token: u64,
    /// For a grant: live waiters queued before it (all of them, for a
    /// fail-fast acquire) and free slots just before it. A grant with
    /// `ahead >= free` took a slot owed to an earlier waiter (S8).
    pub ahead: u64,
    pub free: u64,
    /// The units it asked for (its id's weight).
    pub weight: u64,
}

#[derive(Clone, Debug, Default)]
pub struct RedisModel {
    /// The server clock, in milliseconds.
    pub now_ms: u64,
    /// Lease sets: key -> member -> expiry ms. A weighted lease is one
    /// member per unit, as in Redis. Expired members stay until a script's
    /// prune removes them (so it can count them) or the whole set is dead
    /// (Redis's key expires after its longest lease).
    sets: HashMap<Bytes, BTreeMap<Bytes, u64>>,
    /// Plain keys (tombstones, the recovery hold) -> expiry ms.
    strings: HashMap<Bytes, u64>,
    /// Fencing counters -> (value, expiry ms).
    counters: HashMap<Bytes, (u64, u64)>,
    /// Keys without expiry (the lease-data marker) -> value.
    values: HashMap<Bytes, Bytes>,
    /// Wait queues: queue key -> waiters in arrival order, each
    /// `(ticket, id, expiry ms, lifetime ms)`. The waiters' expiry set is
    /// folded in; the key lives `2 × lifetime` past the last refresh.
    queues: HashMap<Bytes, Vec<(u64, Bytes, u64, u64)>>,
    /// Hold statistics: key -> the hash's fields and its expiry ms.
    holds: HashMap<Bytes, HoldStats>,
    /// Messages published (`SPUBLISH`): channel and payload, in order,
    /// until taken.
    published: Vec<(Bytes, Bytes)>,
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
    /// A deliberate script bug, for the simulator's self-test: fail-fast
    /// acquires ignore the wait queue (newcomers take waiters' slots).
    pub ignore_queue: bool,
    /// `(ahead, free)` of the last grant decided by `acquire`.
    fairness: (u64, u64),
    /// `ACQUIRE_MANY` calls executed.
    pub batches: usize,
    /// Release commands executed (`RELEASE` scripts and `ZREM`s).
    pub zrems: usize,
    /// `LEAVE` calls executed.
    pub leaves: usize,
    /// `TIME` calls executed.
    pub times: usize,
    /// Every renewal's status, in order.
    pub renewals: Vec<i64>,
    /// Every lease written back after a loss: (lease set, id, status).
    pub reasserts: Vec<(Bytes, Bytes, i64)>,
}

/// The hold statistics hash of a subject with waiters: `avg` (kept by
/// `RELEASE`), and the waiters' `limit`, `lifetime` and `ttl` (written by
/// `ACQUIRE_WAITING`).
#[derive(Clone, Debug)]
struct HoldStats {
    average: Option<f64>,
    limit: Option<u64>,
    ttl: Option<u64>,
    expiry: u64,
}

/// One client connection's state on the model server.
#[derive(Debug)]
pub struct ModelConnection {
    reader: ReplyReader,
    authenticated: bool,
    /// Shard channels this connection subscribed to (`SSUBSCRIBE`).
    subscribed: HashSet<Bytes>,
}

impl ModelConnection {
    /// Whether a message on `channel` is delivered to this connection.
    pub fn is_subscribed(&self, channel: &[u8]) -> bool {
        self.subscribed.contains(channel)
    }

    /// The push frame that delivers a message on `channel`.
    pub fn message(channel: &Bytes, payload: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        crate::resp::encode_command(&mut out, &[b"smessage", channel, payload]);
        out.freeze()
    }
}

impl ModelConnection {
    pub fn new() -> Self {
        Self {
            reader: ReplyReader::new(ReplyLimits {
                max_frame_bytes: 1 << 20,
                max_line_bytes: 4 * 1024,
                // Room for the longest command we send: a plain release of
                // MAX_RELEASE_BATCH ids of every unit of the heaviest weight.
                max_array_len: 10 + crate::script::MAX_RELEASE_BATCH * crate::lease_id::MAX_WEIGHT as usize,
                max_depth: 2,
            }),
            authenticated: false,
            subscribed: HashSet::new(),
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
                    .filter(|(id, _)| keep(key, &head_of(id)))
                    .map(|(id, at)| (id.clone(), *at));
                (key.clone(), kept.collect())
            })
            .collect();
        model.strings = old.strings.clone();
        model.counters = old.counters.clone();
        model.values = old.values.clone();
        model.queues = old.queues.clone();
        model.holds = old.holds.clone();
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
                None => match subscription(conn, &args) {
                    Some(pushes) => {
                        replies.push(pushes);
                        continue;
                    }
                    None => self.execute(conn, &args),
                },
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
        } else if text == ACQUIRE_WAITING.as_bytes() {
            Some(self.scripts.acquire_waiting.sha.clone())
        } else if text == RELEASE.as_bytes() {
            Some(self.scripts.release.sha.clone())
        } else if text == LEAVE.as_bytes() {
            Some(self.scripts.leave.sha.clone())
        } else if text == INSPECT.as_bytes() {
            Some(self.scripts.inspect.sha.clone())
        } else {
            None
        }
    }

    /// `numkeys keys.. args..` for one of our scripts, identified by its SHA.
    fn run_script(&mut self, sha: &str, rest: &[Bytes]) -> Frame {
        self.expire();
        if sha == self.scripts.acquire.sha && rest.len() == 11 && &rest[0][..] == b"5" {
            let (leases, tombstone, fence, queue) = (&rest[1], &rest[2], &rest[3], &rest[4]);
            let (Some(ttl), Some(limit), Some(valid_until)) = (number(&rest[6]), number(&rest[7]), number(&rest[9]))
            else {
                return error("ERR Error running script: bad arguments");
            };
            let (id, hold) = (rest[8].clone(), &rest[10]);
            let held = !hold.is_empty() && self.strings.contains_key(hold);
            let mut reclaimed = 0;
            let status = if self.now_ms > valid_until {
                STALE
            } else if self.strings.contains_key(tombstone) {
                -1
            } else {
                reclaimed = self.prune(leases);
                self.acquire(leases, tombstone, queue, ttl, limit, &id, held)
            };
            let token = if status == 1 {
                self.fencing_tokens(fence, 1, ttl)
            } else {
                0
            };
            let (ahead, free) = std::mem::take(&mut self.fairness);
            self.acquires.push(AcquireRecord {
                key: leases.clone(),
                lease: id.clone(),
                status,
                token,
                ahead,
                free,
                weight: u64::from(weight_of(&id)),
            });
            Frame::Array(vec![
                Frame::Integer(status),
                Frame::BulkString(id),
                Frame::Integer(token as i64),
                Frame::Integer(reclaimed as i64),
            ])
        } else if sha == self.scripts.compensate.sha && rest.len() == 8 && &rest[0][..] == b"5" {
            let Some(valid_until) = number(&rest[6]) else {
                return error("ERR Error running script: bad arguments");
            };
            let id = &rest[7];
            if let Some(set) = self.sets.get_mut(&rest[1]) {
                for unit in units(id) {
                    set.remove(&unit[..]);
                }
            }
            // The tombstone outlives the acquire's valid-until by 1 ms, as the
            // script's `PX valid_until - now + 1`.
            if self.now_ms <= valid_until {
                self.strings.insert(rest[2].clone(), valid_until.saturating_add(1));
            }
            if self.queue_exists(&rest[3]) {
                self.leave_queue(&rest[3], id);
                self.published.push((rest[5].clone(), Bytes::from_static(b"0")));
            }
            Frame::BulkString(id.clone())
        } else if sha == self.scripts.release.sha && rest.len() >= 9 && &rest[0][..] == b"6" {
            let Some(held) = number(&rest[7]) else {
                return error("ERR Error running script: bad arguments");
            };
            self.zrems += 1;
            let removed = match self.sets.get_mut(&rest[1]) {
                Some(set) => rest[8..]
                    .iter()
                    .flat_map(|id| units(id))
                    .filter(|unit| set.remove(&unit[..]).is_some())
                    .count(),
                None => 0,
            };
            if self.queue_exists(&rest[2]) {
                // As the script: ids given back wait for nothing.
                for id in &rest[8..] {
                    self.leave_queue(&rest[2], id);
                }
            }
            if removed > 0 && self.queue_exists(&rest[2]) {
                self.release_to_waiters(rest, removed, held);
            }
            Frame::Integer(removed as i64)
        } else if sha == self.scripts.leave.sha && rest.len() == 6 && &rest[0][..] == b"4" {
            self.leaves += 1;
            let queued = self.leave_queue(&rest[1], &rest[5]);
            let reserved = match self.sets.get_mut(&rest[4]) {
                Some(set) => units(&rest[5]).filter(|unit| set.remove(&unit[..]).is_some()).count() > 0,
                None => false,
            };
            let removed = queued || reserved;
            if removed && self.queue_exists(&rest[1]) {
                self.published.push((rest[3].clone(), Bytes::from_static(b"0")));
            }
            Frame::Integer(i64::from(removed))
        } else if sha == self.scripts.acquire_waiting.sha && rest.len() == 14 && &rest[0][..] == b"6" {
            self.run_acquire_waiting(rest)
        } else if sha == self.scripts.acquire_many.sha {
            // numkeys, the lease set, the fence, the queue, the waiters, N
            // tombstones, ttl, limit, valid-until, hold, N ids.
            let batch = number(&rest[0]).map(|keys| keys.saturating_sub(4) as usize);
            let Some(n) = batch.filter(|&n| n >= 1 && rest.len() == 2 * n + 9) else {
                return error("ERR Error running script: bad arguments");
            };
            let (leases, fence, queue) = (&rest[1], &rest[2], &rest[3]);
            let (tombstones, ids) = (&rest[5..5 + n], &rest[9 + n..]);
            let (Some(ttl), Some(limit), Some(valid_until)) =
                (number(&rest[5 + n]), number(&rest[6 + n]), number(&rest[7 + n]))
            else {
                return error("ERR Error running script: bad arguments");
            };
            let hold = &rest[8 + n];
            let held = !hold.is_empty() && self.strings.contains_key(hold);
            self.batches += 1;
            let stale = self.now_ms > valid_until;
            let reclaimed = if stale { 0 } else { self.prune(leases) };
            let decided: Vec<(i64, (u64, u64))> = tombstones
                .iter()
                .zip(ids)
                .map(|(tombstone, id)| {
                    if stale {
                        (STALE, (0, 0))
                    } else if self.strings.contains_key(tombstone) {
                        (-1, (0, 0))
                    } else {
                        let status = self.acquire(leases, tombstone, queue, ttl, limit, id, held);
                        (status, std::mem::take(&mut self.fairness))
                    }
                })
                .collect();
            let (statuses, fairness): (Vec<i64>, Vec<(u64, u64)>) = decided.into_iter().unzip();
            let granted = statuses.iter().filter(|s| **s == 1).count() as u64;
            let mut token = if granted > 0 {
                self.fencing_tokens(fence, granted, ttl)
            } else {
                0
            };
            let mut reply = Vec::with_capacity(3 * n);
            for ((status, id), (ahead, free)) in statuses.into_iter().zip(ids).zip(fairness) {
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
                    ahead,
                    free,
                    weight: u64::from(weight_of(id)),
                });
                reply.extend([
                    Frame::Integer(status),
                    Frame::BulkString(id.clone()),
                    Frame::Integer(this as i64),
                ]);
            }
            reply.push(Frame::Integer(reclaimed as i64));
            Frame::Array(reply)
        } else if sha == self.scripts.reassert.sha && rest.len() == 5 && &rest[0][..] == b"1" {
            let (Some(remaining), Some(limit)) = (number(&rest[3]), number(&rest[4])) else {
                return error("ERR Error running script: bad arguments");
            };
            let id = rest[2].clone();
            let now = self.now_ms;
            self.prune(&rest[1]);
            let set = self.sets.entry(rest[1].clone()).or_default();
            let status = if let Some(expiry) = set.get(&id).copied() {
                for unit in units(&id) {
                    if let Some(at) = set.get_mut(&unit[..]) {
                        *at = expiry.max(now + remaining);
                    }
                }
                1
            } else {
                for unit in units(&id) {
                    set.insert(Bytes::from(unit), now + remaining);
                }
                if set.len() as u64 > limit {
                    3
                } else {
                    2
                }
            };
            self.reasserts.push((rest[1].clone(), id.clone(), status));
            Frame::Array(vec![Frame::Integer(status), Frame::BulkString(id)])
        } else if sha == self.scripts.inspect.sha && rest.len() == 4 && &rest[0][..] == b"2" {
            let Some(most) = number(&rest[3]) else {
                return error("ERR Error running script: bad arguments");
            };
            let now = self.now_ms;
            let mut live: Vec<(u64, Bytes)> = self
                .sets
                .get(&rest[1])
                .map(|set| {
                    set.iter()
                        .filter(|(_, expiry)| **expiry > now)
                        .map(|(id, expiry)| (*expiry, id.clone()))
                        .collect()
                })
                .unwrap_or_default();
            live.sort();
            let limit = self.holds.get(&rest[2]).and_then(|stats| stats.limit);
            let mut reply = vec![
                Frame::Integer(now as i64),
                Frame::Integer(live.len() as i64),
                Frame::Integer(limit.map_or(-1, |limit| limit as i64)),
            ];
            for (expiry, id) in live
                .into_iter()
                .filter(|(_, id)| !is_extra_unit(id))
                .take(most as usize)
            {
                reply.extend([Frame::BulkString(id), Frame::Integer(expiry as i64)]);
            }
            Frame::Array(reply)
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
                return Frame::Array(vec![Frame::Integer(STALE), Frame::BulkString(id), Frame::Integer(0)]);
            }
            let reclaimed = self.prune(&rest[1]);
            let expiry = self.now_ms + ttl;
            let status = match self.sets.get_mut(&rest[1]) {
                Some(set) if set.contains_key(&id) => {
                    for unit in units(&id) {
                        if let Some(at) = set.get_mut(&unit[..]) {
                            *at = expiry;
                        }
                    }
                    1
                }
                _ => 0,
            };
            self.renewals.push(status);
            Frame::Array(vec![
                Frame::Integer(status),
                Frame::BulkString(id),
                Frame::Integer(reclaimed as i64),
            ])
        } else {
            error("ERR Error running script: unknown script or arguments")
        }
    }

    /// The acquire script's semantics once its tombstone is checked and its
    /// lease set pruned: idempotent id, recovery hold, the limit in units
    /// counting the units owed to the live waiters of `queue`.
    #[allow(clippy::too_many_arguments)] // the script's arguments, named
    fn acquire(
        &mut self,
        leases: &Bytes,
        tombstone: &Bytes,
        queue: &Bytes,
        ttl: u64,
        limit: u64,
        id: &Bytes,
        held: bool,
    ) -> i64 {
        debug_assert!(!self.strings.contains_key(tombstone), "checked by the caller");
        let now = self.now_ms;
        if self.sets.get(leases).is_some_and(|set| set.contains_key(id)) {
            return 1;
        }
        if held {
            return RECOVERING;
        }
        let owed = if self.queue_exists(queue) {
            self.purge_queue(queue);
            self.owed(queue, usize::MAX)
        } else {
            0
        };
        let counted = if self.ignore_queue { 0 } else { owed };
        let weight = u64::from(weight_of(id));
        let set = self.sets.entry(leases.clone()).or_default();
        if set.len() as u64 + counted + weight > limit {
            return 0;
        }
        self.fairness = (owed, limit.saturating_sub(set.len() as u64));
        for unit in units(id) {
            set.insert(Bytes::from(unit), now + ttl);
        }
        1
    }

    /// Drops a lease set's expired members (`ZREMRANGEBYSCORE … -inf now`);
    /// how many.
    fn prune(&mut self, leases: &Bytes) -> u64 {
        let now = self.now_ms;
        let Some(set) = self.sets.get_mut(leases) else {
            return 0;
        };
        let before = set.len();
        set.retain(|_, expiry| *expiry > now);
        (before - set.len()) as u64
    }

    /// The units the first `n` live waiters of `queue` wait for.
    fn owed(&self, queue: &Bytes, n: usize) -> u64 {
        self.queues.get(queue).map_or(0, |waiting| {
            waiting
                .iter()
                .take(n)
                .map(|(_, id, _, _)| u64::from(weight_of(id)))
                .sum()
        })
    }

    /// `ACQUIRE_WAITING`: grant when the id's rank in the queue is below
    /// the free slots, else queue it (or shed it when the estimate is longer
    /// than its patience). `{status, id, token, ahead, expected}`.
    fn run_acquire_waiting(&mut self, rest: &[Bytes]) -> Frame {
        let (leases, tombstone, fence, queue, holds) = (&rest[1], &rest[2], &rest[3], &rest[4], &rest[6]);
        let numbers = [7, 8, 10, 12, 13].map(|i| number(&rest[i]));
        let [Some(ttl), Some(limit), Some(valid_until), Some(lifetime), Some(patience)] = numbers else {
            return error("ERR Error running script: bad arguments");
        };
        let (id, hold) = (rest[9].clone(), &rest[11]);
        let now = self.now_ms;
        let mut reclaimed = 0;
        let reply = |status: i64, token: u64, ahead: i64, expected: i64, reclaimed: u64| {
            Frame::Array(vec![
                Frame::Integer(status),
                Frame::BulkString(id.clone()),
                Frame::Integer(token as i64),
                Frame::Integer(ahead),
                Frame::Integer(expected),
                Frame::Integer(reclaimed as i64),
            ])
        };
        if now > valid_until {
            return reply(STALE, 0, 0, 0, 0);
        }
        if self.strings.contains_key(tombstone) {
            return reply(-1, 0, 0, 0, 0);
        }
        reclaimed += self.prune(leases);
        let weight = weight_of(&id) as i64;
        let already = self.sets.get(leases).is_some_and(|set| set.contains_key(&id));
        if !already {
            if !hold.is_empty() && self.strings.contains_key(hold) {
                self.leave_queue(queue, &id);
                self.record_acquire(leases, &id, RECOVERING, 0);
                return reply(RECOVERING, 0, 0, 0, reclaimed);
            }
            if weight > limit as i64 {
                self.leave_queue(queue, &id);
                self.record_acquire(leases, &id, 0, 0);
                return reply(0, 0, weight - limit as i64, 0, reclaimed);
            }
            self.purge_queue(queue);
            let waiting = self.queues.get(queue).map_or(&[][..], Vec::as_slice);
            let position = waiting.iter().position(|(_, waiter, _, _)| *waiter == id);
            let rank = position.unwrap_or(waiting.len());
            let free = limit as i64 - self.sets.get(leases).map_or(0, BTreeMap::len) as i64;
            // As the script: the waiters' weights are read only when their
            // count leaves room (else each counts one unit).
            let before = if rank as i64 + weight <= free {
                self.owed(queue, rank) as i64
            } else {
                rank as i64
            };
            if before + weight > free {
                let ahead = before + weight - free;
                let average = self.holds.get(holds).and_then(|stats| stats.average).unwrap_or(0.0);
                let expected = (ahead as f64 * average / limit as f64).ceil() as i64;
                if average > 0.0 && expected > patience as i64 {
                    self.leave_queue(queue, &id);
                    self.record_acquire(leases, &id, 0, 0);
                    return reply(0, 0, ahead, expected, reclaimed);
                }
                // `HSET … limit lifetime ttl`: no expiry is set here.
                let stats = self.holds.entry(holds.clone()).or_insert(HoldStats {
                    average: None,
                    limit: None,
                    ttl: None,
                    expiry: u64::MAX,
                });
                (stats.limit, stats.ttl) = (Some(limit), Some(ttl));
                let entries = self.queues.entry(queue.clone()).or_default();
                match position {
                    Some(at) => entries[at].2 = now + lifetime,
                    None => {
                        let ticket = entries.last().map_or(now, |(last, _, _, _)| (*last + 1).max(now));
                        entries.push((ticket, id.clone(), now + lifetime, lifetime));
                    }
                }
                self.record_acquire(leases, &id, 2, 0);
                return reply(2, 0, ahead, expected, reclaimed);
            }
            self.fairness = (before as u64, free as u64);
            self.leave_queue(queue, &id);
            let set = self.sets.entry(leases.clone()).or_default();
            for unit in units(&id) {
                set.insert(Bytes::from(unit), now + ttl);
            }
        } else if let Some(set) = self.sets.get_mut(leases) {
            for unit in units(&id) {
                if let Some(at) = set.get_mut(&unit[..]) {
                    *at = now + ttl;
                }
            }
        }
        let token = self.fencing_tokens(fence, 1, ttl);
        self.record_acquire(leases, &id, 1, token);
        reply(1, token, 0, 0, reclaimed)
    }

    /// `RELEASE`'s part once leases are removed from a subject with a queue:
    /// the average hold, then each free slot handed to the waiter first in
    /// line for it (a reservation for its lifetime, with a fencing token),
    /// published as `H id token…` (or `N id…` without the waiters' settings).
    fn release_to_waiters(&mut self, rest: &[Bytes], removed: usize, held: u64) {
        let (leases, queue, holds, wake, fence) = (&rest[1], &rest[2], &rest[4], &rest[5], &rest[6]);
        let now = self.now_ms;
        let stats = self.holds.entry(holds.clone()).or_insert(HoldStats {
            average: None,
            limit: None,
            ttl: None,
            expiry: 0,
        });
        let average = match stats.average {
            Some(average) => average + (held as f64 - average) / 8.0,
            None => held as f64,
        };
        // As the script's `%.3f`.
        stats.average = Some((average * 1000.0).round() / 1000.0);
        stats.expiry = now + 3_600_000;
        let (limit, ttl) = (stats.limit, stats.ttl);
        self.purge_queue(queue);
        // `ZCARD`: expired members not pruned yet count, as in the script.
        let live = self.sets.get(leases).map_or(0, BTreeMap::len);
        let mut free = match limit {
            Some(limit) => removed.max((limit as usize).saturating_sub(live)),
            None => removed,
        };
        let free_before = free;
        // First in line whose units fit, stopping at the first that does not.
        let mut first: Vec<(Bytes, u64)> = Vec::new();
        let candidates: Vec<(Bytes, u64)> = self
            .queues
            .get(queue)
            .map(|waiting| {
                waiting
                    .iter()
                    .take(free.min(64))
                    .map(|(_, id, expiry, _)| (id.clone(), *expiry))
                    .collect()
            })
            .unwrap_or_default();
        for (id, reserved) in candidates {
            let weight = weight_of(&id) as usize;
            if weight > free {
                break;
            }
            free -= weight;
            first.push((id, reserved));
        }
        if first.is_empty() {
            return;
        }
        let Some(ttl) = ttl else {
            let mut payload = b"N".to_vec();
            for (id, _) in &first {
                payload.push(b' ');
                payload.extend_from_slice(id);
            }
            self.published.push((wake.clone(), Bytes::from(payload)));
            return;
        };
        let first_token = self.fencing_tokens(fence, first.len() as u64, ttl);
        let mut payload = b"H".to_vec();
        let mut owed = 0;
        for (token, (id, reserved)) in (first_token..).zip(first.iter()) {
            self.leave_queue(queue, id);
            let set = self.sets.entry(leases.clone()).or_default();
            for unit in units(id) {
                set.insert(Bytes::from(unit), *reserved);
            }
            self.fairness = (owed, free_before as u64);
            owed += u64::from(weight_of(id));
            self.record_acquire(leases, id, 1, token);
            payload.extend_from_slice(format!(" {} {token}", String::from_utf8_lossy(id)).as_bytes());
        }
        self.published.push((wake.clone(), Bytes::from(payload)));
    }

    fn record_acquire(&mut self, key: &Bytes, lease: &Bytes, status: i64, token: u64) {
        let (ahead, free) = std::mem::take(&mut self.fairness);
        self.acquires.push(AcquireRecord {
            key: key.clone(),
            lease: lease.clone(),
            status,
            token,
            ahead,
            free,
            weight: u64::from(weight_of(lease)),
        });
    }

    /// Whether the queue key exists (it may hold only dead waiters, until a
    /// script purges them).
    fn queue_exists(&self, queue: &Bytes) -> bool {
        self.queues.get(queue).is_some_and(|waiting| !waiting.is_empty())
    }

    /// Drops the waiters whose expiry has passed; the live ones left.
    fn purge_queue(&mut self, queue: &Bytes) -> usize {
        let now = self.now_ms;
        let Some(waiting) = self.queues.get_mut(queue) else {
            return 0;
        };
        waiting.retain(|(_, _, expiry, _)| *expiry > now);
        let live = waiting.len();
        if live == 0 {
            self.queues.remove(queue);
        }
        live
    }

    /// Takes `id` out of `queue`; whether it was there.
    fn leave_queue(&mut self, queue: &Bytes, id: &Bytes) -> bool {
        let Some(waiting) = self.queues.get_mut(queue) else {
            return false;
        };
        let before = waiting.len();
        waiting.retain(|(_, waiter, _, _)| waiter != id);
        let removed = waiting.len() < before;
        if waiting.is_empty() {
            self.queues.remove(queue);
        }
        removed
    }

    /// The messages published since the last call, as (channel, payload),
    /// in order (a simulated server delivers them to its subscribed
    /// connections).
    pub fn take_published(&mut self) -> Vec<(Bytes, Bytes)> {
        std::mem::take(&mut self.published)
    }

    /// Live waiters of a queue key, in arrival order.
    pub fn waiters(&mut self, queue: &[u8]) -> Vec<Bytes> {
        let now = self.now_ms;
        self.queues
            .get(queue)
            .map(|waiting| {
                waiting
                    .iter()
                    .filter(|(_, _, expiry, _)| *expiry > now)
                    .map(|(_, id, _, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
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
        self.queues.clear();
        self.holds.clear();
    }

    /// Drops what has expired, as Redis would on access.
    fn expire(&mut self) {
        let now = self.now_ms;
        self.strings.retain(|_, expiry| *expiry > now);
        self.counters.retain(|_, (_, expiry)| *expiry > now);
        // A lease set's key expires after its longest-lived member (its
        // expired members stay until a script prunes them, as in Redis).
        self.sets
            .retain(|_, set| set.values().any(|expiry| *expiry >= now) && !set.is_empty());
        self.holds.retain(|_, stats| stats.expiry > now);
        // A queue key's PEXPIRE is 2 × lifetime from its last refresh.
        self.queues
            .retain(|_, waiting| waiting.iter().any(|(_, _, expiry, lifetime)| expiry + lifetime > now));
    }

    /// Live lease ids of one lease-set key (one per lease, whatever its
    /// weight).
    pub fn live_leases(&mut self, key: &[u8]) -> Vec<Bytes> {
        self.expire();
        let now = self.now_ms;
        self.sets
            .get(key)
            .map(|set| {
                set.iter()
                    .filter(|(id, expiry)| **expiry > now && !is_extra_unit(id))
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Live units of one lease-set key: what its limit counts.
    pub fn live_units(&mut self, key: &[u8]) -> u64 {
        self.expire();
        let now = self.now_ms;
        self.sets
            .get(key)
            .map_or(0, |set| set.values().filter(|expiry| **expiry > now).count() as u64)
    }

    /// Every live member of one lease-set key, units included, sorted (as
    /// `ZRANGE` lists them while nothing has expired).
    pub fn live_members(&mut self, key: &[u8]) -> Vec<Bytes> {
        self.expire();
        let now = self.now_ms;
        self.sets
            .get(key)
            .map(|set| {
                set.iter()
                    .filter(|(_, expiry)| **expiry > now)
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every live lease as (key, id), sorted: one entry per lease.
    pub fn all_live_leases(&mut self) -> Vec<(Bytes, Bytes)> {
        self.expire();
        let now = self.now_ms;
        let mut all: Vec<_> = self
            .sets
            .iter()
            .flat_map(|(key, set)| {
                set.iter()
                    .filter(move |(id, expiry)| **expiry > now && !is_extra_unit(id))
                    .map(move |(id, _)| (key.clone(), id.clone()))
            })
            .collect();
        all.sort();
        all
    }

    /// Whether `key` (a lease set with a live lease, or a tombstone) is
    /// alive now.
    pub fn exists(&mut self, key: &[u8]) -> bool {
        self.expire();
        let now = self.now_ms;
        self.sets.get(key).is_some_and(|set| set.values().any(|e| *e > now)) || self.strings.contains_key(key)
    }

    /// Keys alive now: lease sets (with a live lease) and tombstones.
    pub fn key_count(&mut self) -> usize {
        self.expire();
        let now = self.now_ms;
        self.sets.values().filter(|set| set.values().any(|e| *e > now)).count() + self.strings.len()
    }

    pub fn flush_scripts(&mut self) {
        self.cached.clear();
    }
}

/// `SSUBSCRIBE` and `SUNSUBSCRIBE`: one push frame per channel, as Redis
/// answers them; `None` for any other command.
fn subscription(conn: &mut ModelConnection, args: &[Bytes]) -> Option<Bytes> {
    let name = args.first()?;
    let subscribe = if name.eq_ignore_ascii_case(b"SSUBSCRIBE") {
        true
    } else if name.eq_ignore_ascii_case(b"SUNSUBSCRIBE") {
        false
    } else {
        return None;
    };
    let mut frames = BytesMut::new();
    for channel in &args[1..] {
        let verb: &[u8] = if subscribe {
            conn.subscribed.insert(channel.clone());
            b"ssubscribe"
        } else {
            conn.subscribed.remove(channel);
            b"sunsubscribe"
        };
        let frame = Frame::Array(vec![
            Frame::BulkString(Bytes::copy_from_slice(verb)),
            Frame::BulkString(channel.clone()),
            Frame::Integer(conn.subscribed.len() as i64),
        ]);
        let _ = redis_protocol::resp2::encode::extend_encode(&mut frames, &frame, false);
    }
    Some(frames.freeze())
}

/// The lease a lease-set member belongs to: the member without its `#k`
/// unit suffix.
fn head_of(member: &Bytes) -> Bytes {
    match member.iter().rposition(|&b| b == b'#') {
        Some(at) => member.slice(..at),
        None => member.clone(),
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
