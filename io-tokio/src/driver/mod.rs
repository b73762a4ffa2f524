//! The one task that owns the core. It moves bytes between sockets and the
//! `Client`, turns `poll_timeout` into a timer, and hands outcomes to callers.
//! It decides nothing: every protocol decision is the core's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use inflight_core::{
    Action, Client, ConnectionId, Endpoint, Event, Inspection, KeysPage, Lease, LeaseId, RequestId, Stats,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::clock::{now, timer_at};
use crate::connector::Connector;
use crate::drained::Drained;
use crate::error::{ConnectError, Error, ReleaseError, RenewError};
use crate::mailbox::{Command, Commands, HeldLease};
use crate::news::{Lost, SharedNews};
use crate::socket::{poll_sockets, run_connection, IoEvent, Socket, SocketEvent};
use crate::telemetry;
use crate::throttle::Throttle;

mod events;

/// A started driver: where to send commands, when it is connected, its counters.
pub(crate) struct Spawned {
    pub commands: Commands,
    pub started: oneshot::Receiver<Result<(), ConnectError>>,
    pub stats: tokio::sync::watch::Receiver<Stats>,
}

type Startup = oneshot::Sender<Result<(), ConnectError>>;

/// Where a request's outcome goes.
enum Caller {
    Acquire {
        reply: oneshot::Sender<Result<Option<HeldLease>, Error>>,
        /// Keep its lease alive from its grant on.
        keep_alive: bool,
    },
    AcquireAll {
        reply: oneshot::Sender<Result<Option<Vec<HeldLease>>, Error>>,
        keep_alive: bool,
    },
    Renew(oneshot::Sender<Result<Lease, RenewError>>),
    Inspect(oneshot::Sender<Result<Inspection, Error>>),
    Scan(oneshot::Sender<Result<Option<KeysPage>, Error>>),
}

pub(crate) struct Driver<C: Connector> {
    client: Client,
    connector: Arc<C>,
    /// Our own command sender, handed to every permit so that its drop can
    /// release. The receiver side closes when no limiter or permit is left.
    commands: mpsc::WeakUnboundedSender<Command>,
    io_tx: mpsc::UnboundedSender<IoEvent<C::Io>>,
    /// The open connections (one per node, and wake-up ones), and a buffer
    /// to read into; reads start at a rotating index, fairly.
    sockets: Vec<Socket<C::Io>>,
    next_reader: usize,
    read_buf: Vec<u8>,
    /// Connection attempts under way: each one's task, until it hands
    /// over its stream (or the core gives up on it).
    connecting: HashMap<ConnectionId, JoinHandle<()>>,
    /// Who waits for each request's outcome, by the id its caller drew.
    callers: HashMap<RequestId, Caller>,
    release_waiters: HashMap<LeaseId, oneshot::Sender<Result<(), ReleaseError>>>,
    /// What the driver learns of held leases, for their permits.
    news: SharedNews,
    /// Callers of `Limiter::drain`: when they began, until when they wait.
    drain_waiters: Vec<(Instant, Instant, oneshot::Sender<Drained>)>,
    startup: Option<Startup>,
    last_io_error: Option<String>,
    /// The first connection failed: `connect` returned an error, nobody holds
    /// a handle, and the driver stops instead of retrying forever.
    failed_start: bool,
    published: telemetry::Published,
    /// Lines that could repeat per request or per attempt, throttled.
    fail_open_log: Throttle,
    connect_failed_log: Throttle,
    metric_labels: Vec<metrics::Label>,
    stats: tokio::sync::watch::Sender<Stats>,
    /// The core's events of one pass, taken (and so counted) before any is
    /// handled; kept to reuse its room.
    taken: Vec<Event>,
    /// A stall the simulator asked for, taken at the top of the next pass.
    #[cfg(feature = "fault-injection")]
    stall: Option<std::time::Duration>,
}

impl<C: Connector> Driver<C> {
    /// Starts the driver task. The receiver resolves once the first connection
    /// is ready, or with the reason it could not be made.
    pub(crate) fn spawn(
        client: Client,
        connector: C,
        lazy: bool,
        metric_labels: Vec<metrics::Label>,
    ) -> Result<Spawned, ConnectError> {
        let (commands, command_rx) = mpsc::unbounded_channel();
        let ids = client.request_ids();
        let (io_tx, io_rx) = mpsc::unbounded_channel();
        let (startup, started) = oneshot::channel();
        let (stats_tx, stats) = tokio::sync::watch::channel(Stats::default());
        let driver = Driver {
            client,
            connector: Arc::new(connector),
            commands: commands.downgrade(),
            io_tx,
            sockets: Vec::new(),
            next_reader: 0,
            read_buf: vec![0; 16 * 1024],
            connecting: HashMap::new(),
            callers: HashMap::new(),
            release_waiters: HashMap::new(),
            news: SharedNews::default(),
            drain_waiters: Vec::new(),
            // A lazy start reports nothing: failed attempts are retried.
            startup: (!lazy).then_some(startup),
            last_io_error: None,
            failed_start: false,
            published: telemetry::Published::register(&metric_labels),
            fail_open_log: Throttle::default(),
            connect_failed_log: Throttle::default(),
            metric_labels,
            stats: stats_tx,
            taken: Vec::new(),
            #[cfg(feature = "fault-injection")]
            stall: None,
        };
        tokio::spawn(driver.run(command_rx, io_rx));
        Ok(Spawned {
            commands: Commands::new(commands, ids),
            started,
            stats,
        })
    }

    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut io: mpsc::UnboundedReceiver<IoEvent<C::Io>>,
    ) {
        let mut users_gone = false;
        loop {
            self.flush_outputs();
            #[cfg(feature = "fault-injection")]
            if let Some(stall) = self.stall.take() {
                tokio::time::sleep(stall).await;
            }
            if self.failed_start {
                break;
            }
            if users_gone && self.idle() {
                tracing::info!("inflight: no limiter handle left and nothing owed; the driver stops");
                break;
            }
            let deadline = match (self.client.poll_timeout(), self.drain_deadline()) {
                (Some(core), Some(drain)) => Some(core.min(drain)),
                (core, drain) => core.or(drain),
            };
            let sleep = tokio::time::sleep_until(timer_at(deadline));
            tokio::select! {
                biased;
                Some(event) = io.recv() => self.on_io(event),
                event = poll_sockets(&mut self.sockets, &mut self.read_buf, self.next_reader), if !self.sockets.is_empty() => {
                    self.next_reader = self.next_reader.wrapping_add(1);
                    self.on_socket(event)
                }
                command = commands.recv(), if !users_gone => match command {
                    Some(command) => self.on_command(command),
                    None => users_gone = true,
                },
                _ = sleep, if deadline.is_some() => {}
            }
            // Take everything already queued on both sides before writing, so
            // each wake-up writes one batch and neither side starves the other.
            while let Ok(event) = io.try_recv() {
                self.on_io(event);
            }
            if !users_gone {
                while let Ok(command) = commands.try_recv() {
                    self.on_command(command);
                }
            }
            // Deadlines are honoured however busy the queues were.
            let now = now();
            if self.client.poll_timeout().is_some_and(|at| at <= now) {
                self.client.handle_timeout(now);
            }
        }
        self.published.withdraw(&self.metric_labels);
        self.sockets.clear();
        for (_, attempt) in self.connecting.drain() {
            attempt.abort();
        }
    }

    /// Answers the drains that are over: the driver owes nothing, or their
    /// time ran out (then with what it still owes).
    fn settle_drains(&mut self) {
        if self.drain_waiters.is_empty() {
            return;
        }
        let now = now();
        let idle = self.idle();
        let owed = self.client.outstanding_releases();
        let in_flight = self.client.in_flight_calls();
        let mut waiting = Vec::with_capacity(self.drain_waiters.len());
        for (started, deadline, done) in self.drain_waiters.drain(..) {
            if idle || deadline <= now {
                let waited = now.saturating_duration_since(started);
                if !idle {
                    tracing::warn!(
                        owed,
                        in_flight,
                        ?waited,
                        "inflight: drain gave up with releases still owed; their leases come back at their TTL"
                    );
                }
                let _ = done.send(Drained::new(waited, owed, in_flight));
            } else {
                waiting.push((started, deadline, done));
            }
        }
        self.drain_waiters = waiting;
    }

    /// The soonest drain deadline, for the driver's timer.
    fn drain_deadline(&self) -> Option<Instant> {
        self.drain_waiters.iter().map(|(_, deadline, _)| *deadline).min()
    }

    fn idle(&self) -> bool {
        self.client.owes_nothing()
    }

    /// Remembers that `request`'s outcome goes to `caller`.
    fn track(&mut self, request: RequestId, caller: Caller) {
        self.callers.insert(request, caller);
    }

    fn on_command(&mut self, command: Command) {
        let now = now();
        match command {
            Command::Acquire {
                request,
                keys,
                limit,
                claim,
                keep_alive,
                wait_until,
                reply,
            } => {
                let request = match self.client.acquire_claim(now, request, keys, limit, &claim, wait_until) {
                    Ok(request) => request,
                    Err(error) => {
                        let _ = reply.send(Err(Error::Claim(error)));
                        return;
                    }
                };
                self.track(request, Caller::Acquire { reply, keep_alive });
            }
            Command::AcquireAll {
                request,
                parts,
                claim,
                keep_alive,
                reply,
            } => {
                let request = match self.client.acquire_all(now, request, parts, &claim) {
                    Ok(request) => request,
                    Err(error) => {
                        let _ = reply.send(Err(Error::Composite(error)));
                        return;
                    }
                };
                self.track(request, Caller::AcquireAll { reply, keep_alive });
            }
            Command::Renew { request, lease, reply } => match self.client.renew(now, request, &lease) {
                Ok(request) => self.track(request, Caller::Renew(reply)),
                Err(foreign) => drop(reply.send(Err(refused(foreign, RenewError::Stopped)))),
            },
            Command::Abandon { request } => {
                if self.callers.remove(&request).is_some() {
                    self.client.abandon(now, request);
                }
            }
            Command::KeepAlive { lease } => self.client.keep_alive(now, &lease),
            Command::Inspect {
                request,
                keys,
                holders,
                reply,
            } => match self.client.inspect(now, request, keys, holders) {
                Ok(request) => self.track(request, Caller::Inspect(reply)),
                Err(foreign) => drop(reply.send(Err(refused(foreign, Error::Stopped)))),
            },
            Command::Scan {
                request,
                shard,
                cursor,
                count,
                reply,
            } => match self.client.scan_keys(now, request, shard, cursor, count) {
                Ok(Some(request)) => self.track(request, Caller::Scan(reply)),
                Ok(None) => drop(reply.send(Ok(None))),
                Err(foreign) => drop(reply.send(Err(refused(foreign, Error::Stopped)))),
            },
            Command::Release { lease, done } => {
                self.news.let_go(lease.id(), Lost::Released);
                if let Some(done) = done {
                    self.release_waiters.insert(lease.id().clone(), done);
                }
                self.client.release(now, lease);
            }
            Command::Drain {
                done,
                started,
                deadline,
            } => self.drain_waiters.push((started, deadline, done)),
            #[cfg(feature = "fault-injection")]
            Command::Stall(stall) => self.stall = Some(stall),
        }
    }

    fn on_io(&mut self, event: IoEvent<C::Io>) {
        let now = now();
        match event {
            // One the core gave up on meanwhile: its stream is dropped here.
            IoEvent::Connected(id, stream) if self.connecting.remove(&id).is_some() => {
                self.sockets.push(Socket::new(id, stream));
                self.client.handle_connected(now, id);
            }
            IoEvent::Connected(..) => {}
            IoEvent::Closed(id, error) => self.closed(now, id, error),
        }
    }

    fn on_socket(&mut self, event: SocketEvent) {
        let now = now();
        match event {
            SocketEvent::Read(id, Ok(0)) => self.closed(now, id, Some("Redis closed the connection".into())),
            SocketEvent::Read(id, Ok(n)) => self.client.handle_input(now, id, &self.read_buf[..n]),
            SocketEvent::Read(id, Err(error)) | SocketEvent::WriteFailed(id, error) => {
                self.closed(now, id, Some(error.to_string()))
            }
        }
    }

    fn closed(&mut self, now: Instant, id: ConnectionId, error: Option<String>) {
        self.forget(id);
        match error {
            Some(reason) => {
                self.last_io_error = Some(reason.clone());
                self.client.handle_failed(now, id, reason);
            }
            None => self.client.handle_closed(now, id),
        }
    }

    /// Drops connection `id`: its socket, or its attempt if still connecting.
    fn forget(&mut self, id: ConnectionId) {
        self.sockets.retain(|socket| socket.id() != id);
        if let Some(attempt) = self.connecting.remove(&id) {
            attempt.abort();
        }
    }

    /// Drains the core: sockets first, then bytes, then callers.
    fn flush_outputs(&mut self) {
        // Handling an event can give the core more to write (a release), so
        // go round until a pass brings no event: nothing waits for a wake-up.
        loop {
            while let Some(action) = self.client.poll_action() {
                match action {
                    Action::Connect(id, endpoint) => self.open(id, endpoint, false),
                    Action::ConnectSentinel(id, endpoint) => self.open(id, endpoint, true),
                    Action::Close(id) => self.forget(id),
                }
            }
            while let Some(transmit) = self.client.poll_transmit() {
                // Written by the select's write branch, in this same pass.
                if let Some(socket) = self
                    .sockets
                    .iter_mut()
                    .find(|socket| socket.id() == transmit.connection)
                {
                    socket.send(transmit.data);
                }
            }
            // The core counts an outcome when it is taken: all of this
            // pass's are taken, then published, before any caller hears
            // its own, so that one reading `Limiter::stats` afterwards sees
            // it there.
            let mut taken = std::mem::take(&mut self.taken);
            taken.extend(std::iter::from_fn(|| self.client.poll_event()));
            self.report_metrics();
            let handled = !taken.is_empty();
            for event in taken.drain(..) {
                self.on_event(event);
            }
            self.taken = taken;
            if !handled {
                break;
            }
        }
        self.settle_drains();
        self.report_metrics();
    }

    fn open(&mut self, id: ConnectionId, endpoint: Endpoint, sentinel: bool) {
        let connector = self.connector.clone();
        let task = tokio::spawn(run_connection(connector, endpoint, id, sentinel, self.io_tx.clone()));
        self.connecting.insert(id, task);
    }

    /// Publishes what the core counted since the last call, and the gauges.
    fn report_metrics(&mut self) {
        let stats = self.client.stats();
        let up = self.client.connections().filter(|(_, _, ready)| *ready).count();
        let in_flight = self.client.in_flight_calls();
        let waiting = self.client.waiting_acquires();
        if self
            .published
            .report(&self.metric_labels, stats, up, in_flight, waiting)
        {
            self.stats.send_replace(stats);
        }
    }
}

/// A request named by another client's id, refused unsent. It cannot
/// happen: every id a caller sends comes from this client's own sequence
/// (`Commands`).
fn refused<E>(foreign: inflight_core::ForeignRequest, error: E) -> E {
    tracing::error!(%foreign, "inflight: a request named by another client's id was refused");
    error
}
