//! The connection lifecycle: open, retire, and what is written on it.

use std::time::Instant;

use super::encode::Wire;
use super::releases::Ran;
use super::request::{Op, ReleaseJob, Request, Step};
use super::{Client, Connection};
use crate::event::{Action, ConnectionError, ConnectionId, Event, Unavailable};
use crate::scripts::ScriptKind;

impl Client {
    /// Opens a connection to `node`.
    pub(super) fn start_connect(&mut self, now: Instant, node: usize) {
        if self.net.nodes[node].connection.is_some() {
            return; // one generation at a time
        }
        let id = self.names.connection();
        let target = &mut self.net.nodes[node];
        target.reconnect.attempting();
        target.connection = Some(Connection::new(
            id,
            now + self.config.connect_timeout,
            self.config.reply_limits,
        ));
        self.out.action(Action::Connect(id, target.endpoint.clone()));
    }

    /// Gives up `node`'s current connection: a failed attempt backs off
    /// before the next; a ready connection that is retired is replaced at
    /// once (in a cluster, only while the node still owns slots). Other
    /// nodes' requests are untouched.
    pub(super) fn drop_connection(&mut self, now: Instant, node: usize, error: ConnectionError) {
        let Some(mut conn) = self.net.nodes[node].connection.take() else {
            return;
        };
        self.out.action(Action::Close(conn.id()));
        if !conn.is_ready() {
            return self.connect_failed(now, node, conn.id(), error);
        }
        self.out.stats.connections_replaced += 1;
        self.out.event(Event::Retired(conn.id(), error.clone()));
        // Never written: they wait for the next connection like any other.
        for (op, _) in conn.take_staged().into_iter().rev() {
            self.net.nodes[node].waiting.push_front(op);
        }
        // The replacement first: what the old one leaves behind (releases
        // to retry, compensations) waits for it.
        let wanted = self.net.topology.wanted(node);
        if wanted {
            self.start_connect(now, node);
        }
        // Grants read but not confirmed replicated: they exist, unconfirmed.
        for (op, _) in std::mem::take(&mut conn.unreplicated) {
            self.fail(now, op.call.request, Unavailable::ConnectionLost(error.clone()));
            self.compensate(now, op, Ran::Answered);
        }
        let pending: Vec<Request> = conn.pipeline.drain().collect();
        for request in pending {
            match request {
                Request::Acquire(op) => {
                    self.ambiguous(now, Op::Acquire(op), error.clone());
                }
                Request::AcquireMany(ops) => {
                    for op in ops {
                        self.ambiguous(now, Op::Acquire(op), error.clone());
                    }
                }
                Request::Renew(op) => {
                    self.ambiguous(now, Op::Renew(op), error.clone());
                }
                Request::Inspect(op) => {
                    self.ambiguous(now, Op::Inspect(op), error.clone());
                }
                Request::Release(job) | Request::Compensate(job, _) => self.retry_release(now, job),
                Request::ReleaseMany(jobs) => {
                    for job in jobs {
                        self.retry_release(now, job);
                    }
                }
                Request::Handshake(Step::Shards | Step::Slots) => self.net.topology.refreshed(),
                // A recovery cut short is done again by the next handshake,
                // which finds the same loss (the node's identity is only
                // updated once a connection is ready).
                Request::Handshake(_)
                | Request::Reload(_)
                | Request::Asking
                | Request::Wait
                | Request::Probe
                | Request::Reassert(_)
                | Request::ReleaseAgain(..) => {}
                // Owed until written on a connection that answers it.
                Request::Leave(keys, lease, until) => self.waiters.leave_again(keys, lease, until),
            }
        }
        if !wanted {
            // A node that owns no slot any more: what waited for it goes
            // where its slot lives now.
            for op in std::mem::take(&mut self.net.nodes[node].waiting) {
                self.route_op(now, op);
            }
        }
        if self.net.topology.is_cluster() {
            // A node that failed may have failed over.
            self.refresh_topology(now);
        }
    }

    /// An attempt to open `node`'s connection failed. Before any slot table
    /// is known, the next seed is tried at once; only when every seed has
    /// failed is the failure reported (and the client backs off).
    fn connect_failed(&mut self, now: Instant, node: usize, id: ConnectionId, error: ConnectionError) {
        let waiting = std::mem::take(&mut self.net.nodes[node].waiting);
        if let Some(seed) = self.net.topology.next_seed(node) {
            self.net.nodes[node].reconnect.forget();
            self.net.nodes[seed].waiting.extend(waiting);
            if self.net.nodes[seed].connection.is_none() {
                self.start_connect(now, seed);
            }
            return;
        }
        self.net.nodes[node].reconnect.failed(now, error.clone());
        self.out.event(Event::ConnectFailed(id, error.clone()));
        // Nothing was sent for them; the server is not there for now.
        for op in waiting {
            self.fail(now, op.call().request, Unavailable::NotConnected(error.clone()));
        }
        if self.net.topology.is_cluster() {
            for op in self.net.deferred.take_awaiting_topology() {
                if self.net.topology.known() {
                    self.route_op(now, op);
                } else {
                    self.fail(now, op.call().request, Unavailable::NotConnected(error.clone()));
                }
            }
            self.refresh_topology(now);
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
        if self.releases.due(now).next().is_some() {
            // Releases due on a node nobody connects to (a primary that
            // took over their slot): connect it.
            let idle: Vec<usize> = self
                .releases
                .due(now)
                .filter_map(|job| self.net.topology.node_for(job.keys.slot(), job.ask))
                .filter(|node| {
                    self.net.nodes[*node].connection.is_none() && !self.net.nodes[*node].reconnect.backing_off()
                })
                .collect();
            for node in idle {
                self.start_connect(now, node);
            }
            let ready: Vec<bool> = self.net.nodes.iter().map(super::node::Node::is_ready).collect();
            let topology = &self.net.topology;
            let sendable = |job: &ReleaseJob| {
                topology
                    .node_for(job.keys.slot(), job.ask)
                    .is_some_and(|node| ready[node])
            };
            for job in self.releases.take_due(now, sendable) {
                self.submit_release(now, job);
            }
        }
    }

    /// Takes `op` for `node`'s ready connection (see
    /// [`Connection::stage_call`]); `poll_transmit` writes it. While `node`
    /// holds grants after a data loss, an acquire is refused at once.
    pub(super) fn send_call(&mut self, now: Instant, node: usize, op: Op) {
        if matches!(op, Op::Acquire(_)) && self.net.holding(now, node) {
            self.out.stats.recovering += 1;
            return self.fail(now, op.call().request, Unavailable::Recovering);
        }
        let no_deadline = self.bug_skip_stale_check();
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("sent on the current connection");
        if conn.stage_call(now, op, &self.config, no_deadline) {
            let valid_until = now + self.config.request_liveness;
            self.send(node, Request::Handshake(Step::Time), valid_until);
        }
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
            self.queue_release(job);
        }
    }

    /// Queues a `SCRIPT LOAD` on `node`'s ready connection, once per script at a time.
    pub(super) fn reload(&mut self, now: Instant, node: usize, kind: ScriptKind) {
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("replies come from the current connection");
        if !conn.start_reload(kind) {
            return;
        }
        self.send(node, Request::Reload(kind), now + self.config.request_liveness);
    }
}
