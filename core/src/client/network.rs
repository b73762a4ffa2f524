//! The servers as the client sees them: every node heard of, which node
//! serves which slot, the requests waiting for a slot table or their
//! `TRYAGAIN` time, and each node's wake-up connection kept in line with
//! the channels waited on.

use std::time::Instant;

use bytes::Bytes;

use super::connection::Phase;
use super::deferred::Deferred;
use super::effect::Effect;
use super::names::Names;
use super::node::Node;
use super::outbox::Outbox;
use super::reconnect::Backoff;
use super::request::{Op, ReleaseJob, Request, Step};
use super::sentinel::Sentinels;
use super::topology::{Route, Topology};
use super::waiters::Waiters;
use crate::address::Endpoint;
use crate::config::{Config, Servers};
use crate::event::{Action, ConnectionError, ConnectionId, Transmit, Unavailable};
use crate::resp::Frame;

#[derive(Debug)]
pub(super) struct Network {
    /// The one server, or the cluster's seeds and every primary heard of
    /// since. Never removed, so an index names one node for the client's life.
    pub(super) nodes: Vec<Node>,
    /// Which node serves which subject.
    pub(super) topology: Topology,
    /// Acquires and renewals that a redirect sent back: to be routed again
    /// at their time, or once a slot table is known.
    pub(super) deferred: Deferred,
    /// How a node heard of is given its reconnect schedule.
    pub(super) backoff: Backoff,
    /// Redis Sentinel: the watch that names the primary (node 0).
    pub(super) sentinels: Option<Sentinels>,
}

impl Network {
    /// The one server, or a cluster's seeds (the same seed given twice is
    /// one node), each with its reconnect schedule.
    pub(super) fn new(servers: &Servers, backoff: Backoff) -> Self {
        let (endpoints, topology) = match servers {
            Servers::Standalone(endpoint) => (std::slice::from_ref(endpoint), Topology::standalone()),
            Servers::Cluster { seeds, tls } => (&seeds[..], Topology::cluster(0, *tls)),
            // No node until the sentinels name the primary.
            Servers::Sentinel { .. } => (&[][..], Topology::sentinel()),
        };
        let mut net = Self {
            nodes: Vec::new(),
            topology,
            deferred: Deferred::default(),
            backoff,
            sentinels: None,
        };
        for endpoint in endpoints {
            net.node_at(endpoint);
        }
        if let Servers::Cluster { tls, .. } = servers {
            net.topology = Topology::cluster(net.nodes.len(), *tls);
        }
        net
    }

    /// The node whose current connection is `connection`.
    pub(super) fn node_of(&self, connection: ConnectionId) -> Option<usize> {
        self.nodes.iter().position(|node| node.has(connection))
    }

    /// Acquires, renewals and inspections waiting for a connection, a slot
    /// table or their reply.
    pub(super) fn calls_in_flight(&self) -> usize {
        self.nodes.iter().map(Node::in_flight).sum::<usize>() + self.deferred.len()
    }

    /// Releases and compensations written and not answered yet.
    pub(super) fn releases_in_flight(&self) -> usize {
        let pending = self.nodes.iter().filter_map(|node| node.connection.as_ref());
        pending
            .flat_map(|conn| conn.pipeline.pending())
            .map(|request| match request {
                Request::Release(_) | Request::Compensate(..) => 1,
                Request::ReleaseMany(jobs) | Request::ReleaseToWaiters(jobs) => jobs.len(),
                _ => 0,
            })
            .sum()
    }

    /// What a release still does for others once its lease is back: queue
    /// checks and hand-overs (the waiters of other replicas wait on them),
    /// and `LEAVE`s, written or not yet answered.
    pub(super) fn follow_ups_in_flight(&self) -> usize {
        let pending = self.nodes.iter().filter_map(|node| node.connection.as_ref());
        pending
            .flat_map(|conn| conn.pipeline.pending())
            .filter(|request| {
                matches!(
                    request,
                    Request::QueueCheck(_) | Request::HandOver(_) | Request::Leave(..)
                )
            })
            .count()
    }

    /// The next bytes to write: a node's requests (not before its socket is
    /// open), else a wake-up connection's.
    pub(super) fn next_transmit(&mut self) -> Option<Transmit> {
        let requests = self.nodes.iter_mut().find_map(|node| {
            let conn = node.connection.as_mut()?;
            if matches!(conn.phase, Phase::Connecting { .. }) {
                return None;
            }
            let data = conn.pipeline.take_outgoing()?;
            Some(Transmit {
                connection: conn.id(),
                data,
            })
        });
        let requests = requests.or_else(|| {
            self.nodes.iter_mut().find_map(|node| {
                let (connection, data) = node.wake_ups.take_outgoing()?;
                Some(Transmit { connection, data })
            })
        });
        requests.or_else(|| {
            let (connection, data) = self.sentinels.as_mut()?.take_outgoing()?;
            Some(Transmit { connection, data })
        })
    }

    /// The next reply on `node`'s connection `connection`, while that is
    /// still its current one: the request it answers and the reply, or
    /// why the stream cannot be read any further.
    pub(super) fn next_reply(
        &mut self,
        now: Instant,
        node: usize,
        connection: ConnectionId,
    ) -> Option<Result<(Request, Frame), ConnectionError>> {
        let conn = self.nodes[node].connection.as_mut().filter(|c| c.id() == connection)?;
        match conn.pipeline.next_reply() {
            Ok(Some(reply)) => {
                conn.answered(&reply.0);
                conn.heard(now);
                Some(Ok(reply))
            }
            Ok(None) => None,
            Err(error) => Some(Err(error.into())),
        }
    }

    /// `node`'s socket is open: the handshake's steps to write and the
    /// deadline they share (none if it was not opening).
    pub(super) fn start_handshake(&mut self, now: Instant, node: usize, config: &Config) -> (Vec<Step>, Instant) {
        let cluster = self.topology.is_cluster();
        let conn = self.nodes[node].connection.as_mut().expect("a current connection");
        let steps = conn.start_handshake(now, config, cluster);
        match conn.phase {
            Phase::Handshaking { deadline, .. } => (steps, deadline),
            _ => (Vec::new(), now),
        }
    }

    /// The node whose wake-up connection is `connection`.
    pub(super) fn subscriber_of(&self, connection: ConnectionId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|node| node.wake_ups.id() == Some(connection))
    }

    /// The nodes that would serve `jobs` and that nobody connects to (a
    /// primary that took over their slot, say), each once per job.
    pub(super) fn unconnected_for<'a>(&self, jobs: impl Iterator<Item = &'a ReleaseJob>) -> Vec<usize> {
        jobs.filter_map(|job| self.topology.node_for(job.keys.slot(), job.ask))
            .filter(|node| {
                let node = &self.nodes[*node];
                node.connection.is_none() && !node.reconnect.backing_off()
            })
            .collect()
    }

    /// The node that serves `slot`, if its connection is ready.
    pub(super) fn ready_for(&self, slot: u16) -> Option<usize> {
        match self.topology.route(slot) {
            Route::Node(node) => Some(node).filter(|node| self.nodes[*node].is_ready()),
            Route::AwaitTopology | Route::NoOwner => None,
        }
    }

    /// Every current data connection: its id, where it goes, whether it is ready.
    pub(super) fn connections(&self) -> impl Iterator<Item = (ConnectionId, &Endpoint, bool)> + '_ {
        self.nodes.iter().filter_map(|node| {
            let conn = node.connection.as_ref()?;
            Some((conn.id(), &node.endpoint, conn.is_ready()))
        })
    }

    /// Where `connection` goes (a node's, or the sentinels' watch), while it is current.
    pub(super) fn endpoint(&self, connection: ConnectionId) -> Option<&Endpoint> {
        let node = self.nodes.iter().find(|node| node.has(connection));
        node.map(|node| &node.endpoint).or_else(|| {
            let sentinels = self.sentinels.as_ref()?;
            sentinels.endpoint().filter(|_| sentinels.id() == Some(connection))
        })
    }

    /// Whether `job` can go now: the node that serves it is ready.
    pub(super) fn can_send(&self, job: &ReleaseJob) -> bool {
        self.topology
            .node_for(job.keys.slot(), job.ask)
            .is_some_and(|node| self.nodes[node].is_ready())
    }

    /// Where `op` goes: the node that serves it (an `ASK` target once,
    /// else its slot's owner). Returned when that node's connection is
    /// ready, for the client to write it; else it waits for the handshake,
    /// for a connection (opened on first use) or for a slot table, or it
    /// fails at once (no owner; a node backing off), by effects.
    pub(super) fn route(
        &mut self,
        now: Instant,
        op: Op,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) -> Option<(usize, Op)> {
        let route = match op.call().ask {
            Some(node) => Route::Node(node),
            None => self.topology.route(op.call().keys.slot()),
        };
        let node = match route {
            Route::Node(node) => node,
            Route::AwaitTopology => {
                self.deferred.until_topology(op);
                return None;
            }
            Route::NoOwner => {
                fx.push(Effect::RefreshTopology);
                fx.push(Effect::Fail(op.call().request, Unavailable::NoPrimary));
                return None;
            }
        };
        let target = &mut self.nodes[node];
        let promoted = target.connection.as_ref().is_some_and(|c| c.replica.is_some());
        match target.connection.as_ref().map(|c| c.phase) {
            // Handshaken while its server was a replica (a cluster seed, say),
            // and now routed lease requests: a failover promoted it. That
            // handshake checked nothing for lost lease data and wrote nothing
            // back; a fresh one does both before the request goes.
            Some(Phase::Ready) if promoted => {
                target.waiting.push_back(op);
                self.retire(now, node, ConnectionError::Promoted, out, fx);
                fx.push(Effect::Connect(node));
            }
            Some(Phase::Ready) => return Some((node, op)),
            Some(_) => target.waiting.push_back(op),
            // Backing off after failed connection attempts: say so at once
            // rather than make every caller wait out its timeout.
            None if target.reconnect.backing_off() => {
                let error = target.reconnect.last_error().clone();
                fx.push(Effect::RefreshTopology);
                fx.push(Effect::Fail(op.call().request, Unavailable::NotConnected(error)));
            }
            // A primary not connected yet: connect on first use.
            None => {
                target.waiting.push_back(op);
                fx.push(Effect::Connect(node));
            }
        }
        None
    }

    /// Every wake-up connection's deadline that passed: one that did not
    /// answer in time is closed, to be opened again after `retry_after`.
    pub(super) fn wake_ups_timeout(&mut self, now: Instant, retry_after: std::time::Duration, out: &mut Outbox) {
        for node in &mut self.nodes {
            out.actions(node.wake_ups.handle_timeout(now, retry_after).map(Action::Close));
        }
    }

    /// `node`'s wake-up connection is open: it authenticates and subscribes.
    pub(super) fn subscriber_connected(
        &mut self,
        now: Instant,
        node: usize,
        waiters: &mut Waiters,
        names: &mut Names,
        config: &Config,
        out: &mut Outbox,
    ) {
        self.nodes[node].wake_ups.connected(config.credentials.as_ref());
        self.sync_subscriptions(now, waiters, names, config, out);
    }

    /// Brings every node's wake-up connection in line with the channels
    /// `waiters` wait on: opened where needed (its subscriptions are sent
    /// once it is open), subscribed to new channels, unsubscribed from old
    /// ones.
    pub(super) fn sync_subscriptions(
        &mut self,
        now: Instant,
        waiters: &mut Waiters,
        names: &mut Names,
        config: &Config,
        out: &mut Outbox,
    ) {
        let changed = !waiters.take_changed().is_empty();
        let mut dirty = false;
        for node in &mut self.nodes {
            dirty |= node.wake_ups.take_dirty();
        }
        if !changed && !dirty {
            return;
        }
        let mut wanted: Vec<Vec<Bytes>> = vec![Vec::new(); self.nodes.len()];
        for (channel, keys) in waiters.channels() {
            if let Route::Node(node) = self.topology.route(keys.slot()) {
                wanted[node].push(channel.clone());
            }
        }
        for (target, mut wanted) in self.nodes.iter_mut().zip(wanted) {
            wanted.sort();
            if target.wake_ups.should_open(now, &wanted) {
                let id = names.connection();
                let until = now + config.connect_timeout;
                target.wake_ups.opening(id, until, config.reply_limits);
                out.action(Action::Connect(id, target.endpoint.clone()));
            } else {
                target.wake_ups.subscribe(&wanted);
            }
        }
    }
}
