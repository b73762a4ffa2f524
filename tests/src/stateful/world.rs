//! The executor of a program: the scripts on a real redis-server (and,
//! command for command, on the model), clients that act as the library's
//! client does, faults, and the invariants checked after every step.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use inflight_core::key::{Key, SubjectKeys};
use inflight_core::lease_id::LeaseId;
use inflight_core::resp::{encode_command, Frame};
use inflight_core::scripts::{Eval, LeaseCall, Scripts, WaitArgs, WITHHELD};
use inflight_testkit::model::RedisModel;

use super::program::{ClientSetup, Program, Step};
use crate::subject::{answer, command, Snapshot, Subject, Wire};
use crate::RespClient;

/// How a program runs.
#[derive(Clone)]
pub struct Options {
    /// The scripts (ours, or deliberately broken ones: see `mutations`).
    pub scripts: Scripts,
    /// Run every command on the model too, and require the same answers
    /// and the same data (off with broken scripts: the model has no bugs).
    pub check_model: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            scripts: Scripts::default(),
            check_model: true,
        }
    }
}

/// What a program did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub steps: usize,
    pub script_calls: usize,
    pub grants: usize,
    pub hand_overs: usize,
    /// Hand-overs heard of too late to take from the message: checked again.
    pub late_hand_overs: usize,
    /// Waiters queued again after they had a place: they go on under a new id.
    pub renamed_waiters: usize,
    /// Programs cut short where a slow machine took them outside the
    /// design's assumption (a write-back not landed within the recovery
    /// window, where a grant needed it).
    pub inconclusive: usize,
    /// Releases whose `EXISTS` found a queue (their `RELEASE` followed).
    pub queue_found: usize,
    pub failovers: usize,
    pub flushes: usize,
    pub held_back: usize,
    pub delivered_late: usize,
    pub slept_ms: u64,
    /// `ACQUIRE_ALL` calls.
    pub all_or_nothing: usize,
}

impl std::ops::AddAssign for Summary {
    fn add_assign(&mut self, other: Summary) {
        self.steps += other.steps;
        self.script_calls += other.script_calls;
        self.grants += other.grants;
        self.hand_overs += other.hand_overs;
        self.late_hand_overs += other.late_hand_overs;
        self.renamed_waiters += other.renamed_waiters;
        self.inconclusive += other.inconclusive;
        self.queue_found += other.queue_found;
        self.failovers += other.failovers;
        self.flushes += other.flushes;
        self.held_back += other.held_back;
        self.delivered_late += other.delivered_late;
        self.slept_ms += other.slept_ms;
        self.all_or_nothing += other.all_or_nothing;
    }
}

/// How long new grants are held after a loss: every client recovers
/// before time passes that far (the design's assumption).
const WINDOW_MS: u64 = 300;
/// How a run that a slow machine took outside the design's assumption
/// ends: neither a pass nor a failure.
const INCONCLUSIVE: &str = "inconclusive";
/// Waiters wait for as long as they like: shedding is not under test here.
const PATIENCE_MS: u64 = 3_600_000;

#[derive(Debug)]
struct Held {
    units: u64,
    /// Until when its holder counts on it (server ms).
    believed: u64,
    /// Its holder was told it may be gone (a write-back not confirmed).
    told_lost: bool,
}

#[derive(Debug)]
struct Waiter {
    units: u64,
    limit: u32,
    /// When its last check was written (server ms).
    last_sent: u64,
}

#[derive(Debug)]
enum Kind {
    Acquire,
    Renew,
    Reassert,
    /// A release's `RELEASE` after its `ZREM` found a queue.
    HandOver,
}

/// A request whose bytes sit in a stalled connection.
#[derive(Debug)]
struct HeldBack {
    client: usize,
    id: String,
    kind: Kind,
    bytes: Bytes,
    valid_until: u64,
    /// It reached Redis (late).
    delivered: bool,
    /// Its client gave up on it (its liveness passed).
    given_up: bool,
}

#[derive(Debug)]
struct Client {
    setup: ClientSetup,
    index: usize,
    next: u64,
    held: BTreeMap<String, Held>,
    waiters: BTreeMap<String, Waiter>,
    /// Releases (and compensations) Redis confirmed: when, and which.
    released: Vec<(u64, String)>,
    /// Write-backs that may still run: their valid-until.
    reasserting: HashMap<String, u64>,
    needs_recovery: bool,
    /// How far it has read the published messages.
    cursor: usize,
}

impl Client {
    fn new_id(&mut self, weight: u32) -> String {
        self.next += 1;
        match weight {
            1 => format!("c{}-{}", self.index, self.next),
            w => format!("c{}-{}*{w}", self.index, self.next),
        }
    }

    fn owns(&self, id: &str) -> bool {
        id.starts_with(&format!("c{}-", self.index))
    }
}

struct World {
    redis: RespClient,
    subscriber: RespClient,
    model: Option<RedisModelWire>,
    subject: Subject,
    clients: Vec<Client>,
    /// Messages published since the last failover, in order.
    published: Vec<String>,
    held_back: Vec<HeldBack>,
    snapshot: Option<(u64, Snapshot, Option<RedisModel>)>,
    /// Failovers and flushes so far.
    epoch: u64,
    /// When the last failover or flush happened (server ms).
    lost_at: u64,
    /// The latest expiry any request asked for each id (or its
    /// reservation could have): no member may outlive it.
    bounds: HashMap<String, u64>,
    /// Ids whose every writer is done (released, compensated, left,
    /// refused), with the epoch they died in.
    dead: HashMap<String, u64>,
    last_token: i64,
    /// Slots releases handed to waiters that have not learned of them yet:
    /// by id, the units (they count for every grant meanwhile) and until
    /// when the reservation lasts at most.
    handed: HashMap<String, (u64, u64)>,
    /// The server's time around the last script call.
    time: (u64, u64),
    summary: Summary,
}

type RedisModelWire = crate::subject::ModelWire;

/// Runs `program` against the server at `redis` (and the model), with keys
/// under `prefix`. `Err` says which invariant broke, at which step.
pub fn run(
    redis: RespClient,
    subscriber: RespClient,
    prefix: &str,
    program: &Program,
    options: &Options,
) -> Result<Summary, String> {
    let subject = Subject::with_scripts(prefix, "s", options.scripts.clone());
    let mut world = World {
        redis,
        subscriber,
        model: None,
        subject,
        clients: program
            .clients
            .iter()
            .enumerate()
            .map(|(index, setup)| Client {
                setup: setup.clone(),
                index,
                next: 0,
                held: BTreeMap::new(),
                waiters: BTreeMap::new(),
                released: Vec::new(),
                reasserting: HashMap::new(),
                needs_recovery: false,
                cursor: 0,
            })
            .collect(),
        published: Vec::new(),
        held_back: Vec::new(),
        snapshot: None,
        epoch: 0,
        lost_at: 0,
        bounds: HashMap::new(),
        dead: HashMap::new(),
        last_token: 0,
        handed: HashMap::new(),
        time: (0, 0),
        summary: Summary::default(),
    };
    world.subject.load(&mut world.redis);
    if options.check_model {
        let now = Subject::now(&mut world.redis);
        let mut model = RedisModelWire::new(RedisModel::new(now));
        world.subject.load(&mut model);
        world.model = Some(model);
    }
    let channel = world.subject.keys.wake_channel();
    command(&mut world.subscriber, &[b"SSUBSCRIBE", &channel]);
    let mut trace = std::env::var("ST_TRACE").is_ok().then(String::new);
    let with_trace = |error: String, trace: &Option<String>| match trace {
        Some(trace) => format!("{error}\n{trace}"),
        None => error,
    };
    for (at, step) in program.steps.iter().enumerate() {
        if let Some(trace) = trace.as_mut() {
            let data = dump(&mut world.redis, &world.subject);
            let now = world.now();
            trace.push_str(&format!("BEFORE {at} at {now} {step:?}\n{data:?}\n"));
        }
        let stepped = world.step(step);
        if let Some(trace) = trace.as_mut() {
            let data = dump(&mut world.redis, &world.subject);
            let now = world.now();
            trace.push_str(&format!(
                "AFTER {at} at {now} {step:?}\n{data:?}\n{:?}\n",
                world.published
            ));
            for client in &world.clients {
                trace.push_str(&format!("  c{} holds {:?}\n", client.index, client.held));
            }
        }
        let checked = stepped.and_then(|()| world.check().map_err(|e| format!("(after the step) {e}")));
        match checked {
            Err(e) if e.starts_with(INCONCLUSIVE) => {
                world.summary.inconclusive += 1;
                return Ok(world.summary);
            }
            Err(e) => return Err(with_trace(format!("step {at} ({step:?}): {e}"), &trace)),
            Ok(()) => {}
        }
        world.summary.steps += 1;
    }
    Ok(world.summary)
}

impl World {
    fn now(&mut self) -> u64 {
        Subject::now(&mut self.redis)
    }

    /// Runs one encoded script call on Redis and, at the same instant, on
    /// the model: the model's clock tries each millisecond the call may
    /// have run in, and one must give the same answer and the same data.
    fn call(&mut self, bytes: &Bytes) -> Result<Frame, String> {
        self.summary.script_calls += 1;
        let before = self.now();
        let real = self.redis.send(bytes);
        let after = self.now();
        self.time = (before, after);
        let Some(model) = self.model.as_mut() else {
            return Ok(real);
        };
        let real_data = dump(&mut self.redis, &self.subject);
        // Keys that expire before the dump is read may be gone from it: on
        // a loaded machine reading them takes more than a few milliseconds.
        let dumped = Subject::now(&mut self.redis);
        let mut last = None;
        // Redis judges keys' expiry by the instant a script started, while
        // its `TIME` may read a later millisecond: a key that expires in
        // between is alive for the whole script. The model has one clock, so
        // (only if no single instant matches) it is tried from each start
        // with the keys that expire before `at` kept alive until then.
        let end = after.min(before + 50);
        let runs = (before..=end)
            .map(|at| (at, at))
            .chain((before..=end).flat_map(|at| (before..at).map(move |started| (started, at))));
        for (started, at) in runs {
            let mut candidate = RedisModelWire::new(model.model.clone());
            keep_alive_from(&mut candidate.model, started, at);
            candidate.model.now_ms = at;
            let modelled = candidate.send(bytes);
            let modelled_data = model_dump(&mut candidate.model);
            if tokens_as_grants(&modelled) == tokens_as_grants(&real)
                && same_data(&modelled_data, &real_data, dumped, after - before + 1)
            {
                // Redis's expiries become the model's, and keys Redis had
                // already let expire (within the slack) go from the model.
                let expiries: Vec<(Bytes, Option<u64>)> = real_data.iter().map(|(k, _, w)| (k.clone(), *w)).collect();
                candidate.model.align_expiries(&expiries);
                let gone: Vec<Bytes> = modelled_data
                    .iter()
                    .filter(|(key, _, _)| !real_data.iter().any(|(k, _, _)| k == key))
                    .map(|(key, _, _)| key.clone())
                    .collect();
                candidate.model.delete(&gone);
                *model = candidate;
                return Ok(real);
            }
            last = Some((modelled, modelled_data));
        }
        let (modelled, modelled_data) = last.expect("at least one instant");
        Err(format!(
            "the model disagrees with Redis (ran at {before}..{after} ms)\n  redis: {real:?}\n  model: {modelled:?}\n  redis data: {real_data:#?}\n  model data: {modelled_data:#?}"
        ))
    }

    /// The same effect as `call` on data only (a restore, a flush).
    fn model_data(&mut self, change: impl FnOnce(&mut RedisModel)) {
        if let Some(model) = self.model.as_mut() {
            model.model.now_ms = self.time.1;
            change(&mut model.model);
        }
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        let n = self.clients.len();
        match *step {
            Step::Acquire {
                client,
                weight,
                limit,
                held_back,
            } => self.acquire(client % n, weight, limit, held_back),
            Step::Batch {
                client,
                count,
                limit,
                repeat,
            } => self.batch(client % n, count, limit, repeat),
            Step::Across { client, ref acquires } => self.across(client % n, acquires),
            Step::All {
                client,
                weight,
                limit,
                ref others,
            } => self.all(client % n, weight, limit, others),
            Step::Wait { client, weight, limit } => {
                let c = client % n;
                self.recover_if_needed(c)?;
                let id = self.clients[c].new_id(weight);
                self.check_waiter(c, id, u64::from(weight), limit, None)
            }
            Step::Check { client, pick } => {
                let c = client % n;
                self.recover_if_needed(c)?;
                let Some((id, units, limit)) =
                    nth(&self.clients[c].waiters, pick).map(|(id, w)| (id.clone(), w.units, w.limit))
                else {
                    return Ok(());
                };
                self.check_waiter(c, id, units, limit, None)
            }
            Step::Release {
                client,
                pick,
                more,
                how,
            } => self.release(client % n, pick, more, how),
            Step::Renew {
                client,
                pick,
                held_back,
            } => self.renew(client % n, pick, held_back),
            Step::Leave { client, pick } => {
                let c = client % n;
                self.recover_if_needed(c)?;
                let Some(id) = nth(&self.clients[c].waiters, pick).map(|(id, _)| id.clone()) else {
                    return Ok(());
                };
                self.clients[c].waiters.remove(&id);
                self.handed.remove(&id);
                self.leave(&id)
            }
            Step::Messages { client } => self.messages(client % n),
            Step::Deliver { pick } => self.deliver(pick),
            Step::GiveUp { client } => self.give_up(client % n),
            Step::Recover { client, held_back } => {
                let c = client % n;
                if self.clients[c].needs_recovery {
                    self.recover(c, held_back)?;
                }
                Ok(())
            }
            Step::Snapshot => {
                let at = self.now();
                let snapshot = self.subject.snapshot(&mut self.redis);
                // The model's copy holds what Redis's does: the same keys
                // (one about to expire may be in one and not the other),
                // with Redis's expiries.
                let model = self.model.as_ref().map(|m| {
                    let mut copy = m.model.clone();
                    let expiries = snapshot.expiries();
                    let gone: Vec<Bytes> = copy
                        .dump()
                        .into_iter()
                        .map(|(key, _, _)| key)
                        .filter(|key| !expiries.iter().any(|(k, _)| k == key))
                        .collect();
                    copy.delete(&gone);
                    copy.align_expiries(&expiries);
                    copy
                });
                self.snapshot = Some((at, snapshot, model));
                Ok(())
            }
            Step::Failover => {
                let now = self.now();
                if let Some((at, snapshot, model)) = self.snapshot.take() {
                    if now - at <= WINDOW_MS {
                        self.subject.restore(&mut self.redis, &snapshot);
                        if let Some(model) = model {
                            self.model_data(|m| m.restore_data(&model));
                        }
                    }
                }
                self.summary.failovers += 1;
                self.lose_connections();
                Ok(())
            }
            Step::Flush => {
                for key in self.subject.all_keys(&mut self.redis) {
                    command(&mut self.redis, &[b"DEL", &key]);
                }
                self.model_data(RedisModel::flush_all);
                self.summary.flushes += 1;
                self.snapshot = None;
                self.lose_connections();
                Ok(())
            }
            Step::Garbage { client, kind } => self.garbage(client % n, kind),
            Step::Sleep { ms } => {
                for c in 0..n {
                    self.recover_if_needed(c)?;
                }
                std::thread::sleep(std::time::Duration::from_millis(ms));
                self.summary.slept_ms += ms;
                // Requests held back past their liveness: their clients
                // have given up on them by now.
                let now = self.now();
                let overdue: Vec<usize> = self
                    .held_back
                    .iter()
                    .filter(|h| !h.given_up && h.valid_until < now)
                    .map(|h| h.client)
                    .collect();
                for c in overdue {
                    self.give_up(c)?;
                }
                Ok(())
            }
        }
    }

    // ---- the client's side ------------------------------------------------

    fn acquire(&mut self, c: usize, weight: u32, limit: u32, held_back: bool) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let id = self.clients[c].new_id(weight);
        let setup = self.clients[c].setup.clone();
        let sent = self.now();
        let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
        self.bound(&id, expiry);
        self.subject.fenced = fenced(c);
        let bytes = self.subject.encode_acquire(&id, limit, expiry, valid_until, None);
        if held_back {
            self.hold_back(c, &id, Kind::Acquire, bytes, valid_until);
            return Ok(());
        }
        let reply = answer(self.call(&bytes)?);
        if reply.status == 1 {
            tokens_as_asked(c, reply.token)?;
            self.granted(c, &id, u64::from(weight), limit, sent + setup.ttl - 1, reply.token)?;
        } else {
            self.dead.insert(id, self.epoch);
        }
        Ok(())
    }

    /// A call no client sends (an id that names weight 0, a fractional
    /// expiry): refused before anything is written. Its ids are never
    /// bounded, so a lease of theirs would be "never asked for".
    fn garbage(&mut self, c: usize, kind: u8) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let ttl = self.clients[c].setup.ttl;
        let sent = self.now();
        let id = format!("bad{}-{sent}", self.clients[c].index);
        let bytes = match kind % 3 {
            0 => self
                .subject
                .encode_acquire(&format!("{id}*0"), 5, sent + ttl, sent + 1_000, None),
            1 => {
                let placeholder = sent + ttl;
                let bytes = self.subject.encode_acquire(&id, 5, placeholder, sent + 1_000, None);
                let from = format!("${}\r\n{placeholder}\r\n", placeholder.to_string().len());
                let fractional = format!("{placeholder}.5");
                let to = format!("${}\r\n{fractional}\r\n", fractional.len());
                let text = String::from_utf8_lossy(&bytes).replacen(&from, &to, 1);
                Bytes::from(text.into_bytes())
            }
            _ => self.subject.encode_renew(&format!("{id}*0"), sent + ttl, sent + 1_000),
        };
        match self.call(&bytes)? {
            Frame::Error(_) => Ok(()),
            other => Err(format!("a call with a bad argument was answered {other:?}")),
        }
    }

    fn batch(&mut self, c: usize, count: usize, limit: u32, repeat: bool) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let mut ids: Vec<String> = (0..count).map(|_| self.clients[c].new_id(1)).collect();
        if repeat {
            ids.push(ids[0].clone());
        }
        let setup = self.clients[c].setup.clone();
        let sent = self.now();
        let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
        for id in &ids {
            self.bound(id, expiry);
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let bytes = self.subject.encode_acquire_many(&refs, limit, expiry, valid_until);
        let Frame::Array(items) = self.call(&bytes)? else {
            return Err("ACQUIRE_MANY: not an array".into());
        };
        let mut seen: HashMap<&str, (Frame, Frame)> = HashMap::new();
        for (id, triple) in ids.iter().zip(items.chunks(3)) {
            let (status, token) = (triple[0].clone(), triple[2].clone());
            if let Some(first) = seen.get(id.as_str()) {
                if *first != (status.clone(), token.clone()) {
                    return Err(format!(
                        "a repeated id answered differently: {first:?} then {status:?} {token:?}"
                    ));
                }
                continue;
            }
            seen.insert(id, (status.clone(), token.clone()));
            match (status, token) {
                (Frame::Integer(1), Frame::Integer(token)) => {
                    self.granted(c, id, 1, limit, sent + setup.ttl - 1, token)?;
                }
                _ => {
                    self.dead.insert(id.clone(), self.epoch);
                }
            }
        }
        Ok(())
    }

    fn across(&mut self, c: usize, acquires: &[(u32, u32)]) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let ids: Vec<String> = acquires
            .iter()
            .map(|(weight, _)| self.clients[c].new_id(*weight))
            .collect();
        let setup = self.clients[c].setup.clone();
        let sent = self.now();
        let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
        for id in &ids {
            self.bound(id, expiry);
        }
        let pairs: Vec<(&str, u32)> = ids
            .iter()
            .zip(acquires)
            .map(|(id, (_, limit))| (id.as_str(), *limit))
            .collect();
        self.subject.fenced = fenced(c);
        let bytes = self.subject.encode_acquire_across(&pairs, expiry, valid_until);
        let Frame::Array(items) = self.call(&bytes)? else {
            return Err("ACQUIRE_ACROSS: not an array".into());
        };
        if items.len() != 3 * ids.len() + 1 {
            return Err(format!(
                "ACQUIRE_ACROSS: {} items for {} acquires",
                items.len(),
                ids.len()
            ));
        }
        for ((id, (weight, limit)), triple) in ids.iter().zip(acquires).zip(items.chunks(3)) {
            match (&triple[0], &triple[1], &triple[2]) {
                (Frame::Integer(1), Frame::BulkString(echo), Frame::Integer(token)) if echo == id.as_bytes() => {
                    tokens_as_asked(c, *token)?;
                    self.granted(c, id, u64::from(*weight), *limit, sent + setup.ttl - 1, *token)?;
                }
                (Frame::Integer(_), Frame::BulkString(echo), _) if echo == id.as_bytes() => {
                    self.dead.insert(id.clone(), self.epoch);
                }
                other => return Err(format!("ACQUIRE_ACROSS answered {other:?} for {id}")),
            }
        }
        Ok(())
    }

    /// `ACQUIRE_ALL` of a lease on the subject and on `others` (subjects of
    /// this program's prefix, filled by strangers first, emptied after):
    /// every part granted or none, a withheld part only beside a refused
    /// one, and the other subjects hold the caller's lease exactly when it
    /// was granted.
    fn all(&mut self, c: usize, weight: u32, limit: u32, others: &[(u32, u32)]) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let setup = self.clients[c].setup.clone();
        let sent = self.now();
        let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
        let fenced = fenced(c);
        let shadows: Vec<SubjectKeys> = (0..others.len())
            .map(|i| SubjectKeys::new(&self.subject.prefix, &Key::new("other", i.to_string()).unwrap()))
            .collect();
        let mut strangers = Vec::new();
        for (keys, (other_limit, filled)) in shadows.iter().zip(others) {
            for n in 0..*filled {
                let id = LeaseId::from_parts(0x5eed, u64::from(n)).to_string();
                let call = LeaseCall {
                    keys,
                    id: id.as_bytes(),
                    expiry_ms: expiry,
                    valid_until_ms: valid_until,
                    fenced: false,
                };
                let mut out = bytes::BytesMut::new();
                self.subject
                    .scripts
                    .encode_acquire(&mut out, Eval::Sha, call, *other_limit, &self.subject.hold, None);
                self.call(&out.freeze())?;
                strangers.push((keys.clone(), id));
            }
        }
        let id = self.clients[c].new_id(weight);
        let other_ids: Vec<String> = others.iter().map(|_| self.clients[c].new_id(weight)).collect();
        self.bound(&id, expiry);
        let mut calls = vec![(
            LeaseCall {
                keys: &self.subject.keys,
                id: id.as_bytes(),
                expiry_ms: expiry,
                valid_until_ms: valid_until,
                fenced,
            },
            limit,
        )];
        for ((keys, other_id), (other_limit, _)) in shadows.iter().zip(&other_ids).zip(others) {
            let call = LeaseCall {
                keys,
                id: other_id.as_bytes(),
                expiry_ms: expiry,
                valid_until_ms: valid_until,
                fenced,
            };
            calls.push((call, *other_limit));
        }
        let mut out = bytes::BytesMut::new();
        self.subject
            .scripts
            .encode_acquire_all(&mut out, Eval::Sha, &calls, &self.subject.hold);
        drop(calls);
        let Frame::Array(items) = self.call(&out.freeze())? else {
            return Err("ACQUIRE_ALL: not an array".into());
        };
        if items.len() != 3 * (1 + others.len()) + 1 {
            return Err(format!(
                "ACQUIRE_ALL: {} items for {} subjects",
                items.len(),
                1 + others.len()
            ));
        }
        let statuses: Vec<i64> = items
            .chunks(3)
            .take(1 + others.len())
            .map(|triple| match triple[0] {
                Frame::Integer(status) => status,
                _ => i64::MIN,
            })
            .collect();
        let granted = statuses.iter().filter(|s| **s == 1).count();
        if granted != 0 && granted != statuses.len() {
            return Err(format!("ACQUIRE_ALL granted part of its subjects: {statuses:?}"));
        }
        let refused = statuses.iter().any(|s| *s != 1 && *s != WITHHELD);
        if statuses.contains(&WITHHELD) && !refused {
            return Err(format!(
                "ACQUIRE_ALL withheld a subject without a refusal: {statuses:?}"
            ));
        }
        for (keys, other_id) in shadows.iter().zip(&other_ids) {
            let held = !matches!(
                command(&mut self.redis, &[b"ZSCORE", keys.leases(), other_id.as_bytes()]),
                Frame::Null
            );
            if held != (granted > 0) {
                return Err(format!(
                    "ACQUIRE_ALL: {other_id} held {held} on another subject, statuses {statuses:?}"
                ));
            }
        }
        match (&items[0], &items[1], &items[2]) {
            (Frame::Integer(1), Frame::BulkString(echo), Frame::Integer(token)) if echo == id.as_bytes() => {
                tokens_as_asked(c, *token)?;
                self.granted(c, &id, u64::from(weight), limit, sent + setup.ttl - 1, *token)?;
            }
            (Frame::Integer(_), Frame::BulkString(echo), _) if echo == id.as_bytes() => {
                self.dead.insert(id.clone(), self.epoch);
            }
            other => return Err(format!("ACQUIRE_ALL answered {other:?} for {id}")),
        }
        // The other subjects are emptied again: strangers and the caller's
        // leases there are given back at once.
        for (keys, other_id) in shadows.iter().zip(&other_ids) {
            let ids = strangers
                .iter()
                .filter(|(k, _)| k == keys)
                .map(|(_, id)| id)
                .chain([other_id]);
            let units: Vec<Vec<u8>> = ids
                .flat_map(|id| inflight_core::lease_id::units(id.as_bytes()))
                .collect();
            let mut args: Vec<&[u8]> = vec![b"ZREM", keys.leases()];
            args.extend(units.iter().map(Vec::as_slice));
            let mut out = bytes::BytesMut::new();
            encode_command(&mut out, &args);
            self.call(&out.freeze())?;
        }
        self.summary.all_or_nothing += 1;
        Ok(())
    }

    /// A waiting acquire's first call or a check again (`previous`: the id
    /// it went on from, whose place or slot it takes over).
    fn check_waiter(
        &mut self,
        c: usize,
        id: String,
        units: u64,
        limit: u32,
        previous: Option<&str>,
    ) -> Result<(), String> {
        let setup = self.clients[c].setup.clone();
        let sent = self.now();
        let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
        let wait = WaitArgs {
            lifetime_ms: setup.lifetime,
            patience_ms: PATIENCE_MS,
            previous: previous.unwrap_or_default().as_bytes(),
        };
        // A slot handed to the old id, if Redis still reserves it, is the
        // new id's after this call.
        if let Some(handed) = previous.and_then(|old| self.handed.remove(old)) {
            self.handed.insert(id.clone(), handed);
        }
        self.bound(&id, expiry);
        let bytes = self.subject.encode_acquire(&id, limit, expiry, valid_until, Some(wait));
        let reply = answer(self.call(&bytes)?);
        // A reservation a release hands it lasts until its entry would.
        let reserved = self.time.1 + setup.lifetime + 1;
        self.bound(&id, reserved);
        match reply.status {
            1 => {
                self.clients[c].waiters.remove(&id);
                self.granted(c, &id, units, limit, sent + setup.ttl - 1, reply.token)?;
            }
            // Queued again after it had a place: it lost that place and any
            // slot handed to it, whose message may still come. As the
            // client does, it goes on under a new id, whose check takes over
            // the old id's new place.
            2 if reply.token == 1 && self.clients[c].waiters.contains_key(&id) => {
                self.clients[c].waiters.remove(&id);
                self.summary.renamed_waiters += 1;
                let renamed = self.clients[c].new_id(units as u32);
                return self.check_waiter(c, renamed, units, limit, Some(&id));
            }
            2 => {
                self.clients[c].waiters.insert(
                    id,
                    Waiter {
                        units,
                        limit,
                        last_sent: sent,
                    },
                );
            }
            // Ran too late: its queue entry (if any) is given back, as the
            // client does.
            -2 => {
                self.clients[c].waiters.remove(&id);
                self.leave(&id)?;
            }
            // Shed, or refused during a recovery: the script took it out.
            _ => {
                self.clients[c].waiters.remove(&id);
                self.dead.insert(id, self.epoch);
            }
        }
        // Not granted: the old id is taken back, as the client does when
        // its waiter ends (the call may not have reached it).
        match (reply.status, previous) {
            (1 | 2, _) | (_, None) => {}
            (_, Some(old)) => self.leave(old)?,
        }
        Ok(())
    }

    fn release(&mut self, c: usize, pick: usize, more: usize, how: u8) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let ids: Vec<String> = self.clients[c]
            .held
            .keys()
            .cycle()
            .skip(pick % self.clients[c].held.len().max(1))
            .take((more + 1).min(self.clients[c].held.len()))
            .cloned()
            .collect();
        let now = self.now();
        let mut plain = Vec::new();
        for id in ids {
            self.clients[c].held.remove(&id);
            // A write-back of it that may still run would bring it back:
            // given back with a tombstone until that write-back's deadline.
            match self.clients[c].reasserting.remove(&id).filter(|until| *until >= now) {
                Some(until) => self.compensate(c, &id, until)?,
                None => plain.push(id),
            }
        }
        if plain.is_empty() {
            return Ok(());
        }
        let refs: Vec<&str> = plain.iter().map(String::as_str).collect();
        let release = self.subject.encode_release(&refs, Some(10));
        let first = match how {
            0 => release.clone(),
            _ => self.subject.encode_removal(&refs),
        };
        match self.call(&first)? {
            Frame::Integer(_) => {
                let at = self.time.1;
                for id in plain.iter() {
                    self.clients[c].released.push((at, id.clone()));
                    self.dead.insert(id.clone(), self.epoch);
                }
            }
            other => return Err(format!("the release answered {other:?}")),
        }
        if how > 0 {
            match self.call(&self.subject.encode_queue_check())? {
                Frame::Integer(0) => {}
                Frame::Integer(1) => {
                    self.summary.queue_found += 1;
                    if how == 2 {
                        self.hold_back(c, &plain[0], Kind::HandOver, release, u64::MAX);
                    } else if let other @ Frame::Error(_) = self.call(&release)? {
                        return Err(format!("RELEASE answered {other:?}"));
                    }
                }
                other => return Err(format!("EXISTS answered {other:?}")),
            }
        }
        self.collect_messages()
    }

    fn compensate(&mut self, c: usize, id: &str, tombstone_until: u64) -> Result<(), String> {
        let bytes = self.subject.encode_compensate(id, tombstone_until);
        match self.call(&bytes)? {
            Frame::BulkString(echo) if &echo[..] == id.as_bytes() => {
                let at = self.time.1;
                self.clients[c].released.push((at, id.to_string()));
                self.dead.insert(id.to_string(), self.epoch);
            }
            other => return Err(format!("COMPENSATE answered {other:?}")),
        }
        self.collect_messages()
    }

    fn renew(&mut self, c: usize, pick: usize, held_back: bool) -> Result<(), String> {
        self.recover_if_needed(c)?;
        let Some(id) = nth(&self.clients[c].held, pick).map(|(id, _)| id.clone()) else {
            return Ok(());
        };
        let setup = self.clients[c].setup.clone();
        let sent = self.now();
        let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
        self.bound(&id, expiry);
        let bytes = self.subject.encode_renew(&id, expiry, valid_until);
        if held_back {
            self.hold_back(c, &id, Kind::Renew, bytes, valid_until);
            return Ok(());
        }
        self.confirm(c, &id, bytes, sent + setup.ttl - 1)
    }

    /// Sends a renewal of `id` (a holder's own, or the confirmation of a
    /// hand-over): extended, its holder counts on it until `believed`.
    fn confirm(&mut self, c: usize, id: &str, bytes: Bytes, believed: u64) -> Result<(), String> {
        match self.call(&bytes)? {
            Frame::Array(items) => match items.first() {
                Some(Frame::Integer(1)) => {
                    if let Some(held) = self.clients[c].held.get_mut(id) {
                        held.believed = held.believed.max(believed);
                    }
                }
                Some(Frame::Integer(0)) => {
                    // Gone: its holder is told, and stops counting on it.
                    self.clients[c].held.remove(id);
                }
                _ => {}
            },
            other => return Err(format!("RENEW answered {other:?}")),
        }
        Ok(())
    }

    fn leave(&mut self, id: &str) -> Result<(), String> {
        let bytes = self.subject.encode_leave(id);
        match self.call(&bytes)? {
            Frame::Integer(_) => {
                self.dead.insert(id.to_string(), self.epoch);
            }
            other => return Err(format!("LEAVE answered {other:?}")),
        }
        self.collect_messages()
    }

    /// The messages the last calls published (a `PING` on the subscribed
    /// connection comes back after every message before it).
    fn collect_messages(&mut self) -> Result<(), String> {
        self.subscriber
            .send_only(&[b"PING"])
            .map_err(|e| format!("subscriber: {e}"))?;
        loop {
            let frame = self.subscriber.read_reply().map_err(|e| format!("subscriber: {e}"))?;
            let Frame::Array(items) = frame else {
                return Err(format!("subscriber: {frame:?}"));
            };
            match &items[..] {
                [Frame::BulkString(kind), ..] if &kind[..] == b"pong" => return Ok(()),
                [Frame::BulkString(kind), _, Frame::BulkString(payload)] if &kind[..] == b"smessage" => {
                    let payload = String::from_utf8_lossy(payload).into_owned();
                    // Tokens of hand-overs, in the order Redis made them.
                    let words: Vec<&str> = payload.split(' ').collect();
                    if words[0] == "H" {
                        for pair in words[1..].chunks(2) {
                            let token: i64 = pair[1].parse().map_err(|_| format!("bad message {payload}"))?;
                            self.token(token)?;
                            self.summary.hand_overs += 1;
                            self.hand_over(pair[0])?;
                        }
                    }
                    self.published.push(payload);
                }
                other => return Err(format!("subscriber: {other:?}")),
            }
        }
    }

    /// A release handed a slot to waiter `id`: the grant is made now (its
    /// holder learns of it later), under its own limit.
    fn hand_over(&mut self, id: &str) -> Result<(), String> {
        let waiter = self
            .clients
            .iter()
            .find_map(|client| client.waiters.get(id).map(|w| (w.units, w.limit)));
        // The reservation lasts until its score (the waiter's entry's expiry).
        let reserved = self.subject.score(&mut self.redis, id);
        if let (Some((units, limit)), Some(until)) = (waiter, reserved) {
            // Handed again (a failover took the first reservation): one slot.
            self.handed.remove(id);
            self.over_admission(id, units, limit)?;
            self.handed.insert(id.to_string(), (units, until));
        }
        Ok(())
    }

    /// The client reads what was published since it last did.
    fn messages(&mut self, c: usize) -> Result<(), String> {
        if self.clients[c].needs_recovery {
            return Ok(()); // its wake-up connection died with the server
        }
        let unread: Vec<String> = self.published[self.clients[c].cursor..].to_vec();
        self.clients[c].cursor = self.published.len();
        for payload in unread {
            let words: Vec<String> = payload.split(' ').map(str::to_string).collect();
            match words[0].as_str() {
                "H" => {
                    for pair in words[1..].chunks(2) {
                        self.handed(c, &pair[0])?;
                    }
                }
                "N" => {
                    for id in &words[1..] {
                        if let Some(w) = self.clients[c].waiters.get(id) {
                            let (units, limit) = (w.units, w.limit);
                            self.check_waiter(c, id.clone(), units, limit, None)?;
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A release handed a slot to `id`: if it is one of this client's
    /// waiters, its caller holds it now (until its entry would have
    /// expired), and a renewal confirms it; if it is one of its ids that no
    /// waiter and no holder has, it is given back.
    fn handed(&mut self, c: usize, id: &str) -> Result<(), String> {
        let setup = self.clients[c].setup.clone();
        let now = self.now();
        // Heard of with less than half the reservation left: the client
        // checks again instead (and gets the slot with a whole TTL if it is
        // still reserved, or is queued again, under a new id).
        if let Some(w) = self.clients[c].waiters.get(id) {
            if w.last_sent + setup.lifetime < now + setup.lifetime / 2 {
                let (units, limit) = (w.units, w.limit);
                self.summary.late_hand_overs += 1;
                return self.check_waiter(c, id.to_string(), units, limit, None);
            }
        }
        if let Some(waiter) = self.clients[c].waiters.remove(id) {
            let believed = waiter.last_sent + setup.lifetime - 1;
            self.granted(c, id, waiter.units, waiter.limit, believed, 0)?;
            let sent = self.now();
            let (expiry, valid_until) = (sent + setup.ttl + 1, sent + setup.liveness);
            self.bound(id, expiry);
            let bytes = self.subject.encode_renew(id, expiry, valid_until);
            return self.confirm(c, id, bytes, sent + setup.ttl - 1);
        }
        if self.clients[c].owns(id) && !self.clients[c].held.contains_key(id) {
            return self.leave(id);
        }
        Ok(())
    }

    fn hold_back(&mut self, c: usize, id: &str, kind: Kind, bytes: Bytes, valid_until: u64) {
        self.summary.held_back += 1;
        self.held_back.push(HeldBack {
            client: c,
            id: id.to_string(),
            kind,
            bytes,
            valid_until,
            delivered: false,
            given_up: false,
        });
    }

    fn deliver(&mut self, pick: usize) -> Result<(), String> {
        let waiting: Vec<usize> = (0..self.held_back.len())
            .filter(|&i| !self.held_back[i].delivered)
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let at = waiting[pick % waiting.len()];
        self.held_back[at].delivered = true;
        let bytes = self.held_back[at].bytes.clone();
        self.summary.delivered_late += 1;
        let reply = self.call(&bytes)?;
        if let Kind::Acquire = self.held_back[at].kind {
            // Its reply goes nowhere; a grant took a token all the same.
            if let Frame::Array(items) = &reply {
                // (None if its client asks for no tokens.)
                if let [Frame::Integer(1), _, Frame::Integer(token), ..] = &items[..] {
                    if *token != 0 {
                        self.token(*token)?;
                    }
                }
            }
        }
        // Delivered and given up: nothing is left of it.
        self.held_back.retain(|h| !(h.delivered && h.given_up));
        self.collect_messages()
    }

    fn give_up(&mut self, c: usize) -> Result<(), String> {
        let mine: Vec<usize> = (0..self.held_back.len())
            .filter(|&i| self.held_back[i].client == c && !self.held_back[i].given_up)
            .collect();
        for i in mine {
            self.held_back[i].given_up = true;
            let (id, until) = (self.held_back[i].id.clone(), self.held_back[i].valid_until);
            match self.held_back[i].kind {
                Kind::Acquire => self.compensate(c, &id, until)?,
                // A handshake whose write-back stalls is cut off at its
                // deadline, and the next one recovers again (the loss is
                // still there to find).
                Kind::Reassert => self.clients[c].needs_recovery = true,
                // Best effort: its waiters check on their own.
                Kind::Renew | Kind::HandOver => {}
            }
        }
        self.held_back.retain(|h| !(h.delivered && h.given_up));
        Ok(())
    }

    /// A failover or a flush: every connection breaks with the server, so
    /// messages not read are lost, held-back bytes never arrive, and every
    /// client recovers before it acts again.
    fn lose_connections(&mut self) {
        self.epoch += 1;
        self.lost_at = self.now();
        self.published.clear();
        // Slots handed over stay handed if the data kept them (a waiter that
        // learns of one later, at its check, was granted it then); those
        // the loss took are no one's.
        let handed: Vec<String> = self.handed.keys().cloned().collect();
        for id in handed {
            if self.subject.score(&mut self.redis, &id).is_none() {
                self.handed.remove(&id);
            }
        }
        for client in &mut self.clients {
            client.cursor = 0;
            client.needs_recovery = true;
        }
        for held in std::mem::take(&mut self.held_back) {
            if !held.given_up {
                if let (Kind::Reassert, Some(h)) = (&held.kind, self.clients[held.client].held.get_mut(&held.id)) {
                    h.told_lost = true;
                }
            }
        }
    }

    fn recover_if_needed(&mut self, c: usize) -> Result<(), String> {
        if self.clients[c].needs_recovery {
            self.recover(c, false)?;
        }
        Ok(())
    }

    /// What a client's handshake does after a loss: the hold, the releases
    /// of the window again, each held lease written back.
    fn recover(&mut self, c: usize, hold_back_one: bool) -> Result<(), String> {
        self.clients[c].needs_recovery = false;
        // Its wake-up connection subscribes again from now.
        self.clients[c].cursor = self.published.len();
        let now = self.now();
        let hold = self.subject.encode_hold(WINDOW_MS);
        self.call(&hold)?;
        let again: Vec<String> = self.clients[c]
            .released
            .iter()
            .filter(|(at, _)| now.saturating_sub(*at) <= WINDOW_MS)
            .map(|(_, id)| id.clone())
            .take(64)
            .collect();
        if !again.is_empty() {
            let refs: Vec<&str> = again.iter().map(String::as_str).collect();
            // As the client's recovery does: no hold time to teach.
            let bytes = self.subject.encode_release(&refs, None);
            self.call(&bytes)?;
            self.collect_messages()?;
        }
        let setup = self.clients[c].setup.clone();
        let held: Vec<(String, u64)> = self.clients[c]
            .held
            .iter()
            .filter(|(_, h)| !h.told_lost && h.believed > now)
            .map(|(id, h)| (id.clone(), h.believed))
            .collect();
        let limits = 1_000; // the limit is only for detecting over-admission here
        let mut held_back = hold_back_one;
        for (id, believed) in held {
            let valid_until = now + setup.liveness;
            let expiry = believed + 1;
            self.bound(&id, expiry);
            let bytes = self.subject.encode_reassert(&id, limits, expiry, valid_until);
            let latest = self.clients[c].reasserting.entry(id.clone()).or_insert(valid_until);
            *latest = (*latest).max(valid_until);
            if held_back {
                held_back = false;
                self.hold_back(c, &id, Kind::Reassert, bytes, valid_until);
                continue;
            }
            // Answered: but an earlier write-back cut off with its
            // connection may still run, so the entry stays until given back.
            let reply = self.call(&bytes)?;
            match &reply {
                Frame::Array(items) => match items.first() {
                    Some(Frame::Integer(1..=3)) => {}
                    Some(Frame::Integer(_)) => {
                        if let Some(h) = self.clients[c].held.get_mut(&id) {
                            h.told_lost = true;
                        }
                    }
                    _ => return Err(format!("REASSERT answered {reply:?}")),
                },
                _ => return Err(format!("REASSERT answered {reply:?}")),
            }
        }
        Ok(())
    }

    // ---- what is checked ---------------------------------------------------

    fn bound(&mut self, id: &str, until: u64) {
        let bound = self.bounds.entry(id.to_string()).or_insert(0);
        *bound = (*bound).max(until);
    }

    fn token(&mut self, token: i64) -> Result<(), String> {
        if token <= self.last_token {
            return Err(format!("fencing token {token} after {}", self.last_token));
        }
        self.last_token = token;
        Ok(())
    }

    /// Client `c`'s caller now holds `id`. Unless a release handed it to
    /// it (checked then), the grant is made now.
    fn granted(&mut self, c: usize, id: &str, units: u64, limit: u32, believed: u64, token: i64) -> Result<(), String> {
        if token != 0 {
            self.token(token)?;
        }
        self.summary.grants += 1;
        // A reservation counted since its hand-over is not counted twice
        // (one that ran out before the call that took it is a grant of its
        // own; the call ran at some instant after `time.0`).
        let sent = self.time.0;
        if self.handed.remove(id).is_none_or(|(_, until)| until <= sent) {
            self.over_admission(id, units, limit)?;
        }
        self.clients[c].held.insert(
            id.to_string(),
            Held {
                units,
                believed,
                told_lost: false,
            },
        );
        Ok(())
    }

    /// From the holders' view, a grant of `units` to `id` under `limit`
    /// fits: the units every holder counts on, and those handed to waiters
    /// that will count on them, with these, are at most `limit`.
    fn over_admission(&self, id: &str, units: u64, limit: u32) -> Result<(), String> {
        let at = self.time.1;
        // A lease whose write-back has not landed (stalled, or its client
        // still to recover) once the recovery window is over: the design
        // assumes every client recovers within the window, and only a
        // machine too slow to keep the program's pace breaks that.
        let unrecovered = |client: &Client, lease: &str| {
            client.needs_recovery
                || self.held_back.iter().any(|h| {
                    h.client == client.index && h.id == lease && matches!(h.kind, Kind::Reassert) && !h.delivered
                })
        };
        let past_window = at > self.lost_at + WINDOW_MS;
        let outside: u64 = self
            .clients
            .iter()
            .flat_map(|client| client.held.iter().map(move |(lease, h)| (client, lease, h)))
            .filter(|(client, lease, h)| !h.told_lost && h.believed > at && past_window && unrecovered(client, lease))
            .map(|(_, _, h)| h.units)
            .sum();
        let counted: u64 = self
            .clients
            .iter()
            .flat_map(|client| client.held.values())
            .filter(|h| !h.told_lost && h.believed > at)
            .map(|h| h.units)
            .sum::<u64>()
            + self
                .handed
                .values()
                .filter(|(_, until)| *until > at)
                .map(|(units, _)| units)
                .sum::<u64>();
        if counted + units > u64::from(limit) && counted - outside + units <= u64::from(limit) {
            return Err(format!(
                "{INCONCLUSIVE}: {id} granted past the recovery window while a write-back had not landed"
            ));
        }
        if counted + units > u64::from(limit) {
            let holders: Vec<String> = self
                .clients
                .iter()
                .flat_map(|client| {
                    client
                        .held
                        .iter()
                        .map(move |(id, h)| format!("c{} {id} {h:?}", client.index))
                })
                .collect();
            return Err(format!(
                "over-admission from the holders' view: {id} ({units} units, limit {limit}) granted while {counted} units are held or handed over: {holders:?} {:?}",
                self.handed
            ));
        }
        Ok(())
    }

    /// The invariants, after every step.
    fn check(&mut self) -> Result<(), String> {
        let now = self.now();
        // Every key the scripts write expires.
        for key in self.subject.all_keys(&mut self.redis) {
            if Subject::pttl(&mut self.redis, &key) == -1 {
                return Err(format!("{} has no expiry", String::from_utf8_lossy(&key)));
            }
        }
        let members = scored(command(
            &mut self.redis,
            &[b"ZRANGE", self.subject.keys.leases(), b"0", b"-1", b"WITHSCORES"],
        ));
        // On a loaded machine the reads above take a while, and keys expire
        // meanwhile: what the holders count on is judged at the time after
        // the leases were read (a lease gone by then was due by then).
        let read = self.now();
        let live: Vec<(String, u64)> = members.into_iter().filter(|(_, score)| *score > now).collect();
        for (member, score) in &live {
            let id = member.split('#').next().unwrap_or(member);
            // No lease outlives what its requests asked for (or a
            // reservation its waiter's entry allowed).
            match self.bounds.get(id) {
                Some(bound) if score <= bound => {}
                Some(bound) => {
                    return Err(format!("{member} lives until {score}, past its bound {bound}"));
                }
                None => return Err(format!("{member} was never asked for")),
            }
            // A lease given back does not come back (until the next
            // failover, which recovery then repairs).
            if self.dead.get(id) == Some(&self.epoch) {
                return Err(format!("{member} came back after it was given back"));
            }
        }
        // Every holder's lease is in Redis at least as long as its holder
        // counts on it (once its client recovered from a loss: while its
        // write-back is on its way, the hold keeps everyone else out).
        for client in &self.clients {
            if client.needs_recovery {
                continue;
            }
            for (id, held) in &client.held {
                let writing_back = self.held_back.iter().any(|h| {
                    h.client == client.index && &h.id == id && matches!(h.kind, Kind::Reassert) && !h.delivered
                });
                if held.told_lost || held.believed <= read + 1 || writing_back {
                    continue;
                }
                match live.iter().find(|(member, _)| member == id) {
                    Some((_, score)) if *score >= held.believed => {}
                    found => {
                        return Err(format!(
                            "c{} counts on {id} until {}, Redis has {found:?}",
                            client.index, held.believed
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn nth<V>(map: &BTreeMap<String, V>, pick: usize) -> Option<(&String, &V)> {
    if map.is_empty() {
        return None;
    }
    map.iter().nth(pick % map.len())
}

/// A `ZRANGE ... WITHSCORES` reply as (member, score).
fn scored(frame: Frame) -> Vec<(String, u64)> {
    match frame {
        Frame::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [Frame::BulkString(member), Frame::BulkString(score)] => Some((
                    String::from_utf8_lossy(member).into_owned(),
                    std::str::from_utf8(score).ok()?.parse::<f64>().ok()? as u64,
                )),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A reply as the model's and Redis's can be compared: an acquire's
/// fencing tokens as 1 (granted) or 0 (the model's clock has no
/// microseconds, so only what tokens mean is compared), an error without
/// the script position Redis adds.
fn tokens_as_grants(frame: &Frame) -> Frame {
    if let Frame::Error(message) = frame {
        let text = message.split(" script: ").next().unwrap_or_default();
        return Frame::Error(text.into());
    }
    let Frame::Array(items) = frame else {
        return frame.clone();
    };
    if items.len() == 3 {
        return frame.clone(); // a renewal: {status, id, reclaimed}
    }
    let looks_like_acquire = matches!(
        &items[..],
        [Frame::Integer(_), Frame::BulkString(_), Frame::Integer(_), ..]
    );
    if !looks_like_acquire {
        return frame.clone();
    }
    let width = match items.len() {
        4 | 6 => items.len(),
        _ => 3,
    };
    let mut items = items.clone();
    let len = items.len();
    for group in items[..len - len % width].chunks_exact_mut(width) {
        if let Frame::Integer(token) = &mut group[2] {
            *token = i64::from(*token > 0);
        }
    }
    Frame::Array(items)
}

/// Every key of the subject on a real server, rendered as the model renders
/// its own (fencing counters by expiry only: their values are the clock's).
fn dump(redis: &mut RespClient, subject: &Subject) -> Vec<(Bytes, String, Option<u64>)> {
    let mut keys = subject.all_keys(redis);
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let kind = match command(redis, &[b"TYPE", &key]) {
            Frame::SimpleString(kind) => kind,
            _ => continue,
        };
        let text = match &kind[..] {
            b"zset" => {
                let members: Vec<String> = scored(command(redis, &[b"ZRANGE", &key, b"0", b"-1", b"WITHSCORES"]))
                    .into_iter()
                    .map(|(m, s)| format!("{m}={s}"))
                    .collect();
                format!("zset:{}", members.join(","))
            }
            b"hash" => {
                let mut fields: Vec<(String, String)> = match command(redis, &[b"HGETALL", &key]) {
                    Frame::Array(items) => items
                        .chunks(2)
                        .filter_map(|pair| match pair {
                            [Frame::BulkString(f), Frame::BulkString(v)] => Some((
                                String::from_utf8_lossy(f).into_owned(),
                                String::from_utf8_lossy(v).into_owned(),
                            )),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                fields.sort();
                let fields: Vec<String> = fields.into_iter().map(|(f, v)| format!("{f}={v}")).collect();
                format!("hash:{}", fields.join(","))
            }
            b"string" => match command(redis, &[b"GET", &key]) {
                Frame::BulkString(value) => format!("str:{}", String::from_utf8_lossy(&value)),
                _ => continue,
            },
            _ => continue,
        };
        let when = match command(redis, &[b"PEXPIRETIME", &key]) {
            Frame::Integer(-2) => continue, // expired while being read
            Frame::Integer(at) if at >= 0 => Some(at as u64),
            _ => None,
        };
        out.push((key, text, when));
    }
    normalize(out)
}

/// The same keys with the same values, and expiries at most `slack` ms
/// apart: a script reads `TIME` once, but Redis dates the expiries it sets
/// by its clock when each command runs, which may have moved on by a
/// millisecond (the model dates them all by the script's `TIME`). Keys
/// expiring within a few ms of `at` may be gone on one side and not yet on
/// the other: they are left out.
/// Whether two dumps agree on every key that outlives `dumped` (when the
/// server's was read) by more than `slack`, each key's expiry within `slack`.
fn same_data(a: &[(Bytes, String, Option<u64>)], b: &[(Bytes, String, Option<u64>)], dumped: u64, slack: u64) -> bool {
    let expiring = dumped + slack + 1;
    // A key about to expire on either side is left out of both: the two
    // expiries may differ by the slack, and fall on either side of the
    // cut-off (a fence set with a relative `PX` in a script that ran across
    // a millisecond boundary, say).
    let soon: Vec<&Bytes> = a
        .iter()
        .chain(b)
        .filter(|(_, _, when)| when.is_some_and(|when| when <= expiring + slack))
        .map(|(key, _, _)| key)
        .collect();
    let lasting = |data: &[(Bytes, String, Option<u64>)]| -> Vec<(Bytes, String, Option<u64>)> {
        data.iter()
            .filter(|(key, _, _)| !soon.contains(&key))
            .cloned()
            .collect()
    };
    let (a, b) = (lasting(a), lasting(b));
    a.len() == b.len()
        && a.iter().zip(&b).all(|((ka, va, wa), (kb, vb, wb))| {
            ka == kb
                && va == vb
                && match (wa, wb) {
                    (Some(x), Some(y)) => x.abs_diff(*y) <= slack,
                    (None, None) => true,
                    _ => false,
                }
        })
}

fn model_dump(model: &mut RedisModel) -> Vec<(Bytes, String, Option<u64>)> {
    normalize(model.dump())
}

fn normalize(mut data: Vec<(Bytes, String, Option<u64>)>) -> Vec<(Bytes, String, Option<u64>)> {
    for (key, text, _) in &mut data {
        if key.ends_with(b":fence") {
            *text = "str:(a token)".into();
        }
    }
    data
}

/// Client `c`'s fail-fast acquires draw fencing tokens: the odd clients'
/// do not (as a limiter built without `fencing_tokens`).
fn fenced(c: usize) -> bool {
    c.is_multiple_of(2)
}

/// A fail-fast grant to client `c` carries a token exactly if it asked.
fn tokens_as_asked(c: usize, token: i64) -> Result<(), String> {
    match (fenced(c), token) {
        (true, t) if t > 0 => Ok(()),
        (false, 0) => Ok(()),
        (asked, t) => Err(format!("client {c} (fencing {asked}) was granted with token {t}")),
    }
}

/// The model's keys alive at `started` that expire before `at` live until
/// `at` (a script that started at `started` and read `at` from `TIME`).
fn keep_alive_from(model: &mut RedisModel, started: u64, at: u64) {
    if started == at {
        return;
    }
    model.now_ms = started;
    let dying: Vec<(Bytes, Option<u64>)> = model
        .dump()
        .into_iter()
        .filter(|(_, _, when)| when.is_some_and(|when| when < at))
        .map(|(key, _, _)| (key, Some(at)))
        .collect();
    model.align_expiries(&dying);
}
