//! The connection lifecycle: open, retire, and what is written on it.

use std::time::{Duration, Instant};

use super::releases::Ran;
use super::request::{AcquireOp, Op, ReleaseJob, Request, Step};
use super::{Client, Connection, RequestId};
use crate::event::{Action, ConnectionError, ConnectionId, Event, Unavailable};
use crate::scripts::{Eval, ScriptKind, MAX_BATCH, MAX_RELEASE_BATCH};

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

    /// Takes `op` for `node`'s ready connection; `poll_transmit` writes it.
    /// It is valid for its liveness budget: its reply is due by then, and a
    /// script that runs later refuses it.
    pub(super) fn send_call(&mut self, now: Instant, node: usize, mut op: Op) {
        if matches!(op, Op::Acquire(_)) && self.net.holding(now, node) {
            self.out.stats.recovering += 1;
            return self.fail(now, op.call().request, Unavailable::Recovering);
        }
        let call = op.call_mut();
        call.sent_at.get_or_insert(now);
        let no_deadline = self.bug_skip_stale_check();
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("sent on the current connection");
        let valid_until = now + self.config.request_liveness;
        // Without a reading (never, on a ready connection) the request is
        // written as already stale: refused, never over-admitted. Each node
        // has its own clock: a redirected request is dated again.
        let (valid_until_ms, margin, expiry_ms) = conn.clock.map_or((0, Duration::ZERO, 1), |clock| {
            let ttl = u64::try_from(self.config.lease_ttl.as_millis()).unwrap_or(u64::MAX);
            (
                clock.server_ms(valid_until),
                clock.margin(valid_until),
                clock.upper_ms(now).saturating_add(ttl),
            )
        });
        if let Op::Acquire(AcquireOp { wait: Some(wait), .. }) = &mut op {
            wait.patience_ms = wait.until.saturating_duration_since(now).as_millis() as u64;
        }
        let call = op.call_mut();
        call.valid_until_ms = valid_until_ms;
        call.expiry_ms = expiry_ms;
        if no_deadline {
            // The injected bug: requests that may act a day late, on leases
            // that live a day.
            call.valid_until_ms = valid_until_ms.saturating_add(86_400_000);
            call.expiry_ms = call.valid_until_ms;
        }
        call.runnable_until = Some(valid_until + margin);
        // Read the server's clock again once the last reading has aged, so
        // that drift never builds up: only while requests flow (an idle
        // client needs no clock), one `TIME` at a time, ahead of this request.
        let resync = conn.time_asked.is_none() && conn.clock.is_some_and(|clock| clock.stale(now));
        if resync {
            conn.time_asked = Some(now);
        }
        conn.stage(op, now);
        if resync {
            self.send(node, Request::Handshake(Step::Time), valid_until);
        }
    }

    /// Forgets a request that has not been written yet (its caller is gone):
    /// nothing reached Redis, so nothing needs compensating.
    pub(super) fn unsend(&mut self, request: RequestId) {
        if self.net.deferred.remove(request) {
            return;
        }
        for node in &mut self.net.nodes {
            let before = node.waiting.len();
            node.waiting.retain(|op| op.call().request != request);
            if node.waiting.len() != before || node.connection.as_mut().is_some_and(|c| c.unstage(request)) {
                return;
            }
        }
    }

    /// Writes what was staged since the last call, releases first: a release
    /// only frees a slot, so one staged before an acquire of its subject must
    /// reach Redis before it (a caller that drops a permit and acquires again
    /// at once gets the slot it just gave back), and one staged after it
    /// loses nothing by going first.
    pub(super) fn write_staged(&mut self) {
        self.write_staged_releases();
        for node in 0..self.net.nodes.len() {
            self.write_staged_acquires(node);
        }
    }

    /// Writes `node`'s staged acquires: those of one subject and limit
    /// together, as one `ACQUIRE_MANY` of up to `MAX_BATCH`; renewals, `EVAL`
    /// fallbacks and `ASK` targets one by one. Order within a subject is kept.
    fn write_staged_acquires(&mut self, node: usize) {
        // Three reply items per acquire, and the units reclaimed.
        let most = MAX_BATCH
            .min(self.config.reply_limits.max_array_len.saturating_sub(1) / 3)
            .max(1);
        let Some(conn) = self.net.nodes[node].connection.as_mut() else {
            return;
        };
        let staged = conn.take_staged();
        if staged.is_empty() {
            return;
        }
        let mut latest = None;
        let mut acquires = false;
        for (group, oldest) in acquire_groups(staged, most) {
            let deadline = oldest + self.config.request_liveness;
            let mut request = group.into_request();
            acquires |= matches!(request, Request::Acquire(_) | Request::AcquireMany(_));
            let asked = request.take_ask();
            self.send_asking_if(asked, node, request, deadline);
            latest = latest.max(Some(deadline));
        }
        // One `WAIT` covers every write before it on this connection.
        if let (Some(acks), Some(deadline), true) = (self.config.replica_acks, latest, acquires) {
            self.send(node, Request::Wait, deadline + acks.timeout);
        }
    }

    /// Writes the staged releases: those of one subject as one `ZREM` of up
    /// to `MAX_RELEASE_BATCH` ids, on the node that owns the subject. One
    /// whose node is not ready waits for it.
    fn write_staged_releases(&mut self) {
        let staged = self.releases.take_staged();
        if staged.is_empty() {
            return;
        }
        let same_subject =
            |a: &ReleaseJob, b: &ReleaseJob| a.keys.leases() == b.keys.leases() && a.ask == b.ask && a.kind == b.kind;
        for (mut jobs, oldest) in batches(staged, MAX_RELEASE_BATCH, same_subject) {
            let node = self
                .net
                .topology
                .node_for(jobs[0].keys.slot(), jobs[0].ask)
                .filter(|node| self.net.nodes[*node].is_ready());
            let Some(node) = node else {
                for job in jobs {
                    self.queue_release(job);
                }
                continue;
            };
            let deadline = oldest + self.config.request_liveness;
            // A batch shares one `ask` (see `same_subject`): used up here.
            let asked = jobs[0].ask.is_some();
            jobs.iter_mut().for_each(|job| job.ask = None);
            let request = match jobs.len() {
                1 => Request::Release(jobs.pop().expect("one")),
                _ => Request::ReleaseMany(jobs),
            };
            self.send_asking_if(asked, node, request, deadline);
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

/// Staged acquires and renewals as they go on the wire: a plain acquire (no
/// `EVAL` fallback) joins the first group of its subject and limit with room
/// (at most `most`); renewals and fallbacks go alone. Staging order is kept
/// within a group; each group comes with when its oldest member was staged.
fn acquire_groups(staged: Vec<(Op, Instant)>, most: usize) -> Vec<(Group, Instant)> {
    let mut groups: Vec<(Group, Instant)> = Vec::new();
    for (op, at) in staged {
        match op {
            Op::Acquire(acquire)
                if acquire.call.eval == Eval::Sha && acquire.call.ask.is_none() && acquire.wait.is_none() =>
            {
                let same = |ops: &Vec<AcquireOp>| {
                    ops.len() < most
                        && ops[0].limit == acquire.limit
                        && ops[0].call.keys.leases() == acquire.call.keys.leases()
                };
                match groups.iter_mut().find_map(|(group, oldest)| match group {
                    Group::Acquires(ops) if same(ops) => Some((ops, oldest)),
                    _ => None,
                }) {
                    Some((ops, oldest)) => {
                        ops.push(acquire);
                        *oldest = (*oldest).min(at);
                    }
                    None => groups.push((Group::Acquires(vec![acquire]), at)),
                }
            }
            op => groups.push((Group::Alone(Box::new(op)), at)),
        }
    }
    groups
}

/// Acquires and renewals that go out in one request.
enum Group {
    /// Plain acquires of one subject and limit: one `ACQUIRE_MANY` when
    /// there are two or more.
    Acquires(Vec<AcquireOp>),
    /// A renewal, an acquire sent as `EVAL` text, one sent to an `ASK`
    /// target, or a waiting one. (Boxed: an `Op` is far larger than a `Vec`.)
    Alone(Box<Op>),
}

impl Group {
    fn into_request(self) -> Request {
        match self {
            Group::Acquires(mut ops) if ops.len() == 1 => Request::Acquire(ops.pop().expect("one")),
            Group::Acquires(ops) => Request::AcquireMany(ops),
            Group::Alone(op) => (*op).into_request(),
        }
    }
}

/// `staged` in groups of at most `most` whose first member is `together` with
/// every other, each with when its oldest member was staged. Staging order is
/// kept within a group.
fn batches<T>(staged: Vec<(T, Instant)>, most: usize, together: impl Fn(&T, &T) -> bool) -> Vec<(Vec<T>, Instant)> {
    let mut groups: Vec<(Vec<T>, Instant)> = Vec::new();
    for (item, at) in staged {
        match groups
            .iter_mut()
            .find(|(group, _)| group.len() < most && together(&group[0], &item))
        {
            Some((group, oldest)) => {
                group.push(item);
                *oldest = (*oldest).min(at);
            }
            None => groups.push((vec![item], at)),
        }
    }
    groups
}
