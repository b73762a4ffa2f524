//! What each reply on a connection means: read (by `answers`, `handshake`
//! or `recovery`) and turned into effects for the router, reports for the
//! operator, and an error when the connection must go.

use std::time::Instant;

use super::answers::{self, AcquireAnswer, Misread, RenewAnswer};
use super::callers::Callers;
use super::connection::Connection;
use super::connection::Unconfirmed;
use super::effect::{ambiguous, compensate, Effect, Redirected};
use super::error_class::{classify, error_class, unexpected, ErrorClass};
use super::hand_over;
use super::handshake::Expect;
use super::outbox::Outbox;
use super::recovery::{self, RecoveryState};
use super::request::{AcquireOp, Op, Ran, Reading, ReleaseJob, RenewOp, Request, Step};
use crate::config::Config;
use crate::event::{ConnectionError, Event, Outcome, Reassertion, Renewal, Unavailable};
use crate::fault::InjectedBugs;
use crate::resp::Frame;
use crate::scripts::{Eval, ScriptKind, Scripts};
use crate::server_clock::lease_expiry;
use crate::server_error::{ServerError, ServerErrorKind};

/// Reads the replies of one node's current connection, with what a reply
/// is checked against and where its news goes.
pub(super) struct Reader<'a> {
    pub(super) now: Instant,
    pub(super) node: usize,
    pub(super) config: &'a Config,
    pub(super) cluster: bool,
    pub(super) bugs: &'a InjectedBugs,
    pub(super) callers: &'a Callers,
    pub(super) conn: &'a mut Connection,
    pub(super) recovery: &'a mut RecoveryState,
    pub(super) out: &'a mut Outbox,
    pub(super) fx: &'a mut Vec<Effect>,
}

impl Reader<'_> {
    /// Acts on the reply to `request` (anything but a slot table). An `Err`
    /// retires the connection; the request itself is dealt with by then.
    pub(super) fn read(&mut self, request: Request, frame: Frame) -> Result<(), ConnectionError> {
        match request {
            Request::Handshake(step) => self.handshake(step, frame),
            // A reload answers as the handshake's load does (on a ready
            // connection, where a failed load is not fatal).
            Request::Reload(kind) => self.handshake(Step::Load(kind), frame),
            Request::Acquire(op) => self.call(Op::Acquire(op), frame),
            Request::Renew(op) => self.call(Op::Renew(op), frame),
            Request::Inspect(op) => self.call(Op::Inspect(op), frame),
            Request::AcquireMany(ops) => self.batch(ops, frame, ScriptKind::AcquireMany),
            Request::AcquireAcross(ops) => self.batch(ops, frame, ScriptKind::AcquireAcross),
            Request::AcquireAll(bundle) => self.bundle(bundle, frame),
            Request::Release(job) | Request::Compensate(job, _) => self.released([job], frame),
            Request::ReleaseMany(jobs) | Request::ReleaseToWaiters(jobs) => self.released(jobs, frame),
            Request::QueueCheck(hand_overs) => {
                let frame = match frame {
                    Frame::Integer(found)
                        if self.bugs.partial_queue_count_as_none && found < hand_overs.len() as i64 =>
                    {
                        Frame::Integer(0)
                    }
                    frame => frame,
                };
                hand_over::queues_checked(hand_overs, frame, self.onward(), self.fx)
            }
            Request::HandOver(hand_over) => hand_over.handed(frame, self.onward(), self.fx),
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
                self.step_done();
                Ok(())
            }
            Request::ReleaseAgain(_, leases) => {
                let back = self.recovery.released_again(self.now, self.node, leases, frame)?;
                self.out.stats.releases_repeated += back;
                self.step_done();
                Ok(())
            }
            // Whatever it says, the command after it answers for itself.
            Request::Asking => Ok(()),
            Request::Probe => match frame {
                Frame::SimpleString(pong) if &pong[..] == b"PONG" => Ok(()),
                other => Err(unexpected("ping", &other)),
            },
            Request::Wait => self.replicated(frame),
            // An error (a slot moved, a script to load again) is tried again
            // while it matters; a reply of the wrong shape says the stream is off.
            Request::Leave(keys, lease, until) => match frame {
                Frame::Integer(_) => Ok(()),
                Frame::Error(message) => {
                    match error_class(&message, self.cluster) {
                        ErrorClass::Redirect(_) => self.fx.push(Effect::RefreshTopology),
                        ErrorClass::NoScript => self.fx.push(Effect::Reload(self.node, ScriptKind::Leave)),
                        _ => {}
                    }
                    self.fx.push(Effect::LeaveAgain(keys, lease, until));
                    Ok(())
                }
                other => Err(unexpected("leave", &other)),
            },
        }
    }

    /// A handshake step's reply (not the slot table's): a warning is
    /// reported; the last one starts the check for lost lease data.
    fn handshake(&mut self, step: Step, frame: Frame) -> Result<(), ConnectionError> {
        let expect = Expect {
            cluster: self.cluster,
            sentinel: self.config.servers.is_sentinel(),
            allow_eviction: self.config.allow_eviction,
            scripts: Scripts::shared(),
        };
        let answer = self.conn.read_step(self.now, step, frame, &expect)?;
        if let Some(deadline) = self.conn.marker_due(step, self.cluster) {
            self.fx
                .push(Effect::Send(self.node, Request::Handshake(Step::Marker), deadline));
        }
        if let Some(warning) = answer.warning {
            self.out.stats.server_warnings += 1;
            self.out.event(Event::Warning(self.conn.id(), warning));
        }
        if answer.all_in {
            self.fx.push(Effect::HandshakeDone(self.node));
        }
        Ok(())
    }

    /// Where a hand-over's next request goes: this node, within a liveness.
    fn onward(&self) -> hand_over::Onward {
        let deadline = self.now + self.config.request_liveness;
        hand_over::Onward {
            node: self.node,
            cluster: self.cluster,
            deadline,
        }
    }

    /// A recovery write of the handshake was answered.
    fn step_done(&mut self) {
        if self.conn.step_answered() {
            self.fx.push(Effect::HandshakeDone(self.node));
        }
    }

    /// The reply to one acquire, renewal or inspection, read by `answers`
    /// (shape, echo, status) before anything is believed.
    fn call(&mut self, op: Op, frame: Frame) -> Result<(), ConnectionError> {
        let check_echo = !self.bugs.skip_echo_check;
        match op {
            Op::Acquire(op) => match answers::acquire(&op, frame, check_echo) {
                Ok((answer, reclaimed)) => {
                    self.out.stats.reclaimed += reclaimed;
                    self.acquired(op, answer);
                    Ok(())
                }
                Err(misread) => self.misread(Op::Acquire(op), misread),
            },
            Op::AcquireAll(bundle) => self.bundle(bundle, frame),
            Op::Renew(op) => match answers::renew(&op, frame, check_echo) {
                Ok((answer, reclaimed)) => {
                    self.out.stats.reclaimed += reclaimed;
                    self.renewed(op, answer);
                    Ok(())
                }
                Err(misread) => self.misread(Op::Renew(op), misread),
            },
            Op::Inspect(op) => {
                let request = op.call.request;
                let read = match op.reading {
                    Reading::Keys { .. } => answers::scan(&self.config.key_prefix, frame)
                        .map(|page| Effect::Deliver(request, Event::Scanned(request, Ok(page)))),
                    Reading::Subject { .. } => answers::inspection(self.now, frame)
                        .map(|reading| Effect::Deliver(request, Event::Inspected(request, Ok(reading)))),
                };
                match read {
                    Ok(effect) => {
                        self.fx.push(effect);
                        Ok(())
                    }
                    Err(misread) => self.misread(Op::Inspect(op), misread),
                }
            }
        }
    }

    /// A reply not to believe: a refusal is read by its class; a garbled one
    /// leaves the call's fate unknown and retires the connection.
    fn misread(&mut self, op: Op, misread: Misread) -> Result<(), ConnectionError> {
        match misread {
            Misread::Refused(message) => self.refused(op, message),
            Misread::Garbled(error) => {
                ambiguous(self.fx, op, &error);
                Err(error)
            }
        }
    }

    /// What a trusted answer to an acquire means for its caller.
    fn acquired(&mut self, op: AcquireOp, answer: AcquireAnswer) {
        let request = op.call.request;
        let waiting = self.callers.contains(request);
        let effect = match answer {
            AcquireAnswer::Queued { entered } => Effect::Queued { op, entered },
            AcquireAnswer::Shed(expected) => {
                Effect::Deliver(request, Event::Acquired(request, Outcome::Shed(expected)))
            }
            // Delivered (or released) when the `WAIT` after it answers.
            AcquireAnswer::Granted(token) if self.config.replica_acks.is_some() => {
                return self.conn.unreplicated.push(Unconfirmed::One(op, token));
            }
            AcquireAnswer::Granted(token) if waiting => Effect::Grant(op, token),
            AcquireAnswer::Granted(_) if self.bugs.skip_late_grant_compensation => return,
            AcquireAnswer::Granted(_) => Effect::Compensate(op, Ran::Answered),
            AcquireAnswer::Exceeded if waiting => Effect::Deliver(request, Event::Acquired(request, Outcome::Exceeded)),
            AcquireAnswer::Exceeded => return,
            AcquireAnswer::Tombstoned => Effect::Fail(request, Unavailable::Refused),
            // A trusted non-grant, but no evidence about the limit (never
            // `Exceeded`); a waiter's queue entry, if any, is not needed.
            AcquireAnswer::Stale => {
                self.fx.push(Effect::Fail(request, Unavailable::Stale));
                if op.wait.is_none() {
                    return;
                }
                Effect::Leave(op.call.keys, op.call.lease_bytes)
            }
            AcquireAnswer::Recovering => {
                self.out.stats.recovering += 1;
                Effect::Fail(request, Unavailable::Recovering)
            }
        };
        self.fx.push(effect);
    }

    /// What a trusted answer to a renewal means for its holder.
    fn renewed(&mut self, op: RenewOp, answer: RenewAnswer) {
        let request = op.call.request;
        let renewal = match answer {
            RenewAnswer::Extended => {
                let expires_at = lease_expiry(op.call.sent_at.unwrap_or(self.now), self.config.lease_ttl);
                let lease = op.call.into_lease(op.token, op.granted_at, expires_at, expires_at);
                self.recovery.held.renewed(&lease);
                Renewal::Extended(lease)
            }
            RenewAnswer::Gone => {
                self.recovery.held.remove(&op.call.lease);
                self.fx.push(Effect::Gone(request, op.call.lease));
                Renewal::Lost
            }
            // It changed nothing: the lease keeps its expiry.
            RenewAnswer::Stale => Renewal::Unavailable(Unavailable::Stale),
        };
        self.fx.push(Effect::Renewed(request, renewal));
    }

    /// One reply for several acquires: each answer read as its acquire's;
    /// an error reply is each acquire's error.
    fn batch(&mut self, ops: Vec<AcquireOp>, frame: Frame, script: ScriptKind) -> Result<(), ConnectionError> {
        let mut result = Ok(());
        match answers::batch(&ops, frame, !self.bugs.skip_echo_check) {
            Ok((answers, reclaimed)) => {
                self.out.stats.reclaimed += reclaimed;
                for (op, answer) in ops.into_iter().zip(answers) {
                    match answer {
                        Ok(answer) => self.acquired(op, answer),
                        Err(error) => {
                            ambiguous(self.fx, Op::Acquire(op), &error);
                            result = result.and(Err(error));
                        }
                    }
                }
            }
            Err(Misread::Refused(message)) => {
                if matches!(classify(&message), ErrorClass::NoScript) {
                    self.fx.push(Effect::Reload(self.node, script));
                }
                for op in ops {
                    let outcome = self.refused(Op::Acquire(op), message.clone());
                    result = result.and(outcome);
                }
            }
            Err(Misread::Garbled(error)) => {
                for op in ops {
                    ambiguous(self.fx, Op::Acquire(op), &error);
                }
                return Err(error);
            }
        }
        result
    }

    /// `WAIT`'s answer: enough replicas delivers the grants read since the
    /// last one; too few (or an error) releases them.
    fn replicated(&mut self, frame: Frame) -> Result<(), ConnectionError> {
        let grants = std::mem::take(&mut self.conn.unreplicated);
        let wanted = self.config.replica_acks.map_or(0, |acks| acks.replicas);
        let acked = answers::replicas_acked(frame);
        for grant in grants {
            let reason = match &acked {
                Ok(acked) if *acked >= wanted => {
                    self.fx.push(grant.confirmed());
                    continue;
                }
                &Ok(acked) => {
                    self.out.stats.not_replicated += 1;
                    Unavailable::NotReplicated { acked, wanted }
                }
                Err(error) => Unavailable::ConnectionLost(error.clone()),
            };
            self.fx.push(Effect::Fail(grant.request(), reason));
            grant.given_back(self.fx);
        }
        acked.map(drop)
    }

    /// An error reply to an acquire, a renewal or an inspection.
    pub(super) fn refused(&mut self, mut op: Op, message: String) -> Result<(), ConnectionError> {
        let request = op.call().request;
        let error = ServerError::new(&message);
        let refused = Effect::Fail(request, Unavailable::Server(error.clone()));
        match error_class(&message, self.cluster) {
            ErrorClass::NoScript => {
                if self.callers.contains(request) {
                    op.call_mut().eval = Eval::Text;
                    self.fx.push(Effect::Reload(self.node, op.script()));
                    self.fx.push(Effect::Resend(self.node, op));
                }
                Ok(())
            }
            ErrorClass::Redirect(redirect) => {
                self.fx.push(Effect::Redirect(Box::new(Redirected {
                    node: self.node,
                    request: op,
                    redirect,
                    message,
                })));
                Ok(())
            }
            ErrorClass::NotExecuted => {
                if error.kind() == ServerErrorKind::ClusterDown {
                    self.fx.push(Effect::RefreshTopology);
                }
                self.fx.push(refused);
                Ok(())
            }
            ErrorClass::NotExecutedRetire => {
                self.fx.push(refused);
                Err(ConnectionError::Server(error))
            }
            ErrorClass::Unknown => {
                self.fx.push(refused);
                // It was answered, so it will not run later: no tombstone.
                compensate(self.fx, op, Ran::Answered);
                Ok(())
            }
        }
    }

    /// The reply to a release, a compensation or a batch of releases of
    /// one subject (see [`answers::released`]): each job is done, or tried
    /// again as its error says.
    fn released(
        &mut self,
        jobs: impl AsRef<[ReleaseJob]> + IntoIterator<Item = ReleaseJob>,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let message = match answers::released(jobs.as_ref(), frame) {
            Ok(()) => {
                let horizon = self.config.recovery_window();
                for job in jobs {
                    self.out.stats.releases += 1;
                    self.recovery.remember_release(self.now, horizon, self.node, &job);
                    let of = job.whose();
                    self.out.event(Event::Released { lease: job.lease, of });
                }
                return Ok(());
            }
            Err(Misread::Garbled(error)) => {
                self.fx.extend(jobs.into_iter().map(Effect::RetryRelease));
                return Err(error);
            }
            Err(Misread::Refused(message)) => message,
        };
        match error_class(&message, self.cluster) {
            ErrorClass::NoScript => {
                // A plain release is a `ZREM`: only the scripts get here.
                if let Some(kind) = jobs.as_ref().first().and_then(ReleaseJob::script) {
                    self.fx.push(Effect::Reload(self.node, kind));
                }
                for mut job in jobs {
                    job.eval = Eval::Text;
                    self.fx.push(Effect::ResendRelease(self.node, job));
                }
                Ok(())
            }
            ErrorClass::Redirect(redirect) => {
                for job in jobs {
                    self.fx.push(Effect::RedirectRelease(Box::new(Redirected {
                        node: self.node,
                        request: job,
                        redirect,
                        message: message.clone(),
                    })));
                }
                Ok(())
            }
            class => {
                self.fx.extend(jobs.into_iter().map(Effect::RetryRelease));
                match class {
                    ErrorClass::NotExecutedRetire => Err(ConnectionError::Server(ServerError::new(message))),
                    _ => Ok(()),
                }
            }
        }
    }
}
