//! What a release's queue check and hand-over replies come to.

use bytes::Bytes;

use super::start;
use crate::client::effect::Effect;
use crate::client::hand_over;
use crate::client::request::HandOver;
use crate::client::request::Request;
use crate::key::{Key, SubjectKeys};
use crate::resp::Frame;
use crate::scripts::{Eval, ScriptKind};

fn hand_over() -> HandOver {
    HandOver {
        keys: SubjectKeys::new("t", &Key::new("ns", "subject").unwrap()),
        ids: vec![Bytes::from_static(b"lease-1")],
        held_ms: 12,
        eval: Eval::Sha,
    }
}

fn onward(node: usize, cluster: bool, deadline: std::time::Instant) -> hand_over::Onward {
    hand_over::Onward {
        node,
        cluster,
        deadline,
    }
}

/// `hand_over::queues_checked` of `hand_overs` on node 0 (standalone),
/// with its effects, or its error.
fn checked(hand_overs: Vec<HandOver>, frame: Frame, deadline: std::time::Instant) -> Result<Vec<Effect>, String> {
    let mut fx = Vec::new();
    hand_over::queues_checked(hand_overs, frame, onward(0, false, deadline), &mut fx).map_err(|e| e.to_string())?;
    Ok(fx)
}

#[test]
fn a_queue_found_sends_release_on_the_same_node_and_none_sends_nothing() {
    let (mut fx, deadline) = (Vec::new(), start());
    hand_over::queues_checked(
        vec![hand_over()],
        Frame::Integer(1),
        onward(3, false, deadline),
        &mut fx,
    )
    .unwrap();
    match &fx[..] {
        [Effect::Send(3, Request::HandOver(sent), at)] => {
            assert_eq!(sent.ids, hand_over().ids);
            assert_eq!(sent.held_ms, 12);
            assert_eq!(*at, deadline);
        }
        other => panic!("{other:?}"),
    }
    let mut fx = Vec::new();
    hand_over::queues_checked(vec![hand_over()], Frame::Integer(0), onward(3, false, start()), &mut fx).unwrap();
    assert!(fx.is_empty(), "{fx:?}");
}

#[test]
fn a_queue_among_several_subjects_is_found_by_checking_each_again() {
    let other = || HandOver {
        keys: SubjectKeys::new("t", &Key::new("ns", "other").unwrap()),
        ..hand_over()
    };
    let deadline = start();
    let fx = checked(vec![hand_over(), other()], Frame::Integer(1), deadline).unwrap();
    let checked_again: Vec<_> = fx
        .iter()
        .map(|effect| match effect {
            Effect::Send(0, Request::QueueCheck(one), at) if *at == deadline && one.len() == 1 => one[0].keys.leases(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        checked_again,
        [hand_over().keys.leases(), other().keys.leases()],
        "one of two: each checked on its own"
    );
    // Both found: both handed over at once.
    let fx = checked(vec![hand_over(), other()], Frame::Integer(2), deadline).unwrap();
    assert!(
        matches!(
            &fx[..],
            [
                Effect::Send(0, Request::HandOver(_), _),
                Effect::Send(0, Request::HandOver(_), _)
            ]
        ),
        "{fx:?}"
    );
    assert!(
        checked(vec![hand_over()], Frame::Integer(-1), deadline).is_err(),
        "a negative count is no reply EXISTS gives"
    );
}

#[test]
fn a_script_not_cached_is_sent_again_by_text_once() {
    let mut fx = Vec::new();
    let noscript = || Frame::Error("NOSCRIPT No matching script".into());
    hand_over()
        .handed(noscript(), onward(0, false, start()), &mut fx)
        .unwrap();
    let again = match fx.as_mut_slice() {
        [Effect::Reload(0, ScriptKind::Release), Effect::Send(0, Request::HandOver(again), _)] => {
            assert_eq!(again.eval, Eval::Text);
            std::mem::replace(again, hand_over())
        }
        other => panic!("{other:?}"),
    };
    let mut fx = Vec::new();
    again.handed(noscript(), onward(0, false, start()), &mut fx).unwrap();
    assert!(fx.is_empty(), "by text and still refused: given up, {fx:?}");
}

#[test]
fn a_moved_slot_asks_for_a_slot_table_and_a_wrong_shape_retires() {
    let mut fx = Vec::new();
    let moved = Frame::Error("MOVED 12 127.0.0.1:7001".into());
    hand_over::queues_checked(vec![hand_over()], moved, onward(0, true, start()), &mut fx).unwrap();
    assert!(matches!(&fx[..], [Effect::RefreshTopology]), "{fx:?}");
    let mut fx = Vec::new();
    let garbled = Frame::BulkString(Bytes::from_static(b"1"));
    assert!(hand_over::queues_checked(vec![hand_over()], garbled, onward(0, false, start()), &mut fx).is_err());
    assert!(hand_over()
        .handed(Frame::Array(vec![]), onward(0, false, start()), &mut fx)
        .is_err());
}
