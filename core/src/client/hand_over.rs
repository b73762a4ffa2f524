//! What a release does for the subject's waiters. A release is a plain
//! `ZREM` of the lease's units, and behind the `ZREM`s of one write on the
//! same connection one `EXISTS` of their subjects' queues: one read where,
//! for most subjects, there is no queue. Only when one exists does
//! `RELEASE` run on the same ids (it is idempotent: it removes nothing
//! more, and hands the free units to the waiters the fairness rule lets
//! through). A client
//! that has waiters on the subject itself knows a queue is there: its
//! releases go as `RELEASE` alone (`ReleaseKind::ToWaiters`), with no round
//! trip in which the slot stands free and no check.
//!
//! Why this is as exact as one script: admission stays in the acquire
//! scripts, which count the lease set atomically, so a hand-over that comes
//! late or never over-admits nothing. And nothing waits for ever: a queue
//! that exists when the `EXISTS` runs (after the `ZREM`) is served; a queue
//! made after the `ZREM` was made by a waiter whose script saw the freed
//! units already. The rest (a reply lost, a slot moving) is best effort, as
//! `LEAVE` is: a waiter not served checks on its own.

use std::time::Instant;

use super::effect::Effect;
use super::error_class::{error_class, unexpected, ErrorClass};
use super::request::{HandOver, Request};
use crate::event::ConnectionError;
use crate::resp::Frame;
use crate::scripts::{Eval, ScriptKind};

/// Where a hand-over's next request goes (the node that answered, in a
/// cluster or not) and until when it may wait for its reply.
#[derive(Debug, Clone, Copy)]
pub(super) struct Onward {
    pub(super) node: usize,
    pub(super) cluster: bool,
    pub(super) deadline: Instant,
}

/// The reply to the `EXISTS` of the queues of `hand_overs` (the subjects of
/// one write's `ZREM`s on `node`). None (0), the common case, wants nothing:
/// one `EXISTS` for all, not one per subject, is what a write of many
/// tenants' releases saves. As many as were checked want the `RELEASE` on
/// each. Fewer do not say whose: each subject is checked again on its own,
/// a round trip later, rather than a script call on every one of them.
pub(super) fn queues_checked(
    hand_overs: Vec<HandOver>,
    frame: Frame,
    onward: Onward,
    fx: &mut Vec<Effect>,
) -> Result<(), ConnectionError> {
    match frame {
        Frame::Integer(0) => {}
        Frame::Integer(found) if found > 0 => {
            let every_one = found >= hand_overs.len() as i64;
            fx.extend(hand_overs.into_iter().map(|hand_over| {
                let request = match every_one {
                    true => Request::HandOver(hand_over),
                    false => Request::QueueCheck(vec![hand_over]),
                };
                Effect::Send(onward.node, request, onward.deadline)
            }));
        }
        Frame::Error(message) => refused(&message, onward.cluster, fx),
        other => return Err(unexpected("queue check", &other)),
    }
    Ok(())
}

impl HandOver {
    /// `RELEASE`'s reply: a count of units; a script not cached is sent
    /// again by text, once.
    pub(super) fn handed(mut self, frame: Frame, onward: Onward, fx: &mut Vec<Effect>) -> Result<(), ConnectionError> {
        match frame {
            Frame::Integer(_) => {}
            Frame::Error(message) => match error_class(&message, onward.cluster) {
                ErrorClass::NoScript if self.eval == Eval::Sha => {
                    self.eval = Eval::Text;
                    fx.push(Effect::Reload(onward.node, ScriptKind::Release));
                    fx.push(Effect::Send(onward.node, Request::HandOver(self), onward.deadline));
                }
                _ => refused(&message, onward.cluster, fx),
            },
            other => return Err(unexpected("hand-over", &other)),
        }
        Ok(())
    }
}

/// Given up: the waiters check on their own. A slot that moved is worth a
/// fresh slot table.
fn refused(message: &str, cluster: bool, fx: &mut Vec<Effect>) {
    if let ErrorClass::Redirect(_) = error_class(message, cluster) {
        fx.push(Effect::RefreshTopology);
    }
}
