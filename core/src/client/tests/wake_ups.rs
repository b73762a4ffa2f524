use super::start;
use std::time::Duration;

use bytes::Bytes;

use crate::client::subscriber::{Heard, WakeUps};
use crate::config::Credentials;
use crate::event::ConnectionId;
use crate::resp::ReplyLimits;

fn push(kind: &str, channel: &str, payload: &str) -> Vec<u8> {
    let item = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    format!("*3\r\n{}{}{}", item(kind), item(channel), item(payload)).into_bytes()
}

/// Driven alone: opened when wanted, authenticates, subscribes in
/// order, reads what releases published, marks itself dirty when a
/// wanted subscription is dropped, and closes and waits on its own
/// timers.
#[test]
fn it_opens_subscribes_hears_and_retries_on_its_timers() {
    let t0 = start();
    let mut wake_ups = WakeUps::default();
    let (a, b) = (Bytes::from_static(b"p:{t|a}:wake"), Bytes::from_static(b"p:{t|b}:wake"));
    assert!(!wake_ups.should_open(t0, &[]), "nobody waits");
    assert!(wake_ups.should_open(t0, std::slice::from_ref(&a)));
    wake_ups.opening(ConnectionId(7), t0 + Duration::from_secs(1), ReplyLimits::default());
    assert_eq!(
        wake_ups.poll_timeout(true),
        Some(t0 + Duration::from_secs(1)),
        "its connect deadline"
    );
    assert!(wake_ups.take_outgoing().is_none(), "nothing written before it is open");

    let credentials = Credentials {
        username: None,
        password: "pw".into(),
    };
    wake_ups.connected(Some(&credentials));
    assert!(wake_ups.take_dirty(), "open: its channels need a sync");
    wake_ups.subscribe(&[a.clone(), b.clone()]);
    let (id, written) = wake_ups.take_outgoing().unwrap();
    assert_eq!(id, ConnectionId(7));
    let written = String::from_utf8(written.to_vec()).unwrap();
    assert!(
        written.starts_with("*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*3\r\n$10\r\nSSUBSCRIBE\r\n"),
        "{written:?}"
    );

    let mut data = push("smessage", "p:{t|a}:wake", "H 9-1 41 9-2 42");
    data.extend(push("smessage", "p:{t|b}:wake", "N 9-3"));
    let heard = wake_ups.input(&data, |_| true).unwrap();
    assert!(
        matches!(&heard[..], [Heard::Handed(_, handed), Heard::WakeThese(_, ids)]
        if handed.len() == 2 && handed[1].1 == 42 && ids.len() == 1)
    );

    // A subscription confirmed: every waiter there checks (see `waiters.rs`).
    let confirmed = b"*3\r\n$10\r\nssubscribe\r\n$12\r\np:{t|a}:wake\r\n:1\r\n";
    let heard = wake_ups.input(confirmed, |_| true).unwrap();
    assert!(matches!(&heard[..], [Heard::Subscribed(channel)] if &channel[..] == b"p:{t|a}:wake"));

    // The server drops b's subscription while someone still waits there.
    let dropped = b"*3\r\n$12\r\nsunsubscribe\r\n$12\r\np:{t|b}:wake\r\n:1\r\n";
    assert!(wake_ups.input(dropped, |channel| channel == &b).unwrap().is_empty());
    assert!(wake_ups.take_dirty());

    // Garbage breaks it: closed, opened again after the backoff.
    assert!(wake_ups.input(b"$-7\r\n", |_| true).is_err());
    assert_eq!(wake_ups.close(t0, Duration::from_secs(1)), Some(ConnectionId(7)));
    assert!(!wake_ups.should_open(t0, std::slice::from_ref(&a)));
    assert_eq!(wake_ups.poll_timeout(true), Some(t0 + Duration::from_secs(1)));
    assert_eq!(wake_ups.poll_timeout(false), None, "nobody waits: no timer");
    assert!(wake_ups
        .handle_timeout(t0 + Duration::from_secs(1), Duration::from_secs(1))
        .is_none());
    assert!(wake_ups.take_dirty(), "its retry time came");
    assert!(wake_ups.should_open(t0 + Duration::from_secs(1), &[a]));
}

#[test]
fn a_connection_that_does_not_open_in_time_is_closed() {
    let t0 = start();
    let mut wake_ups = WakeUps::default();
    wake_ups.opening(ConnectionId(3), t0 + Duration::from_secs(1), ReplyLimits::default());
    assert!(wake_ups.handle_timeout(t0, Duration::from_secs(2)).is_none());
    assert_eq!(
        wake_ups.handle_timeout(t0 + Duration::from_secs(1), Duration::from_secs(2)),
        Some(ConnectionId(3))
    );
    assert_eq!(wake_ups.id(), None);
    assert_eq!(wake_ups.poll_timeout(true), Some(t0 + Duration::from_secs(3)));
}
