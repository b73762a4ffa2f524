//! Where a release goes: written on the ready connection of the node that
//! owns its subject (a release staged so those of one subject share a
//! script call; a compensation at once), or kept in the queue until that
//! node is ready or its retry time comes, or given up and reported.

use std::time::{Duration, Instant};

use super::effect::Effect;
use super::network::Network;
use super::outbox::Outbox;
use super::release_job::ReleaseKind;
use super::release_queue::{Given, ReleaseQueue};
use super::request::{ReleaseJob, Request};
use crate::event::{Event, ReleaseFailure};

impl ReleaseQueue {
    /// Sends `job` to the node that owns its subject if that node is ready;
    /// else it waits (and a primary not connected yet is connected).
    pub(super) fn submit(
        &mut self,
        now: Instant,
        job: ReleaseJob,
        net: &Network,
        liveness: Duration,
        out: &mut Outbox,
        fx: &mut Vec<Effect>,
    ) {
        let Some(node) = net.topology.node_for(job.keys.slot(), job.ask) else {
            fx.push(Effect::RefreshTopology);
            return self.wait(job, out);
        };
        let target = &net.nodes[node];
        if target.is_ready() {
            return self.send_on(now, node, job, liveness, fx);
        }
        if target.connection.is_none() && !target.reconnect.backing_off() {
            fx.push(Effect::Connect(node));
        }
        self.wait(job, out);
    }

    /// `job` on `node`'s ready connection: an ordinary release is staged
    /// (`poll_transmit` writes those of one subject as one call); a
    /// compensation (a script each) goes at once.
    pub(super) fn send_on(
        &mut self,
        now: Instant,
        node: usize,
        mut job: ReleaseJob,
        liveness: Duration,
        fx: &mut Vec<Effect>,
    ) {
        if !job.is_compensation() {
            return self.stage(job, now);
        }
        let deadline = now + liveness;
        if job.ask.take().is_some() {
            fx.push(Effect::Send(node, Request::Asking, deadline));
        }
        fx.push(Effect::Send(node, job.into_request(), deadline));
    }

    /// Queues `job` for a ready connection or its retry time (abandoned,
    /// and reported, if there is no room).
    pub(super) fn wait(&mut self, job: ReleaseJob, out: &mut Outbox) {
        if let Some(Given::Up(job, reason)) = self.queue(job) {
            abandon(job, reason, out);
        }
    }

    /// `job`, refused unrun at `now` by `TRYAGAIN` (its slot moving), goes
    /// again after a backoff, unless that is past its deadline. A script of several keys
    /// meets `TRYAGAIN` for as long as the move lasts (some of its keys
    /// moved, some not), which can outlast every attempt's backoff: counted
    /// as failures, the release would give up and leave its slot taken
    /// until the lease's TTL. So no attempt is spent; and a release to
    /// waiters goes on as the plain `ZREM` (one key: served, or sent on by
    /// `ASK`), its waiters told as after any plain release.
    pub(super) fn later(&mut self, now: Instant, mut job: ReleaseJob, out: &mut Outbox) {
        if self.try_again_spends_attempts() {
            return self.try_again(now, job, out);
        }
        if job.kind == ReleaseKind::ToWaiters {
            job.kind = ReleaseKind::Release;
        }
        if let Some(Given::Up(job, reason)) = self.defer(now, job) {
            abandon(job, reason, out);
        }
    }

    /// An attempt failed: back off and try again on whatever connection is
    /// ready then (after a retirement, always a fresh one), or give up.
    pub(super) fn try_again(&mut self, now: Instant, job: ReleaseJob, out: &mut Outbox) {
        match self.retry(now, job) {
            // Counted only once it is really queued for another attempt.
            None => out.stats.release_retries += 1,
            Some(Given::Up(job, reason)) => abandon(job, reason, out),
        }
    }
}

/// Reports `job` given up, for `reason`.
pub(super) fn abandon(job: ReleaseJob, reason: ReleaseFailure, out: &mut Outbox) {
    out.stats.releases_abandoned += 1;
    let of = job.whose();
    out.event(Event::ReleaseAbandoned {
        lease: job.lease,
        of,
        reason,
    });
}
