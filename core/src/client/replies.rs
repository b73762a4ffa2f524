//! What each reply means: the handshake's, an acquire's, a release's.

use std::time::Instant;

use super::error_class::{classify, describe, error_class, unexpected, unexpected_status, ErrorClass};
use super::identity;
use super::releases::Ran;
use super::request::{AcquireOp, InspectOp, Op, Reading, RenewOp, Request, Step};
use super::{Client, Phase};
use crate::event::{ConnectionError, Event, Holder, Inspection, Lease, Outcome, Renewal, Unavailable, Warning};
use crate::resp::Frame;
use crate::scripts::{Eval, ScriptKind, RECOVERING, STALE};
use crate::server_clock::{lease_expiry, ServerClock};
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
            Request::Inspect(op) => self.on_inspect_reply(now, node, op, frame),
            Request::AcquireMany(ops) => self.on_batch_reply(now, node, ops, frame),
            Request::Release(job) | Request::Compensate(job, _) => self.on_release_reply(now, node, job, frame),
            Request::ReleaseMany(jobs) => self.on_release_many_reply(now, node, jobs, frame),
            Request::Reassert(job) => self.on_reassert_reply(now, node, job, frame),
            Request::ReleaseAgain(keys, leases) => self.on_release_again_reply(now, node, keys, leases, frame),
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
        let cluster = self.net.topology.is_cluster();
        // Standalone, a replica is refused. In a cluster it may serve as a
        // source of the slot table (a seed demoted by a failover, say): no
        // route sends a write to a node the table does not name as a
        // slot's primary, and nothing is recovered on it.
        // Standalone, the refusal waits for `INFO` (the next step), so that
        // a cluster node reached without cluster mode hears that first.
        if let (Step::Role, Some(Err(role))) = (step, identity::primary(&frame)) {
            if let Some(conn) = self.net.nodes[node].connection.as_mut() {
                conn.replica = Some(role);
            }
        }
        let refused_replica = |conn: &super::Connection| match (&conn.replica, cluster) {
            (Some(role), false) => Err(ConnectionError::Replica(role.clone())),
            _ => Ok(()),
        };
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("replies come from the current connection");
        let handshaking = matches!(conn.phase, Phase::Handshaking { .. });
        let ok = match (&step, &frame) {
            (Step::Auth | Step::Select, Frame::SimpleString(s)) => &s[..] == b"OK",
            (Step::Ping, Frame::SimpleString(s)) => &s[..] == b"PONG",
            (Step::Role, Frame::Array(_)) => identity::primary(&frame).is_some(),
            (Step::Info, Frame::BulkString(info)) => match (identity::cluster_enabled(info), cluster) {
                (Some(true), false) => return Err(ConnectionError::ClusterMode),
                (Some(false), true) => return Err(ConnectionError::NotCluster),
                _ => {
                    refused_replica(conn)?;
                    if let Some(version) = identity::too_old(info) {
                        return Err(ConnectionError::Handshake(format!(
                            "Redis {version} is too old: inflight needs Redis 7.0 or later"
                        )));
                    }
                    conn.identity.learn_info(info);
                    if let Some(policy) = identity::eviction(info) {
                        if !self.config.allow_eviction {
                            return Err(ConnectionError::Eviction(policy));
                        }
                        let id = conn.id();
                        self.out.stats.server_warnings += 1;
                        self.out.event(Event::Warning(id, Warning::Eviction(policy)));
                    }
                    true
                }
            },
            (Step::Info, Frame::Error(message)) if !is_auth_error(message) => {
                refused_replica(conn)?;
                let id = conn.id();
                self.out.stats.server_warnings += 1;
                self.out.event(Event::Warning(id, Warning::InfoRefused));
                true
            }
            // A server (or an ACL) that will not say: go on. A cluster node
            // that stays silent here still cannot misroute quietly: its
            // `MOVED` replies fail the acquires as unavailable, and in
            // cluster mode `CLUSTER SHARDS` must answer. A replica that
            // will not say is refused by its first write (`READONLY`).
            (Step::Role | Step::Info | Step::Marker, Frame::Error(message)) => !is_auth_error(message),
            (Step::Marker, frame) => match identity::marker(frame) {
                Some((created, value)) => {
                    conn.identity.marker = Some(value);
                    conn.identity.marker_created = created;
                    true
                }
                None => false,
            },
            (Step::Hold, Frame::Integer(_)) => true,
            (Step::Load(kind), Frame::BulkString(sha)) => &sha[..] == self.net.scripts.get(*kind).sha.as_bytes(),
            (Step::Load(kind), Frame::Error(_)) if !handshaking => {
                // A reload after NOSCRIPT failed; `EVAL` keeps working without it.
                conn.reloaded(*kind);
                return Ok(());
            }
            (Step::Time, Frame::Array(items)) => match read_time(items) {
                Some((seconds, micros)) => {
                    let asked = conn.time_asked.take().unwrap_or(now);
                    conn.clock = Some(ServerClock::new(asked, now, seconds, micros));
                    true
                }
                None => false,
            },
            (Step::Time, Frame::Error(_)) if !handshaking => {
                // A refresh failed: the last reading stays, with its margin.
                conn.time_asked = None;
                return Ok(());
            }
            _ => false,
        };
        if !ok {
            return Err(match (step, frame) {
                (Step::Auth, Frame::Error(message)) => ConnectionError::Auth(message.to_string()),
                // No AUTH sent (the URL has no password) to a server that wants one.
                (_, Frame::Error(message)) if is_auth_error(&message) => ConnectionError::Auth(message.to_string()),
                (_, Frame::Error(message)) => ConnectionError::Handshake(message.to_string()),
                (step, frame) => ConnectionError::UnexpectedReply(format!("{step:?}: {}", describe(&frame))),
            });
        }
        if let Step::Load(kind) = step {
            conn.reloaded(kind);
        }
        self.step_done(now, node);
        Ok(())
    }

    /// One handshake step of `node`'s connection is answered. After the
    /// last one, a connection whose server lost lease data first writes
    /// back what this client holds there (more steps); then it is ready.
    pub(super) fn step_done(&mut self, now: Instant, node: usize) {
        let target = &mut self.net.nodes[node];
        let Some(conn) = target.connection.as_mut() else {
            return;
        };
        let Phase::Handshaking { steps, .. } = &mut conn.phase else {
            return;
        };
        *steps -= 1;
        if *steps > 0 {
            return;
        }
        if !conn.recovery_checked {
            conn.recovery_checked = true;
            if self.recover(now, node) {
                return;
            }
        }
        let target = &mut self.net.nodes[node];
        let conn = target.connection.as_mut().expect("checked above");
        conn.phase = Phase::Ready;
        conn.heard(now);
        target.identity = Some(conn.identity.clone());
        target.reconnect.succeeded();
        self.out.event(Event::Connected(conn.id()));
    }

    /// The reply to one acquire or renewal: `{status, own id}`, checked for
    /// shape and echo before the status is believed.
    fn on_call_reply(&mut self, now: Instant, node: usize, op: Op, frame: Frame) -> Result<(), ConnectionError> {
        let what = match op {
            Op::Acquire(_) => "acquire",
            Op::Renew(_) => "renew",
            Op::Inspect(op) => return self.on_inspect_reply(now, node, op, frame),
        };
        // An acquire answers `{status, id, token, reclaimed}`, a waiting one
        // `{status, id, token, ahead, expected ms, reclaimed}`, a renewal
        // `{status, id, reclaimed}`: `reclaimed` counts the expired units its
        // prune removed.
        let mut expected_ms = 0;
        let (status, echo, token, reclaimed) = match (frame, &op) {
            (Frame::Array(items), Op::Acquire(AcquireOp { wait: Some(_), .. })) => {
                match <[Frame; 6]>::try_from(items) {
                    Ok(
                        [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(token), Frame::Integer(_), Frame::Integer(expected), Frame::Integer(reclaimed)],
                    ) if expected >= 0 && reclaimed >= 0 => {
                        expected_ms = expected as u64;
                        (status, echo, token, reclaimed)
                    }
                    Ok(items) => return Err(self.ambiguous(now, op, unexpected(what, &Frame::Array(items.into())))),
                    Err(items) => return Err(self.ambiguous(now, op, unexpected(what, &Frame::Array(items)))),
                }
            }
            (Frame::Array(items), Op::Acquire(_)) => match <[Frame; 4]>::try_from(items) {
                Ok(
                    [Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(token), Frame::Integer(reclaimed)],
                ) if reclaimed >= 0 => (status, echo, token, reclaimed),
                Ok(items) => return Err(self.ambiguous(now, op, unexpected(what, &Frame::Array(items.into())))),
                Err(items) => return Err(self.ambiguous(now, op, unexpected(what, &Frame::Array(items)))),
            },
            (Frame::Array(items), Op::Renew(_)) => match <[Frame; 3]>::try_from(items) {
                Ok([Frame::Integer(status), Frame::BulkString(echo), Frame::Integer(reclaimed)]) if reclaimed >= 0 => {
                    (status, echo, 0, reclaimed)
                }
                Ok(items) => return Err(self.ambiguous(now, op, unexpected(what, &Frame::Array(items.into())))),
                Err(items) => return Err(self.ambiguous(now, op, unexpected(what, &Frame::Array(items)))),
            },
            (Frame::Error(message), _) => return self.on_call_error(now, node, op, &message),
            (other, _) => return Err(self.ambiguous(now, op, unexpected(what, &other))),
        };
        if echo != op.call().lease_bytes && !self.bug_skip_echo_check() {
            return Err(self.ambiguous(now, op, ConnectionError::EchoMismatch));
        }
        self.out.stats.reclaimed += reclaimed as u64;
        match op {
            Op::Acquire(op) if op.wait.is_some() => self.on_waiting_status(now, node, op, status, token, expected_ms),
            Op::Acquire(op) => self.on_acquire_status(now, node, op, status, token),
            Op::Renew(op) => self.on_renew_status(now, op, status),
            Op::Inspect(_) => unreachable!("answered above"),
        }
    }

    /// What a trusted answer to a waiting acquire means: `ACQUIRE`'s
    /// statuses, and 2 queued (park it), 0 shed (the expected wait is longer
    /// than its deadline allows).
    fn on_waiting_status(
        &mut self,
        now: Instant,
        node: usize,
        op: AcquireOp,
        status: i64,
        token: i64,
        expected_ms: u64,
    ) -> Result<(), ConnectionError> {
        match status {
            2 => {
                if let Some(effect) = self.waiters.queued(now, op) {
                    self.apply_waiter(now, effect);
                }
                Ok(())
            }
            0 => {
                let expected = std::time::Duration::from_millis(expected_ms);
                self.finish(now, op.call.request, Outcome::Shed(expected));
                Ok(())
            }
            // It ran too late: its queue entry (if any) is not needed.
            STALE => {
                self.fail(now, op.call.request, Unavailable::Stale);
                self.waiters.leave(op.call.keys, op.call.lease_bytes, now);
                Ok(())
            }
            _ => self.on_acquire_status(now, node, op, status, token),
        }
    }

    /// What a trusted `{status, own id, token}` means for an acquire (its
    /// shape and echo are checked by the caller, once).
    fn on_acquire_status(
        &mut self,
        now: Instant,
        node: usize,
        op: AcquireOp,
        status: i64,
        token: i64,
    ) -> Result<(), ConnectionError> {
        let request = op.call.request;
        let waiting = self.callers.contains(request);
        match status {
            // A grant always carries a positive token; zero or less is a lie.
            1 if token <= 0 => {
                let error = unexpected_status("acquire", status, &op.call.lease_bytes);
                return Err(self.ambiguous(now, Op::Acquire(op), error));
            }
            1 if self.config.replica_acks.is_some() => {
                // Delivered (or released) when the `WAIT` after it answers.
                let conn = self.net.nodes[node]
                    .connection
                    .as_mut()
                    .expect("replies come from the current connection");
                conn.unreplicated.push((op, token as u64));
            }
            1 if waiting => self.deliver_grant(now, op, token as u64),
            1 if self.bug_skip_late_grant_compensation() => {}
            1 => self.compensate(now, op, Ran::Answered),
            0 => {
                if waiting {
                    self.finish(now, request, Outcome::Exceeded);
                }
            }
            // The id was tombstoned: no lease exists. We never reuse a
            // compensated id, so a trusted connection should not say this.
            -1 => self.fail(now, request, Unavailable::Refused),
            // It ran after its valid-until and took nothing: a trusted
            // non-grant, but no evidence about the limit (never `Exceeded`).
            STALE => self.fail(now, request, Unavailable::Stale),
            RECOVERING => {
                self.out.stats.recovering += 1;
                self.fail(now, request, Unavailable::Recovering);
            }
            _ => {
                let error = unexpected_status("acquire", status, &op.call.lease_bytes);
                return Err(self.ambiguous(now, Op::Acquire(op), error));
            }
        }
        Ok(())
    }

    /// `{now, units, limit, waiting, id, expiry…}`: what a subject holds;
    /// or, for a page of keys, `[cursor, [key…]]`.
    fn on_inspect_reply(
        &mut self,
        now: Instant,
        node: usize,
        op: InspectOp,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        if let Reading::Keys { .. } = op.reading {
            return self.on_scan_reply(now, node, op, frame);
        }
        let items = match frame {
            Frame::Array(items) => items,
            Frame::Error(message) => return self.on_call_error(now, node, Op::Inspect(op), &message),
            other => return Err(self.ambiguous(now, Op::Inspect(op), unexpected("inspect", &other))),
        };
        let parsed = match &items[..] {
            [Frame::Integer(server_ms), Frame::Integer(units), Frame::Integer(limit), Frame::Integer(waiting), rest @ ..]
                if *server_ms >= 0 && *units >= 0 && *waiting >= 0 && rest.len() % 2 == 0 =>
            {
                let mut holders = Vec::with_capacity(rest.len() / 2);
                let mut well_formed = true;
                for pair in rest.chunks_exact(2) {
                    match pair {
                        [Frame::BulkString(member), Frame::Integer(expiry)] => {
                            let expires_in =
                                std::time::Duration::from_millis(expiry.saturating_sub(*server_ms).max(0) as u64);
                            holders.push(Holder::from_member(member, now, expires_in));
                        }
                        _ => well_formed = false,
                    }
                }
                well_formed.then(|| Inspection {
                    units: *units as u64,
                    limit_recorded: u32::try_from(*limit).ok().filter(|limit| *limit > 0),
                    waiting: *waiting as u64,
                    holders,
                })
            }
            _ => None,
        };
        let Some(inspection) = parsed else {
            let frame = Frame::Array(items);
            return Err(self.ambiguous(now, Op::Inspect(op), unexpected("inspect", &frame)));
        };
        self.finish_inspection(now, op.call.request, Ok(inspection));
        Ok(())
    }

    /// `[cursor, [key…]]`: a page of a node's lease sets, as subjects.
    fn on_scan_reply(&mut self, now: Instant, node: usize, op: InspectOp, frame: Frame) -> Result<(), ConnectionError> {
        let page = match &frame {
            Frame::Array(items) => match &items[..] {
                [Frame::BulkString(cursor), Frame::Array(keys)] => {
                    let cursor = std::str::from_utf8(cursor).ok().and_then(|c| c.parse::<u64>().ok());
                    let keys: Option<Vec<crate::Key>> = keys
                        .iter()
                        .map(|key| match key {
                            // A key the pattern matched but that is not one
                            // of ours (written by hand, say) is skipped.
                            Frame::BulkString(name) => {
                                Some(crate::key::Key::of_leases_key(&self.config.key_prefix, name))
                            }
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()
                        .map(|keys| keys.into_iter().flatten().collect());
                    cursor.zip(keys)
                }
                _ => None,
            },
            Frame::Error(message) => return self.on_call_error(now, node, Op::Inspect(op), message),
            _ => None,
        };
        let Some((cursor, keys)) = page else {
            return Err(self.ambiguous(now, Op::Inspect(op), unexpected("scan", &frame)));
        };
        self.finish_scan(now, op.call.request, Ok(crate::event::KeysPage { cursor, keys }));
        Ok(())
    }

    /// What a trusted `{status, own id}` means for a renewal.
    fn on_renew_status(&mut self, now: Instant, op: RenewOp, status: i64) -> Result<(), ConnectionError> {
        let request = op.call.request;
        let renewal = match status {
            1 => {
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
            0 => {
                self.recovery.held.remove(&op.call.lease);
                if !self.keep_alive.is_renewal(request) {
                    // Found gone by its holder's own renewal: not kept any more.
                    self.keep_alive.remove(&op.call.lease);
                }
                Renewal::Lost
            }
            // It ran too late and changed nothing: the lease keeps its expiry.
            STALE => Renewal::Unavailable(Unavailable::Stale),
            _ => {
                let error = unexpected_status("renew", status, &op.call.lease_bytes);
                return Err(self.ambiguous(now, Op::Renew(op), error));
            }
        };
        self.finish_renewal(now, request, renewal);
        Ok(())
    }

    /// One reply for several acquires: a pair per acquire, each checked for
    /// shape and echo before any is believed, then each status read as its
    /// acquire's. An error reply is each acquire's error.
    pub(super) fn on_batch_reply(
        &mut self,
        now: Instant,
        node: usize,
        ops: Vec<AcquireOp>,
        frame: Frame,
    ) -> Result<(), ConnectionError> {
        let items = match frame {
            Frame::Error(message) => {
                if matches!(classify(&message), ErrorClass::NoScript) {
                    self.reload(now, node, ScriptKind::AcquireMany);
                }
                let mut result = Ok(());
                for op in ops {
                    let outcome = self.on_call_error(now, node, Op::Acquire(op), &message);
                    result = result.and(outcome);
                }
                return result;
            }
            // A triple per acquire, then the units the prune reclaimed.
            Frame::Array(items) if items.len() == 3 * ops.len() + 1 => items,
            other => return Err(self.all_ambiguous(now, ops, unexpected("acquire batch", &other))),
        };
        let well_formed = items
            .chunks_exact(3)
            .all(|triple| matches!(triple, [Frame::Integer(_), Frame::BulkString(_), Frame::Integer(_)]))
            && matches!(items.last(), Some(Frame::Integer(reclaimed)) if *reclaimed >= 0);
        if !well_formed {
            let frame = Frame::Array(items);
            return Err(self.all_ambiguous(now, ops, unexpected("acquire batch", &frame)));
        }
        let echoed = items
            .chunks_exact(3)
            .zip(&ops)
            .all(|(triple, op)| matches!(&triple[1], Frame::BulkString(echo) if *echo == op.call.lease_bytes));
        if !echoed && !self.bug_skip_echo_check() {
            return Err(self.all_ambiguous(now, ops, ConnectionError::EchoMismatch));
        }
        if let Some(Frame::Integer(reclaimed)) = items.last() {
            self.out.stats.reclaimed += *reclaimed as u64;
        }
        let mut result = Ok(());
        for (op, triple) in ops.into_iter().zip(items.chunks_exact(3)) {
            let (Frame::Integer(status), Frame::Integer(token)) = (&triple[0], &triple[2]) else {
                unreachable!("checked above")
            };
            let outcome = self.on_acquire_status(now, node, op, *status, *token);
            result = result.and(outcome);
        }
        result
    }

    /// `WAIT`'s answer: the replicas that acknowledged every write before
    /// it. Enough delivers the grants read since the last one; too few (or
    /// an error) releases them.
    fn on_wait_reply(&mut self, now: Instant, node: usize, frame: Frame) -> Result<(), ConnectionError> {
        let conn = self.net.nodes[node]
            .connection
            .as_mut()
            .expect("replies come from the current connection");
        let grants = std::mem::take(&mut conn.unreplicated);
        let wanted = self.config.replica_acks.map_or(0, |acks| acks.replicas);
        let acked = match frame {
            Frame::Integer(acked) if acked >= 0 => u32::try_from(acked).unwrap_or(u32::MAX),
            Frame::Error(_) => 0,
            other => {
                for (op, _) in grants {
                    self.fail(
                        now,
                        op.call.request,
                        Unavailable::ConnectionLost(unexpected("wait", &other)),
                    );
                    self.compensate(now, op, Ran::Answered);
                }
                return Err(unexpected("wait", &other));
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

/// `TIME`'s reply: seconds and microseconds, as bulk strings of digits.
fn read_time(items: &[Frame]) -> Option<(u64, u64)> {
    let number = |frame: &Frame| match frame {
        Frame::BulkString(digits) => std::str::from_utf8(digits).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    match items {
        [seconds, micros] => Some((number(seconds)?, number(micros)?)),
        _ => None,
    }
}

/// Redis's codes for "who are you?": a missing or refused login.
fn is_auth_error(message: &str) -> bool {
    matches!(
        ServerErrorKind::of(message),
        ServerErrorKind::NoAuth | ServerErrorKind::WrongPass
    )
}
