//! A connection's handshake: the steps it writes once the socket is open,
//! what each step's reply must say, and when the last one is in. The
//! connection owns this state; the client only learns, per reply, whether a
//! warning came with it and whether the handshake is complete.

use std::time::Instant;

use super::connection::{Connection, Phase};
use super::identity;
use super::request::Step;
use crate::config::Config;
use crate::event::{ConnectionError, Warning};
use crate::resp::Frame;
use crate::scripts::{ScriptKind, Scripts};
use crate::server_clock::ServerClock;
use crate::server_error::ServerErrorKind;

/// What one handshake reply came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct StepAnswer {
    /// Something about the server the operator should hear of.
    pub(super) warning: Option<Warning>,
    /// That was the last step: the connection may be checked for lost
    /// lease data, then made ready.
    pub(super) all_in: bool,
}

/// What the replies are checked against.
pub(super) struct Expect<'a> {
    pub(super) cluster: bool,
    /// The sentinels named this node: `ROLE` must answer (an ACL that
    /// refuses it would let a replica they name through).
    pub(super) sentinel: bool,
    pub(super) allow_eviction: bool,
    pub(super) scripts: &'a Scripts,
}

impl Connection {
    /// The socket is open: the steps to write, in order (none if this
    /// connection is not opening). `TIME` is asked now.
    pub(super) fn start_handshake(&mut self, now: Instant, config: &Config, cluster: bool) -> Vec<Step> {
        let Phase::Connecting { deadline } = self.phase else {
            return Vec::new();
        };
        let mut steps = Vec::with_capacity(12);
        if config.credentials.is_some() {
            steps.push(Step::Auth);
        }
        if config.database != 0 {
            steps.push(Step::Select);
        }
        steps.extend([Step::Ping, Step::Role, Step::Info]);
        if cluster {
            steps.push(Step::Shards);
        }
        steps.push(Step::Time);
        steps.extend(ScriptKind::LOADED.map(Step::Load));
        // Standalone, the marker (a write) is counted now and sent once
        // `INFO` has said this is a primary (see `marker_due`): a replica,
        // even a writable one, is never written to.
        self.phase = Phase::Handshaking {
            deadline,
            steps: steps.len() + usize::from(!cluster),
        };
        self.time_asked = Some(now);
        steps
    }

    /// Whether the marker goes out after `step`'s reply (read without
    /// error): standalone, once `INFO` is answered; by the handshake's
    /// deadline.
    pub(super) fn marker_due(&self, step: Step, cluster: bool) -> Option<Instant> {
        match (step, self.phase) {
            (Step::Info, Phase::Handshaking { deadline, .. }) if !cluster => Some(deadline),
            _ => None,
        }
    }

    /// Recovery's writes follow the handshake's steps, with a fresh
    /// budget: the connection is ready once `steps` more are answered.
    pub(super) fn more_steps(&mut self, deadline: Instant, steps: usize) {
        self.phase = Phase::Handshaking { deadline, steps };
    }

    /// The handshake is done: requests may go.
    pub(super) fn make_ready(&mut self, now: Instant) {
        self.phase = Phase::Ready;
        self.heard(now);
    }

    /// Reads the reply to `step` (or to a `SCRIPT LOAD` or `TIME` sent again
    /// on a ready connection). An error says why the connection must go.
    pub(super) fn read_step(
        &mut self,
        now: Instant,
        step: Step,
        frame: Frame,
        expect: &Expect,
    ) -> Result<StepAnswer, ConnectionError> {
        // Standalone, a replica is refused. In a cluster it may serve as a
        // source of the slot table (a seed demoted by a failover, say): no
        // route sends a write to a node the table does not name as a
        // slot's primary, and nothing is recovered on it.
        // Standalone, the refusal waits for `INFO` (the next step), so that
        // a cluster node reached without cluster mode hears that first.
        if let (Step::Role, Some(Err(role))) = (step, identity::primary(&frame)) {
            self.replica = Some(role);
        }
        let refused_replica = |conn: &Connection| match (&conn.replica, expect.cluster) {
            (Some(role), false) => Err(ConnectionError::Replica(role.clone())),
            _ => Ok(()),
        };
        let handshaking = matches!(self.phase, Phase::Handshaking { .. });
        let mut warning = None;
        let ok = match (&step, &frame) {
            (Step::Auth | Step::Select, Frame::SimpleString(s)) => &s[..] == b"OK",
            (Step::Ping, Frame::SimpleString(s)) => &s[..] == b"PONG",
            (Step::Role, Frame::Array(_)) => identity::primary(&frame).is_some(),
            (Step::Info, Frame::BulkString(info)) => match (identity::cluster_enabled(info), expect.cluster) {
                (Some(true), false) => return Err(ConnectionError::ClusterMode),
                (Some(false), true) => return Err(ConnectionError::NotCluster),
                _ => {
                    refused_replica(self)?;
                    if let Some(version) = identity::too_old(info) {
                        return Err(ConnectionError::Handshake(format!(
                            "Redis {version} is too old: inflight needs Redis 7.0 or later"
                        )));
                    }
                    self.identity.learn_info(info);
                    if let Some(policy) = identity::eviction(info) {
                        if !expect.allow_eviction {
                            return Err(ConnectionError::Eviction(policy));
                        }
                        warning = Some(Warning::Eviction(policy));
                    }
                    true
                }
            },
            (Step::Info, Frame::Error(message)) if !is_auth_error(message) => {
                refused_replica(self)?;
                warning = Some(Warning::InfoRefused);
                true
            }
            // A server (or an ACL) that will not say: go on. A cluster node
            // that stays silent here still cannot misroute quietly: its
            // `MOVED` replies fail the acquires as unavailable, and in
            // cluster mode `CLUSTER SHARDS` must answer. A replica that
            // will not say is refused by its first write (`READONLY`).
            (Step::Role, Frame::Error(message)) if expect.sentinel && !is_auth_error(message) => {
                return Err(ConnectionError::Handshake(format!(
                    "ROLE was refused ({message}): behind Sentinel the limiter must see that the node it was named is a primary; allow +role (and +info) to its user"
                )));
            }
            (Step::Role | Step::Info | Step::Marker, Frame::Error(message)) => !is_auth_error(message),
            (Step::Marker, frame) => match identity::marker(frame) {
                Some((created, value)) => {
                    self.identity.marker = Some(value);
                    self.identity.marker_created = created;
                    true
                }
                None => false,
            },
            (Step::Hold, Frame::Integer(_)) => true,
            (Step::Load(kind), Frame::BulkString(sha)) => &sha[..] == expect.scripts.get(*kind).sha.as_bytes(),
            (Step::Load(kind), Frame::Error(_)) if !handshaking => {
                // A reload after NOSCRIPT failed; `EVAL` keeps working without it.
                self.reloaded(*kind);
                return Ok(StepAnswer::default());
            }
            (Step::Time, Frame::Array(items)) => match read_time(items) {
                Some((seconds, micros)) => {
                    let asked = self.time_asked.take().unwrap_or(now);
                    self.clock = Some(ServerClock::new(asked, now, seconds, micros));
                    true
                }
                None => false,
            },
            (Step::Time, Frame::Error(_)) if !handshaking => {
                // A refresh failed: the last reading stays, with its margin.
                self.time_asked = None;
                return Ok(StepAnswer::default());
            }
            _ => false,
        };
        if !ok {
            return Err(match (step, frame) {
                (Step::Auth, Frame::Error(message)) => ConnectionError::Auth(message.to_string()),
                // No AUTH sent (the URL has no password) to a server that wants one.
                (_, Frame::Error(message)) if is_auth_error(&message) => ConnectionError::Auth(message.to_string()),
                (_, Frame::Error(message)) => ConnectionError::Handshake(message.to_string()),
                (step, frame) => {
                    ConnectionError::UnexpectedReply(format!("{step:?}: {}", super::error_class::describe(&frame)))
                }
            });
        }
        if let Step::Load(kind) = step {
            self.reloaded(kind);
        }
        Ok(StepAnswer {
            warning,
            all_in: self.step_answered(),
        })
    }

    /// One handshake step is answered; whether it was the last. (Nothing
    /// counts on a ready connection: a reload or a clock refresh.)
    pub(super) fn step_answered(&mut self) -> bool {
        let Phase::Handshaking { steps, .. } = &mut self.phase else {
            return false;
        };
        *steps -= 1;
        *steps == 0
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
