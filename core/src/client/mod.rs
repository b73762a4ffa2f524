//! The `Client`: one state machine that owns every request, every reply and
//! every compensation decision. The contract is on [`Client`]. Its parts
//! (the network and its connections, the reply reader, delivery, the release
//! queue, waiters, keep-alive, recovery) each live in a file of their own and
//! answer with effects; `router.rs` applies them, and is the only other file
//! that implements `Client`.

use std::num::NonZeroU32;
use std::time::Instant;

use crate::address::Endpoint;
use crate::composite::{self, CompositeError};
use crate::config::{Config, ConfigError, Servers};
use crate::event::{Action, ConnectionId, Event, Lease, RequestId, Stats, Transmit};
use crate::key::{Key, SubjectKeys};
use crate::lease_id::{Claim, ClaimError, LeaseId};
use crate::request_ids::{ForeignRequest, FreshRequest, RequestIds};
use crate::resp::ReplyLimits;
use crate::scripts::MAX_BATCH;
use callers::{Awaits, Callers};
use keep_alive::KeepAlive;
use names::Names;
use network::Network;
use outbox::Outbox;
use reconnect::Backoff;
use recovery::RecoveryState;
use release_queue::ReleaseQueue;
use request::{AcquireOp, Bundle, Call, InspectOp, Op, ReleaseJob, RenewOp, Request, Wait};
use waiters::Waiters;

pub use timer::Timer;

mod all_or_nothing;
mod answers;
mod callers;
mod connection;
mod deferred;
mod delivery;
mod effect;
mod encode;
mod error_class;
mod hand_over;
mod handshake;
mod held;
mod identity;
mod keep_alive;
mod lifecycle;
mod names;
mod network;
mod node;
mod outbox;
mod primary;
mod reconnect;
mod recovery;
mod redirects;
mod release_job;
mod release_queue;
mod released;
mod releases;
mod replies;
mod request;
mod router;
mod sentinel;
mod sentinel_says;
mod subscriber;
mod timer;
mod topology;
mod waiters;
mod writes;

#[doc = include_str!("contract.md")]
pub struct Client {
    config: Config,
    names: Names,
    /// The servers: nodes, slot table, requests sent back by a redirect.
    net: Network,
    /// Callers still waiting for an outcome, with their deadline.
    callers: Callers,
    /// Releases staged for the next write, or waiting for a connection or their retry time.
    releases: ReleaseQueue,
    /// Actions and events for the driver, and the running totals.
    out: Outbox,
    /// The leases callers hold now, and the keys recovery writes.
    recovery: RecoveryState,
    /// Waiting acquires between their checks.
    waiters: Waiters,
    /// The leases this client renews on its own.
    keep_alive: KeepAlive,
    /// Deliberate bugs, for the simulator's self-test only (none unless
    /// the `fault-injection` feature lets the simulator switch them on).
    bugs: crate::fault::InjectedBugs,
}

impl Client {
    /// A client that immediately asks for its first connection. `entropy` must
    /// be 16 random bytes, fresh for every client: lease ids are built from it.
    pub fn new(mut config: Config, entropy: [u8; 16], now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        if let Servers::Cluster { .. } = config.servers {
            config.reply_limits = config.reply_limits.at_least(ReplyLimits::TOPOLOGY);
        }
        let backoff = Backoff::new(config.reconnect_initial_backoff, config.reconnect_max_backoff, entropy);
        let mut net = Network::new(&config.servers, backoff);
        net.sentinels = sentinel::Settings::of(&config).map(sentinel::Sentinels::new);
        let mut client = Self {
            names: Names::new(entropy),
            net,
            callers: Callers::default(),
            releases: ReleaseQueue::new(config.release),
            out: Outbox::default(),
            recovery: RecoveryState::new(&config),
            waiters: Waiters::new(config.waiter_recheck(), config.waiter_lifetime()),
            keep_alive: KeepAlive::new(config.lease_ttl),
            bugs: crate::fault::InjectedBugs::default(),
            config,
        };
        match client.net.watch_sentinels(now, &mut client.names) {
            Some(watch) => client.out.action(watch),
            None => client.start_connect(now, 0),
        }
        Ok(client)
    }

    /// The settings this client was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Running totals of outcomes, releases and connections. An outcome is
    /// counted when `poll_event` hands it out (one withdrawn before, never).
    pub fn stats(&self) -> Stats {
        self.out.stats
    }

    /// Every current connection: its id, where it goes, whether it is ready.
    pub fn connections(&self) -> impl Iterator<Item = (ConnectionId, &Endpoint, bool)> + '_ {
        self.net.connections()
    }

    /// Where `connection` goes, while it is current.
    pub fn endpoint(&self, connection: ConnectionId) -> Option<&Endpoint> {
        self.net.endpoint(connection)
    }

    /// Releases (and compensations) not yet done or given up, and `LEAVE`s
    /// (waiters whose callers left) not written yet.
    pub fn outstanding_releases(&self) -> usize {
        self.releases.len() + self.net.releases_in_flight() + self.waiters.leaves_owed()
    }

    /// Whether the client owes nothing: no release, compensation or `LEAVE`
    /// outstanding, no call in flight, and no release's hand-over to the
    /// subject's waiters still on its way (without it, a process that stops
    /// right after a release would leave another replica's waiter to find
    /// the free slot on its own periodic check).
    pub fn owes_nothing(&self) -> bool {
        self.outstanding_releases() == 0 && self.in_flight_calls() == 0 && self.net.follow_ups_in_flight() == 0
    }

    /// Leases granted to callers and not given back yet (nor expired, as of
    /// the last sweep): those written back if a server loses its data.
    pub fn held_leases(&self) -> usize {
        self.recovery.held.len()
    }

    /// Acquires waiting for a connection or for their reply, abandoned ones
    /// included (their reply may still call for a compensation).
    pub fn in_flight_calls(&self) -> usize {
        self.net.calls_in_flight()
    }

    // ---- calls from users -------------------------------------------------

    /// Asks for a lease on `key` with at most `limit` live leases. Exactly one
    /// `Event::Acquired` follows for the returned id, unless it is abandoned first.
    pub fn acquire(&mut self, now: Instant, key: &Key, limit: NonZeroU32) -> RequestId {
        let keys = SubjectKeys::new(&self.config.key_prefix, key);
        let request = self.names.requests().draw();
        self.acquire_claim(now, request, keys, limit, &Claim::default(), None)
            .expect("a weight of 1 fits every limit, and the id is this client's")
    }

    /// The ids callers draw from (on any thread) for the calls below.
    pub fn request_ids(&self) -> RequestIds {
        self.names.requests().clone()
    }

    /// The general acquire, of `keys` encoded already (see [`SubjectKeys::new`]
    /// with this client's `key_prefix`; a driver can do that on the caller's
    /// thread): `claim.weight()` units of `limit`, all or nothing, under the
    /// claim's label (else `holder_label`); failing fast, or with `until`
    /// waiting for a slot until then, first come, first served across the
    /// fleet. `Event::Acquired` follows: a grant; for a wait, `Exceeded` when
    /// `until` passes, `Shed` at once when the server expects a longer wait.
    /// A weight above the limit, or an id another client drew, is refused
    /// here, before anything is sent.
    pub fn acquire_claim(
        &mut self,
        now: Instant,
        request: FreshRequest,
        keys: SubjectKeys,
        limit: NonZeroU32,
        claim: &Claim,
        until: Option<Instant>,
    ) -> Result<RequestId, ClaimError> {
        claim.fits(limit)?;
        let request = self.register(now, request, until, Awaits::Acquire)?;
        let label = claim.label().or(self.config.holder_label.as_ref()).cloned();
        let (weight, fenced) = (claim.weight(), self.config.fencing_tokens);
        let mut op = AcquireOp::of(request, &self.names, keys, limit, weight, label, fenced);
        op.wait = until.map(Wait::until);
        if op.wait.is_some() {
            self.waiters.start(&op);
        }
        self.submit(now, Op::Acquire(op));
        Ok(request)
    }

    /// A lease of `claim.weight()` units on each of `parts` (subjects and
    /// limits; one slot in a cluster), all or nothing, failing fast: one
    /// `ACQUIRE_ALL`. One `Event::Acquired` follows: `GrantedAll` (in the
    /// order given), `ExceededAt(i)` naming a full subject, or why no
    /// answer can be trusted; a grant whose caller left is released whole.
    pub fn acquire_all(
        &mut self,
        now: Instant,
        request: FreshRequest,
        parts: Vec<(SubjectKeys, NonZeroU32)>,
        claim: &Claim,
    ) -> Result<RequestId, CompositeError> {
        let most = MAX_BATCH.min(self.config.reply_limits.max_array_len.saturating_sub(1) / 3);
        let cluster = matches!(self.config.servers, Servers::Cluster { .. });
        composite::check(&parts, claim, most, cluster)?;
        let request = self.register(now, request, None, Awaits::Acquire)?;
        let label = claim.label().or(self.config.holder_label.as_ref()).cloned();
        let (weight, fenced) = (claim.weight(), self.config.fencing_tokens);
        let bundle = Bundle::of(request, &mut self.names, parts, weight, label, fenced);
        self.submit(now, Op::AcquireAll(bundle));
        Ok(request)
    }

    /// Waiting acquires now, parked or in flight.
    pub fn waiting_acquires(&self) -> usize {
        self.waiters.len()
    }

    /// Extends `lease` to the lease TTL from now, if Redis still holds it.
    /// Exactly one `Event::Renewed` follows for the returned id, unless it is
    /// abandoned first. Renewals share the acquires' FIFO, timeout and
    /// in-flight cap.
    pub fn renew(&mut self, now: Instant, request: FreshRequest, lease: &Lease) -> Result<RequestId, ForeignRequest> {
        let request = self.register(now, request, None, Awaits::Renewal)?;
        let (id, keys) = (lease.id.clone(), lease.keys.clone());
        let renewal = RenewOp::new(request, id, keys, lease.fencing_token, lease.granted_at);
        self.submit(now, Op::Renew(renewal));
        Ok(request)
    }

    /// Reads what `keys`' subject holds now: its live units, the limit its
    /// waiters recorded, and up to `holders` of its live leases (0: none,
    /// only the count). Read only. Exactly one `Event::Inspected` follows,
    /// unless it is abandoned first; it shares the acquires' timeout.
    pub fn inspect(
        &mut self,
        now: Instant,
        request: FreshRequest,
        keys: SubjectKeys,
        holders: u32,
    ) -> Result<RequestId, ForeignRequest> {
        let request = self.register(now, request, None, Awaits::Inspection)?;
        let call = Call::new(request, self.names.lease_id(request), keys);
        let op = InspectOp::subject(call, holders, self.config.reply_limits);
        self.submit(now, Op::Inspect(op));
        Ok(request)
    }

    /// How many primaries hold lease sets: 1 for a standalone server, the
    /// cluster's primaries once its slot table is known (0 before).
    pub fn shards(&self) -> usize {
        self.net.topology.slot_per_primary().len()
    }

    /// Reads one page of the keys primary `shard` (below [`Client::shards`])
    /// holds lease sets for, from `cursor` (0 to begin), about `count`
    /// keys: `SCAN`, for operators listing busy keys. Exactly one
    /// `Event::Scanned` follows, unless it is abandoned first; it shares the
    /// acquires' timeout. `None` if there is no such shard.
    pub fn scan_keys(
        &mut self,
        now: Instant,
        request: FreshRequest,
        shard: usize,
        cursor: u64,
        count: u32,
    ) -> Result<Option<RequestId>, ForeignRequest> {
        let Some(&slot) = self.net.topology.slot_per_primary().get(shard) else {
            return Ok(None);
        };
        let request = self.register(now, request, None, Awaits::Scan)?;
        // The scan goes where this slot's keys go: routed (and redirected,
        // and connected on first use) as any request of that slot.
        let call = Call::new(request, self.names.lease_id(request), SubjectKeys::in_slot(slot));
        let pattern = crate::key::leases_pattern(&self.config.key_prefix);
        let op = InspectOp::keys(call, cursor, count, pattern, self.config.reply_limits);
        self.submit(now, Op::Inspect(op));
        Ok(Some(request))
    }

    /// Keeps `lease` alive: from now on the client renews it on its own
    /// until it is released, and reports `Event::KeptAlive` at each renewal
    /// and `Event::LeaseLost` if it is lost. Nothing happens for a lease
    /// this client does not hold (released, or lost already).
    pub fn keep_alive(&mut self, now: Instant, lease: &Lease) {
        if let Some(lease) = self.recovery.held.latest(lease) {
            self.keep_alive.keep(now, &lease);
        }
    }

    /// Whether a caller of this client holds `lease` (not released, not lost).
    pub fn holds(&self, lease: &LeaseId) -> bool {
        self.recovery.held.contains(lease)
    }

    /// Leases kept alive now.
    pub fn kept_alive(&self) -> usize {
        self.keep_alive.len()
    }

    /// The caller of `request` is gone. From now on no event is sent for it:
    /// an outcome not yet taken with `poll_event` is withdrawn, and a lease
    /// Redis grants it, before or after this call, is released.
    pub fn abandon(&mut self, now: Instant, request: RequestId) {
        let mut was_waiting = false;
        self.delivering(now, |d| was_waiting = d.abandon(request));
        if was_waiting {
            self.net.unsend(request);
            self.send_leaves(now);
        }
    }

    /// Gives a lease back. `Event::Released` or `Event::ReleaseAbandoned` follows.
    pub fn release(&mut self, now: Instant, lease: Lease) {
        self.out.forget_lease(&lease.id);
        let plain = self.waiters.release_kind(&lease.keys);
        let job = ReleaseJob::given_back(now, lease, plain, &mut self.recovery.held, &mut self.keep_alive);
        self.submit_release(now, job);
    }

    // ---- inputs -----------------------------------------------------------

    /// The socket for `connection` is open.
    pub fn handle_connected(&mut self, now: Instant, connection: ConnectionId) {
        if let Some(sentinels) = self.net.sentinels.as_mut().filter(|s| s.id() == Some(connection)) {
            return sentinels.connected(now, connection);
        }
        if let Some(node) = self.net.subscriber_of(connection) {
            let (waiters, names, config) = (&mut self.waiters, &mut self.names, &self.config);
            return self
                .net
                .subscriber_connected(now, node, waiters, names, config, &mut self.out);
        }
        let Some(node) = self.net.node_of(connection) else {
            return;
        };
        let (steps, deadline) = self.net.start_handshake(now, node, &self.config);
        for step in steps {
            self.send(node, Request::Handshake(step), deadline);
        }
    }

    /// Bytes arrived on `connection`.
    pub fn handle_input(&mut self, now: Instant, connection: ConnectionId, data: &[u8]) {
        if self.net.is_watch(connection) {
            self.then(now, |c, fx| {
                c.net.on_watch(now, connection, Ok(data), &c.bugs, &mut c.out, fx)
            });
            return self.drive(now);
        }
        if let Some(node) = self.net.subscriber_of(connection) {
            self.wake_ups_input(now, node, data);
            return self.drive(now);
        }
        let Some(node) = self.net.node_of(connection) else {
            return; // A retired generation: nothing it says is trusted.
        };
        let conn = self.net.nodes[node].connection.as_mut().expect("node_of found it");
        conn.pipeline.receive(data);
        // Until the connection is retired (by a reply, or a broken stream).
        while let Some(reply) = self.net.next_reply(now, node, connection) {
            if let Err(error) = reply.and_then(|(request, frame)| self.on_reply(now, node, request, frame)) {
                self.drop_connection(now, node, error);
                break;
            }
        }
        self.drive(now);
    }

    // ---- outputs ----------------------------------------------------------

    /// The next socket to open or close, if any. Drain first after every input.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.out.next_action()
    }

    /// The next bytes to write, if any; staged calls are written here, in one go.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.write_staged();
        self.net.next_transmit()
    }

    /// The next event for callers (outcomes, releases, connection news), if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.out.next_event()
    }

    /// The next instant at which `handle_timeout` has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer(None).map(|(at, _)| at)
    }

    /// The next deadline and what it is for, leaving out timers of kind
    /// `except` (a test bench that runs "until nothing is owed" leaves out
    /// the idle probes, which come back for as long as leases are held).
    #[doc(hidden)]
    pub fn next_timer(&self, except: Option<Timer>) -> Option<(Instant, Timer)> {
        let sentinels = self.net.sentinels.as_ref().and_then(sentinel::Sentinels::poll_timeout);
        let parts = [
            (self.callers.next_deadline(), Timer::Caller),
            (self.releases.poll_timeout(|job| self.net.can_send(job)), Timer::Release),
            (self.net.topology.next_deadline(), Timer::Topology),
            (self.net.deferred.next_deadline(), Timer::Deferred),
            (self.waiters.poll_timeout(), Timer::Waiter),
            (self.keep_alive.poll_timeout(), Timer::KeepAlive),
            (sentinels, Timer::Sentinel),
        ];
        let nodes = self
            .net
            .timers(self.config.idle_probe, self.probing(), self.waiters.len() > 0);
        timer::soonest(parts.into_iter().chain(nodes), except)
    }

    /// Whether idle connections are probed: only while a held lease (to write
    /// back after a failover) or a waiter is at stake; idle, it sends nothing.
    fn probing(&self) -> bool {
        self.recovery.held.len() > 0 || self.waiters.len() > 0
    }
}

#[cfg(test)]
mod tests;
