//! What each reply means: the handshake's, an acquire's, a release's.

use std::time::Instant;

use super::answers::{self, AcquireAnswer, Misread, RenewAnswer};
use super::error_class::{classify, error_class, unexpected, ErrorClass};
use super::handshake::Expect;
use super::recovery;
use super::releases::Ran;
use super::request::{AcquireOp, Op, Reading, RenewOp, Request, Step};
use super::Client;
use crate::event::{ConnectionError, Event, Lease, Outcome, Reassertion, Renewal, Unavailable};
use crate::resp::Frame;
use crate::scripts::{Eval, ScriptKind, Scripts};
use crate::server_clock::lease_expiry;
use crate::server_error::{ServerError, ServerErrorKind};

impl Client {
    /// Acts on one reply. An `Err` retires the connection; the request itself
    /// has been dealt with by then.
    pub(super) fn on_reply(
        &mut self,
        now: Instant,
        node: usize,
        request: Request,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        match request {
            Request::Handshake(step) => self.on_handshake_reply(now, node, step, frame),
            // A reload answers as the handshake's load does (on a ready
            // connection, where a failed load is not fatal).
            Request::Reload(kind) => self.on_handshake_reply(now, node, Step::Load(kind), frame),
            Request::Acquire(op) => self.on_call_reply(now, node, Op::Acquire(op), frame),
            Request::Renew(op) => self.on_call_reply(now, node, Op::Renew(op), frame),
            Request::Inspect(op) => self.on_call_reply(now, node, Op::Inspect(op), frame),
            Request::AcquireMany(ops) => self.on_batch_reply(now, node, ops, frame),
            Request::Release(job) | Request::Compensate(job, _) => self.on_release_reply(now, node, [job], frame),
            Request::ReleaseMany(jobs) => self.on_release_reply(now, node, jobs, frame),
            Request::Reassert(job) => {
                let outcome = recovery::reassertion(&job, &frame)?;
                let stats = &mut self.out.stats;
                match outcome {
                    Reassertion::Survived => stats.leases_survived += 1,
                    Reassertion::Restored => stats.leases_restored += 1,
                    Reassertion::OverLimit => {
                        stats.leases_restored += 1;
                        stats.over_admissions += 1;
                    }
                    Reassertion::Unconfirmed | Reassertion::GivenBack => {}
                }
                self.out.event(Event::Reasserted {
                    lease: job.lease,
                    outcome,
                });
                self.step_done(now, node);
                Ok(())
            }
            Request::ReleaseAgain(keys, leases) => {
                let horizon = self.config.recovery_window();
                let back = self.recovery.released_again(now, horizon, &keys, leases, frame)?;
                self.out.stats.releases_repeated += back;
                self.step_done(now, node);
                Ok(())
            }
            // Whatever it says, the command after it answers for itself.
            Request::Asking => Ok(()),
            Request::Probe => match frame {
                Frame::SimpleString(pong) if &pong[..] == b"PONG" => Ok(()),
                other => Err(unexpected("ping", &other)),
            },
            Request::Wait => self.on_wait_reply(now, node, frame),
            // An error (a slot moved, a script to load again) is tried again
            // while it matters; a reply of the wrong shape says the stream is off.
            Request::Leave(keys, lease, until) => match frame {
                Frame::Integer(_) => Ok(()),
                Frame::Error(message) => {
                    match error_class(&message, self.net.topology.is_cluster()) {
                        ErrorClass::Redirect(_) => self.refresh_topology(now),
                        ErrorClass::NoScript => self.reload(now, node, ScriptKind::Leave),
                        _ => {}
                    }
                    self.waiters.leave_again(keys, lease, until);
                    Ok(())
                }
                other => Err(unexpected("leave", &other)),
            },
        }
    }

    pub(super) fn on_handshake_reply(
        &mut self,
        now: Instant,
        node: usize,
        step: Step,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        if let Step::Shards | Step::Slots = step {
            return self.on_topology_reply(now, node, step, frame);
        }
        let expect = Expect {
            cluster: self.net.topology.is_cluster(),
            allow_eviction: self.config.allow_eviction,
            scripts: Scripts::shared(),
        };
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("replies come from the current connection");
        let answer = conn.read_step(now, step, frame, &expect)?;
        if let Some(warning) = answer.warning {
            self.out.stats.server_warnings += 1;
            self.out.event(Event::Warning(conn.id(), warning));
        }
        if answer.all_in {
            self.handshake_done(now, node);
        }
        Ok(())
    }

    /// One more handshake step of `node`'s connection is answered.
    pub(super) fn step_done(&mut self, now: Instant, node: usize) {
        let all_in = self.net.nodes[node]
            .connection
            .as_mut()
            .is_some_and(|conn| conn.step_answered());
        if all_in {
            self.handshake_done(now, node);
        }
    }

    /// Every step of `node`'s handshake is answered: a connection whose
    /// server lost lease data first writes back what this client holds
    /// there (more steps); then it is ready.
    fn handshake_done(&mut self, now: Instant, node: usize) {
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("a handshake just ended");
        if !conn.recovery_checked {
            conn.recovery_checked = true;
            let window = self.config.recovery_window().filter(|_| !self.bug_no_recovery());
            if let Some(found) = self
                .recovery
                .on_handshake(now, node, &mut self.net, &self.config, window)
            {
                self.out.stats.data_losses += 1;
                self.out.event(found.report);
                if !found.writes.is_empty() {
                    // A fresh budget: the handshake's own may be nearly spent.
                    let deadline = now + self.config.connect_timeout;
                    let conn = self.net.nodes[node]
                        .connection
                        .as_mut()
                        .expect("a handshake just ended");
                    conn.more_steps(deadline, found.writes.len());
                    for request in found.writes {
                        self.send(node, request, deadline);
                    }
                    return;
                }
            }
        }
        let target = &mut self.net.nodes[node];
        let conn = target.connection.as_mut().expect("a handshake just ended");
        conn.make_ready(now);
        target.identity = Some(conn.identity.clone());
        target.reconnect.succeeded();
        self.out.event(Event::Connected(conn.id()));
    }

    /// The reply to one acquire, renewal or inspection, read by `answers`
    /// (shape, echo, status) before anything is believed.
    fn on_call_reply(&mut self, now: Instant, node: usize, op: Op, frame: Frame) -> Result<(), ConnectionError> {
        let check_echo = !self.bug_skip_echo_check();
        match op {
            Op::Acquire(op) => match answers::acquire(&op, frame, check_echo) {
                Ok((answer, reclaimed)) => {
                    self.out.stats.reclaimed += reclaimed;
                    self.on_acquire_answer(now, node, op, answer);
                    Ok(())
                }
                Err(misread) => self.misread(now, node, Op::Acquire(op), misread),
            },
            Op::Renew(op) => match answers::renew(&op, frame, check_echo) {
                Ok((answer, reclaimed)) => {
                    self.out.stats.reclaimed += reclaimed;
                    self.on_renew_answer(now, op, answer);
                    Ok(())
                }
                Err(misread) => self.misread(now, node, Op::Renew(op), misread),
            },
            Op::Inspect(op) => {
                let request = op.call.request;
                match op.reading {
                    Reading::Keys { .. } => match answers::scan(&self.config.key_prefix, frame) {
                        Ok(page) => {
                            self.finish_scan(now, request, Ok(page));
                            Ok(())
                        }
                        Err(misread) => self.misread(now, node, Op::Inspect(op), misread),
                    },
                    Reading::Subject { .. } => match answers::inspection(now, frame) {
                        Ok(inspection) => {
                            self.finish_inspection(now, request, Ok(inspection));
                            Ok(())
                        }
                        Err(misread) => self.misread(now, node, Op::Inspect(op), misread),
                    },
                }
            }
        }
    }

    /// A reply not to believe: a refusal is read by its class; a garbled one
    /// leaves the call's fate unknown and retires the connection.
    fn misread(&mut self, now: Instant, node: usize, op: Op, misread: Misread) -> Result<(), ConnectionError> {
        match misread {
            Misread::Refused(message) => self.on_call_error(now, node, op, &message),
            Misread::Garbled(error) => Err(self.ambiguous(now, op, error)),
        }
    }

    /// What a trusted answer to an acquire means for its caller.
    fn on_acquire_answer(&mut self, now: Instant, node: usize, op: AcquireOp, answer: AcquireAnswer) {
        let request = op.call.request;
        let waiting = self.callers.contains(request);
        match answer {
            AcquireAnswer::Queued => {
                if let Some(effect) = self.waiters.queued(now, op) {
                    self.apply_waiter(now, effect);
                }
            }
            AcquireAnswer::Shed(expected) => {
                self.finish(now, request, Outcome::Shed(expected));
            }
            AcquireAnswer::Granted(token) if self.config.replica_acks.is_some() => {
                // Delivered (or released) when the `WAIT` after it answers.
                let conn = self.net.nodes[node]
                    .connection
                    .as_mut()
                    .expect("replies come from the current connection");
                conn.unreplicated.push((op, token));
            }
            AcquireAnswer::Granted(token) if waiting => self.deliver_grant(now, op, token),
            AcquireAnswer::Granted(_) if self.bug_skip_late_grant_compensation() => {}
            AcquireAnswer::Granted(_) => self.compensate(now, op, Ran::Answered),
            AcquireAnswer::Exceeded => {
                if waiting {
                    self.finish(now, request, Outcome::Exceeded);
                }
            }
            AcquireAnswer::Tombstoned => self.fail(now, request, Unavailable::Refused),
            // A trusted non-grant, but no evidence about the limit (never
            // `Exceeded`); a waiter's queue entry, if any, is not needed.
            AcquireAnswer::Stale => {
                self.fail(now, request, Unavailable::Stale);
                if op.wait.is_some() {
                    self.waiters.leave(op.call.keys, op.call.lease_bytes, now);
                }
            }
            AcquireAnswer::Recovering => {
                self.out.stats.recovering += 1;
                self.fail(now, request, Unavailable::Recovering);
            }
        }
    }

    /// What a trusted answer to a renewal means for its holder.
    fn on_renew_answer(&mut self, now: Instant, op: RenewOp, answer: RenewAnswer) {
        let request = op.call.request;
        let renewal = match answer {
            RenewAnswer::Extended => {
                let call = op.call;
                let expires_at = lease_expiry(call.sent_at.unwrap_or(now), self.config.lease_ttl);
                let lease = Lease {
                    id: call.lease,
                    expires_at,
                    keys: call.keys,
                    fencing_token: op.token,
                    granted_at: op.granted_at,
                    release_until: expires_at,
                };
                self.recovery.held.renewed(&lease);
                Renewal::Extended(lease)
            }
            RenewAnswer::Gone => {
                self.recovery.held.remove(&op.call.lease);
                if !self.keep_alive.is_renewal(request) {
                    // Found gone by its holder's own renewal: not kept any more.
                    self.keep_alive.remove(&op.call.lease);
                }
                Renewal::Lost
            }
            // It changed nothing: the lease keeps its expiry.
            RenewAnswer::Stale => Renewal::Unavailable(Unavailable::Stale),
        };
        self.finish_renewal(now, request, renewal);
    }

    /// One reply for several acquires: each answer read as its acquire's;
    /// an error reply is each acquire's error.
    pub(super) fn on_batch_reply(
        &mut self,
        now: Instant,
        node: usize,
        ops: Vec<AcquireOp>,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let mut result = Ok(());
        match answers::batch(&ops, frame, !self.bug_skip_echo_check()) {
            Ok((answers, reclaimed)) => {
                self.out.stats.reclaimed += reclaimed;
                for (op, answer) in ops.into_iter().zip(answers) {
                    match answer {
                        Ok(answer) => self.on_acquire_answer(now, node, op, answer),
                        Err(error) => result = result.and(Err(self.ambiguous(now, Op::Acquire(op), error))),
                    }
                }
            }
            Err(Misread::Refused(message)) => {
                if matches!(classify(&message), ErrorClass::NoScript) {
                    self.reload(now, node, ScriptKind::AcquireMany);
                }
                for op in ops {
                    let outcome = self.on_call_error(now, node, Op::Acquire(op), &message);
                    result = result.and(outcome);
                }
            }
            Err(Misread::Garbled(error)) => return Err(self.all_ambiguous(now, ops, error)),
        }
        result
    }

    /// `WAIT`'s answer: enough replicas delivers the grants read since the
    /// last one; too few (or an error) releases them.
    fn on_wait_reply(&mut self, now: Instant, node: usize, frame: Frame) -> Result<(), ConnectionError> {
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("replies come from the current connection");
        let grants = std::mem::take(&mut conn.unreplicated);
        let wanted = self.config.replica_acks.map_or(0, |acks| acks.replicas);
        let acked = match answers::replicas_acked(frame) {
            Ok(acked) => acked,
            Err(error) => {
                for (op, _) in grants {
                    self.fail(now, op.call.request, Unavailable::ConnectionLost(error.clone()));
                    self.compensate(now, op, Ran::Answered);
                }
                return Err(error);
            }
        };
        for (op, token) in grants {
            if acked >= wanted {
                self.deliver_grant(now, op, token);
            } else {
                self.out.stats.not_replicated += 1;
                self.fail(now, op.call.request, Unavailable::NotReplicated { acked, wanted });
                self.compensate(now, op, Ran::Answered);
            }
        }
        Ok(())
    }

    /// Hands a grant to its caller, or releases it if the caller is gone.
    fn deliver_grant(&mut self, now: Instant, op: AcquireOp, token: u64) {
        let request = op.call.request;
        if !self.callers.contains(request) {
            return self.compensate(now, op, Ran::Answered);
        }
        // The grant took it out of its queue: nothing to leave.
        self.waiters.remove(request, true, now);
        let call = op.call;
        let expires_at = lease_expiry(call.sent_at.unwrap_or(now), self.config.lease_ttl);
        let lease = Lease {
            id: call.lease,
            expires_at,
            keys: call.keys,
            fencing_token: token,
            granted_at: now,
            release_until: expires_at,
        };
        self.recovery.held.insert(now, &lease, op.limit);
        self.finish(now, request, Outcome::Granted(lease));
    }

    fn all_ambiguous(&mut self, now: Instant, ops: Vec<AcquireOp>, error: ConnectionError) -> ConnectionError {
        for op in ops {
            self.ambiguous(now, Op::Acquire(op), error.clone());
        }
        error
    }

    /// An error reply to an acquire or a renewal.
    fn on_call_error(&mut self, now: Instant, node: usize, mut op: Op, message: &str) -> Result<(), ConnectionError> {
        let request = op.call().request;
        let error = ServerError::new(message);
        let refused = || Unavailable::Server(error.clone());
        match error_class(message, self.net.topology.is_cluster()) {
            ErrorClass::NoScript => {
                if self.callers.contains(request) {
                    op.call_mut().eval = Eval::Text;
                    self.reload(now, node, op.script());
                    self.send_call(now, node, op);
                }
                Ok(())
            }
            ErrorClass::Redirect(redirect) => {
                self.redirect_op(now, node, op, redirect, message);
                Ok(())
            }
            ErrorClass::NotExecuted => {
                if error.kind() == ServerErrorKind::ClusterDown {
                    self.refresh_topology(now);
                }
                self.fail(now, request, refused());
                Ok(())
            }
            ErrorClass::NotExecutedRetire => {
                self.fail(now, request, refused());
                Err(ConnectionError::Server(error))
            }
            ErrorClass::Unknown => {
                self.fail(now, request, refused());
                // It was answered, so it will not run later: no tombstone.
                if let Op::Acquire(op) = op {
                    self.compensate(now, op, Ran::Answered);
                }
                Ok(())
            }
        }
    }
}
