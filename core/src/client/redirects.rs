//! Redis Cluster's answers that send a command elsewhere: `MOVED`, `ASK`,
//! `TRYAGAIN`, and `READONLY` from a demoted primary. Each means the script
//! did not run, so none is ambiguous: the request is routed again, never
//! compensated, and the connection that said it stays (it is healthy; it
//! just does not own the slot). Also here: reading the slot table and
//! choosing where to read it again. All of it is the network's own state;
//! what the client is to do comes back as effects.

use std::time::{Duration, Instant};

use super::effect::{Effect, Redirected};
use super::error_class::Redirect;
use super::network::Network;
use super::node::Node;
use super::request::{Op, ReleaseJob, Request, Step};
use crate::address::Endpoint;
use crate::cluster::{parse_redirect, parse_shards, parse_slots, Shard};
use crate::event::{ConnectionError, Stats, Unavailable};
use crate::resp::Frame;
use crate::server_error::ServerError;

/// `MOVED` and `ASK` redirects one request may follow in a row; past that
/// it fails (a cluster that bounces a slot back and forth is not serving
/// it). A `TRYAGAIN` wait starts the count again: a request that waits
/// between tries cannot spin, and a migration may take a few rounds of
/// `ASK` and `TRYAGAIN` (our scripts declare two keys), which the caller's
/// timeout bounds.
const MAX_REDIRECTS: u8 = 5;

/// How long a `TRYAGAIN` (or a demoted primary) holds a request back.
const TRY_AGAIN_DELAY: Duration = Duration::from_millis(20);

/// What a request sent back by a redirect does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Go again: to `ask` for this one attempt (an `ASK`), else to the
    /// slot's owner (a `MOVED` updated it).
    Route { ask: Option<usize> },
    /// A slot migrating (`TRYAGAIN`) or a primary demoted (`READONLY`):
    /// try again a little later.
    Later,
    /// Too many redirects in a row, or one that names no node.
    GiveUp,
}

/// What a `CLUSTER SHARDS` (or `CLUSTER SLOTS`) reply came to.
#[derive(Debug)]
enum Table {
    /// Redis before 7 has no `CLUSTER SHARDS`: ask `CLUSTER SLOTS` (at a
    /// handshake, in place of this step).
    AskOlder,
    /// A table was read and learnt: these requests waited for one.
    Learnt(Vec<Op>),
    /// Nothing to learn (a refresh that failed keeps the table we have; a
    /// node that serves no slot yet while the cluster forms).
    Kept,
}

impl Network {
    /// The node at `endpoint`, added if new.
    pub(super) fn node_at(&mut self, endpoint: &Endpoint) -> usize {
        if let Some(node) = self.nodes.iter().position(|node| node.endpoint == *endpoint) {
            return node;
        }
        self.nodes
            .push(Node::new(endpoint.clone(), self.backoff.for_node(self.nodes.len())));
        self.nodes.len() - 1
    }

    /// `node` answered a request with `redirect` (`message` is the error):
    /// counts it against the request's `redirects` in a row, follows a
    /// `MOVED` or `ASK` (the node it names is added if new; a `MOVED` also
    /// moves the slot) and says what the request does next, and whether the
    /// slot table should be read again now (after a `MOVED` or a `READONLY`).
    pub(super) fn redirected(
        &mut self,
        node: usize,
        redirect: Redirect,
        message: &str,
        redirects: &mut u8,
        stats: &mut Stats,
    ) -> (Next, bool) {
        *redirects = match redirect {
            Redirect::Moved | Redirect::Ask => *redirects + 1,
            Redirect::TryAgain | Redirect::ReadOnly => 0,
        };
        if *redirects > MAX_REDIRECTS {
            return (Next::GiveUp, false);
        }
        match redirect {
            Redirect::Moved | Redirect::Ask => {
                let Some((slot, endpoint)) = parse_redirect(message, &self.nodes[node].endpoint) else {
                    return (Next::GiveUp, false);
                };
                let target = self.node_at(&endpoint);
                if redirect == Redirect::Moved {
                    stats.moved += 1;
                    self.topology.moved(slot, target);
                    return (Next::Route { ask: None }, true);
                }
                stats.asked += 1;
                (Next::Route { ask: Some(target) }, false)
            }
            Redirect::TryAgain => {
                stats.try_again += 1;
                (Next::Later, false)
            }
            Redirect::ReadOnly => (Next::Later, true),
        }
    }

    /// An acquire, renewal or inspection `node` redirected: routed again
    /// (to the node an `ASK` names, for one attempt), held back a little,
    /// or failed, as [`Network::redirected`] says.
    pub(super) fn redirect_op(
        &mut self,
        now: Instant,
        redirected: Redirected<Op>,
        stats: &mut Stats,
        fx: &mut Vec<Effect>,
    ) {
        let Redirected { request: mut op, .. } = redirected;
        op.call_mut().ask = None;
        let (node, redirect, message) = (redirected.node, redirected.redirect, &redirected.message);
        let next = self.follow(node, redirect, message, &mut op.call_mut().redirects, stats, fx);
        match next {
            Next::Route { ask } => {
                op.call_mut().ask = ask;
                fx.push(Effect::Route(op));
            }
            Next::Later => self.deferred.until(now + TRY_AGAIN_DELAY, op),
            Next::GiveUp => fx.push(Effect::Fail(
                op.call().request,
                Unavailable::Server(ServerError::new(message)),
            )),
        }
    }

    /// A release or compensation `node` redirected: sent again where the
    /// slot lives (a tenant's slot may move while its leases are held), or,
    /// refused unrun while the slot moves (`TRYAGAIN`), again shortly.
    pub(super) fn redirect_release(
        &mut self,
        redirected: Redirected<ReleaseJob>,
        stats: &mut Stats,
        fx: &mut Vec<Effect>,
    ) {
        let Redirected { request: mut job, .. } = redirected;
        job.ask = None;
        let (node, redirect, message) = (redirected.node, redirected.redirect, &redirected.message);
        let next = self.follow(node, redirect, message, &mut job.redirects, stats, fx);
        fx.push(match next {
            Next::Route { ask } => {
                job.ask = ask;
                Effect::Release(job)
            }
            // See `ReleaseQueue::later`.
            Next::Later if redirect == Redirect::TryAgain => Effect::DeferRelease(job),
            Next::Later | Next::GiveUp => Effect::RetryRelease(job),
        });
    }

    /// Counts and follows `redirect` (see [`Network::redirected`]); a slot
    /// table to read again is asked for as an effect.
    fn follow(
        &mut self,
        node: usize,
        redirect: Redirect,
        message: &str,
        redirects: &mut u8,
        stats: &mut Stats,
        fx: &mut Vec<Effect>,
    ) -> Next {
        let (next, refresh) = self.redirected(node, redirect, message, redirects, stats);
        if refresh {
            fx.push(Effect::RefreshTopology);
        }
        next
    }

    /// Where to read the slot table again now, if a refresh is wanted and
    /// none is on its way or went out too recently (then one is owed for
    /// later): a ready node that owns slots, else any ready node. With no
    /// ready node, none: the next handshake reads the table anyway.
    pub(super) fn refresh_target(&mut self, now: Instant) -> Option<usize> {
        if !self.topology.is_cluster() || !self.topology.want_refresh(now) {
            return None;
        }
        let ready = |node: &usize| self.nodes[*node].is_ready();
        let target = (0..self.nodes.len())
            .find(|node| ready(node) && self.topology.wanted(*node))
            .or_else(|| (0..self.nodes.len()).find(ready));
        if target.is_none() {
            self.topology.refreshed();
        }
        target
    }

    /// The reply to `CLUSTER SHARDS` (or `CLUSTER SLOTS`) from `node`, at
    /// a handshake or a refresh. At a handshake, a table that cannot be
    /// read ends the attempt (the error); a refresh that fails keeps the
    /// table we have.
    fn read_table(&mut self, node: usize, step: Step, frame: &Frame) -> Result<Table, ConnectionError> {
        let handshaking = !self.nodes[node].is_ready();
        let asked = &self.nodes[node].endpoint;
        let parsed = match (frame, step) {
            (Frame::Error(_), Step::Shards) => return Ok(Table::AskOlder),
            (Frame::Error(message), _) => Err(ConnectionError::Handshake(message.to_string())),
            (frame, Step::Shards) => parse_shards(frame, asked, self.topology.tls())
                .map_err(|error| ConnectionError::UnexpectedReply(error.to_string())),
            (frame, _) => {
                parse_slots(frame, asked).map_err(|error| ConnectionError::UnexpectedReply(error.to_string()))
            }
        };
        if !handshaking {
            self.topology.refreshed();
        }
        match parsed {
            Ok(shards) if !shards.is_empty() => Ok(Table::Learnt(self.learn(&shards))),
            // A node that serves no slot yet (the cluster is forming).
            Ok(_) if !handshaking => Ok(Table::Kept),
            Ok(_) => Err(ConnectionError::Handshake("the cluster serves no slot".into())),
            Err(error) if handshaking => Err(error),
            Err(_) => Ok(Table::Kept),
        }
    }

    /// The reply to `CLUSTER SHARDS` (or `SLOTS`) from `node`: requests
    /// that waited for a table are routed; at a handshake, one step is done
    /// (or, before Redis 7, `CLUSTER SLOTS` is asked in its place).
    pub(super) fn topology_reply(
        &mut self,
        now: Instant,
        node: usize,
        step: Step,
        frame: &Frame,
        liveness: Duration,
        fx: &mut Vec<Effect>,
    ) -> Result<(), ConnectionError> {
        let handshaking = !self.nodes[node].is_ready();
        match self.read_table(node, step, frame)? {
            Table::AskOlder => {
                fx.push(Effect::Send(node, Request::Handshake(Step::Slots), now + liveness));
                return Ok(());
            }
            Table::Learnt(waiting) => fx.extend(waiting.into_iter().map(Effect::Route)),
            Table::Kept => {}
        }
        let conn = self.nodes[node].connection.as_mut();
        if handshaking && conn.is_some_and(|conn| conn.step_answered()) {
            fx.push(Effect::HandshakeDone(node));
        }
        Ok(())
    }

    /// A slot table arrived: it replaces ours. Returns the requests that
    /// waited for one, to be routed.
    fn learn(&mut self, shards: &[Shard]) -> Vec<Op> {
        let owners: Vec<usize> = shards.iter().map(|shard| self.node_at(&shard.primary)).collect();
        self.topology.learn(shards, &owners);
        self.deferred.take_awaiting_topology()
    }
}
