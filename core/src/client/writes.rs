//! What goes on the wire, and what goes together: a call dated and staged on
//! its connection; at the next write, a connection's staged acquires of one
//! subject and limit as one `ACQUIRE_MANY`, those left alone as one
//! `ACQUIRE_ACROSS` (of one slot, in a cluster), the staged releases of one
//! subject as one `ZREM`, and one check of the queues behind a node's
//! `ZREM`s; and a call forgotten before it is written.

use std::time::{Duration, Instant};

use super::connection::Connection;
use super::encode::Wire;
use super::network::Network;
use super::release_job::ReleaseKind;
use super::request::{AcquireOp, HandOver, Op, ReleaseJob, Request};
use crate::config::Config;
use crate::event::RequestId;
use crate::scripts::{Eval, MAX_BATCH, MAX_RELEASE_BATCH};

impl Connection {
    /// Dates `op` for this (ready) connection and stages it for the next
    /// write. It is valid for its liveness budget: its reply is due by then,
    /// and a script that runs later refuses it. Returns whether the
    /// server's clock should be read again first: the caller then writes a
    /// `TIME`, which goes ahead of `op`.
    pub(super) fn stage_call(&mut self, now: Instant, mut op: Op, config: &Config, no_deadline: bool) -> bool {
        let valid_until = now + config.request_liveness;
        // Without a reading (never, on a ready connection) the request is
        // written as already stale: refused, never over-admitted. Each node
        // has its own clock: a redirected request is dated again.
        let (valid_until_ms, margin, expiry_ms) = self.clock.map_or((0, Duration::ZERO, 1), |clock| {
            let ttl = u64::try_from(config.lease_ttl.as_millis()).unwrap_or(u64::MAX);
            (
                clock.server_ms(valid_until),
                clock.margin(valid_until),
                clock.upper_ms(now).saturating_add(ttl),
            )
        });
        if let Op::Acquire(AcquireOp { wait: Some(wait), .. }) = &mut op {
            wait.patience_ms = wait.until.saturating_duration_since(now).as_millis() as u64;
        }
        for call in op.calls_mut() {
            call.sent_at.get_or_insert(now);
            call.valid_until_ms = valid_until_ms;
            call.expiry_ms = expiry_ms;
            if no_deadline {
                // The injected bug: requests that may act a day late, on
                // leases that live a day.
                call.valid_until_ms = valid_until_ms.saturating_add(86_400_000);
                call.expiry_ms = call.valid_until_ms;
            }
            call.runnable_until = Some(valid_until + margin);
        }
        // Read the server's clock again once the last reading has aged, so
        // that drift never builds up: only while requests flow (an idle
        // client needs no clock), one `TIME` at a time, ahead of this request.
        let resync = self.time_asked.is_none() && self.clock.is_some_and(|clock| clock.stale(now));
        if resync {
            self.time_asked = Some(now);
        }
        self.stage(op, now);
        resync
    }

    /// Writes the staged acquires: those of one subject and limit together,
    /// as one `ACQUIRE_MANY` of up to `MAX_BATCH`; those left alone together
    /// as one `ACQUIRE_ACROSS` of up to `MAX_BATCH` (in a `cluster`, of one
    /// slot: a script's keys must be); renewals, waiting acquires, `EVAL`
    /// fallbacks and `ASK` targets one by one. Order within a subject and
    /// limit is kept.
    pub(super) fn write_staged_acquires(&mut self, wire: &Wire, cluster: bool) {
        // Three reply items per acquire, and the units reclaimed.
        let most = MAX_BATCH
            .min(wire.config.reply_limits.max_array_len.saturating_sub(1) / 3)
            .max(1);
        let staged = self.take_staged();
        if staged.is_empty() {
            return;
        }
        let mut latest = None;
        let mut acquires = false;
        for (group, oldest) in across(acquire_groups(staged, most), most, cluster) {
            let deadline = oldest + wire.config.request_liveness;
            let mut request = group.into_request();
            acquires |= matches!(
                request,
                Request::Acquire(_) | Request::AcquireMany(_) | Request::AcquireAcross(_) | Request::AcquireAll(_)
            );
            let asked = request.take_ask();
            self.send_asking_if(asked, request, deadline, wire);
            latest = latest.max(Some(deadline));
        }
        // One `WAIT` covers every write before it on this connection.
        if let (Some(acks), Some(deadline), true) = (wire.config.replica_acks, latest, acquires) {
            self.send(Request::Wait, deadline + acks.timeout, wire);
        }
    }

    /// Writes `request`, right after an `ASKING` when an `ASK` redirect sent
    /// it here (the flag holds for the next command only).
    pub(super) fn send_asking_if(&mut self, asked: bool, request: Request, deadline: Instant, wire: &Wire) {
        if asked {
            self.send(Request::Asking, deadline, wire);
        }
        self.send(request, deadline, wire);
    }
}

impl Network {
    /// Writes the staged releases: those of one subject as one `ZREM` of
    /// up to `MAX_RELEASE_BATCH` ids on the node that owns the subject,
    /// then, behind all of a node's `ZREM`s, one `EXISTS` of their queues
    /// (of one slot's, in a cluster: a command's keys must share it).
    /// Returns those whose node is not ready: they wait for it.
    pub(super) fn write_releases(&mut self, staged: Vec<(ReleaseJob, Instant)>, wire: &Wire) -> Vec<ReleaseJob> {
        let mut waiting = Vec::new();
        if staged.is_empty() {
            return waiting;
        }
        let cluster = self.topology.is_cluster();
        // (node, slot or 0, the hand-overs, the earliest deadline).
        let mut checks: Vec<(usize, u16, Vec<HandOver>, Instant)> = Vec::new();
        let same_subject =
            |a: &ReleaseJob, b: &ReleaseJob| a.keys.leases() == b.keys.leases() && a.ask == b.ask && a.kind == b.kind;
        for (mut jobs, oldest) in batches(staged, MAX_RELEASE_BATCH, same_subject) {
            let node = self
                .topology
                .node_for(jobs[0].keys.slot(), jobs[0].ask)
                .filter(|node| self.nodes[*node].is_ready());
            let Some((node, conn)) = node.and_then(|node| Some((node, self.nodes[node].connection.as_mut()?))) else {
                waiting.extend(jobs);
                continue;
            };
            let deadline = oldest + wire.config.request_liveness;
            // A batch shares one `ask` (see `same_subject`): used up here.
            let asked = jobs[0].ask.is_some();
            jobs.iter_mut().for_each(|job| job.ask = None);
            // After an `ASK` the queue may be on either node: a plain `ZREM`,
            // and its waiters check on their own (see `hand_over.rs`).
            let to_waiters = !asked && jobs[0].kind == ReleaseKind::ToWaiters;
            if !asked && !to_waiters {
                let slot = if cluster { jobs[0].keys.slot() } else { 0 };
                let hand_over = HandOver::after(&jobs);
                match checks
                    .iter_mut()
                    .find(|(n, s, group, _)| (*n, *s) == (node, slot) && group.len() < MAX_RELEASE_BATCH)
                {
                    Some((_, _, group, earliest)) => {
                        group.push(hand_over);
                        *earliest = (*earliest).min(deadline);
                    }
                    None => checks.push((node, slot, vec![hand_over], deadline)),
                }
            }
            let request = match jobs.len() {
                _ if to_waiters => Request::ReleaseToWaiters(jobs),
                1 => Request::Release(jobs.pop().expect("one")),
                _ => Request::ReleaseMany(jobs),
            };
            conn.send_asking_if(asked, request, deadline, wire);
        }
        for (node, _, hand_overs, deadline) in checks {
            if let Some(conn) = self.nodes[node].connection.as_mut() {
                conn.send(Request::QueueCheck(hand_overs), deadline, wire);
            }
        }
        waiting
    }

    /// Forgets a request that has not been written yet (its caller is gone):
    /// nothing reached Redis, so nothing needs compensating.
    pub(super) fn unsend(&mut self, request: RequestId) {
        if self.deferred.remove(request) {
            return;
        }
        for node in &mut self.nodes {
            let before = node.waiting.len();
            node.waiting.retain(|op| op.call().request != request);
            if node.waiting.len() != before || node.connection.as_mut().is_some_and(|c| c.unstage(request)) {
                return;
            }
        }
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

/// The groups of one plain acquire (alone under its subject and limit)
/// gathered into groups of at most `most` that go out as one
/// `ACQUIRE_ACROSS`: any of them on a standalone server, those of one slot
/// in a `cluster`. The other groups are kept as they are, in their order.
fn across(groups: Vec<(Group, Instant)>, most: usize, cluster: bool) -> Vec<(Group, Instant)> {
    let mut gathered: Vec<(Group, Instant)> = Vec::with_capacity(groups.len());
    for (group, at) in groups {
        let op = match group {
            Group::Acquires(mut ops) if ops.len() == 1 => ops.pop().expect("one"),
            other => {
                gathered.push((other, at));
                continue;
            }
        };
        let slot = op.call.keys.slot();
        let joins = |ops: &Vec<AcquireOp>| ops.len() < most && (!cluster || ops[0].call.keys.slot() == slot);
        match gathered.iter_mut().find_map(|(group, oldest)| match group {
            Group::Across(ops) if joins(ops) => Some((ops, oldest)),
            _ => None,
        }) {
            Some((ops, oldest)) => {
                ops.push(op);
                *oldest = (*oldest).min(at);
            }
            None => gathered.push((Group::Across(vec![op]), at)),
        }
    }
    gathered
}

/// Acquires and renewals that go out in one request.
enum Group {
    /// Plain acquires of one subject and limit: one `ACQUIRE_MANY` when
    /// there are two or more.
    Acquires(Vec<AcquireOp>),
    /// Plain acquires each alone under its subject and limit: one
    /// `ACQUIRE_ACROSS` when there are two or more.
    Across(Vec<AcquireOp>),
    /// A renewal, an acquire sent as `EVAL` text, one sent to an `ASK`
    /// target, or a waiting one. (Boxed: an `Op` is far larger than a `Vec`.)
    Alone(Box<Op>),
}

impl Group {
    fn into_request(self) -> Request {
        match self {
            Group::Acquires(mut ops) if ops.len() == 1 => Request::Acquire(ops.pop().expect("one")),
            Group::Acquires(ops) => Request::AcquireMany(ops),
            Group::Across(mut ops) if ops.len() == 1 => Request::Acquire(ops.pop().expect("one")),
            Group::Across(ops) => Request::AcquireAcross(ops),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // an arbitrary starting instant
    fn batches_keep_order_and_the_oldest_time() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(5);
        let staged = vec![(1, later), (2, t0), (1, t0), (3, later), (1, later)];
        let groups = batches(staged, 2, |a: &i32, b: &i32| a == b);
        let shape: Vec<(Vec<i32>, bool)> = groups.into_iter().map(|(g, at)| (g, at == t0)).collect();
        assert_eq!(
            shape,
            vec![(vec![1, 1], true), (vec![2], true), (vec![3], false), (vec![1], false)]
        );
    }
}
