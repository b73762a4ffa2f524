//! Where the sub-machines' effects are applied: the one place that turns
//! what keep-alive, the waiters and the wake-up connections ask for or
//! heard into requests, grants, connections and events, and counts them.

use std::time::Instant;

use bytes::Bytes;

use super::callers::Awaits;
use super::encode::Wire;
use super::error_class::Redirect;
use super::keep_alive;
use super::redirects::{Next, Table, TRY_AGAIN_DELAY};
use super::request::{AcquireOp, Op, ReleaseJob, ReleaseKind, RenewOp, Request, Step};
use super::subscriber::Heard;
use super::topology::Route;
use super::waiters;
use super::Client;
use crate::event::{Action, ConnectionError, ConnectionId, Event, Lease, Outcome, RequestId, Unavailable};
use crate::lease_id::LeaseId;
use crate::resp::Frame;
use crate::server_clock::lease_expiry;
use crate::server_error::ServerError;

impl Client {
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
    /// release handed over delivered (or, with `replica_acks`, confirmed
    /// first).
    pub(super) fn apply_waiter(&mut self, now: Instant, effect: waiters::Effect) {
        match effect {
            waiters::Effect::Check(op) => self.route_op(now, Op::Acquire(op)),
            waiters::Effect::Handed { op, token } => {
                self.out.stats.handed_over += 1;
                if self.config.replica_acks.is_some() {
                    self.confirm_handed(now, op, token);
                } else {
                    self.deliver_handed(now, op, token);
                }
            }
        }
    }

    /// A handed slot becomes the waiter's permit at once, from the message:
    /// the slot is already its own in Redis, reserved until its queue entry
    /// would have expired, and a renewal sent right away extends it to a
    /// whole TTL (a renewal never creates a lease: if the caller gave the
    /// permit back first, it finds nothing).
    fn deliver_handed(&mut self, now: Instant, op: AcquireOp, token: u64) {
        let request = op.call.request;
        // The release ran after this waiter's last check (which queued it)
        // was sent: the reservation lives its lifetime from then at least.
        let sent = op.call.sent_at.unwrap_or(now);
        let lease = Lease {
            id: op.call.lease,
            keys: op.call.keys.clone(),
            expires_at: lease_expiry(sent, self.config.waiter_lifetime()),
            fencing_token: token,
            granted_at: now,
            // The renewal sent now runs within its liveness, and extends
            // the lease a TTL from then: releases keep trying until that.
            release_until: now + self.config.request_liveness + self.config.lease_ttl,
        };
        self.waiters.remove(request, true, now);
        self.recovery.held.insert(now, &lease, op.limit);
        // The renewal answers no caller: its outcome only updates the held
        // lease (or finds it given back already).
        let renewal = self.names.request();
        let confirm = RenewOp::new(renewal, lease.id.clone(), lease.keys.clone(), token, now);
        self.finish(now, request, Outcome::Granted(lease));
        self.route_op(now, Op::Renew(confirm));
    }

    /// With `replica_acks`, a hand-over is delivered as any grant is: once a
    /// `WAIT` says enough replicas have it. The release that made it ran on
    /// another client's connection, which `WAIT` here does not cover; the
    /// renewal that confirms it runs on this one, after it in the
    /// replication stream, so a `WAIT` after the renewal covers both.
    fn confirm_handed(&mut self, now: Instant, op: AcquireOp, token: u64) {
        let renewal = self.names.request();
        self.callers
            .insert(renewal, now + self.config.request_liveness, Awaits::HandOver);
        let confirm = RenewOp::new(renewal, op.call.lease.clone(), op.call.keys.clone(), token, now);
        self.waiters.confirming(renewal, op, token);
        self.route_op(now, Op::Renew(confirm));
    }

    /// The renewal that confirms a hand-over ended (see `confirm_handed`).
    /// Extended: the grant waits for a `WAIT` written at once on that node.
    /// Otherwise the reservation is gone (or unconfirmed): the waiter checks
    /// again, keeping its place if it still has one.
    pub(super) fn handed_confirmed(&mut self, now: Instant, renewal: RequestId, extended: bool) {
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

    /// Writes the `LEAVE`s owed, on the nodes that serve them, if ready.
    pub(super) fn send_leaves(&mut self, now: Instant) {
        let (topology, nodes) = (&self.net.topology, &self.net.nodes);
        let leaves = self.waiters.take_leaves(now, |keys| match topology.route(keys.slot()) {
            Route::Node(node) => Some(node).filter(|node| nodes[*node].is_ready()),
            Route::AwaitTopology | Route::NoOwner => None,
        });
        for leave in leaves {
            self.out.stats.waiters_left += 1;
            let deadline = now + self.config.request_liveness;
            self.send(
                leave.node,
                Request::Leave(leave.keys, leave.lease, leave.until),
                deadline,
            );
        }
    }
}

impl Client {
    /// Brings every node's wake-up connection in line with the channels
    /// waited on: opened where needed (its subscriptions are sent once it
    /// is open), subscribed to new channels, unsubscribed from old ones.
    pub(super) fn sync_subscriptions(&mut self, now: Instant) {
        let changed = !self.waiters.take_changed().is_empty();
        let mut dirty = false;
        for node in &mut self.net.nodes {
            dirty |= node.wake_ups.take_dirty();
        }
        if !changed && !dirty {
            return;
        }
        let mut wanted: Vec<Vec<Bytes>> = vec![Vec::new(); self.net.nodes.len()];
        for (channel, keys) in self.waiters.channels() {
            if let Route::Node(node) = self.net.topology.route(keys.slot()) {
                wanted[node].push(channel.clone());
            }
        }
        for (node, mut wanted) in wanted.into_iter().enumerate() {
            wanted.sort();
            if self.net.nodes[node].wake_ups.should_open(now, &wanted) {
                let id = self.names.connection();
                let until = now + self.config.connect_timeout;
                let target = &mut self.net.nodes[node];
                target.wake_ups.opening(id, until, self.config.reply_limits);
                self.out.action(Action::Connect(id, target.endpoint.clone()));
            } else {
                self.net.nodes[node].wake_ups.subscribe(&wanted);
            }
        }
    }

    /// The node whose wake-up connection is `connection`.
    pub(super) fn subscriber_of(&self, connection: ConnectionId) -> Option<usize> {
        self.net
            .nodes
            .iter()
            .position(|node| node.wake_ups.id() == Some(connection))
    }

    /// Bytes on `node`'s wake-up connection: what they say goes to the
    /// waiters (each message counted); a broken stream closes it.
    pub(super) fn wake_ups_input(&mut self, now: Instant, node: usize, data: &[u8]) {
        let waiters = &self.waiters;
        let heard = match self.net.nodes[node]
            .wake_ups
            .input(data, |channel| waiters.wants(channel))
        {
            Ok(heard) => heard,
            Err(()) => return self.close_wake_ups(now, node),
        };
        for news in heard {
            self.out.stats.wake_ups += 1;
            let effects = match news {
                Heard::Wake(channel) => self.waiters.woken(&channel, 1),
                Heard::WakeThese(channel, ids) => self.waiters.named(&channel, &ids),
                Heard::Handed(channel, handed) => {
                    let (names, held) = (&self.names, &self.recovery.held);
                    let done_waiting = |id: &LeaseId| names.issued(id) && !held.contains(id);
                    self.waiters.handed(now, &channel, handed, done_waiting)
                }
            };
            self.apply_waiters(now, effects);
        }
    }

    /// `node`'s wake-up connection closed or failed: closed here too, and
    /// opened again after the reconnect backoff cap.
    pub(super) fn close_wake_ups(&mut self, now: Instant, node: usize) {
        let retry_after = self.config.reconnect_max_backoff;
        if let Some(id) = self.net.nodes[node].wake_ups.close(now, retry_after) {
            self.out.action(Action::Close(id));
        }
    }
}

impl Client {
    /// Writes `request` on `node`'s current connection; its reply is due by `deadline`.
    pub(super) fn send(&mut self, node: usize, request: Request, deadline: Instant) {
        let wire = Wire::new(&self.config, &self.recovery.keys, &self.names);
        self.net.nodes[node]
            .connection
            .as_mut()
            .expect("sent on the current connection")
            .send(request, deadline, &wire);
    }

    /// As [`Client::send`], right after an `ASKING` when an `ASK` redirect
    /// sent it there (the flag holds for the next command only).
    pub(super) fn send_asking_if(&mut self, asked: bool, node: usize, request: Request, deadline: Instant) {
        if asked {
            self.send(node, Request::Asking, deadline);
        }
        self.send(node, request, deadline);
    }
}

impl Client {
    /// An acquire or renewal `node` redirected: route it again, hold it
    /// back a little, or fail it (see [`Network::redirected`]).
    pub(super) fn redirect_op(&mut self, now: Instant, node: usize, mut op: Op, redirect: Redirect, message: &str) {
        let request = op.call().request;
        if !self.callers.contains(request) {
            return; // Its caller is gone and nothing ran: nothing to do.
        }
        if self.bug_redirect_as_denial() && matches!(op, Op::Acquire(_)) {
            self.finish(now, request, Outcome::Exceeded);
            return;
        }
        let (config, names) = (&self.config, &self.names);
        let call = op.call_mut();
        call.ask = None;
        let (next, refresh) = self.net.redirected(
            node,
            redirect,
            message,
            &mut call.redirects,
            &mut self.out.stats,
            |at| names.reconnect(config, at),
        );
        if refresh {
            self.refresh_topology(now);
        }
        match next {
            Next::Route { ask } => {
                op.call_mut().ask = ask;
                self.route_op(now, op);
            }
            Next::Later => self.net.deferred.until(now + TRY_AGAIN_DELAY, op),
            Next::GiveUp => self.fail(now, request, Unavailable::Server(ServerError::new(message))),
        }
    }

    /// A release or compensation `node` redirected: sent again where the
    /// slot lives (a tenant's slot may move while its leases are held); one
    /// waiting out a migration backs off as after a failure, as a plain
    /// removal (the script's keys are split between two nodes meanwhile).
    pub(super) fn redirect_release(
        &mut self,
        now: Instant,
        node: usize,
        mut job: ReleaseJob,
        redirect: Redirect,
        message: &str,
    ) {
        job.ask = None;
        let (config, names) = (&self.config, &self.names);
        let (next, refresh) =
            self.net
                .redirected(node, redirect, message, &mut job.redirects, &mut self.out.stats, |at| {
                    names.reconnect(config, at)
                });
        if refresh {
            self.refresh_topology(now);
        }
        match next {
            Next::Route { ask } => {
                job.ask = ask;
                self.submit_release(now, job);
            }
            Next::Later => {
                if redirect == Redirect::TryAgain && job.kind == ReleaseKind::Release {
                    job.kind = ReleaseKind::Removal;
                }
                self.retry_release(now, job);
            }
            Next::GiveUp => self.retry_release(now, job),
        }
    }

    /// Reads the slot table again, if the network says now is the time.
    pub(super) fn refresh_topology(&mut self, now: Instant) {
        if let Some(node) = self.net.refresh_target(now) {
            self.out.stats.topology_refreshes += 1;
            let deadline = now + self.config.request_liveness;
            self.send(node, Request::Handshake(Step::Shards), deadline);
        }
    }

    /// The reply to `CLUSTER SHARDS` (or `SLOTS`): requests that waited for
    /// a table are routed; at a handshake, one step is done.
    pub(super) fn on_topology_reply(
        &mut self,
        now: Instant,
        node: usize,
        step: Step,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let handshaking = !self.net.nodes[node].is_ready();
        let (config, names) = (&self.config, &self.names);
        match self
            .net
            .read_table(node, step, &frame, |at| names.reconnect(config, at))?
        {
            Table::AskOlder => {
                let deadline = now + self.config.request_liveness;
                self.send(node, Request::Handshake(Step::Slots), deadline);
                return Ok(());
            }
            Table::Learnt(waiting) => {
                for op in waiting {
                    self.route_op(now, op);
                }
            }
            Table::Kept => {}
        }
        if handshaking {
            self.step_done(now, node);
        }
        Ok(())
    }
}
