//! The reply reader alone: what a reply to an acquire comes to, as effects,
//! with no client around it.

use std::num::NonZeroU32;
use std::time::Duration;

use bytes::Bytes;

use super::start;
use crate::client::callers::{Awaits, Callers};
use crate::client::connection::Connection;
use crate::client::effect::Effect;
use crate::client::held::HeldLeases;
use crate::client::outbox::Outbox;
use crate::client::recovery::{RecoveryKeys, RecoveryState};
use crate::client::replies::Reader;
use crate::client::request::{AcquireOp, Call, Ran, Request, Wait};
use crate::config::Config;
use crate::event::{ConnectionError, ConnectionId, RequestId, Unavailable};
use crate::fault::InjectedBugs;
use crate::key::{Key, SubjectKeys};
use crate::lease_id::LeaseId;
use crate::resp::{Frame, ReplyLimits};
use crate::scripts::{Eval, ScriptKind};

const REQUEST: RequestId = RequestId(7);

fn acquire(waits: bool) -> AcquireOp {
    let keys = SubjectKeys::new("t", &Key::new("ns", "subject").unwrap());
    let call = Call::new(REQUEST, LeaseId::from_parts(0x7a3, REQUEST.0), keys);
    let wait = waits.then(|| Wait::until(start() + Duration::from_secs(1)));
    AcquireOp {
        call,
        limit: NonZeroU32::new(5).unwrap(),
        wait,
        fenced: true,
    }
}

/// `ACQUIRE`'s reply: status, the echoed id, the token, units reclaimed.
fn reply(status: i64, echo: &Bytes, token: i64) -> Frame {
    Frame::Array(vec![
        Frame::Integer(status),
        Frame::BulkString(echo.clone()),
        Frame::Integer(token),
        Frame::Integer(0),
    ])
}

/// Reads `frame` as the reply to `op`, with `request`'s caller waiting or
/// not: what the reader answered, and the effects it asked for.
fn read(op: AcquireOp, frame: Frame, waiting: bool) -> (Result<(), ConnectionError>, Vec<Effect>) {
    let config = Config::default();
    let mut callers = Callers::default();
    if waiting {
        callers.insert(REQUEST, start() + Duration::from_secs(1), Awaits::Acquire);
    }
    let mut conn = Connection::new(ConnectionId(1), start(), ReplyLimits::default());
    let mut recovery = RecoveryState {
        held: HeldLeases::default(),
        released: Default::default(),
        keys: RecoveryKeys::new(&config),
    };
    let (mut out, mut fx) = (Outbox::default(), Vec::new());
    let result = Reader {
        now: start(),
        node: 0,
        config: &config,
        cluster: false,
        bugs: &InjectedBugs::default(),
        callers: &callers,
        conn: &mut conn,
        recovery: &mut recovery,
        out: &mut out,
        fx: &mut fx,
    }
    .read(Request::Acquire(op), frame);
    (result, fx)
}

#[test]
fn a_grant_goes_to_a_waiting_caller_and_a_late_one_is_compensated() {
    let op = acquire(false);
    let echo = op.call.lease_bytes.clone();
    let (result, fx) = read(op, reply(1, &echo, 42), true);
    assert!(result.is_ok());
    assert!(matches!(&fx[..], [Effect::Grant(op, 42)] if op.call.request == REQUEST));

    let (result, fx) = read(acquire(false), reply(1, &echo, 42), false);
    assert!(result.is_ok());
    assert!(matches!(&fx[..], [Effect::Compensate(_, Ran::Answered)]));
}

#[test]
fn a_stale_waiter_fails_and_gives_its_queue_place_back() {
    let op = acquire(true);
    let echo = op.call.lease_bytes.clone();
    let frame = Frame::Array(vec![
        Frame::Integer(-2),
        Frame::BulkString(echo),
        Frame::Integer(0),
        Frame::Integer(0),
        Frame::Integer(0),
        Frame::Integer(0),
    ]);
    let (result, fx) = read(op, frame, true);
    assert!(result.is_ok());
    assert!(matches!(
        &fx[..],
        [Effect::Fail(REQUEST, Unavailable::Stale), Effect::Leave(..)]
    ));
}

#[test]
fn noscript_reloads_and_resends_by_text_only_while_the_caller_waits() {
    let noscript = || Frame::Error("NOSCRIPT No matching script".into());
    let (result, fx) = read(acquire(false), noscript(), true);
    assert!(result.is_ok());
    assert!(matches!(
        &fx[..],
        [Effect::Reload(0, ScriptKind::Acquire), Effect::Resend(0, op)] if op.call().eval == Eval::Text
    ));
    let (_, fx) = read(acquire(false), noscript(), false);
    assert!(fx.is_empty(), "not executed and nobody waits: nothing to do");
}

#[test]
fn a_reply_echoing_another_id_is_ambiguous_and_retires_the_connection() {
    let other = Bytes::from_static(b"not-this-lease");
    let (result, fx) = read(acquire(false), reply(1, &other, 42), true);
    assert!(matches!(result, Err(ConnectionError::EchoMismatch)));
    assert!(matches!(
        &fx[..],
        [
            Effect::Fail(REQUEST, Unavailable::ConnectionLost(ConnectionError::EchoMismatch)),
            Effect::Compensate(_, Ran::MayStillRun)
        ]
    ));
}
