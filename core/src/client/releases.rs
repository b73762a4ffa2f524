//! Releases and compensations, as the client handles them: routed, sent,
//! answered (the retry policy and the waiting jobs are `ReleaseQueue`'s).

use std::time::Instant;

use super::answers::{self, Misread};
use super::error_class::{error_class, ErrorClass};
use super::release_queue::Given;
use super::request::{AcquireOp, ReleaseJob, ReleaseKind};
use super::Client;
use crate::event::ConnectionError;
use crate::event::{Event, ReleaseFailure};
use crate::resp::Frame;
use crate::scripts::{Eval, ScriptKind};
use crate::server_error::ServerError;

/// Whether an acquire to compensate has run: its reply was read, or it was
/// not (its bytes may still reach Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ran {
    Answered,
    MayStillRun,
}

impl Client {
    /// Releases a lease the caller will never hold. Only an acquire can be
    /// compensated: a renewal creates no lease.
    ///
    /// [`Ran::MayStillRun`]: no reply was read for the acquire, so its bytes
    /// may still reach Redis (held in a buffer, a stalled server, a proxy).
    /// Until its valid-until a tombstone refuses it, and the release keeps
    /// trying until any lease it could have made has expired: it runs no
    /// later than `runnable_until`, and lives a TTL from there. An acquire
    /// whose reply was read has run; its lease lives a TTL from that reply
    /// at most.
    pub(super) fn compensate(&mut self, now: Instant, op: AcquireOp, ran: Ran) {
        self.out.stats.compensations += 1;
        let may_still_run = ran == Ran::MayStillRun;
        let call = op.call;
        let ran_by = if may_still_run {
            call.runnable_until.unwrap_or(now).max(now)
        } else {
            now
        };
        let job = ReleaseJob {
            lease: call.lease,
            lease_bytes: call.lease_bytes,
            keys: call.keys,
            kind: ReleaseKind::Compensation {
                tombstone_until_ms: if may_still_run { call.valid_until_ms } else { 0 },
            },
            // Nobody held it: it says nothing about hold times.
            held_ms: 0,
            failures: 0,
            deadline: ran_by + self.config.lease_ttl,
            not_before: now,
            eval: Eval::Sha,
            ask: None,
            redirects: 0,
        };
        self.submit_release(now, job);
    }

    /// Sends `job` to the node that owns its subject if that node is ready;
    /// else it waits (and a primary not connected yet is connected).
    pub(super) fn submit_release(&mut self, now: Instant, job: ReleaseJob) {
        let Some(node) = self.net.topology.node_for(job.keys.slot(), job.ask) else {
            self.refresh_topology(now);
            self.queue_release(job);
            return;
        };
        if self.net.nodes[node].is_ready() {
            return self.send_release(now, node, job);
        }
        if self.net.nodes[node].connection.is_none() && !self.net.nodes[node].reconnect.backing_off() {
            self.start_connect(now, node);
        }
        self.queue_release(job);
    }

    /// Queues `job` for a ready connection or its retry time (abandoned,
    /// and reported, if there is no room).
    pub(super) fn queue_release(&mut self, job: ReleaseJob) {
        if let Some(Given::Up(job, reason)) = self.releases.queue(job) {
            self.abandon_release(job, reason);
        }
    }

    /// An attempt failed: back off and try again on whatever connection is
    /// ready then (after a retirement, always a fresh one), or give up.
    pub(super) fn retry_release(&mut self, now: Instant, job: ReleaseJob) {
        match self.releases.retry(now, job) {
            // Counted only once it is really queued for another attempt.
            None => self.out.stats.release_retries += 1,
            Some(Given::Up(job, reason)) => self.abandon_release(job, reason),
        }
    }

    pub(super) fn abandon_release(&mut self, job: ReleaseJob, reason: ReleaseFailure) {
        self.out.stats.releases_abandoned += 1;
        let of = job.whose();
        self.out.event(Event::ReleaseAbandoned {
            lease: job.lease,
            of,
            reason,
        });
    }

    /// Ordinary releases are staged so that `poll_transmit` can write those of
    /// one subject as one `ZREM`; compensations (a script each) go at once,
    /// to `node`.
    pub(super) fn send_release(&mut self, now: Instant, node: usize, mut job: ReleaseJob) {
        if !job.is_compensation() {
            return self.releases.stage(job, now);
        }
        let asked = job.ask.take().is_some();
        self.send_asking_if(asked, node, job.into_request(), now + self.config.request_liveness);
    }

    // ---- replies ----------------------------------------------------------

    /// The reply to a release, a compensation or a batch of releases of
    /// one subject (see [`answers::released`]): each job is done, or tried
    /// again as its error says.
    pub(super) fn on_release_reply(
        &mut self,
        now: Instant,
        node: usize,
        jobs: impl AsRef<[ReleaseJob]> + IntoIterator<Item = ReleaseJob>,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let message = match answers::released(jobs.as_ref(), frame) {
            Ok(()) => {
                let horizon = self.config.recovery_window();
                for job in jobs {
                    self.out.stats.releases += 1;
                    self.recovery
                        .remember_release(now, horizon, job.lease.clone(), &job.keys);
                    let of = job.whose();
                    self.out.event(Event::Released { lease: job.lease, of });
                }
                return Ok(());
            }
            Err(Misread::Garbled(error)) => {
                for job in jobs {
                    self.retry_release(now, job);
                }
                return Err(error);
            }
            Err(Misread::Refused(message)) => message,
        };
        match error_class(&message, self.net.topology.is_cluster()) {
            ErrorClass::NoScript => {
                let script = match jobs.as_ref().first().is_some_and(ReleaseJob::is_compensation) {
                    true => ScriptKind::Compensate,
                    false => ScriptKind::Release,
                };
                self.reload(now, node, script);
                for mut job in jobs {
                    job.eval = Eval::Text;
                    self.send_release(now, node, job);
                }
                Ok(())
            }
            ErrorClass::Redirect(redirect) => {
                for job in jobs {
                    self.redirect_release(now, node, job, redirect, &message);
                }
                Ok(())
            }
            class => {
                for job in jobs {
                    self.retry_release(now, job);
                }
                match class {
                    ErrorClass::NotExecutedRetire => Err(ConnectionError::Server(ServerError::new(message))),
                    _ => Ok(()),
                }
            }
        }
    }
}
