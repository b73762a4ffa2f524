use std::time::Duration;

use bytes::Bytes;

use super::start;
use crate::client::connection::{Connection, Phase};
use crate::client::handshake::{Expect, StepAnswer};
use crate::client::request::Step;
use crate::config::Config;
use crate::event::{ConnectionError, ConnectionId, Warning};
use crate::resp::{Frame, ReplyLimits};
use crate::scripts::Scripts;

fn opened() -> (Connection, Vec<Step>) {
    let t0 = start();
    let mut conn = Connection::new(ConnectionId(1), t0 + Duration::from_secs(1), ReplyLimits::default());
    let steps = conn.start_handshake(t0, &Config::default(), false);
    (conn, steps)
}

fn expect(allow_eviction: bool) -> Expect<'static> {
    Expect {
        cluster: false,
        sentinel: false,
        allow_eviction,
        scripts: Scripts::shared(),
    }
}

#[test]
fn the_last_answer_is_all_in_and_a_second_start_writes_nothing() {
    let (mut conn, steps) = opened();
    assert_eq!(&steps[..3], &[Step::Ping, Step::Role, Step::Info]);
    assert!(conn.start_handshake(start(), &Config::default(), false).is_empty());
    let pong = Frame::SimpleString(Bytes::from_static(b"PONG"));
    let answer = conn.read_step(start(), Step::Ping, pong, &expect(false)).unwrap();
    assert_eq!(answer, StepAnswer::default());
    let Phase::Handshaking { steps: left, .. } = conn.phase else {
        panic!("still handshaking")
    };
    // Standalone, the marker (a write) is counted but goes out only once
    // `INFO` has answered that this is a primary.
    assert!(!steps.contains(&Step::Marker));
    assert_eq!(left, steps.len() + 1 - 1);
    assert_eq!(conn.marker_due(Step::Ping, false), None);
    assert!(conn.marker_due(Step::Info, false).is_some());
    assert_eq!(conn.marker_due(Step::Info, true), None, "a cluster writes no marker");
    for _ in 1..left {
        assert!(!conn.step_answered());
    }
    assert!(conn.step_answered(), "the last step");
}

#[test]
fn a_replica_is_refused_and_eviction_warns_only_when_allowed() {
    let (mut conn, _) = opened();
    let role = Frame::Array(vec![
        Frame::BulkString(Bytes::from_static(b"slave")),
        Frame::BulkString(Bytes::from_static(b"127.0.0.1")),
        Frame::Integer(6379),
        Frame::BulkString(Bytes::from_static(b"connected")),
        Frame::Integer(0),
    ]);
    conn.read_step(start(), Step::Role, role, &expect(false)).unwrap();
    let info = Frame::BulkString(Bytes::from_static(b"redis_version:7.0.15\r\n"));
    let refused = conn.read_step(start(), Step::Info, info, &expect(false));
    assert!(matches!(refused, Err(ConnectionError::Replica(_))), "{refused:?}");

    let (mut conn, _) = opened();
    let evicting = b"redis_version:7.0.15\r\nmaxmemory:1000\r\nmaxmemory_policy:allkeys-lru\r\n";
    let info = || Frame::BulkString(Bytes::from_static(evicting));
    let refused = conn.read_step(start(), Step::Info, info(), &expect(false));
    assert!(matches!(refused, Err(ConnectionError::Eviction(_))), "{refused:?}");
    let (mut conn, _) = opened();
    let answer = conn.read_step(start(), Step::Info, info(), &expect(true)).unwrap();
    assert!(matches!(answer.warning, Some(Warning::Eviction(_))), "{answer:?}");
}

#[test]
fn behind_sentinel_a_refused_role_ends_the_handshake() {
    let (mut conn, _) = opened();
    let refused = Frame::Error("NOPERM this user has no permissions to run the 'role' command".into());
    let sentinel = Expect {
        sentinel: true,
        ..expect(false)
    };
    let error = conn.read_step(start(), Step::Role, refused.clone(), &sentinel);
    assert!(matches!(error, Err(ConnectionError::Handshake(_))), "{error:?}");
    let (mut conn, _) = opened();
    assert!(
        conn.read_step(start(), Step::Role, refused, &expect(false)).is_ok(),
        "standalone: no ROLE, go on"
    );
}
