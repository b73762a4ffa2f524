//! A reference model of the Redis that `inflight` talks to.
//!
//! It speaks RESP (decoded with the core's own reader), keeps its own clock in
//! milliseconds, and runs our scripts natively, command for command as their
//! Lua files do, on a keyspace with Redis's expiry rules (`store.rs`); so
//! property tests, fuzzers and the simulator run the real `Client` against
//! one agreed meaning of "the lease set", and the differential tests hold
//! that meaning to a real server. It implements only what the client sends:
//! `PING`, `AUTH`, `SELECT`, `INFO`, `ROLE`, `WAIT`, `TIME`, `SCRIPT LOAD`,
//! `SCRIPT FLUSH`, `EVALSHA`, `EVAL` (of our scripts), `ZREM`, and the shard
//! subscriptions of waiters.

use std::collections::HashSet;

use bytes::{Bytes, BytesMut};

use inflight_core::resp::{Frame, ReplyLimits, ReplyReader};
use inflight_core::scripts::{ScriptKind, Scripts};
use store::Store;

mod acquire;
mod release;
mod scripts;
mod store;
mod views;

/// What one acquire did, in execution order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireRecord {
    pub key: Bytes,
    pub lease: Bytes,
    pub status: i64,
    /// The fencing token of a grant; 0 otherwise.
    pub token: u64,
    /// For a grant: the units owed to live waiters that the fairness rule
    /// serves before it (all of them, for a fail-fast acquire) and the free
    /// units just before it. A grant with `ahead + weight > free` took units
    /// owed to an earlier waiter (S8).
    pub ahead: u64,
    pub free: u64,
    /// The units it asked for (its id's weight).
    pub weight: u64,
    /// For a part of an `ACQUIRE_ALL`: the call it was part of (the
    /// model's count of batch calls then), so a check can see each call's
    /// parts together.
    pub call: Option<usize>,
    /// Made by a release (`RELEASE` handing a freed slot to a waiter), not
    /// by the caller's own call: its client learns of it from a message.
    pub handed: bool,
}

#[derive(Clone, Debug, Default)]
pub struct RedisModel {
    /// The server clock, in milliseconds.
    pub now_ms: u64,
    /// The data set.
    store: Store,
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
    /// `INFO`'s `maxmemory_policy` (and a `maxmemory` set when it is not
    /// `noeviction`).
    pub eviction: Option<String>,
    /// `INFO`'s `run_id`, new for every model (every server start).
    pub run_id: String,
    /// `INFO`'s `master_replid` and `master_replid2`.
    pub replid: String,
    pub replid2: String,
    /// Every acquire executed, in order.
    pub acquires: Vec<AcquireRecord>,
    /// The lease ids clients named in renewals, waiting acquires and
    /// `LEAVE`s, in order: a client that hears of a hand-over answers it
    /// with one of these (the simulator's S13).
    pub named: Vec<Bytes>,
    /// A deliberate script bug, for the simulator's self-test: fail-fast
    /// acquires ignore the wait queue (newcomers take waiters' slots).
    pub ignore_queue: bool,
    /// Another: every waiter is judged under the limit the last one recorded
    /// (`limit`), not its own.
    pub last_limit_for_all: bool,
    /// Another: `ACQUIRE_ACROSS` takes every acquire under the first one's
    /// limit (an indexing slip: `ARGV[2]` for `ARGV[5i-3]`).
    pub across_first_limit: bool,
    /// Another: a grant may take units a waiter ahead under a lower limit
    /// is owed (`claim` forgets the waiters' `room`).
    pub ignore_room: bool,
    /// Another: `ACQUIRE_ALL` grants each subject that has room, whether
    /// or not the others do (as separate acquires, one per key, would).
    pub grant_all_unchecked: bool,
    /// The `ACQUIRE_ALL` call running now (its parts' records name it).
    in_call: Option<usize>,
    /// `ACQUIRE_MANY`, `ACQUIRE_ACROSS` and `ACQUIRE_ALL` calls executed.
    pub batches: usize,
    /// Release commands executed (`RELEASE` scripts and `ZREM`s).
    pub zrems: usize,
    /// `LEAVE` calls executed.
    pub leaves: usize,
    /// `TIME` calls executed.
    pub times: usize,
    /// `EXISTS` commands executed (the client's queue checks; the scripts'
    /// own checks are not commands here).
    pub exists: usize,
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
    /// Shard channels this connection subscribed to (`SSUBSCRIBE`).
    subscribed: HashSet<Bytes>,
}

impl ModelConnection {
    pub fn new() -> Self {
        Self {
            reader: ReplyReader::new(ReplyLimits {
                max_frame_bytes: 1 << 20,
                max_line_bytes: 4 * 1024,
                // Room for the longest command we send: a plain release of
                // MAX_RELEASE_BATCH ids of every unit of the heaviest weight.
                max_array_len: 10
                    + inflight_core::scripts::MAX_RELEASE_BATCH * inflight_core::lease_id::MAX_WEIGHT as usize,
                max_depth: 2,
            }),
            authenticated: false,
            subscribed: HashSet::new(),
        }
    }

    /// Whether a message on `channel` is delivered to this connection.
    pub fn is_subscribed(&self, channel: &[u8]) -> bool {
        self.subscribed.contains(channel)
    }

    /// The push frame that delivers a message on `channel`.
    pub fn message(channel: &Bytes, payload: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        inflight_core::resp::encode_command(&mut out, &[b"smessage", channel, payload]);
        out.freeze()
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
    /// up to now: the same data (all of it, or of each lease set the members
    /// `keep` keeps, given the key and the lease a member belongs to), a new
    /// replication id that continues `old`'s.
    pub fn promoted_from(old: &RedisModel, now_ms: u64, keep: impl Fn(&Bytes, &Bytes) -> bool) -> Self {
        let mut model = RedisModel::new(now_ms);
        model.replid2 = old.replid.clone();
        model.store = old.store.filtered(|key, member| keep(key, &head_of(member)));
        model.cluster_enabled = old.cluster_enabled;
        model.password = old.password.clone();
        model.replicas = old.replicas;
        model.eviction = old.eviction.clone();
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
            self.store.now = self.now_ms;
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

    /// Runs one command, as a client connection sends it.
    pub fn command(&mut self, conn: &mut ModelConnection, args: &[Bytes]) -> Frame {
        self.store.now = self.now_ms;
        self.execute(conn, args)
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
            ("INFO", 1) => Frame::BulkString(Bytes::from(self.info())),
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
            ("SCRIPT", 3) if args[1].eq_ignore_ascii_case(b"LOAD") => match self.scripts.kind_of_text(&args[2]) {
                Some(kind) => {
                    let sha = self.scripts.get(kind).sha.clone();
                    self.cached.insert(sha.clone());
                    Frame::BulkString(Bytes::from(sha))
                }
                None => error("ERR the model knows only inflight's scripts"),
            },
            ("EVALSHA", n) if n >= 3 => {
                let sha = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
                match self.scripts.kind_of_sha(&sha) {
                    Some(kind) if self.cached.contains(&sha) => self.eval(kind, &args[2..]),
                    _ => error("NOSCRIPT No matching script. Please use EVAL."),
                }
            }
            ("EVAL", n) if n >= 3 => match self.scripts.kind_of_text(&args[1]) {
                Some(kind) => {
                    self.cached.insert(self.scripts.get(kind).sha.clone());
                    self.eval(kind, &args[2..])
                }
                None => error("ERR the model knows only inflight's scripts"),
            },
            ("ZREM", n) if n >= 3 => {
                self.zrems += 1;
                Frame::Integer(self.store.zrem(&args[1], &args[2..]) as i64)
            }
            ("EXISTS", n) if n >= 2 => {
                self.exists += 1;
                self.time();
                Frame::Integer(args[1..].iter().filter(|key| self.store.exists(key)).count() as i64)
            }
            _ => error("ERR unknown command or wrong number of arguments"),
        }
    }

    fn info(&self) -> String {
        let enabled = u8::from(self.cluster_enabled);
        let role = if self.replica { "slave" } else { "master" };
        let (maxmemory, policy) = match &self.eviction {
            Some(policy) => (1 << 30, policy.as_str()),
            None => (0, "noeviction"),
        };
        format!(
            "# Server\r\nredis_version:7.0.0\r\nrun_id:{}\r\n\r\n# Memory\r\nmaxmemory:{maxmemory}\r\n\
             maxmemory_policy:{policy}\r\n\r\n# Replication\r\nrole:{role}\r\n\
             master_replid:{}\r\nmaster_replid2:{}\r\n\r\n# Cluster\r\ncluster_enabled:{enabled}\r\n",
            self.run_id, self.replid, self.replid2
        )
    }

    /// `numkeys keys.. args..` of script `kind`.
    fn eval(&mut self, kind: ScriptKind, rest: &[Bytes]) -> Frame {
        let numkeys = std::str::from_utf8(&rest[0]).ok().and_then(|n| n.parse::<usize>().ok());
        match numkeys {
            Some(n) if n < rest.len() => self.run(kind, &rest[1..1 + n], &rest[1 + n..]),
            _ => error("ERR Number of keys can't be greater than number of args"),
        }
    }

    /// The scripts' `TIME`: the clock, frozen for the script's run.
    fn time(&mut self) -> u64 {
        self.store.now = self.now_ms;
        self.now_ms
    }

    fn record(&mut self, key: &Bytes, lease: &Bytes, status: i64, token: u64, (ahead, free): (u64, u64)) {
        self.acquires.push(AcquireRecord {
            key: key.clone(),
            lease: lease.clone(),
            status,
            token,
            ahead,
            free,
            weight: scripts::weight(lease).unwrap_or(1),
            call: self.in_call,
            handed: false,
        });
    }

    /// A hand-over's grant, as [`RedisModel::record`] records a call's.
    fn record_hand_over(&mut self, key: &Bytes, lease: &Bytes, token: u64, fair: (u64, u64)) {
        self.record(key, lease, 1, token, fair);
        if let Some(record) = self.acquires.last_mut() {
            record.handed = true;
        }
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

fn ok() -> Frame {
    Frame::SimpleString(Bytes::from_static(b"OK"))
}

fn error(message: &str) -> Frame {
    Frame::Error(message.into())
}
