//! The router: where the effects the client's parts ask for are applied, in
//! order (and nowhere else), where inputs and requests are dispatched to
//! the part that owns them, and where calls are written on their node.

use std::time::Instant;

use super::callers::Awaits;
use super::delivery::Delivery;
use super::effect::Effect;
use super::encode::Wire;
use super::releases;
use super::replies::Reader;
use super::request::{AcquireOp, Op, ReleaseJob, Request, Step};
use super::waiters;
use super::Client;
use crate::event::{Action, ConnectionError, ConnectionId, Event, Outcome, ReleaseFailure, RequestId, Unavailable};
use crate::request_ids::{ForeignRequest, FreshRequest};
use crate::resp::Frame;
use crate::scripts::ScriptKind;

impl Client {
    pub(super) fn apply_all(&mut self, now: Instant, effects: Vec<Effect>) {
        for effect in effects {
            self.apply(now, effect);
        }
    }

    /// Runs `part`, then applies the effects it asked for, in order.
    pub(super) fn then(&mut self, now: Instant, part: impl FnOnce(&mut Self, &mut Vec<Effect>)) {
        let mut fx = Vec::new();
        part(self, &mut fx);
        self.apply_all(now, fx);
    }

    /// Does what a part asked for.
    fn apply(&mut self, now: Instant, effect: Effect) {
        match effect {
            Effect::Route(op) => self.route_op(now, op),
            Effect::Resend(node, op) => self.send_call(now, node, op),
            Effect::Redirect(redirected) => {
                let request = redirected.request.call().request;
                if !self.callers.contains(request) {
                    return; // Its caller is gone and nothing ran: nothing to do.
                }
                if self.bugs.redirect_as_denial && matches!(redirected.request, Op::Acquire(_)) {
                    let denied = Event::Acquired(request, Outcome::Exceeded);
                    return self.delivering(now, |d| d.deliver(request, denied));
                }
                self.then(now, |c, fx| c.net.redirect_op(now, *redirected, &mut c.out.stats, fx));
            }
            Effect::Deliver(request, event) => self.delivering(now, |d| d.deliver(request, event)),
            Effect::Fail(request, reason) => self.delivering(now, |d| d.fail(request, reason)),
            Effect::Renewed(request, renewal) => self.delivering(now, |d| d.renewed(request, renewal)),
            Effect::Gone(request, lease) => {
                if !self.keep_alive.is_renewal(request) {
                    // Found gone by its holder's own renewal: not kept any more.
                    self.keep_alive.remove(&lease);
                }
            }
            Effect::Grant(mut op, token) => {
                // The injected bug: a fenced grant's token is lost on the way.
                op.fenced &= !self.bugs.drop_fencing_token;
                self.delivering(now, |d| d.grant(op, token))
            }
            Effect::GrantAll(bundle, tokens) => self.delivering(now, |d| d.grant_all(bundle, tokens)),
            Effect::AwaitReplicas(op, token) => self.await_replicas(now, op, token),
            Effect::Queued { op, entered } => {
                let names = &self.names;
                if let Some(effect) = self.waiters.queued(now, op, entered, |old| names.fresh_like(old)) {
                    self.delivering(now, |d| d.waiter(effect));
                }
            }
            Effect::Leave(keys, lease) => self.waiters.leave(keys, lease, now),
            Effect::LeaveAgain(keys, lease, until) => self.waiters.leave_again(keys, lease, until, now),
            Effect::Compensate(op, ran) => {
                self.out.stats.compensations += 1;
                let job = ReleaseJob::compensation(op, ran, now, self.config.lease_ttl);
                self.submit_release(now, job);
            }
            Effect::ResendRelease(node, job) => {
                let liveness = self.config.request_liveness;
                self.then(now, |c, fx| c.releases.send_on(now, node, job, liveness, fx));
            }
            Effect::Release(job) => self.submit_release(now, job),
            Effect::RedirectRelease(redirected) => {
                self.then(now, |c, fx| c.net.redirect_release(*redirected, &mut c.out.stats, fx));
            }
            Effect::RetryRelease(job) => self.releases.try_again(now, job, &mut self.out),
            Effect::DeferRelease(job) => self.releases.later(now, job, &mut self.out),
            Effect::Reload(node, kind) => self.reload(now, node, kind),
            Effect::Send(node, request, deadline) => self.send(node, request, deadline),
            Effect::RefreshTopology => self.refresh_topology(now),
            Effect::HandshakeDone(node) => {
                let window = self.config.recovery_window().filter(|_| !self.bugs.no_recovery);
                let (net, config, out) = (&mut self.net, &self.config, &mut self.out);
                match self.recovery.handshake_writes(now, node, net, config, window, out) {
                    Some((writes, deadline)) => writes.into_iter().for_each(|write| self.send(node, write, deadline)),
                    None => self.net.make_ready(now, node, &mut self.out),
                }
            }
            Effect::Connect(node) => self.start_connect(now, node),
        }
    }

    /// Acts on one reply from `node`'s current connection. An `Err` retires
    /// the connection; the request itself has been dealt with by then.
    pub(super) fn on_reply(
        &mut self,
        now: Instant,
        node: usize,
        request: Request,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let mut fx = Vec::new();
        let result = match request {
            Request::Handshake(step @ (Step::Shards | Step::Slots)) => {
                let liveness = self.config.request_liveness;
                self.net.topology_reply(now, node, step, &frame, liveness, &mut fx)
            }
            request => Reader {
                now,
                node,
                config: &self.config,
                cluster: self.net.topology.is_cluster(),
                bugs: &self.bugs,
                callers: &self.callers,
                conn: self.net.nodes[node]
                    .connection
                    .as_mut()
                    .expect("replies come from the current connection"),
                recovery: &mut self.recovery,
                out: &mut self.out,
                fx: &mut fx,
            }
            .read(request, frame),
        };
        self.apply_all(now, fx);
        result
    }

    // ---- inputs (the rest) ------------------------------------------------

    /// `connection` closed, or could not be opened.
    pub fn handle_closed(&mut self, now: Instant, connection: ConnectionId) {
        self.closed(now, connection, ConnectionError::Closed);
    }

    /// `connection` failed, or could not be opened, for `reason` (the
    /// operating system's words): as `handle_closed`, and the reason is
    /// what callers without a connection are told.
    pub fn handle_failed(&mut self, now: Instant, connection: ConnectionId, reason: String) {
        self.closed(now, connection, ConnectionError::Io(reason));
    }

    fn closed(&mut self, now: Instant, connection: ConnectionId, error: ConnectionError) {
        if self.net.is_watch(connection) {
            self.then(now, |c, fx| {
                c.net.on_watch(now, connection, Err(error), &c.bugs, &mut c.out, fx)
            });
        } else if let Some(node) = self.net.subscriber_of(connection) {
            self.close_wake_ups(now, node);
        } else if let Some(node) = self.net.node_of(connection) {
            self.drop_connection(now, node, error);
        } else {
            return;
        }
        self.drive(now);
    }

    /// Time has reached (or passed) what `poll_timeout` asked for.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(request) = self.callers.overdue(now) {
            self.net.unsend(request);
            self.delivering(now, |d| d.time_out(request));
        }
        while let Some(effect) = self.waiters.handle_timeout(now) {
            self.delivering(now, |d| d.waiter(effect));
        }
        self.net
            .wake_ups_timeout(now, self.config.reconnect_max_backoff, &mut self.out);
        self.then(now, |c, fx| c.net.watch_timeout(now, &c.bugs, &mut c.out, fx));
        while let Some(effect) = self.keep_alive.handle_timeout(now) {
            self.delivering(now, |d| d.keep_alive(effect));
        }
        for node in 0..self.net.nodes.len() {
            let probing = self.probing();
            self.then(now, |c, fx| c.net.expire(now, node, &c.config, probing, &mut c.out, fx));
        }
        for job in self.releases.take_expired(now) {
            releases::abandon(job, ReleaseFailure::Expired, &mut self.out);
        }
        if self.net.topology.next_deadline().is_some_and(|at| at <= now) {
            self.refresh_topology(now);
        }
        for op in self.net.deferred.take_due(now) {
            self.route_op(now, op);
        }
        self.drive(now);
    }

    /// Switches on deliberate bugs: for the simulator's self-test only.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn inject_bugs(&mut self, bugs: crate::fault::InjectedBugs) {
        if bugs.keep_alive_without_margin {
            self.keep_alive.without_margin();
        }
        self.waiters.inject_bugs(&bugs);
        if bugs.releases_aged_from_recovery {
            self.recovery.released.age_from_now();
        }
        if bugs.try_again_spends_attempts {
            self.releases.spend_attempts_on_try_again();
        }
        self.bugs = bugs;
    }

    /// Files the caller of the `fresh` request, who waits until `until`
    /// (the acquire timeout from when it asked, or from `now`, if `None`),
    /// unless another client drew its id.
    pub(super) fn register(
        &mut self,
        now: Instant,
        fresh: FreshRequest,
        until: Option<Instant>,
        awaits: Awaits,
    ) -> Result<RequestId, ForeignRequest> {
        let asked = fresh.asked().map_or(now, |at| at.min(now));
        let request = self.names.accept(fresh)?;
        let deadline = until.unwrap_or(asked + self.config.acquire_timeout).max(now);
        self.callers.insert(request, deadline, awaits);
        Ok(request)
    }

    // ---- calls ------------------------------------------------------------

    /// Writes `op` (or has it wait for the handshake), unless the in-flight
    /// cap, its caller's passed timeout or a backing-off connection fails it.
    pub(super) fn submit(&mut self, now: Instant, op: Op) {
        let request = op.call().request;
        let overloaded = self.in_flight_calls() >= self.config.max_in_flight;
        if let Some(reason) = self.callers.refused(request, now, overloaded) {
            return self.delivering(now, |d| d.fail(request, reason));
        }
        self.route_op(now, op);
    }

    /// Sends `op` where it goes (see [`Network::route`](super::Network)).
    pub(super) fn route_op(&mut self, now: Instant, op: Op) {
        let mut fx = Vec::new();
        if let Some((node, op)) = self.net.route(now, op, &mut self.out, &mut fx) {
            self.send_call(now, node, op);
        }
        self.apply_all(now, fx);
    }

    /// Stages `op` on `node`'s ready connection (`Connection::stage_call`)
    /// for `poll_transmit` to write. While `node` holds grants after a data
    /// loss, an acquire is refused at once.
    fn send_call(&mut self, now: Instant, node: usize, op: Op) {
        if op.acquires() && self.net.holding(now, node) {
            self.out.stats.recovering += 1;
            let request = op.call().request;
            return self.delivering(now, |d| d.fail(request, Unavailable::Recovering));
        }
        let no_deadline = self.bugs.skip_stale_check;
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("sent on the current connection");
        if conn.stage_call(now, op, &self.config, no_deadline) {
            let valid_until = now + self.config.request_liveness;
            self.send(node, Request::Handshake(Step::Time), valid_until);
        }
    }

    /// Writes `request` on `node`'s current connection; its reply is due by `deadline`.
    pub(super) fn send(&mut self, node: usize, request: Request, deadline: Instant) {
        let wire = Wire::new(&self.config, &self.recovery.keys, &self.names);
        self.net.nodes[node]
            .connection
            .as_mut()
            .expect("sent on the current connection")
            .send(request, deadline, &wire);
    }

    /// Writes what was staged since the last call, releases first: a release
    /// only frees a slot, so one staged before an acquire of its subject must
    /// reach Redis before it (a caller that drops a permit and acquires again
    /// at once gets the slot it just gave back), and one staged after it
    /// loses nothing by going first.
    pub(super) fn write_staged(&mut self) {
        let wire = Wire::new(&self.config, &self.recovery.keys, &self.names);
        let waiting = self.net.write_releases(self.releases.take_staged(), &wire);
        let cluster = self.net.topology.is_cluster();
        for conn in self.net.nodes.iter_mut().filter_map(|node| node.connection.as_mut()) {
            conn.write_staged_acquires(&wire, cluster);
        }
        for job in waiting {
            self.releases.wait(job, &mut self.out);
        }
    }

    /// Sends what can be sent on ready connections.
    pub(super) fn drive(&mut self, now: Instant) {
        if let Some(watch) = self.net.watch_sentinels(now, &mut self.names) {
            self.out.action(watch);
        }
        let (waiters, names, config) = (&mut self.waiters, &mut self.names, &self.config);
        self.net.sync_subscriptions(now, waiters, names, config, &mut self.out);
        self.send_leaves(now);
        for node in 0..self.net.nodes.len() {
            if !self.net.nodes[node].is_ready() {
                continue;
            }
            while let Some(op) = self.net.nodes[node].waiting.pop_front() {
                self.send_call(now, node, op);
            }
        }
        if self.releases.due(now).next().is_none() {
            return;
        }
        // Releases due on a node nobody connects to (a primary that took
        // over their slot): connect it.
        for node in self.net.unconnected_for(self.releases.due(now)) {
            self.start_connect(now, node);
        }
        let net = &self.net;
        for job in self.releases.take_due(now, |job| net.can_send(job)) {
            self.submit_release(now, job);
        }
    }

    /// Writes the `LEAVE`s owed, on the nodes that serve them, if ready.
    pub(super) fn send_leaves(&mut self, now: Instant) {
        let net = &self.net;
        let leaves = self.waiters.take_leaves(now, |keys| net.ready_for(keys.slot()));
        for leave in leaves {
            self.out.stats.waiters_left += 1;
            let request = Request::Leave(leave.keys, leave.lease, leave.until);
            self.send(leave.node, request, now + self.config.request_liveness);
        }
    }

    /// Queues a `SCRIPT LOAD` on `node`'s ready connection, once per script at a time.
    fn reload(&mut self, now: Instant, node: usize, kind: ScriptKind) {
        let conn = self.net.nodes[node].connection.as_mut().expect("a ready connection");
        if conn.start_reload(kind) {
            self.send(node, Request::Reload(kind), now + self.config.request_liveness);
        }
    }

    // ---- connections ------------------------------------------------------

    /// Opens a connection to `node`, unless it has one.
    pub(super) fn start_connect(&mut self, now: Instant, node: usize) {
        let (deadline, limits) = (now + self.config.connect_timeout, self.config.reply_limits);
        let action = self.net.connect(node, || self.names.connection(), deadline, limits);
        self.out.actions(action);
    }

    /// Gives up `node`'s current connection (see [`Network::retire`](super::Network)).
    pub(super) fn drop_connection(&mut self, now: Instant, node: usize, error: ConnectionError) {
        self.then(now, |c, fx| c.net.retire(now, node, error, &mut c.out, fx));
    }

    /// Reads the slot table again, if the network says now is the time.
    pub(super) fn refresh_topology(&mut self, now: Instant) {
        if self.net.ask_sentinels_again(now, &mut self.out) {
            return;
        }
        if let Some(node) = self.net.refresh_target(now) {
            self.out.stats.topology_refreshes += 1;
            let deadline = now + self.config.request_liveness;
            self.send(node, Request::Handshake(Step::Shards), deadline);
        }
    }

    /// Sends `job` where its subject lives, or queues it (see [`ReleaseQueue::submit`]).
    pub(super) fn submit_release(&mut self, now: Instant, job: ReleaseJob) {
        let liveness = self.config.request_liveness;
        self.then(now, |c, fx| {
            c.releases.submit(now, job, &c.net, liveness, &mut c.out, fx)
        });
    }

    // ---- wake-ups ---------------------------------------------------------

    /// Bytes on `node`'s wake-up connection: each message (counted) goes to
    /// the waiters, and what they ask for is done before the next; a broken
    /// stream closes the connection.
    pub(super) fn wake_ups_input(&mut self, now: Instant, node: usize, data: &[u8]) {
        let (waiters, wake_ups) = (&self.waiters, &mut self.net.nodes[node].wake_ups);
        let Ok(heard) = wake_ups.input(data, |channel| waiters.wants(channel)) else {
            return self.close_wake_ups(now, node);
        };
        for news in heard {
            self.out.stats.wake_ups += 1;
            let (names, held) = (&self.names, &self.recovery.held);
            let done_waiting = |id: &_| names.issued(id) && !held.contains(id);
            let effects = self.waiters.hear(now, news, done_waiting);
            self.apply_waiters(now, effects);
        }
    }

    /// `node`'s wake-up connection closed or failed: closed here too, and
    /// opened again after the reconnect backoff cap.
    pub(super) fn close_wake_ups(&mut self, now: Instant, node: usize) {
        let retry_after = self.config.reconnect_max_backoff;
        let closed = self.net.nodes[node].wake_ups.close(now, retry_after);
        self.out.actions(closed.map(Action::Close));
    }

    // ---- outcomes ---------------------------------------------------------

    /// Runs one delivery step (see [`Delivery`]), then what it asked for.
    pub(super) fn delivering(&mut self, now: Instant, step: impl FnOnce(&mut Delivery)) {
        let mut fx = Vec::new();
        step(&mut Delivery {
            now,
            config: &self.config,
            names: &mut self.names,
            callers: &mut self.callers,
            waiters: &mut self.waiters,
            keep_alive: &mut self.keep_alive,
            held: &mut self.recovery.held,
            out: &mut self.out,
            fx: &mut fx,
        });
        self.apply_all(now, fx);
    }

    /// What the waiters ask for, one effect at a time.
    pub(super) fn apply_waiters(&mut self, now: Instant, effects: Vec<waiters::Effect>) {
        for effect in effects {
            self.delivering(now, |d| d.waiter(effect));
        }
    }

    /// A confirmed hand-over waits for a `WAIT` written at once on the node
    /// that serves it; with that node not ready, the waiter checks again.
    fn await_replicas(&mut self, now: Instant, op: AcquireOp, token: u64) {
        let (Some(node), Some(acks)) = (self.net.ready_for(op.call.keys.slot()), self.config.replica_acks) else {
            return self.route_op(now, Op::Acquire(op.resend()));
        };
        let conn = self.net.nodes[node].connection.as_mut().expect("ready");
        conn.unreplicated.push(super::connection::Unconfirmed::One(op, token));
        self.send(node, Request::Wait, now + self.config.request_liveness + acks.timeout);
    }
}
