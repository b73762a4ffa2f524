//! Redis Cluster's answers that send a command elsewhere: `MOVED`, `ASK`,
//! `TRYAGAIN`, and `READONLY` from a demoted primary. Each means the script
//! did not run, so none is ambiguous: the request is routed again, never
//! compensated, and the connection that said it stays (it is healthy; it
//! just does not own the slot). Also here: reading the slot table and
//! refreshing it.

use std::time::{Duration, Instant};

use super::error_class::Redirect;
use super::request::{Op, ReleaseJob, ReleaseKind, Request, Step};
use super::Client;
use crate::cluster::{parse_redirect, parse_shards, parse_slots, Shard};
use crate::event::{ConnectionError, Unavailable};
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

impl Client {
    /// An acquire or renewal was redirected by `node`: route it again.
    pub(super) fn redirect_op(&mut self, now: Instant, node: usize, mut op: Op, redirect: Redirect, message: &str) {
        let request = op.call().request;
        if !self.callers.contains(request) {
            return; // Its caller is gone and nothing ran: nothing to do.
        }
        if self.bug_redirect_as_denial() && matches!(op, Op::Acquire(_)) {
            self.finish(now, request, crate::event::Outcome::Exceeded);
            return;
        }
        let call = op.call_mut();
        call.ask = None;
        call.redirects = match redirect {
            Redirect::Moved | Redirect::Ask => call.redirects + 1,
            Redirect::TryAgain | Redirect::ReadOnly => 0,
        };
        if call.redirects > MAX_REDIRECTS {
            return self.fail(now, request, Unavailable::Server(ServerError::new(message)));
        }
        match redirect {
            Redirect::Moved | Redirect::Ask => {
                let Some(target) = self.follow(now, node, redirect, message) else {
                    return self.fail(now, request, Unavailable::Server(ServerError::new(message)));
                };
                if redirect == Redirect::Ask {
                    op.call_mut().ask = Some(target);
                }
                self.route_op(now, op);
            }
            Redirect::TryAgain => {
                self.out.stats.try_again += 1;
                self.net.deferred.until(now + TRY_AGAIN_DELAY, op);
            }
            Redirect::ReadOnly => {
                self.refresh_topology(now);
                self.net.deferred.until(now + TRY_AGAIN_DELAY, op);
            }
        }
    }

    /// A release or compensation was redirected by `node`: send it again
    /// where the slot lives (a tenant's slot may move while its leases are
    /// held). A release waiting out a migration backs off as after a failure.
    pub(super) fn redirect_release(
        &mut self,
        now: Instant,
        node: usize,
        mut job: ReleaseJob,
        redirect: Redirect,
        message: &str,
    ) {
        job.ask = None;
        job.redirects = match redirect {
            Redirect::Moved | Redirect::Ask => job.redirects + 1,
            Redirect::TryAgain | Redirect::ReadOnly => 0,
        };
        if job.redirects > MAX_REDIRECTS {
            return self.retry_release(now, job);
        }
        match redirect {
            Redirect::Moved | Redirect::Ask => match self.follow(now, node, redirect, message) {
                Some(target) => {
                    if redirect == Redirect::Ask {
                        job.ask = Some(target);
                    }
                    self.submit_release(now, job);
                }
                None => self.retry_release(now, job),
            },
            Redirect::TryAgain => {
                self.out.stats.try_again += 1;
                if job.kind == ReleaseKind::Release {
                    job.kind = ReleaseKind::Removal;
                }
                self.retry_release(now, job);
            }
            Redirect::ReadOnly => {
                self.refresh_topology(now);
                self.retry_release(now, job);
            }
        }
    }

    /// The node a `MOVED` or `ASK` names (added if new); a `MOVED` also
    /// updates the slot and asks for a (rate-limited) table refresh.
    fn follow(&mut self, now: Instant, node: usize, redirect: Redirect, message: &str) -> Option<usize> {
        let (slot, endpoint) = parse_redirect(message, &self.net.nodes[node].endpoint)?;
        let target = self.node_at(&endpoint);
        if redirect == Redirect::Moved {
            self.out.stats.moved += 1;
            self.net.topology.moved(slot, target);
            self.refresh_topology(now);
        } else {
            self.out.stats.asked += 1;
        }
        Some(target)
    }

    /// Reads the slot table again, from a ready node, unless a refresh is on
    /// its way or went out too recently (then one is owed for later).
    pub(super) fn refresh_topology(&mut self, now: Instant) {
        if !self.net.topology.is_cluster() {
            return;
        }
        if !self.net.topology.want_refresh(now) {
            return;
        }
        let ready =
            (0..self.net.nodes.len()).find(|node| self.net.nodes[*node].is_ready() && self.net.topology.wanted(*node));
        let ready = ready.or_else(|| (0..self.net.nodes.len()).find(|node| self.net.nodes[*node].is_ready()));
        // With no ready node, the next handshake reads the table anyway.
        let Some(node) = ready else {
            self.net.topology.refreshed();
            return;
        };
        self.out.stats.topology_refreshes += 1;
        self.send(
            node,
            Request::Handshake(Step::Shards),
            now + self.config.request_liveness,
        );
    }

    /// The reply to `CLUSTER SHARDS` (or `CLUSTER SLOTS`), at a handshake or
    /// a refresh. At a handshake, a table that cannot be read ends the
    /// attempt; a refresh that fails keeps the table we have.
    pub(super) fn on_topology_reply(
        &mut self,
        now: Instant,
        node: usize,
        step: Step,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let handshaking = !self.net.nodes[node].is_ready();
        let asked = self.net.nodes[node].endpoint.clone();
        let parsed = match (&frame, step) {
            (Frame::Error(_), Step::Shards) => {
                // Redis before 7 has no `CLUSTER SHARDS`: ask the older way
                // (at a handshake, in place of this step).
                let deadline = now + self.config.request_liveness;
                self.send(node, Request::Handshake(Step::Slots), deadline);
                return Ok(());
            }
            (Frame::Error(message), _) => Err(ConnectionError::Handshake(message.to_string())),
            (frame, Step::Shards) => parse_shards(frame, &asked, self.net.topology.tls())
                .map_err(|error| ConnectionError::UnexpectedReply(error.to_string())),
            (frame, _) => {
                parse_slots(frame, &asked).map_err(|error| ConnectionError::UnexpectedReply(error.to_string()))
            }
        };
        if !handshaking {
            self.net.topology.refreshed();
        }
        match parsed {
            Ok(shards) if !shards.is_empty() => self.learn(now, &shards),
            // A node that serves no slot yet (the cluster is forming).
            Ok(_) if !handshaking => {}
            Ok(_) => return Err(ConnectionError::Handshake("the cluster serves no slot".into())),
            Err(error) if handshaking => return Err(error),
            Err(_) => {}
        }
        if handshaking {
            self.step_done(now, node);
        }
        Ok(())
    }

    /// A slot table arrived: it replaces ours, and requests that waited for
    /// one are routed.
    fn learn(&mut self, now: Instant, shards: &[Shard]) {
        let owners: Vec<usize> = shards.iter().map(|shard| self.node_at(&shard.primary)).collect();
        self.net.topology.learn(shards, &owners);
        for op in self.net.deferred.take_awaiting_topology() {
            self.route_op(now, op);
        }
    }

    fn bug_redirect_as_denial(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        return self.bugs.redirect_as_denial;
        #[cfg(not(feature = "fault-injection"))]
        false
    }
}
