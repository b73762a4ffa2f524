//! A node's connection opened and given up: what a retired or failed
//! connection leaves behind becomes effects (callers told, acquires
//! compensated, releases retried, requests routed elsewhere).

use std::time::Instant;

use super::connection::Connection;
use super::effect::{ambiguous, Effect};
use super::network::Network;
use super::outbox::Outbox;
use super::request::{Op, Request, Step};
use crate::config::Config;
use crate::event::{Action, ConnectionError, ConnectionId, Event, SentinelError, Unavailable};
use crate::resp::ReplyLimits;

impl Network {
    /// Opens a connection to `node` (named by `id`), unless it has one:
    /// the socket to open.
    pub(super) fn connect(
        &mut self,
        node: usize,
        id: impl FnOnce() -> ConnectionId,
        deadline: Instant,
        limits: ReplyLimits,
    ) -> Option<Action> {
        let target = &mut self.nodes[node];
        if target.connection.is_some() {
            return None; // one generation at a time
        }
        let id = id();
        target.reconnect.attempting();
        target.connection = Some(Connection::new(id, deadline, limits));
        Some(Action::Connect(id, target.endpoint.clone()))
    }

    /// `node`'s connection timers at `now`: an overdue connection is
    /// retired; an idle one is probed (only while `probing`); a reconnect
    /// attempt that is due starts, or is forgotten if nothing needs the node.
    pub(super) fn expire(
        &mut self,
        now: Instant,
        node: usize,
        config: &Config,
        probing: bool,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        let target = &mut self.nodes[node];
        let Some(conn) = &target.connection else {
            if target.reconnect.due(now) {
                match self.topology.wanted(node) {
                    true => fx.push(Effect::Connect(node)),
                    false => target.reconnect.forget(),
                }
            }
            return;
        };
        if let Some(error) = conn.overdue(now) {
            return self.retire(now, node, error, out, fx);
        }
        if probing && conn.probe_at(config.idle_probe).is_some_and(|at| at <= now) {
            fx.push(Effect::Send(node, Request::Probe, now + config.request_liveness));
        }
    }

    /// `node`'s handshake is done (and any recovery written): requests may
    /// go, the server's identity is remembered and the backoff starts over.
    pub(super) fn make_ready(&mut self, now: Instant, node: usize, out: &mut Outbox) {
        let target = &mut self.nodes[node];
        let conn = target.connection.as_mut().expect("a handshake just ended");
        conn.make_ready(now);
        target.identity = Some(conn.identity.clone());
        if let Some(sentinels) = self.sentinels.as_mut() {
            sentinels.primary_confirmed();
        }
        target.reconnect.succeeded();
        out.event(Event::Connected(conn.id()));
    }

    /// Gives up `node`'s current connection: a failed attempt backs off
    /// before the next; a ready connection that is retired is replaced at
    /// once (in a cluster, only while the node still owns slots). Other
    /// nodes' requests are untouched.
    pub(super) fn retire(
        &mut self,
        now: Instant,
        node: usize,
        error: ConnectionError,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        let Some(mut conn) = self.nodes[node].connection.take() else {
            return;
        };
        out.action(Action::Close(conn.id()));
        if !conn.is_ready() {
            return self.connect_failed(now, node, conn.id(), error, out, fx);
        }
        out.stats.connections_replaced += 1;
        out.event(Event::Retired(conn.id(), error.clone()));
        // Never written: they wait for the next connection like any other.
        for (op, _) in conn.take_staged().into_iter().rev() {
            self.nodes[node].waiting.push_front(op);
        }
        // The replacement first: what the old one leaves behind (releases
        // to retry, compensations) waits for it.
        let wanted = self.topology.wanted(node);
        if wanted {
            fx.push(Effect::Connect(node));
        }
        // Grants read but not confirmed replicated: they exist, unconfirmed.
        for grant in std::mem::take(&mut conn.unreplicated) {
            fx.push(Effect::Fail(
                grant.request(),
                Unavailable::ConnectionLost(error.clone()),
            ));
            grant.given_back(fx);
        }
        for request in conn.pipeline.drain() {
            match request {
                Request::Acquire(op) => ambiguous(fx, Op::Acquire(op), &error),
                Request::AcquireAll(bundle) => ambiguous(fx, Op::AcquireAll(bundle), &error),
                Request::AcquireMany(ops) | Request::AcquireAcross(ops) => {
                    for op in ops {
                        ambiguous(fx, Op::Acquire(op), &error);
                    }
                }
                Request::Renew(op) => ambiguous(fx, Op::Renew(op), &error),
                Request::Inspect(op) => ambiguous(fx, Op::Inspect(op), &error),
                Request::Release(job) | Request::Compensate(job, _) => fx.push(Effect::RetryRelease(job)),
                Request::ReleaseMany(jobs) | Request::ReleaseToWaiters(jobs) => fx.extend(jobs.into_iter().map(Effect::RetryRelease)),
                Request::Handshake(Step::Shards | Step::Slots) => self.topology.refreshed(),
                // A recovery cut short is done again by the next handshake,
                // which finds the same loss (the node's identity is only
                // updated once a connection is ready).
                Request::Handshake(_)
                | Request::Reload(_)
                | Request::Asking
                | Request::Wait
                | Request::Probe
                | Request::Reassert(_)
                | Request::ReleaseAgain(..)
                // Best effort: the waiters check on their own.
                | Request::QueueCheck(_)
                | Request::HandOver(_) => {}
                // Owed until written on a connection that answers it.
                Request::Leave(keys, lease, until) => fx.push(Effect::LeaveAgain(keys, lease, until)),
            }
        }
        if !wanted {
            // A node that owns no slot any more: what waited for it goes
            // where its slot lives now.
            fx.extend(
                std::mem::take(&mut self.nodes[node].waiting)
                    .into_iter()
                    .map(Effect::Route),
            );
        }
        // A node that failed may have failed over: ask the cluster, or the
        // sentinels, again. Not after a switch the sentinels announced: the
        // next sentinel may not have heard of it yet, and its older answer
        // would move the client back.
        let switched = matches!(error, ConnectionError::Switched);
        if self.topology.is_cluster() || (self.topology.is_sentinel() && !switched) {
            fx.push(Effect::RefreshTopology);
        }
    }

    /// An attempt to open `node`'s connection failed. Before any slot table
    /// is known, the next seed is tried at once; only when every seed has
    /// failed is the failure reported (and the client backs off).
    fn connect_failed(
        &mut self,
        now: Instant,
        node: usize,
        id: ConnectionId,
        error: ConnectionError,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        if let (ConnectionError::Replica(role), Some(sentinels)) = (&error, self.sentinels.as_mut()) {
            // A sentinel named a replica (a stale answer): what waits for
            // the primary goes on waiting while the next sentinel is asked.
            // Only when every sentinel has done so in a row is it a failure.
            if !sentinels.named_replica() {
                let node_endpoint = self.nodes[node].endpoint.to_string();
                let stale = SentinelError::NamedReplica {
                    node: node_endpoint,
                    role: role.clone(),
                };
                out.stats.sentinel_errors += 1;
                out.event(Event::SentinelFailed(id, stale));
                // No primary until a sentinel names one again: node 0 is
                // not reconnected on its own (a refusal counts a sentinel's
                // answer, not a retry), and what waits for it, or comes
                // meanwhile, waits for that answer.
                self.topology.primary_unnamed();
                self.nodes[node].reconnect.forget();
                for op in std::mem::take(&mut self.nodes[node].waiting) {
                    self.deferred.until_topology(op);
                }
                fx.push(Effect::RefreshTopology);
                return;
            }
        }
        let waiting = std::mem::take(&mut self.nodes[node].waiting);
        if let Some(seed) = self.topology.next_seed(node) {
            self.nodes[node].reconnect.forget();
            self.nodes[seed].waiting.extend(waiting);
            fx.push(Effect::Connect(seed));
            return;
        }
        self.nodes[node].reconnect.failed(now, error.clone());
        out.event(Event::ConnectFailed(id, error.clone()));
        // Nothing was sent for them; the server is not there for now.
        let not_connected = |op: Op| Effect::Fail(op.call().request, Unavailable::NotConnected(error.clone()));
        fx.extend(waiting.into_iter().map(not_connected));
        if self.topology.is_cluster() {
            for op in self.deferred.take_awaiting_topology() {
                fx.push(match self.topology.known() {
                    true => Effect::Route(op),
                    false => not_connected(op),
                });
            }
        }
        // A cluster's seed or owner, or the node the sentinels named, is not
        // there (or, behind Sentinel, not a primary): ask again.
        if self.topology.is_cluster() || self.topology.is_sentinel() {
            fx.push(Effect::RefreshTopology);
        }
    }
}
