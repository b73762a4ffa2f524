//! The simulated Redis, shared by both harnesses: one connection's loop,
//! generic over the stream, speaking RESP with the core's own codec and
//! executing the core's reference model of the lease set. turmoil and madsim
//! each accept connections their own way and hand them to [`serve_connection`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use inflight_testkit::model::{ModelConnection, RedisModel};
use inflight_testkit::model_cluster::{ClusterConnection, Migration, ModelCluster};

use crate::rng::Rng;
use crate::Bug;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::ledger::Ledger;

pub const PORT: u16 = 6379;
pub use crate::clock::EPOCH_MS;

/// What the simulated server shares with the harness.
#[derive(Clone)]
pub struct ServerState {
    pub model: Arc<Mutex<RedisModel>>,
    pub ledger: Arc<Mutex<Ledger>>,
    /// Replies still to be lost on purpose (one each), keeping the connection.
    pub drop_replies: Arc<AtomicU32>,
    /// Key names of the scenario, to attribute the model's denials.
    pub keys: &'static [(&'static str, u32)],
    /// Milliseconds of virtual time since the run began.
    pub elapsed_ms: fn() -> u64,
    /// Server starts so far, to give each its own ids.
    incarnations: Arc<std::sync::atomic::AtomicU64>,
    /// Bumped by [`ServerState::restart`]: every connection of the old
    /// incarnation closes.
    restarts: Arc<tokio::sync::watch::Sender<u64>>,
    /// A Redis Cluster's slot map, when the scenario runs one: each host
    /// then answers for its own slots (the data is the cluster's, in `model`).
    pub cluster: Option<Arc<Mutex<ModelCluster>>>,
    /// A replica that receives the data set late, when the scenario can
    /// fail over to it: the primary's data after each batch of commands of
    /// the last `REPLICA_LAG_MS` (and the last one before), by when.
    replica: Option<Arc<Mutex<History>>>,
    /// Messages published (`SPUBLISH`), by host, for every connection to
    /// deliver to its subscriber if it subscribed to the channel.
    wakes: tokio::sync::broadcast::Sender<Wake>,
    /// While wake-ups lag: until when (virtual ms), and by how much each
    /// message published until then reaches its subscribers late.
    wake_lag: Arc<Mutex<Option<(u64, u64)>>>,
    /// The injected bug, when it is one of the scripts' (see
    /// [`Bug::inject_into`]).
    pub bug: Option<Bug>,
    /// A Redis Sentinel deployment, when the scenario runs one: which data
    /// host is the primary, and the sentinels' view (see `sentinel`).
    pub sentinel: Option<Arc<crate::sentinel::SentinelSim>>,
}

/// Whether a lease (key, id) is live in the simulated Redis now (S14).
pub type LeaseOracle = Arc<dyn Fn(&'static str, &str) -> bool + Send + Sync>;

/// A message published (`SPUBLISH`): on which host, the channel, the
/// payload, and the virtual millisecond it may reach its subscribers.
type Wake = (usize, bytes::Bytes, bytes::Bytes, u64);

/// The primary's data after each batch of commands, by virtual millisecond.
type History = VecDeque<(u64, RedisModel)>;

/// How far a lagging replica is behind: a failover loses the writes (grants
/// and releases alike) of the last this many milliseconds.
pub const REPLICA_LAG_MS: u64 = 30;

impl ServerState {
    pub fn new(ledger: Arc<Mutex<Ledger>>, keys: &'static [(&'static str, u32)], elapsed_ms: fn() -> u64) -> Self {
        Self {
            model: Arc::new(Mutex::new(RedisModel::new(EPOCH_MS))),
            ledger,
            drop_replies: Arc::new(AtomicU32::new(0)),
            keys,
            elapsed_ms,
            incarnations: Arc::default(),
            restarts: Arc::new(tokio::sync::watch::Sender::new(0)),
            cluster: None,
            replica: None,
            wakes: tokio::sync::broadcast::Sender::new(4096),
            wake_lag: Arc::default(),
            bug: None,
            sentinel: None,
        }
    }

    /// The state of a Sentinel deployment: two data hosts (the first the
    /// primary, the second its lagging replica) and three sentinels.
    pub fn with_sentinel(self) -> Self {
        let mut state = self.with_lagging_replica();
        state.sentinel = Some(Arc::default());
        state
    }

    /// The state of a server with a lagging replica that a failover promotes.
    pub fn with_lagging_replica(mut self) -> Self {
        let copy = self.model.lock().unwrap().clone();
        self.replica = Some(Arc::new(Mutex::new(VecDeque::from([(0, copy)]))));
        self
    }

    /// Records the primary's data after a batch of commands, for the replica
    /// to receive `REPLICA_LAG_MS` later.
    fn replicate(&self, model: &RedisModel) {
        let Some(history) = &self.replica else {
            return;
        };
        let mut history = history.lock().unwrap();
        let now = (self.elapsed_ms)();
        if history.back().is_some_and(|(at, _)| *at == now) {
            history.pop_back();
        }
        history.push_back((now, model.clone()));
        // Keep the newest state the replica has surely received, and after.
        while history.len() > 1 && history[1].0 + REPLICA_LAG_MS <= now {
            history.pop_front();
        }
    }

    /// The primary dies and the replica takes over with what it has: a new
    /// replication id continuing the old one, the last writes lost. Every
    /// connection breaks; clients reconnect to the same address (a virtual
    /// IP or a Sentinel-managed name follows the new primary).
    pub fn fail_over(&self, elapsed: std::time::Duration) {
        self.promote_replica(elapsed);
        self.restarts.send_modify(|n| *n += 1);
    }

    /// The replica takes over with what it has: a new replication id
    /// continuing the old one, the last writes lost. Returns the old
    /// primary's data. Connections stay open (see `fail_over`).
    pub fn promote_replica(&self, elapsed: std::time::Duration) -> RedisModel {
        let history = self.replica.as_ref().expect("a scenario with a replica");
        let elapsed_ms = elapsed.as_millis() as u64;
        let now = EPOCH_MS + elapsed_ms;
        let mut history = history.lock().unwrap();
        // What the replica has: the primary's data as of REPLICA_LAG_MS ago.
        let received = history
            .iter()
            .rev()
            .find(|(at, _)| *at + REPLICA_LAG_MS <= elapsed_ms)
            .unwrap_or(&history[0]);
        let mut model = self.model.lock().unwrap();
        let old = model.clone();
        *model = RedisModel::promoted_from(&received.1, now, |_, _| true);
        self.new_incarnation(&mut model);
        // The next replica follows the new primary from here.
        *history = VecDeque::from([(elapsed_ms, model.clone())]);
        old
    }

    /// The state of a cluster whose hosts are `addresses`, the first
    /// `primaries` of them owning the slots, each scenario key on primary
    /// `index % primaries` so that every primary is busy.
    pub fn with_cluster(mut self, addresses: Vec<(String, u16)>, primaries: usize) -> Self {
        let mut cluster = ModelCluster::new(addresses, primaries);
        for (index, (key, _)) in self.keys.iter().enumerate() {
            cluster.assign(crate::callers::subject_keys(key).slot(), index % primaries);
        }
        self.model.lock().unwrap().cluster_enabled = true;
        self.cluster = Some(Arc::new(Mutex::new(cluster)));
        self
    }

    /// A restart in place: data forgotten, every connection closed. (turmoil
    /// restarts the whole host instead; madsim cannot rebind a restarted
    /// node's port, so its harness uses this.)
    pub fn restart(&self, elapsed: std::time::Duration) {
        self.forget_everything(elapsed);
        self.restarts.send_modify(|n| *n += 1);
    }

    /// A restart of a Redis without persistence: everything is forgotten.
    /// `elapsed` is the run's virtual time (the harness's, which reads it
    /// outside any host).
    pub fn forget_everything(&self, elapsed: std::time::Duration) {
        let mut model = self.model.lock().unwrap();
        *model = RedisModel::new(EPOCH_MS + elapsed.as_millis() as u64);
        self.new_incarnation(&mut model);
    }

    /// Gives a freshly started server a run id and a replication id of its
    /// own, even if it starts in the same millisecond as the last one.
    fn new_incarnation(&self, model: &mut RedisModel) {
        let incarnation = self.incarnations.fetch_add(1, Ordering::SeqCst) + 1;
        model.run_id = format!("{:032x}{incarnation:08x}", model.now_ms);
        model.replid = format!("{:032x}{:08x}", model.now_ms.wrapping_mul(31), incarnation << 20);
    }

    /// S14's oracle, where the scenario loses no data (no restart, no
    /// failover, one server): whether lease `id` of key `key` is live in
    /// Redis now. A permit must never reach its caller after its lease (a
    /// hand-over's reservation, say) has lapsed.
    pub fn lease_oracle(&self, scenario: &crate::scenario::Scenario) -> Option<LeaseOracle> {
        let faults = scenario.faults;
        let loses_data =
            faults.bounce || faults.lagging_failover || faults.failovers || scenario.cluster || scenario.sentinel;
        if loses_data {
            return None;
        }
        let (model, elapsed_ms) = (self.model.clone(), self.elapsed_ms);
        Some(Arc::new(move |key: &'static str, id: &str| {
            let keys = crate::callers::subject_keys(key);
            let mut model = model.lock().unwrap();
            model.now_ms = model.now_ms.max(EPOCH_MS + elapsed_ms());
            model
                .live_leases(keys.leases())
                .iter()
                .any(|live| live == id.as_bytes())
        }))
    }

    /// Until `until` (virtual ms), every message published reaches its
    /// subscribers `lag` ms late: a backlog on the wake-up connections (a
    /// slow subscriber, a busy server), while commands are answered at once.
    pub fn lag_wake_ups(&self, lag: u64, until: u64) {
        *self.wake_lag.lock().unwrap() = Some((until, lag));
    }

    /// Wake-ups reach their subscribers as soon as they are published.
    pub fn stop_lagging_wake_ups(&self) {
        *self.wake_lag.lock().unwrap() = None;
    }

    /// When a message published now may reach its subscribers.
    fn wake_due(&self) -> u64 {
        let now = (self.elapsed_ms)();
        match *self.wake_lag.lock().unwrap() {
            Some((until, lag)) if now < until => now + lag,
            _ => now,
        }
    }

    /// Asks the server to lose its next reply.
    pub fn lose_one_reply(&self) {
        self.drop_replies.fetch_add(1, Ordering::SeqCst);
    }
}

/// Serves one client connection of cluster host `host` (0 for a lone
/// server) until it closes or sends garbage.
pub async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, state: ServerState, host: usize) {
    let mut connection = ModelConnection::new();
    let mut cluster_connection = ClusterConnection::default();
    let mut restarted = state.restarts.subscribe();
    let mut wakes = state.wakes.subscribe();
    // A Sentinel reconfiguration of this host closes its clients (with no
    // Sentinel, a sender kept here that never changes).
    let never = tokio::sync::broadcast::Sender::new(1);
    let mut reconfigured = match &state.sentinel {
        Some(sentinel) => sentinel.reconfigurations(host),
        None => never.subscribe(),
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            biased;
            _ = restarted.changed() => return,
            _ = reconfigured.recv() => return,
            wake = wakes.recv() => {
                // A lagging receiver loses messages, as a slow subscriber
                // may: waiters then rely on their own checks.
                if let Ok((from, channel, payload, due)) = wake {
                    if from == host && connection.is_subscribed(&channel) {
                        // A lagging message holds up the ones behind it, as
                        // a backlog on one connection does.
                        let wait = due.saturating_sub((state.elapsed_ms)());
                        if wait > 0 {
                            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                        }
                        let message = ModelConnection::message(&channel, &payload);
                        if stream.write_all(&message).await.is_err() || stream.flush().await.is_err() {
                            return;
                        }
                    }
                }
                continue;
            }
            read = stream.read(&mut buf) => read,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if let Some(sentinel) = &state.sentinel {
            // Not the primary (any more): the old primary's lost copy, or
            // a read-only replica; nothing there is the fleet's.
            if let crate::sentinel::Role::Other(replies, ran) =
                sentinel.serve(host, &mut connection, &buf[..n], (state.elapsed_ms)())
            {
                let at = std::time::Duration::from_millis((state.elapsed_ms)());
                for record in ran {
                    let mut ledger = state.ledger.lock().unwrap();
                    match (key_name(state.keys, &record.key), record.status) {
                        (Some(key), 0) => ledger.server_denied(key),
                        (Some(key), _) => ledger.server_granted(at, key, record.token),
                        (None, _) => {}
                    }
                }
                let Ok(replies) = replies else { return };
                watch(&state, host, "not primary", &buf[..n], &replies);
                for reply in replies {
                    if stream.write_all(&reply).await.is_err() || stream.flush().await.is_err() {
                        return;
                    }
                }
                continue;
            }
        }
        let (replies, published) = {
            let mut model = state.model.lock().unwrap();
            model.now_ms = EPOCH_MS + (state.elapsed_ms)();
            if let Some(bug) = state.bug {
                bug.inject_into(&mut model);
            }
            let replies = match &state.cluster {
                Some(cluster) => {
                    let cluster = cluster.lock().unwrap();
                    model.handle_each_with(&mut connection, &buf[..n], |model, args| {
                        cluster.intercept(host, &mut cluster_connection, model, args)
                    })
                }
                None => model.handle_each(&mut connection, &buf[..n]),
            };
            let records: Vec<_> = model.acquires.drain(..).collect();
            let named: Vec<_> = model.named.drain(..).collect();
            let partial = partial_calls(&records);
            let executed: Vec<_> = records.into_iter().filter(|r| r.status == 0 || r.status == 1).collect();
            let published = model.take_published();
            // S9's oracle: whether a waiter in line could be granted now.
            let servable: Vec<(&'static str, bool)> = state
                .keys
                .iter()
                .map(|(key, limit)| {
                    let keys = crate::callers::subject_keys(key);
                    (*key, model.waiter_could_go(&keys, u64::from(*limit)))
                })
                .collect();
            drop(model);
            let mut ledger = state.ledger.lock().unwrap();
            let at = std::time::Duration::from_millis((state.elapsed_ms)());
            for detail in partial {
                ledger.violate(at, "S12 all or nothing", detail);
            }
            for record in executed {
                match (key_name(state.keys, &record.key), record.status) {
                    (Some(key), 0) => ledger.server_denied(key),
                    (Some(key), _) => {
                        ledger.server_granted(at, key, record.token);
                        if record.handed {
                            ledger.server_handed(at, String::from_utf8_lossy(&record.lease).into_owned());
                        }
                        // A fresh grant needs a free slot; `free` is 0 for
                        // an id that already held one.
                        if record.free > 0 {
                            ledger.server_fairness(at, key, record.ahead, record.free, record.weight);
                        }
                    }
                    (None, _) => {}
                }
            }
            for lease in named {
                ledger.hand_over_heard(&String::from_utf8_lossy(&lease));
            }
            for (key, one_could_go) in servable {
                ledger.server_waiters(at, key, one_could_go);
            }
            let overdue = ledger.overdue_hand_overs(at);
            drop(ledger);
            if !overdue.is_empty() {
                let live: Vec<String> = {
                    let mut model = state.model.lock().unwrap();
                    let held = model.all_live_leases();
                    overdue
                        .into_iter()
                        .filter(|lease| held.iter().any(|(_, id)| id[..] == *lease.as_bytes()))
                        .collect()
                };
                state.ledger.lock().unwrap().unheard_hand_overs(at, live);
            }
            (replies, published)
        };
        state.replicate(&state.model.lock().unwrap());
        let Ok(replies) = replies else {
            return; // garbage from a client: drop it, as Redis does
        };
        watch(&state, host, "primary", &buf[..n], &replies);
        for reply in replies {
            let lose = state
                .drop_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if lose {
                continue;
            }
            if stream.write_all(&reply).await.is_err() || stream.flush().await.is_err() {
                return;
            }
        }
        let due = state.wake_due();
        for (channel, payload) in published {
            let _ = state.wakes.send((host, channel, payload, due));
        }
    }
}

/// With `INFLIGHT_SIM_WATCH=<text>` (e.g. a lease id a violation names),
/// prints every request to a data host that holds the text, with its
/// replies: one lease followed through a seed.
fn watch(state: &ServerState, host: usize, role: &str, request: &[u8], replies: &[bytes::Bytes]) {
    // Read once: this runs for every request.
    static WATCHED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let watched = WATCHED.get_or_init(|| std::env::var("INFLIGHT_SIM_WATCH").ok());
    let Some(text) = watched else {
        return;
    };
    let request = String::from_utf8_lossy(request);
    if !request.contains(text.as_str()) {
        return;
    }
    let flat = |s: &str| s.replace("\r\n", " ");
    let replies: Vec<String> = replies.iter().map(|r| flat(&String::from_utf8_lossy(r))).collect();
    eprintln!(
        "{:>10.3}s host {host} ({role}): {} -> {}",
        (state.elapsed_ms)() as f64 / 1000.0,
        flat(&request),
        replies.join(" | ")
    );
}

/// `sim:{load|k1}:leases` -> `k1`.
fn key_name(keys: &'static [(&'static str, u32)], redis_key: &[u8]) -> Option<&'static str> {
    let text = std::str::from_utf8(redis_key).ok()?;
    let subject = text.split('|').nth(1)?.split('}').next()?;
    keys.iter().map(|(k, _)| *k).find(|k| *k == subject)
}

/// Starts moving the slot of one of `keys` (drawn by `chaos`) to another
/// primary: IMPORTING and MIGRATING, keys not moved yet. Returns the note.
pub fn start_migration(
    map: &mut ModelCluster,
    keys: &[(&str, u32)],
    chaos: &mut Rng,
    name: impl Fn(usize) -> String,
) -> String {
    let (key, _) = keys[chaos.range(0, keys.len() as u64) as usize];
    let slot = crate::callers::subject_keys(key).slot();
    let from = map.owner(slot);
    let others: Vec<usize> = map.primaries().into_iter().filter(|p| *p != from).collect();
    let to = others[chaos.range(0, others.len() as u64) as usize];
    map.migration = Some(Migration {
        slot,
        from,
        to,
        keys_moved: false,
    });
    format!("slot {slot} ({key}) migrates from {} to {}", name(from), name(to))
}

/// A failover: the spare host (of `hosts`) takes every slot of `failed`.
pub fn promote_spare(map: &mut ModelCluster, failed: usize, hosts: usize) -> usize {
    let primaries = map.primaries();
    let spare = (0..hosts)
        .find(|host| *host != failed && !primaries.contains(host))
        .expect("a spare host");
    map.promote(failed, spare);
    spare
}

/// S12: the `ACQUIRE_ALL` calls among `records` that granted some of their
/// subjects and refused others, described.
fn partial_calls(records: &[inflight_testkit::model::AcquireRecord]) -> Vec<String> {
    let mut calls: Vec<(usize, bool, bool)> = Vec::new();
    for record in records {
        let Some(call) = record.call else { continue };
        if calls.last().is_none_or(|(c, ..)| *c != call) {
            calls.push((call, false, false));
        }
        let entry = calls.last_mut().expect("pushed");
        match record.status {
            1 => entry.1 = true,
            inflight_core::scripts::WITHHELD => {}
            _ => entry.2 = true,
        }
    }
    calls
        .into_iter()
        .filter(|(_, granted, refused)| *granted && *refused)
        .map(|(call, ..)| format!("ACQUIRE_ALL call {call} granted some subjects and refused another"))
        .collect()
}
