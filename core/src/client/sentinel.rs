//! The sentinels' watch: where a Sentinel-managed primary is, asked of one
//! sentinel at a time, and every switch they announce, heard at once.
//!
//! One connection, to one sentinel: it authenticates, asks
//! `SENTINEL get-master-addr-by-name` and `SENTINEL sentinels` (which adds
//! the sentinels it knows of to the list), then subscribes to
//! `+switch-master` (and `+odown`/`-odown`, for the operator) and stays
//! open. A switch is news the moment a sentinel publishes it, not at the
//! next error. When the client wants the primary asked again (a `READONLY`,
//! a node that answers as a replica, a lost connection), the watch is
//! opened afresh on the next sentinel in the list: a stale sentinel is never
//! asked twice in a row.
//!
//! Nothing a sentinel says is trusted to write: an address named here is
//! only where the client connects next, and that connection's handshake
//! refuses a node whose `ROLE` is not `master`. A stale or lying sentinel
//! can delay the client, never make it write to a replica.
//!
//! A sub-machine: it owns its connection, its deadlines and its backoff,
//! and answers with [`News`]; it knows nothing of nodes, callers or counts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::address::{Credentials, Endpoint};
use crate::config::{Config, Servers};
use crate::event::{ConnectionId, SentinelError};
use crate::resp::{encode_command, Frame, ReplyLimits, ReplyReader};

pub(super) use super::sentinel_says::News;
use super::sentinel_says::{self as says, Answer, Question};

/// The most sentinels remembered (those given, then those learned).
const MAX_SENTINELS: usize = 16;

/// The least time between two watches opened because the client asked.
pub(super) const ASK_INTERVAL: Duration = Duration::from_millis(100);

/// The channels the watch subscribes to.
const CHANNELS: [&[u8]; 3] = [b"+switch-master", b"+odown", b"-odown"];

/// The sentinels and the one watch open on them.
#[derive(Debug)]
pub(super) struct Sentinels {
    master: Bytes,
    credentials: Option<Credentials>,
    /// The sentinels given, then those learned, without repeats.
    endpoints: Vec<Endpoint>,
    /// How many of them were given (the rest were learned).
    given: usize,
    /// The one asked next.
    next: usize,
    watch: Option<Watch>,
    /// Failures in a row since one answered; a round is every sentinel.
    failures: usize,
    /// The most telling error of this round (see [`SentinelError::telling`]).
    worst: Option<SentinelError>,
    /// After a failed round, no watch before then.
    retry_at: Option<Instant>,
    /// The wait after the next failed round.
    backoff: Duration,
    initial_backoff: Duration,
    max_backoff: Duration,
    /// Nodes they named that answered as replicas, in a row.
    named_replicas: usize,
    /// When the client last had the watch opened afresh.
    last_ask: Option<Instant>,
    /// The client asked while it could not be done yet (rate limit).
    ask_owed: bool,
    /// The watch was closed and is not backing off: a deadline now, so
    /// that the client's next `handle_timeout` (and its `drive`) opens it.
    reopen_at: Option<Instant>,
    connect_timeout: Duration,
    answer_timeout: Duration,
    limits: ReplyLimits,
}

#[derive(Debug)]
struct Watch {
    id: ConnectionId,
    sentinel: usize,
    /// Until the socket is open, when the attempt is given up.
    connecting_until: Option<Instant>,
    /// Until every question is answered and the subscription confirmed,
    /// when the sentinel is given up.
    answer_by: Option<Instant>,
    /// What the replies still to come answer, in order.
    awaiting: VecDeque<Question>,
    /// Subscribed: when its next liveness `PING` goes (a half-open
    /// connection would otherwise never be found, and a switch never heard).
    ping_at: Option<Instant>,
    reader: ReplyReader,
    outgoing: BytesMut,
}

/// How the sentinels are reached and how long each may take.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) sentinels: Vec<Endpoint>,
    pub(super) master: String,
    pub(super) credentials: Option<Credentials>,
    pub(super) connect_timeout: Duration,
    pub(super) answer_timeout: Duration,
    pub(super) initial_backoff: Duration,
    pub(super) max_backoff: Duration,
    pub(super) limits: ReplyLimits,
}

impl Settings {
    /// The sentinels' settings, if `config` names a Sentinel-managed primary.
    pub(super) fn of(config: &Config) -> Option<Self> {
        let Servers::Sentinel {
            sentinels,
            master,
            credentials,
        } = &config.servers
        else {
            return None;
        };
        Some(Self {
            sentinels: sentinels.clone(),
            master: master.clone(),
            credentials: credentials.clone(),
            connect_timeout: config.connect_timeout,
            answer_timeout: config.request_liveness,
            initial_backoff: config.reconnect_initial_backoff,
            max_backoff: config.reconnect_max_backoff,
            limits: config.reply_limits,
        })
    }
}

impl Sentinels {
    pub(super) fn new(settings: Settings) -> Self {
        let mut endpoints = Vec::new();
        add_sentinels(&mut endpoints, settings.sentinels);
        Self {
            master: Bytes::from(settings.master),
            credentials: settings.credentials,
            given: endpoints.len(),
            endpoints,
            next: 0,
            watch: None,
            failures: 0,
            worst: None,
            retry_at: None,
            backoff: settings.initial_backoff,
            initial_backoff: settings.initial_backoff,
            max_backoff: settings.max_backoff,
            named_replicas: 0,
            last_ask: None,
            ask_owed: false,
            reopen_at: None,
            connect_timeout: settings.connect_timeout,
            answer_timeout: settings.answer_timeout,
            limits: settings.limits,
        }
    }

    /// The watch's connection, while it has one.
    pub(super) fn id(&self) -> Option<ConnectionId> {
        self.watch.as_ref().map(|watch| watch.id)
    }

    /// Where the watch's connection goes.
    pub(super) fn endpoint(&self) -> Option<&Endpoint> {
        self.watch.as_ref().map(|watch| &self.endpoints[watch.sentinel])
    }

    /// The sentinels known now (those given, then those learned).
    #[cfg(test)]
    pub(super) fn known(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// Opens the watch on the next sentinel (named `id()`), unless one is
    /// open or the round's backoff is not over: where to connect.
    pub(super) fn open(&mut self, now: Instant, id: impl FnOnce() -> ConnectionId) -> Option<(ConnectionId, Endpoint)> {
        if self.watch.is_some() || self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        self.retry_at = None;
        self.reopen_at = None;
        let id = id();
        let sentinel = self.next % self.endpoints.len();
        self.watch = Some(Watch {
            id,
            sentinel,
            connecting_until: Some(now + self.connect_timeout),
            answer_by: None,
            awaiting: VecDeque::new(),
            ping_at: None,
            reader: ReplyReader::new(self.limits),
            outgoing: BytesMut::new(),
        });
        Some((id, self.endpoints[sentinel].clone()))
    }

    /// The client wants the primary asked again (it found a replica, a
    /// `READONLY`, a lost connection): the watch is opened afresh on the
    /// next sentinel, at most once per [`ASK_INTERVAL`] (else owed). A
    /// watch still asking is left to answer. The connection to close.
    pub(super) fn ask_again(&mut self, now: Instant) -> Option<ConnectionId> {
        let asking = self.watch.as_ref().is_some_and(|watch| {
            watch.connecting_until.is_some() || watch.awaiting.iter().any(|q| *q != Question::Pong)
        });
        if asking || self.retry_at.is_some() || self.watch.is_none() {
            // A watch on its way asks anyway: nothing is owed.
            self.ask_owed = false;
            return None;
        }
        if self.last_ask.is_some_and(|last| now < last + ASK_INTERVAL) {
            self.ask_owed = true;
            return None;
        }
        self.ask_owed = false;
        self.last_ask = Some(now);
        let watch = self.watch.take()?;
        self.next = watch.sentinel + 1;
        self.reopen_at = Some(now);
        Some(watch.id)
    }

    /// A node they named answered as a replica: whether every sentinel
    /// has now done so in a row (then the client reports it).
    pub(super) fn named_replica(&mut self) -> bool {
        self.named_replicas += 1;
        if self.named_replicas >= self.endpoints.len() {
            self.named_replicas = 0;
            return true;
        }
        false
    }

    /// A node they named is a primary, its connection ready.
    pub(super) fn primary_confirmed(&mut self) {
        self.named_replicas = 0;
    }

    /// The socket is open: authenticate, ask, subscribe.
    pub(super) fn connected(&mut self, now: Instant, id: ConnectionId) {
        let master = self.master.clone();
        let credentials = self.credentials.clone();
        let answer_timeout = self.answer_timeout;
        let Some(watch) = self.watch.as_mut().filter(|watch| watch.id == id) else {
            return;
        };
        watch.connecting_until = None;
        watch.answer_by = Some(now + answer_timeout);
        if let Some(credentials) = &credentials {
            let password = credentials.password.as_bytes();
            match &credentials.username {
                Some(user) => encode_command(&mut watch.outgoing, &[b"AUTH", user.as_bytes(), password]),
                None => encode_command(&mut watch.outgoing, &[b"AUTH", password]),
            }
            watch.awaiting.push_back(Question::Auth);
        }
        encode_command(&mut watch.outgoing, &[b"SENTINEL", b"get-master-addr-by-name", &master]);
        encode_command(&mut watch.outgoing, &[b"SENTINEL", b"sentinels", &master]);
        let mut subscribe: Vec<&[u8]> = vec![b"SUBSCRIBE"];
        subscribe.extend(CHANNELS);
        encode_command(&mut watch.outgoing, &subscribe);
        watch.awaiting.extend([Question::Master, Question::Sentinels]);
        watch.awaiting.extend(CHANNELS.map(|_| Question::Subscribed));
    }

    /// Bytes arrived on the watch: what they say. A sentinel that cannot
    /// be used is given up here (its failure is among the news).
    pub(super) fn input(&mut self, now: Instant, id: ConnectionId, data: &[u8]) -> Vec<News> {
        let mut news = Vec::new();
        let Some(watch) = self.watch.as_mut().filter(|watch| watch.id == id) else {
            return news;
        };
        watch.reader.push(data);
        loop {
            let Some(watch) = self.watch.as_mut() else {
                return news;
            };
            let frame = match watch.reader.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => return news,
                Err(error) => {
                    let sentinel = self.endpoints[watch.sentinel].to_string();
                    let error = SentinelError::Unexpected {
                        sentinel,
                        reply: error.to_string(),
                    };
                    news.extend(self.fail(now, error));
                    return news;
                }
            };
            match self.read(now, frame) {
                Ok(Some(heard)) => news.push(heard),
                Ok(None) => {}
                Err(error) => {
                    news.extend(self.fail(now, error));
                    return news;
                }
            }
        }
    }

    /// One frame on the watch, by what it answers.
    fn read(&mut self, now: Instant, frame: Frame) -> Result<Option<News>, SentinelError> {
        // A published message may come before a `PING`'s answer.
        if says::is_message(&frame) {
            return Ok(says::message(&self.master, &frame));
        }
        let watch = self.watch.as_mut().expect("a frame came on it");
        let question = watch.awaiting.pop_front();
        let last = watch.awaiting.is_empty();
        let Some(question) = question else {
            return Ok(says::message(&self.master, &frame));
        };
        let sentinel = &self.endpoints[watch.sentinel];
        match says::answer(question, frame, sentinel, &self.master)? {
            Answer::Primary(primary) => return Ok(Some(News::Primary(primary))),
            Answer::Sentinels(named) => self.learn(named),
            Answer::Subscribed if last => self.answered(now),
            Answer::Pong => self.answered(now),
            Answer::Subscribed | Answer::Nothing => {}
        }
        Ok(None)
    }

    /// Asked, answered and listening: the round is over.
    fn answered(&mut self, now: Instant) {
        let every = self.answer_timeout;
        if let Some(watch) = self.watch.as_mut() {
            watch.answer_by = None;
            watch.ping_at = Some(now + every);
        }
        self.failures = 0;
        self.worst = None;
        self.backoff = self.initial_backoff;
    }

    /// Adds the sentinels a `SENTINEL sentinels` reply named.
    fn learn(&mut self, named: Vec<Endpoint>) {
        add_sentinels(&mut self.endpoints, named);
    }

    /// The watch's connection closed or failed (`error`).
    pub(super) fn closed(&mut self, now: Instant, id: ConnectionId, error: SentinelError) -> Vec<News> {
        if self.id() != Some(id) {
            return Vec::new();
        }
        self.fail(now, error)
    }

    /// Gives the watch's sentinel up: the next is tried at once, unless
    /// every one failed in a row (then the watch backs off).
    fn fail(&mut self, now: Instant, error: SentinelError) -> Vec<News> {
        let Some(watch) = self.watch.take() else {
            return Vec::new();
        };
        // A learned sentinel that cannot be reached is forgotten (it may
        // have left the deployment, and each round would wait out its
        // connect timeout); the others list it again while they know it.
        let unreachable = matches!(error, SentinelError::Unreachable { .. } | SentinelError::Timeout { .. });
        if unreachable && watch.sentinel >= self.given {
            self.endpoints.remove(watch.sentinel);
            self.next = watch.sentinel;
        } else {
            self.next = watch.sentinel + 1;
            self.failures += 1;
        }
        if self
            .worst
            .as_ref()
            .is_none_or(|worst| error.telling() > worst.telling())
        {
            self.worst = Some(error.clone());
        }
        let mut news = vec![News::Failed(watch.id, error)];
        if self.failures >= self.endpoints.len() {
            self.failures = 0;
            self.retry_at = Some(now + self.backoff);
            self.backoff = (self.backoff * 2).min(self.max_backoff);
            let worst = self.worst.take().expect("set above");
            news.push(News::AllFailed(watch.id, worst));
        } else {
            self.reopen_at = Some(now);
        }
        news
    }

    /// What to write on the watch, once its socket is open.
    pub(super) fn take_outgoing(&mut self) -> Option<(ConnectionId, Bytes)> {
        let watch = self.watch.as_mut()?;
        if watch.connecting_until.is_some() || watch.outgoing.is_empty() {
            return None;
        }
        Some((watch.id, watch.outgoing.split().freeze()))
    }

    /// Its next deadline: the watch's connect or answer deadline, the end
    /// of a round's backoff, or when an owed ask may go.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let watch = self
            .watch
            .as_ref()
            .and_then(|watch| watch.connecting_until.or(watch.answer_by).or(watch.ping_at));
        let owed = self.last_ask.filter(|_| self.ask_owed).map(|last| last + ASK_INTERVAL);
        [watch, self.retry_at, owed, self.reopen_at].into_iter().flatten().min()
    }

    /// At `now`: a watch past its deadline is given up (the connection to
    /// close, and the news); an owed ask goes (its connection to close).
    /// The watch is opened again by [`Sentinels::open`].
    pub(super) fn handle_timeout(&mut self, now: Instant) -> (Option<ConnectionId>, Vec<News>) {
        let late = self
            .watch
            .as_ref()
            .filter(|watch| watch.connecting_until.or(watch.answer_by).is_some_and(|at| at <= now));
        if let Some(watch) = late {
            let (id, sentinel) = (watch.id, self.endpoints[watch.sentinel].to_string());
            let error = SentinelError::Timeout { sentinel };
            return (Some(id), self.fail(now, error));
        }
        let answer_timeout = self.answer_timeout;
        if let Some(watch) = self.watch.as_mut().filter(|w| w.ping_at.is_some_and(|at| at <= now)) {
            watch.ping_at = None;
            watch.answer_by = Some(now + answer_timeout);
            encode_command(&mut watch.outgoing, &[b"PING"]);
            watch.awaiting.push_back(Question::Pong);
        }
        if self.ask_owed && self.last_ask.is_some_and(|last| last + ASK_INTERVAL <= now) {
            return (self.ask_again(now), Vec::new());
        }
        (None, Vec::new())
    }
}

/// Adds each of `more` not in `endpoints` yet, up to [`MAX_SENTINELS`].
fn add_sentinels(endpoints: &mut Vec<Endpoint>, more: impl IntoIterator<Item = Endpoint>) {
    for endpoint in more {
        if !endpoints.contains(&endpoint) && endpoints.len() < MAX_SENTINELS {
            endpoints.push(endpoint);
        }
    }
}
