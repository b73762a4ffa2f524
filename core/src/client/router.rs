//! The router: the one place where the effects the client's parts ask for
//! are applied, in order, where a request is routed to its node and
//! written, and where an outcome is delivered to its caller (or released
//! when the caller is gone).

use std::time::Instant;

use super::callers::Awaits;
use super::effect::Effect;
use super::encode::Wire;
use super::keep_alive;
use super::release_queue::ReleaseQueue;
use super::replies::Reader;
use super::request::{AcquireOp, Op, Ran, ReleaseJob, ReleaseKind, RenewOp, Request, Step};
use super::topology::Route;
use super::waiters;
use super::Client;
use crate::event::{Action, ConnectionError, Event, Outcome, Renewal, RequestId, Unavailable};
use crate::resp::Frame;
use crate::scripts::ScriptKind;
use crate::server_clock::lease_expiry;
use crate::UnavailablePolicy;

impl Client {
    pub(super) fn apply_all(&mut self, now: Instant, effects: Vec<Effect>) {
        for effect in effects {
            self.apply(now, effect);
        }
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
                    return self.deliver(now, request, Event::Acquired(request, Outcome::Exceeded));
                }
                let mut fx = Vec::new();
                self.net.redirect_op(now, *redirected, &mut self.out.stats, &mut fx);
                self.apply_all(now, fx);
            }
            Effect::Finish(request, outcome) => self.deliver(now, request, Event::Acquired(request, outcome)),
            Effect::Fail(request, reason) => self.fail(now, request, reason),
            Effect::Renewed(request, renewal) => self.finish_renewal(now, request, renewal),
            Effect::Gone(request, lease) => {
                if !self.keep_alive.is_renewal(request) {
                    // Found gone by its holder's own renewal: not kept any more.
                    self.keep_alive.remove(&lease);
                }
            }
            Effect::Inspected(request, reading) => self.deliver(now, request, Event::Inspected(request, Ok(reading))),
            Effect::Scanned(request, page) => self.deliver(now, request, Event::Scanned(request, Ok(page))),
            Effect::Grant(op, token) => self.deliver_grant(now, op, token),
            Effect::Queued(op) => {
                if let Some(effect) = self.waiters.queued(now, op) {
                    self.apply_waiter(now, effect);
                }
            }
            Effect::Leave(keys, lease) => self.waiters.leave(keys, lease, now),
            Effect::LeaveAgain(keys, lease, until) => self.waiters.leave_again(keys, lease, until),
            Effect::Compensate(op, ran) => {
                self.out.stats.compensations += 1;
                let job = ReleaseJob::compensation(op, ran, now, self.config.lease_ttl);
                self.submit_release(now, job);
            }
            Effect::ResendRelease(node, job) => {
                let mut fx = Vec::new();
                self.releases
                    .send_on(now, node, job, self.config.request_liveness, &mut fx);
                self.apply_all(now, fx);
            }
            Effect::Release(job) => self.submit_release(now, job),
            Effect::RedirectRelease(redirected) => {
                let mut fx = Vec::new();
                self.net.redirect_release(*redirected, &mut self.out.stats, &mut fx);
                self.apply_all(now, fx);
            }
            Effect::RetryRelease(job) => self.releases.try_again(now, job, &mut self.out),
            Effect::Reload(node, kind) => self.reload(now, node, kind),
            Effect::Send(node, request, deadline) => self.send(node, request, deadline),
            Effect::RefreshTopology => self.refresh_topology(now),
            Effect::HandshakeDone(node) => {
                let window = self.config.recovery_window().filter(|_| !self.bugs.no_recovery);
                let (net, config) = (&mut self.net, &self.config);
                if let Some((writes, deadline)) =
                    self.recovery
                        .handshake_done(now, node, net, config, window, &mut self.out)
                {
                    for write in writes {
                        self.send(node, write, deadline);
                    }
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

    // ---- calls ------------------------------------------------------------

    /// Writes `op` (or has it wait for the handshake), unless the in-flight
    /// cap or a backing-off connection fails it at once.
    pub(super) fn submit(&mut self, now: Instant, op: Op) {
        if self.in_flight_calls() >= self.config.max_in_flight {
            return self.fail(now, op.call().request, Unavailable::Overloaded);
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

    /// Takes `op` for `node`'s ready connection (see
    /// `Connection::stage_call`); `poll_transmit`
    /// writes it. While `node` holds grants after a data loss, an acquire is
    /// refused at once.
    fn send_call(&mut self, now: Instant, node: usize, op: Op) {
        if matches!(op, Op::Acquire(_)) && self.net.holding(now, node) {
            self.out.stats.recovering += 1;
            return self.fail(now, op.call().request, Unavailable::Recovering);
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
        for conn in self.net.nodes.iter_mut().filter_map(|node| node.connection.as_mut()) {
            conn.write_staged_acquires(&wire);
        }
        for job in waiting {
            self.releases.wait(job, &mut self.out);
        }
    }

    /// Sends what can be sent on ready connections.
    pub(super) fn drive(&mut self, now: Instant) {
        self.sync_subscriptions(now);
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
        let (topology, nodes) = (&self.net.topology, &self.net.nodes);
        let leaves = self.waiters.take_leaves(now, |keys| match topology.route(keys.slot()) {
            Route::Node(node) => Some(node).filter(|node| nodes[*node].is_ready()),
            Route::AwaitTopology | Route::NoOwner => None,
        });
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
        let names = &mut self.names;
        let deadline = now + self.config.connect_timeout;
        let limits = self.config.reply_limits;
        if let Some(action) = self.net.connect(node, || names.connection(), deadline, limits) {
            self.out.action(action);
        }
    }

    /// Gives up `node`'s current connection (see [`Network::retire`](super::Network)).
    pub(super) fn drop_connection(&mut self, now: Instant, node: usize, error: ConnectionError) {
        let mut fx = Vec::new();
        self.net.retire(now, node, error, &mut self.out, &mut fx);
        self.apply_all(now, fx);
    }

    /// Reads the slot table again, if the network says now is the time.
    pub(super) fn refresh_topology(&mut self, now: Instant) {
        if let Some(node) = self.net.refresh_target(now) {
            self.out.stats.topology_refreshes += 1;
            let deadline = now + self.config.request_liveness;
            self.send(node, Request::Handshake(Step::Shards), deadline);
        }
    }

    /// Sends `job` where its subject lives, or queues it (see [`ReleaseQueue::submit`]).
    pub(super) fn submit_release(&mut self, now: Instant, job: ReleaseJob) {
        let mut fx = Vec::new();
        let liveness = self.config.request_liveness;
        ReleaseQueue::submit(
            &mut self.releases,
            now,
            job,
            &self.net,
            liveness,
            &mut self.out,
            &mut fx,
        );
        self.apply_all(now, fx);
    }

    // ---- wake-ups ---------------------------------------------------------

    /// Opens, subscribes or unsubscribes wake-up connections as the
    /// channels waited on changed (see [`Network::sync_subscriptions`](super::Network)).
    pub(super) fn sync_subscriptions(&mut self, now: Instant) {
        let (waiters, names, config) = (&mut self.waiters, &mut self.names, &self.config);
        self.net.sync_subscriptions(now, waiters, names, config, &mut self.out);
    }

    /// Bytes on `node`'s wake-up connection: each message (counted) goes to
    /// the waiters, and what they ask for is done before the next; a broken
    /// stream closes the connection.
    pub(super) fn wake_ups_input(&mut self, now: Instant, node: usize, data: &[u8]) {
        let waiters = &self.waiters;
        let Ok(heard) = self.net.nodes[node]
            .wake_ups
            .input(data, |channel| waiters.wants(channel))
        else {
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
        self.out
            .actions(self.net.nodes[node].wake_ups.close(now, retry_after).map(Action::Close));
    }

    // ---- outcomes ---------------------------------------------------------

    /// Forgets `request`'s caller; whether it was still waiting.
    pub(super) fn stop_waiting(&mut self, now: Instant, request: RequestId) -> bool {
        // A waiter that leaves without a grant gives its queue place back.
        self.waiters.remove(request, false, now);
        self.callers.remove(request).is_some()
    }

    /// Hands `event`, `request`'s outcome, to its caller if it still waits.
    pub(super) fn deliver(&mut self, now: Instant, request: RequestId, event: Event) {
        if self.stop_waiting(now, request) {
            self.out.event(event);
        }
    }

    /// No trustworthy answer for `request`: deny or fail open, by policy (a
    /// renewal or an inspection is simply unavailable).
    pub(super) fn fail(&mut self, now: Instant, request: RequestId, reason: Unavailable) {
        let event = match self.callers.awaits(request) {
            Some(Awaits::Inspection) => Event::Inspected(request, Err(reason)),
            Some(Awaits::Scan) => Event::Scanned(request, Err(reason)),
            Some(Awaits::Renewal | Awaits::KeepAlive | Awaits::HandOver) => {
                return self.finish_renewal(now, request, Renewal::Unavailable(reason));
            }
            _ => Event::Acquired(
                request,
                match self.config.unavailable_policy {
                    UnavailablePolicy::Deny => Outcome::Unavailable(reason),
                    UnavailablePolicy::Allow => Outcome::FailOpen(reason),
                },
            ),
        };
        self.deliver(now, request, event);
    }

    /// Hands a grant to its caller, or releases it if the caller is gone.
    fn deliver_grant(&mut self, now: Instant, op: AcquireOp, token: u64) {
        let request = op.call.request;
        if !self.callers.contains(request) {
            return self.apply(now, Effect::Compensate(op, Ran::Answered));
        }
        // The grant took it out of its queue: nothing to leave.
        self.waiters.remove(request, true, now);
        let expires_at = lease_expiry(op.call.sent_at.unwrap_or(now), self.config.lease_ttl);
        let lease = op.call.into_lease(token, now, expires_at, expires_at);
        self.recovery.held.insert(now, &lease, op.limit);
        self.deliver(now, request, Event::Acquired(request, Outcome::Granted(lease)));
    }

    /// Delivers a renewal's outcome: to its caller if it still waits, to
    /// keep-alive for its own, or to the hand-over it confirms.
    fn finish_renewal(&mut self, now: Instant, request: RequestId, renewal: Renewal) {
        if self.callers.awaits(request) == Some(Awaits::HandOver) {
            self.stop_waiting(now, request);
            return self.handed_confirmed(now, request, matches!(renewal, Renewal::Extended(_)));
        }
        if !self.stop_waiting(now, request) {
            return;
        }
        if !self.keep_alive.is_renewal(request) {
            return self.out.event(Event::Renewed(request, renewal));
        }
        if let Some(effect) = self.keep_alive.on_renewed(request, renewal) {
            self.apply_keep_alive(now, effect);
        }
    }

    /// Applies what keep-alive asks for: a renewal sent (as any request,
    /// bounded by the acquire timeout and the lease's expiry), or a lease
    /// kept or lost reported and counted.
    pub(super) fn apply_keep_alive(&mut self, now: Instant, effect: keep_alive::Effect) {
        match effect {
            keep_alive::Effect::Renew(lease) => {
                let request = self.names.request();
                let deadline = (now + self.config.acquire_timeout).min(lease.expires_at);
                self.callers.insert(request, deadline, Awaits::KeepAlive);
                self.keep_alive.sent(&lease.id, request, now);
                let renewal = RenewOp::new(request, lease.id, lease.keys, lease.fencing_token, lease.granted_at);
                self.submit(now, Op::Renew(renewal));
            }
            keep_alive::Effect::Kept { lease, expires_at } => {
                self.out.stats.kept_alive += 1;
                self.out.event(Event::KeptAlive { lease, expires_at });
            }
            keep_alive::Effect::Lost { lease, reason } => {
                self.out.stats.keep_alive_lost += 1;
                self.recovery.held.remove(&lease);
                self.out.event(Event::LeaseLost { lease, reason });
            }
        }
    }

    pub(super) fn apply_waiters(&mut self, now: Instant, effects: Vec<waiters::Effect>) {
        for effect in effects {
            self.apply_waiter(now, effect);
        }
    }

    /// Applies what the waiters ask for: a check sent again, or a slot a
    /// release handed over delivered at once, from the message (or, with
    /// `replica_acks`, once the renewal that confirms it is replicated).
    pub(super) fn apply_waiter(&mut self, now: Instant, effect: waiters::Effect) {
        let (op, token) = match effect {
            waiters::Effect::Check(op) => return self.route_op(now, Op::Acquire(op)),
            waiters::Effect::Handed { op, token } => (op, token),
        };
        self.out.stats.handed_over += 1;
        let request = op.call.request;
        // The renewal that confirms it runs on this client's connection,
        // after the release (another client's) in the replication stream:
        // a `WAIT` after it covers both. Without `replica_acks` it answers
        // no caller: it extends the slot, already this waiter's in Redis, to
        // a whole TTL, or finds it given back already.
        let renewal = self.names.request();
        let confirm = RenewOp::new(renewal, op.call.lease.clone(), op.call.keys.clone(), token, now);
        if self.config.replica_acks.is_some() {
            self.callers
                .insert(renewal, now + self.config.request_liveness, Awaits::HandOver);
            self.waiters.confirming(renewal, op, token);
            return self.route_op(now, Op::Renew(confirm));
        }
        // The release ran after this waiter's last check (which queued it)
        // was sent: the reservation lives its lifetime from then at least.
        let expires_at = lease_expiry(op.call.sent_at.unwrap_or(now), self.config.waiter_lifetime());
        // The renewal runs within its liveness and extends the lease a TTL
        // from then: releases keep trying until that.
        let release_until = now + self.config.request_liveness + self.config.lease_ttl;
        let lease = op.call.into_lease(token, now, expires_at, release_until);
        self.waiters.remove(request, true, now);
        self.recovery.held.insert(now, &lease, op.limit);
        self.deliver(now, request, Event::Acquired(request, Outcome::Granted(lease)));
        self.route_op(now, Op::Renew(confirm));
    }

    /// The renewal that confirms a hand-over ended. Extended: the grant
    /// waits for a `WAIT` written at once on that node. Otherwise the
    /// reservation is gone (or unconfirmed): the waiter checks again,
    /// keeping its place if it still has one.
    fn handed_confirmed(&mut self, now: Instant, renewal: RequestId, extended: bool) {
        let Some((op, token)) = self.waiters.confirmed(renewal) else {
            return;
        };
        let node = match self.net.topology.route(op.call.keys.slot()) {
            Route::Node(node) if extended && self.net.nodes[node].is_ready() => node,
            _ => return self.route_op(now, Op::Acquire(op.resend())),
        };
        let acks = self
            .config
            .replica_acks
            .expect("confirmations wait only with replica_acks");
        let conn = self.net.nodes[node].connection.as_mut().expect("ready");
        conn.unreplicated.push((op, token));
        let deadline = now + self.config.request_liveness + acks.timeout;
        self.send(node, Request::Wait, deadline);
    }

    /// Takes back an outcome whose caller left before seeing it (never
    /// delivered, so never counted): the lease of a grant is compensated.
    pub(super) fn withdraw(&mut self, now: Instant, outcome: Outcome) {
        if let Outcome::Granted(lease) = outcome {
            self.recovery.held.remove(&lease.id);
            self.out.stats.compensations += 1;
            let compensation = ReleaseKind::Compensation { tombstone_until_ms: 0 };
            self.submit_release(now, ReleaseJob::of(lease, compensation, now));
        }
    }
}
