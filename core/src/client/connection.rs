//! One connection generation: its phase, its request FIFO, what is staged
//! for its next write, and what it knows about the server. Each node the
//! client talks to (the one server, or each primary of a cluster) has at
//! most one at a time.

use std::time::{Duration, Instant};

use super::effect::{compensate, Effect};
use super::identity::Identity;
use super::request::{AcquireOp, Bundle, Op, Ran, Request};
use crate::event::{ConnectionError, ConnectionId, RequestId};
use crate::pipeline::Pipeline;
use crate::resp::ReplyLimits;
use crate::scripts::ScriptKind;
use crate::server_clock::ServerClock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The driver is opening the socket.
    Connecting {
        deadline: Instant,
    },
    /// AUTH, SELECT, PING, ROLE, INFO, TIME, SCRIPT LOADs (and, after a
    /// data loss, the writes that recover it) are out; `steps` replies to go.
    Handshaking {
        deadline: Instant,
        steps: usize,
    },
    Ready,
}

#[derive(Debug)]
pub(super) struct Connection {
    id: ConnectionId,
    pub(super) phase: Phase,
    pub(super) pipeline: Pipeline<Request>,
    /// Acquires and renewals for the next write, with when each was staged:
    /// those of one subject and limit go out as one `ACQUIRE_MANY`.
    staged: Vec<(Op, Instant)>,
    /// Acquires and renewals staged or pending in `pipeline`, for the
    /// in-flight cap. Kept by `stage`, `unstage` and `answered` only.
    in_flight: usize,
    /// A `SCRIPT LOAD` is on its way after a `NOSCRIPT`, per `ScriptKind`.
    reloading: [bool; ScriptKind::LOADED.len()],
    /// The server's clock, read at the handshake (and refreshed while
    /// requests flow): requests' valid-until are written in it.
    pub(super) clock: Option<ServerClock>,
    /// When the `TIME` on its way (the handshake's, or one to refresh
    /// `clock`) was written: its reply was made no earlier.
    pub(super) time_asked: Option<Instant>,
    /// Who the server is, as this handshake learns it.
    pub(super) identity: Identity,
    /// The handshake's replies are all in and were compared with the
    /// node's last identity (recovery steps may follow).
    pub(super) recovery_checked: bool,
    /// What `ROLE` said, if not a primary: refused standalone; in a cluster
    /// only a source of the slot table.
    pub(super) replica: Option<String>,
    /// Grants read and not yet confirmed by a `WAIT` (with `replica_acks`),
    /// with their fencing tokens.
    pub(super) unreplicated: Vec<Unconfirmed>,
    /// When the server was last heard from (a reply, or the connection
    /// becoming ready): an idle connection is probed `idle_probe` after.
    heard_at: Instant,
}

impl Connection {
    /// A connection being opened, due to be ready by `deadline`.
    pub(super) fn new(id: ConnectionId, deadline: Instant, limits: ReplyLimits) -> Self {
        Self {
            id,
            phase: Phase::Connecting { deadline },
            pipeline: Pipeline::new(limits),
            staged: Vec::new(),
            in_flight: 0,
            reloading: [false; ScriptKind::LOADED.len()],
            clock: None,
            time_asked: None,
            identity: Identity::default(),
            recovery_checked: false,
            unreplicated: Vec::new(),
            replica: None,
            heard_at: deadline,
        }
    }

    /// The server answered (or the connection became ready) at `now`.
    pub(super) fn heard(&mut self, now: Instant) {
        self.heard_at = now;
    }

    /// When to probe this connection: `idle_probe` after the server was
    /// last heard from, if it is ready and carries nothing (anything in
    /// flight has its own liveness deadline). A host that died without a
    /// word (no FIN, no RST) is found by the probe's deadline.
    pub(super) fn probe_at(&self, idle_probe: Duration) -> Option<Instant> {
        let idle = self.phase == Phase::Ready && self.staged.is_empty() && self.pipeline.pending().next().is_none();
        idle.then(|| self.heard_at + idle_probe)
    }

    pub(super) fn id(&self) -> ConnectionId {
        self.id
    }

    pub(super) fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// Acquires and renewals staged or awaiting their reply here.
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Takes `op` for the next write.
    pub(super) fn stage(&mut self, op: Op, now: Instant) {
        self.in_flight += 1;
        self.staged.push((op, now));
    }

    /// Drops `request` if it is staged and not yet written; whether it was.
    pub(super) fn unstage(&mut self, request: RequestId) -> bool {
        let Some(at) = self.staged.iter().position(|(op, _)| op.call().request == request) else {
            return false;
        };
        self.staged.remove(at);
        self.in_flight -= 1;
        true
    }

    /// Everything staged since the last write, in staging order.
    pub(super) fn take_staged(&mut self) -> Vec<(Op, Instant)> {
        std::mem::take(&mut self.staged)
    }

    /// `request`'s reply was read: it no longer counts as in flight.
    pub(super) fn answered(&mut self, request: &Request) {
        match request {
            Request::Acquire(_) | Request::AcquireAll(_) | Request::Renew(_) | Request::Inspect(_) => {
                self.in_flight -= 1
            }
            Request::AcquireMany(ops) | Request::AcquireAcross(ops) => self.in_flight -= ops.len(),
            _ => {}
        }
    }

    /// Marks a reload of `kind` as on its way; false if one already is.
    pub(super) fn start_reload(&mut self, kind: ScriptKind) -> bool {
        !std::mem::replace(&mut self.reloading[kind as usize], true)
    }

    /// A load of `kind` was answered.
    pub(super) fn reloaded(&mut self, kind: ScriptKind) {
        self.reloading[kind as usize] = false;
    }

    /// When this connection next needs attention: its connect deadline, or
    /// the oldest request's liveness.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Connecting { deadline } | Phase::Handshaking { deadline, .. } => Some(deadline),
            Phase::Ready => self.pipeline.next_deadline(),
        }
    }

    /// Why this connection must go at `now`, if it must.
    pub(super) fn overdue(&self, now: Instant) -> Option<ConnectionError> {
        let due = self.next_deadline().is_some_and(|deadline| deadline <= now);
        match self.phase {
            _ if !due => None,
            Phase::Connecting { .. } | Phase::Handshaking { .. } => Some(ConnectionError::ConnectTimeout),
            Phase::Ready => Some(ConnectionError::Stalled),
        }
    }
}

/// A grant read and not yet confirmed replicated by a `WAIT`, with its
/// fencing tokens.
#[derive(Debug)]
pub(super) enum Unconfirmed {
    One(AcquireOp, u64),
    All(Bundle, Vec<u64>),
}

impl Unconfirmed {
    /// Its caller's request.
    pub(super) fn request(&self) -> RequestId {
        match self {
            Unconfirmed::One(op, _) => op.call.request,
            Unconfirmed::All(bundle, _) => bundle.call().request,
        }
    }

    /// Replicated: the grant goes to its caller.
    pub(super) fn confirmed(self) -> Effect {
        match self {
            Unconfirmed::One(op, token) => Effect::Grant(op, token),
            Unconfirmed::All(bundle, tokens) => Effect::GrantAll(bundle, tokens),
        }
    }

    /// Not replicated (or not known to be): what it took is given back.
    pub(super) fn given_back(self, fx: &mut Vec<Effect>) {
        let op = match self {
            Unconfirmed::One(op, _) => Op::Acquire(op),
            Unconfirmed::All(bundle, _) => Op::AcquireAll(bundle),
        };
        compensate(fx, op, Ran::Answered);
    }
}
