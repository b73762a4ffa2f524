use super::start;
use std::num::NonZeroU32;

use crate::client::request::AcquireOp;
use crate::client::request::{Call, Wait};
use crate::client::subscriber::Heard;
use crate::client::waiters::{Effect, Waiters};
use crate::event::RequestId;
use crate::key::Key;
use crate::key::SubjectKeys;
use crate::lease_id::LeaseId;
use bytes::Bytes;
use std::time::{Duration, Instant};

fn keys() -> SubjectKeys {
    SubjectKeys::new("p", &Key::new("t", "s").unwrap())
}

fn waiting(n: u64, until: Instant) -> AcquireOp {
    AcquireOp {
        call: Call::new(RequestId(n), LeaseId::from_parts(9, n), keys()),
        limit: NonZeroU32::new(1).unwrap(),
        wait: Some(Wait::until(until)),
        fenced: true,
    }
}

/// The id a waiter that lost its place goes on under.
fn fresh(old: &LeaseId) -> LeaseId {
    LeaseId::from_parts(9, 1_000).with_claim(old.weight(), None)
}

fn checked(effects: Vec<Effect>) -> Vec<u64> {
    effects
        .into_iter()
        .map(|effect| match effect {
            Effect::Check(op) => op.call.request.0,
            other => panic!("{other:?}"),
        })
        .collect()
}

/// Driven alone: wake-ups go to the first parked in arrival order, one
/// that comes while a waiter is in flight is kept for its answer, each
/// waiter checks on its own timer, and a hand-over is delivered.
#[test]
fn wake_ups_checks_and_hand_overs_come_back_as_effects() {
    let t0 = start();
    let recheck = Duration::from_secs(1);
    let mut waiters = Waiters::new(recheck, Duration::from_secs(5));
    let until = t0 + Duration::from_secs(30);
    let channel = keys().wake_channel();
    for n in 1..=3 {
        waiters.start(&waiting(n, until));
    }
    assert_eq!(waiters.take_changed().len(), 1, "the channel gained its first waiter");
    // 1 and 2 are queued (parked); 3 is still in flight.
    assert!(waiters.queued(t0, waiting(1, until), false, fresh).is_none());
    assert!(waiters.queued(t0, waiting(2, until), false, fresh).is_none());
    assert_eq!(waiters.poll_timeout(), Some(t0 + recheck));

    assert_eq!(checked(waiters.woken(&channel, 1)), [1], "the first parked");
    // Two slots: 2 is parked and checks; 3 in flight checks once answered.
    assert_eq!(checked(waiters.woken(&channel, 2)), [2]);
    assert_eq!(
        checked(
            waiters
                .queued(t0, waiting(3, until), false, fresh)
                .into_iter()
                .collect()
        ),
        [3]
    );

    // 1 was in flight when the second wake-up walked past it: its
    // answer "queued" sends it again at once (the slot may have freed
    // after its check ran). Parked then, it checks on its own timer.
    let later = t0 + Duration::from_millis(10);
    assert_eq!(
        checked(
            waiters
                .queued(later, waiting(1, until), false, fresh)
                .into_iter()
                .collect()
        ),
        [1]
    );
    assert!(waiters.queued(later, waiting(1, until), false, fresh).is_none());
    assert!(waiters.handle_timeout(later).is_none());
    let due = waiters.poll_timeout().unwrap();
    assert_eq!(due, later + recheck);
    assert_eq!(checked(waiters.handle_timeout(due).into_iter().collect()), [1]);

    // A slot handed to 2 (parked) is delivered; one handed to an id no
    // waiter here has, but that we issued and do not hold, is left.
    assert!(waiters.queued(due, waiting(2, until), false, fresh).is_none());
    let ours = LeaseId::from_parts(9, 77);
    let handed = vec![
        (Bytes::from(LeaseId::from_parts(9, 2).to_bytes()), 41),
        (Bytes::from(ours.to_bytes()), 42),
    ];
    let effects = waiters.handed(due, &channel, handed, |id| *id == ours);
    assert!(matches!(&effects[..], [Effect::Handed { op, token: 41 }] if op.call.request == RequestId(2)));
    let leaves = waiters.take_leaves(due, |_| Some(0));
    assert_eq!(leaves.len(), 1);
    assert_eq!(leaves[0].lease, Bytes::from(ours.to_bytes()));
    assert_eq!(leaves[0].until, due + Duration::from_secs(5), "a waiter's lifetime");

    // A queued waiter whose caller left owes a LEAVE; a granted one not.
    waiters.remove(RequestId(3), false, due);
    waiters.remove(RequestId(2), true, due);
    assert_eq!(waiters.leaves_owed(), 1);
    assert!(
        waiters.take_leaves(due, |_| None).is_empty(),
        "kept until its node is ready"
    );
    assert_eq!(waiters.leaves_owed(), 1);
    assert!(
        waiters
            .take_leaves(due + Duration::from_secs(5), |_| Some(0))
            .is_empty(),
        "moot by then"
    );
}

/// A waiter queued before that enters the queue again lost its place and
/// any slot a release handed it, and that hand-over's message may still
/// come: it goes on at once under a new lease id, its check naming the old
/// one so that Redis moves what the old id has now to the new (no `LEAVE`
/// while that check may run). The late message names the old id, which
/// nobody waits with any more: never delivered, and left to that check.
#[test]
fn a_waiter_queued_again_goes_on_under_a_new_id_and_old_hand_overs_are_left() {
    let t0 = start();
    let mut waiters = Waiters::new(Duration::from_secs(1), Duration::from_secs(5));
    let until = t0 + Duration::from_secs(30);
    let channel = keys().wake_channel();
    waiters.start(&waiting(1, until));
    assert!(
        waiters.queued(t0, waiting(1, until), true, fresh).is_none(),
        "first entry: parked"
    );
    assert!(
        waiters.queued(t0, waiting(1, until), false, fresh).is_none(),
        "kept its place"
    );
    let effect = waiters.queued(t0, waiting(1, until), true, fresh);
    let Some(Effect::Check(mut op)) = effect else {
        panic!("{effect:?}")
    };
    assert_eq!(op.call.request, RequestId(1), "the same caller");
    assert_eq!(op.call.lease, fresh(&LeaseId::from_parts(9, 1)), "under a new id");
    let old = Bytes::from(LeaseId::from_parts(9, 1).to_bytes());
    assert_eq!(
        op.wait.as_ref().unwrap().previous,
        Some(old.clone()),
        "naming the old id"
    );
    assert_eq!(waiters.leaves_owed(), 0, "the check takes the old id over");
    let issued = |id: &LeaseId| id.parts().0 == 9;
    let late = waiters.handed(t0, &channel, vec![(old.clone(), 41)], issued);
    assert!(late.is_empty(), "not delivered: {late:?}");
    assert_eq!(waiters.leaves_owed(), 0, "the slot handed to the old id is the check's");
    // Its check ran: it names the old id no more, and a message for the
    // old id is answered with a `LEAVE` like any to an id nobody waits with.
    op.call.sent_at = Some(t0);
    assert!(
        waiters.queued(t0, op, false, fresh).is_none(),
        "kept the old id's place"
    );
    let late = waiters.handed(t0, &channel, vec![(old.clone(), 41)], issued);
    assert!(late.is_empty(), "not delivered: {late:?}");
    let leaves = waiters.take_leaves(t0, |_| Some(0));
    assert_eq!(leaves.len(), 1);
    assert_eq!(leaves[0].lease, old);
    // A hand-over to the new id is delivered, and its next check names
    // nothing.
    let new = Bytes::from(fresh(&LeaseId::from_parts(9, 1)).to_bytes());
    let handed = waiters.handed(t0, &channel, vec![(new, 42)], issued);
    match &handed[..] {
        [Effect::Handed { op, token: 42 }] => {
            assert_eq!(op.call.request, RequestId(1));
            assert_eq!(op.wait.as_ref().unwrap().previous, None);
        }
        other => panic!("{other:?}"),
    }
}

/// A waiter whose caller leaves before its renamed check ran owes a `LEAVE`
/// for both ids: the check may never run.
#[test]
fn a_waiter_gone_before_its_renamed_check_ran_leaves_under_both_ids() {
    let t0 = start();
    let mut waiters = Waiters::new(Duration::from_secs(1), Duration::from_secs(5));
    let until = t0 + Duration::from_secs(30);
    waiters.start(&waiting(1, until));
    assert!(waiters.queued(t0, waiting(1, until), true, fresh).is_none());
    assert!(waiters.queued(t0, waiting(1, until), true, fresh).is_some(), "renamed");
    waiters.remove(RequestId(1), false, t0);
    let mut left: Vec<Bytes> = waiters
        .take_leaves(t0, |_| Some(0))
        .into_iter()
        .map(|leave| leave.lease)
        .collect();
    left.sort();
    let mut both = vec![
        Bytes::from(LeaseId::from_parts(9, 1).to_bytes()),
        Bytes::from(fresh(&LeaseId::from_parts(9, 1)).to_bytes()),
    ];
    both.sort();
    assert_eq!(left, both);
}

#[test]
fn an_injected_deafness_ignores_wake_ups_but_not_own_checks() {
    let t0 = start();
    let mut waiters = Waiters::new(Duration::from_secs(1), Duration::from_secs(5));
    waiters.ignore_wake_ups_for_test();
    let until = t0 + Duration::from_secs(30);
    waiters.start(&waiting(1, until));
    assert!(waiters.queued(t0, waiting(1, until), false, fresh).is_none());
    assert!(waiters.woken(&keys().wake_channel(), 1).is_empty());
    assert_eq!(
        checked(
            waiters
                .handle_timeout(t0 + Duration::from_secs(1))
                .into_iter()
                .collect()
        ),
        [1]
    );
}

/// A release may hand a slot to any waiter of a channel before this
/// client's subscription to it is confirmed, and that message is never
/// heard: the confirmation sends every parked waiter there to check, where
/// a plain wake-up sends the first.
#[test]
fn a_confirmed_subscription_sends_every_parked_waiter_of_its_channel_to_check() {
    let t0 = start();
    let mut waiters = Waiters::new(Duration::from_secs(1), Duration::from_secs(5));
    let until = t0 + Duration::from_secs(30);
    let channel = keys().wake_channel();
    for n in 1..=3 {
        waiters.start(&waiting(n, until));
        assert!(waiters.queued(t0, waiting(n, until), false, fresh).is_none());
    }
    let woken = waiters.hear(t0, Heard::Wake(channel.clone()), |_| false);
    assert_eq!(checked(woken), [1], "a wake-up: the first parked");
    let woken = waiters.hear(t0, Heard::Subscribed(channel.clone()), |_| false);
    assert_eq!(checked(woken), [2, 3], "subscribed: every one parked");
}

/// A `LEAVE` refused (a busy server, a slot migrating) is tried again a
/// sixteenth of a lifetime later, not at every turn of the driver, and
/// dropped once it stops mattering.
#[test]
fn a_refused_leave_is_tried_again_later_not_at_once() {
    let t0 = start();
    let lifetime = Duration::from_millis(1600);
    let mut waiters = Waiters::new(Duration::from_millis(500), lifetime);
    let lease = Bytes::from(LeaseId::from_parts(9, 1).to_bytes());
    let until = t0 + lifetime;
    waiters.leave_again(keys(), lease.clone(), until, t0);
    assert!(waiters.take_leaves(t0, |_| Some(0)).is_empty(), "not at once");
    let retry = t0 + Duration::from_millis(100);
    assert_eq!(waiters.poll_timeout(), Some(retry));
    let leaves = waiters.take_leaves(retry, |_| Some(0));
    assert_eq!(leaves.len(), 1);
    assert_eq!(leaves[0].lease, lease);
    waiters.leave_again(keys(), lease, until, until - Duration::from_millis(50));
    assert!(waiters.take_leaves(until, |_| Some(0)).is_empty(), "moot by then");
    assert_eq!(waiters.leaves_owed(), 0);
}

/// A hand-over heard with less than half its reservation left (the
/// reservation runs a lifetime from the check that queued the waiter) is
/// not delivered: the waiter checks again, as a fresh write, and gets the
/// slot with a whole TTL if it is still reserved. One heard in time is
/// delivered.
#[test]
fn a_hand_over_heard_with_under_half_its_reservation_left_is_checked_again() {
    let t0 = start();
    let lifetime = Duration::from_secs(1);
    let until = t0 + Duration::from_secs(30);
    let channel = keys().wake_channel();
    let handed = |n| vec![(Bytes::from(LeaseId::from_parts(9, n).to_bytes()), 7)];
    let mut waiters = Waiters::new(lifetime / 3, lifetime);
    for n in 1..=2 {
        let mut op = waiting(n, until);
        op.call.sent_at = Some(t0);
        waiters.start(&op);
        assert!(waiters.queued(t0, op, false, fresh).is_none());
    }
    let in_time = t0 + Duration::from_millis(400);
    let effects = waiters.handed(in_time, &channel, handed(1), |_| false);
    assert!(matches!(&effects[..], [Effect::Handed { op, token: 7 }] if op.call.request == RequestId(1)));
    let late = t0 + Duration::from_millis(600);
    let effects = waiters.handed(late, &channel, handed(2), |_| false);
    match &effects[..] {
        [Effect::CheckLate(op)] => {
            assert_eq!(op.call.request, RequestId(2));
            assert_eq!(op.call.sent_at, None, "sent again as a fresh write");
        }
        other => panic!("{other:?}"),
    }
}
