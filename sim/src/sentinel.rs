//! A simulated Redis Sentinel deployment: two data hosts (one primary, one
//! read-only replica that a failover promotes with what it has, 30 ms
//! behind) and three sentinels that name the primary and announce each
//! switch, each late by its own delay; in some seeds one sentinel is stale
//! for up to two seconds (it names, and announces, the old primary long
//! after the others). As in a real Sentinel failover, the old primary goes
//! on taking writes for a moment after the promotion (its own copy, lost)
//! before it is demoted to a read-only replica, and each reconfiguration
//! closes the client connections of the node reconfigured: a real sentinel
//! sends `CLIENT KILL TYPE normal` with its `REPLICAOF` (seen on Redis
//! 7.0.15: a `SENTINEL FAILOVER` closed the promoted replica's clients at
//! once, and the old primary's when it was converted to a replica, ten
//! seconds after `+switch-master`).

use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use inflight_core::resp::{encode_command, Frame, ReplyLimits, ReplyReader};
use inflight_testkit::model::{AcquireRecord, ModelConnection, RedisModel};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::rng::Rng;

/// The data hosts, by index.
pub const DATA: [&str; 2] = ["redis-a", "redis-b"];
pub const SENTINELS: usize = 3;
pub const SENTINEL_PORT: u16 = 26379;
/// The longest a switch takes to be known everywhere: the stale
/// sentinel's delay (up to 2 s) and the old primary's demotion (300 ms).
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(2_500);
/// The master name the sentinels monitor.
pub const MASTER: &str = "sim";

pub fn sentinel_name(index: usize) -> String {
    format!("sentinel{}", index + 1)
}

/// The URL every limiter of the scenario is given.
pub fn url() -> String {
    let hosts: Vec<String> = (0..SENTINELS)
        .map(|i| format!("{}:{SENTINEL_PORT}", sentinel_name(i)))
        .collect();
    format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
}

/// What the deployment looks like now, shared by its hosts and the harness.
pub struct SentinelSim {
    view: Mutex<View>,
    /// Announcements: (sentinel, `+switch-master` payload).
    news: tokio::sync::broadcast::Sender<(usize, Bytes)>,
    /// Per data host: a message each time it is reconfigured, which closes
    /// its client connections. A broadcast, not a `watch`: a `watch` wakes
    /// its receivers in an order drawn from tokio's own randomness.
    reconfigured: [tokio::sync::broadcast::Sender<()>; 2],
}

struct View {
    /// The data host that serves the fleet's data (`ServerState::model`).
    primary: usize,
    /// The old primary's own copy, taking writes until `demoted_at` (ms of
    /// the run); then it is a read-only replica.
    old: Option<(usize, RedisModel, u64)>,
    /// The old primary's demotion, until it happens: (host, at ms).
    demotion: Option<(usize, u64)>,
    /// What a read-only replica answers with (`ROLE` slave, `READONLY`).
    replica: RedisModel,
    /// Per sentinel: the data host it names.
    named: [usize; SENTINELS],
    /// Per sentinel: when it learns of the last switch (ms of the run).
    learns_at: [Option<u64>; SENTINELS],
}

/// How a data host answers a connection, now.
pub enum Role {
    /// The primary: the fleet's data.
    Primary,
    /// Not the primary: these replies instead (the old primary's lost
    /// copy, or a read-only replica's refusals), and the acquires the old
    /// primary ran (its denials are honest, its grants real to their
    /// callers).
    Other(Result<Vec<Bytes>, ()>, Vec<AcquireRecord>),
}

impl Default for SentinelSim {
    fn default() -> Self {
        let mut replica = RedisModel::new(crate::clock::EPOCH_MS);
        replica.replica = true;
        Self {
            view: Mutex::new(View {
                primary: 0,
                old: None,
                demotion: None,
                replica,
                named: [0; SENTINELS],
                learns_at: [None; SENTINELS],
            }),
            news: tokio::sync::broadcast::Sender::new(64),
            reconfigured: [
                tokio::sync::broadcast::Sender::new(1),
                tokio::sync::broadcast::Sender::new(1),
            ],
        }
    }
}

impl SentinelSim {
    /// Changes each time data host `host` is reconfigured (promoted or
    /// demoted): a connection to it closes then.
    pub fn reconfigurations(&self, host: usize) -> tokio::sync::broadcast::Receiver<()> {
        self.reconfigured[host].subscribe()
    }

    /// How data host `host` answers `data` at `now_ms`: as the primary, or
    /// with the replies of the node it is instead.
    pub fn serve(&self, host: usize, conn: &mut ModelConnection, data: &[u8], now_ms: u64) -> Role {
        let mut view = self.view.lock().unwrap();
        if view.primary == host {
            return Role::Primary;
        }
        if let Some((old, copy, demoted_at)) = &mut view.old {
            if *old == host && now_ms < *demoted_at {
                copy.now_ms = crate::clock::EPOCH_MS + now_ms;
                let replies = copy.handle_each(conn, data).map_err(|_| ());
                let _ = copy.take_published();
                let ran = copy
                    .acquires
                    .drain(..)
                    .filter(|r| r.status == 0 || r.status == 1)
                    .collect();
                return Role::Other(replies, ran);
            }
        }
        Role::Other(view.replica.handle_each(conn, data).map_err(|_| ()), Vec::new())
    }

    /// A failover: the other data host is the primary now (the harness has
    /// given it the replica's data); `old_data` is what the old primary
    /// holds, which it goes on writing to for a moment. The sentinels learn
    /// of it each after its own delay, one of them perhaps much later.
    pub fn switch(&self, now_ms: u64, old_data: RedisModel, chaos: &mut Rng) -> String {
        let mut view = self.view.lock().unwrap();
        let old = view.primary;
        view.primary = 1 - old;
        let demoted_at = now_ms + chaos.range(0, 300);
        view.old = Some((old, old_data, demoted_at));
        view.demotion = Some((old, demoted_at));
        let _ = self.reconfigured[view.primary].send(());
        let stale = (chaos.range(0, 2) == 0).then(|| chaos.range(0, SENTINELS as u64) as usize);
        for sentinel in 0..SENTINELS {
            let delay = match stale {
                Some(s) if s == sentinel => chaos.range(500, 2_000),
                _ => chaos.range(0, 400),
            };
            view.learns_at[sentinel] = Some(now_ms + delay);
        }
        format!(
            "failover: {} is the primary, {} demoted in {} ms{}",
            DATA[view.primary],
            DATA[old],
            demoted_at - now_ms,
            stale.map_or(String::new(), |s| format!(", {} stale", sentinel_name(s)))
        )
    }

    /// At `now_ms`: the sentinels whose delay is over learn of the switch
    /// and announce it. Returns a note per announcement.
    pub fn advance(&self, now_ms: u64) -> Vec<String> {
        let mut view = self.view.lock().unwrap();
        let mut notes = Vec::new();
        if let Some((host, at)) = view.demotion {
            if at <= now_ms {
                view.demotion = None;
                let _ = self.reconfigured[host].send(());
                notes.push(format!("{} demoted: its clients are closed", DATA[host]));
            }
        }
        for sentinel in 0..SENTINELS {
            if view.learns_at[sentinel].is_some_and(|at| at <= now_ms) {
                view.learns_at[sentinel] = None;
                let (old, new) = (view.named[sentinel], view.primary);
                view.named[sentinel] = new;
                if old != new {
                    let payload = format!("{MASTER} {} 6379 {} 6379", DATA[old], DATA[new]);
                    let _ = self.news.send((sentinel, Bytes::from(payload)));
                    notes.push(format!(
                        "{} announces +switch-master to {}",
                        sentinel_name(sentinel),
                        DATA[new]
                    ));
                }
            }
        }
        notes
    }

    fn named(&self, sentinel: usize) -> usize {
        self.view.lock().unwrap().named[sentinel]
    }
}

/// Serves one connection to sentinel `index` until it closes.
pub async fn serve_sentinel<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, sim: &SentinelSim, index: usize) {
    let mut reader = ReplyReader::new(ReplyLimits::default());
    let mut news = sim.news.subscribe();
    let mut subscribed = false;
    let mut buf = vec![0u8; 4096];
    loop {
        let mut out = BytesMut::new();
        // Biased: an unbiased `select!` draws from tokio's own randomness,
        // which no seed controls.
        tokio::select! {
            biased;
            heard = news.recv(), if subscribed => {
                if let Ok((from, payload)) = heard {
                    if from == index {
                        encode_command(&mut out, &[b"message", b"+switch-master", &payload]);
                    }
                }
            }
            read = stream.read(&mut buf) => {
                let n = match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                reader.push(&buf[..n]);
                while let Ok(Some(Frame::Array(args))) = reader.next_frame() {
                    let words: Vec<Bytes> = args
                        .into_iter()
                        .filter_map(|arg| match arg {
                            Frame::BulkString(word) => Some(word),
                            _ => None,
                        })
                        .collect();
                    answer(&mut out, sim, index, &words, &mut subscribed);
                }
            }
        }
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// A sentinel's answer to one command.
fn answer(out: &mut BytesMut, sim: &SentinelSim, index: usize, words: &[Bytes], subscribed: &mut bool) {
    let lower: Vec<Vec<u8>> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let lower: Vec<&[u8]> = lower.iter().map(Vec::as_slice).collect();
    match lower[..] {
        [b"sentinel", b"get-master-addr-by-name", name] if name == MASTER.as_bytes() => {
            encode_command(out, &[DATA[sim.named(index)].as_bytes(), b"6379"]);
        }
        [b"sentinel", b"get-master-addr-by-name", _] => out.extend_from_slice(b"*-1\r\n"),
        [b"sentinel", b"sentinels", _] => {
            let others: Vec<usize> = (0..SENTINELS).filter(|s| *s != index).collect();
            out.extend_from_slice(format!("*{}\r\n", others.len()).as_bytes());
            for other in others {
                let name = sentinel_name(other);
                let port = SENTINEL_PORT.to_string();
                encode_command(
                    out,
                    &[
                        b"name",
                        name.as_bytes(),
                        b"ip",
                        name.as_bytes(),
                        b"port",
                        port.as_bytes(),
                    ],
                );
            }
        }
        [b"subscribe", ..] => {
            *subscribed = true;
            for (n, channel) in words.iter().skip(1).enumerate() {
                out.extend_from_slice(b"*3\r\n$9\r\nsubscribe\r\n");
                out.extend_from_slice(format!("${}\r\n", channel.len()).as_bytes());
                out.extend_from_slice(channel);
                out.extend_from_slice(format!("\r\n:{}\r\n", n + 1).as_bytes());
            }
        }
        // Subscribed, a connection answers `PING` as a push (RESP2).
        [b"ping"] if *subscribed => encode_command(out, &[b"pong", b""]),
        [b"ping"] => out.extend_from_slice(b"+PONG\r\n"),
        [b"auth", ..] => out.extend_from_slice(b"+OK\r\n"),
        _ => out.extend_from_slice(b"-ERR unknown command\r\n"),
    }
}
