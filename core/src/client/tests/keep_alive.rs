use super::start;
use crate::client::keep_alive::{Effect, KeepAlive};
use crate::event::{Lease, LeaseLost, Renewal, RequestId, Unavailable};
use crate::key::{Key, SubjectKeys};
use crate::lease_id::LeaseId;
use std::time::{Duration, Instant};

fn lease(counter: u64, now: Instant, ttl: Duration) -> Lease {
    Lease {
        id: LeaseId::from_parts(7, counter),
        keys: SubjectKeys::new("p", &Key::new("t", "s").unwrap()),
        expires_at: now + ttl,
        fencing_token: 1,
        granted_at: now,
        release_until: now + ttl,
    }
}

/// Driven alone, by its own timer: renew a third into the TTL, retry a
/// sixth after an unanswered attempt, report the lease lost at its
/// expiry; an extension reschedules and is reported.
#[test]
fn it_renews_retries_and_loses_on_its_own_schedule() {
    let ttl = Duration::from_secs(6);
    let t0 = start();
    let mut keep = KeepAlive::new(ttl);
    let held = lease(1, t0, ttl);
    keep.keep(t0, &held);
    assert_eq!(keep.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    assert!(keep.handle_timeout(t0 + Duration::from_secs(1)).is_none());

    let at = t0 + Duration::from_secs(2);
    let Some(Effect::Renew(renewing)) = keep.handle_timeout(at) else {
        panic!("due at a third of the TTL");
    };
    assert_eq!(renewing.id, held.id);
    keep.sent(&renewing.id, RequestId(10), at);
    assert!(keep.is_renewal(RequestId(10)));
    assert!(keep
        .on_renewed(RequestId(10), Renewal::Unavailable(Unavailable::Timeout))
        .is_none());
    assert_eq!(keep.poll_timeout(), Some(at + Duration::from_secs(1)), "a sixth later");

    let again = at + Duration::from_secs(1);
    let Some(Effect::Renew(_)) = keep.handle_timeout(again) else {
        panic!("retried");
    };
    keep.sent(&held.id, RequestId(11), again);
    let extended = lease(1, again, ttl);
    match keep.on_renewed(RequestId(11), Renewal::Extended(extended.clone())) {
        Some(Effect::Kept { expires_at, .. }) => assert_eq!(expires_at, extended.expires_at),
        other => panic!("{other:?}"),
    }
    assert_eq!(keep.poll_timeout(), Some(again + Duration::from_secs(2)));

    // Unanswered until the expiry: lost, and nothing is due any more.
    let late = again + Duration::from_secs(2);
    let Some(Effect::Renew(_)) = keep.handle_timeout(late) else {
        panic!("due");
    };
    keep.sent(&held.id, RequestId(12), late);
    assert!(keep
        .on_renewed(RequestId(12), Renewal::Unavailable(Unavailable::Timeout))
        .is_none());
    let mut lost = None;
    while let Some(at) = keep.poll_timeout() {
        if let Some(effect) = keep.handle_timeout(at) {
            match effect {
                Effect::Renew(lease) => keep.sent(&lease.id, RequestId(13), at),
                Effect::Lost { reason, .. } => lost = Some((reason, at)),
                Effect::Kept { .. } | Effect::Confirmed { .. } => panic!("nothing was extended"),
            }
        }
        if keep.is_renewal(RequestId(13)) {
            assert!(keep
                .on_renewed(RequestId(13), Renewal::Unavailable(Unavailable::Timeout))
                .is_none());
        }
    }
    assert_eq!(lost, Some((LeaseLost::Expired, extended.expires_at)));
    assert_eq!(keep.len(), 0);
}

#[test]
fn a_renewal_answered_after_a_release_changes_nothing() {
    let ttl = Duration::from_secs(6);
    let t0 = start();
    let mut keep = KeepAlive::new(ttl);
    let held = lease(1, t0, ttl);
    keep.keep(t0, &held);
    let at = keep.poll_timeout().unwrap();
    assert!(matches!(keep.handle_timeout(at), Some(Effect::Renew(_))));
    keep.sent(&held.id, RequestId(3), at);
    assert_eq!(keep.remove(&held.id), Some(held.expires_at));
    assert!(!keep.is_renewal(RequestId(3)));
    assert!(keep.on_renewed(RequestId(3), Renewal::Lost).is_none());
    assert!(
        keep.handle_timeout(t0 + ttl * 2).is_none(),
        "nothing due for a released lease"
    );
}

/// A slot handed over until `expires_at` (800 ms here) is confirmed by one
/// renewal an eighth of the way in, and then kept no longer; one given back
/// before that costs no renewal; one whose holder asks for keep-alive
/// meanwhile is kept on after it.
#[test]
fn a_hand_over_is_confirmed_once_an_eighth_into_its_reservation() {
    let (ttl, reserved) = (Duration::from_secs(6), Duration::from_millis(800));
    let t0 = start();
    let mut keep = KeepAlive::new(ttl);
    let handed = lease(1, t0, reserved);
    keep.confirm(t0, &handed);
    assert_eq!(keep.len(), 0, "not a lease kept alive");
    assert_eq!(keep.poll_timeout(), Some(t0 + Duration::from_millis(100)));
    assert!(keep.handle_timeout(t0 + Duration::from_millis(99)).is_none());
    let at = t0 + Duration::from_millis(100);
    let Some(Effect::Renew(renewing)) = keep.handle_timeout(at) else {
        panic!("due an eighth of the way in");
    };
    keep.sent(&renewing.id, RequestId(20), at);
    // Unanswered: tried again halfway to the reservation's end.
    assert!(keep
        .on_renewed(RequestId(20), Renewal::Unavailable(Unavailable::Timeout))
        .is_none());
    assert_eq!(keep.poll_timeout(), Some(at + Duration::from_millis(350)));
    let again = at + Duration::from_millis(350);
    assert!(matches!(keep.handle_timeout(again), Some(Effect::Renew(_))));
    keep.sent(&handed.id, RequestId(21), again);
    let whole = lease(1, again, ttl);
    match keep.on_renewed(RequestId(21), Renewal::Extended(whole.clone())) {
        Some(Effect::Confirmed { expires_at, .. }) => assert_eq!(expires_at, whole.expires_at),
        other => panic!("{other:?}"),
    }
    assert_eq!(keep.poll_timeout(), None, "confirmed once, kept no longer");

    // Given back before its confirmation: nothing is ever sent.
    let short = lease(2, t0, reserved);
    keep.confirm(t0, &short);
    assert_eq!(keep.remove(&short.id), Some(short.expires_at));
    assert!(keep.handle_timeout(t0 + reserved).is_none());

    // Its holder asks for keep-alive before the confirmation: kept on.
    let kept = lease(3, t0, reserved);
    keep.confirm(t0, &kept);
    keep.keep(t0, &kept);
    assert_eq!(keep.len(), 1);
    let at = keep.poll_timeout().unwrap();
    assert!(matches!(keep.handle_timeout(at), Some(Effect::Renew(_))));
    keep.sent(&kept.id, RequestId(22), at);
    let extended = lease(3, at, ttl);
    assert!(matches!(
        keep.on_renewed(RequestId(22), Renewal::Extended(extended)),
        Some(Effect::Kept { .. })
    ));
    assert!(keep.poll_timeout().is_some(), "still kept alive");
}

/// Its holder's own renewal does keep-alive's work: a hand-over still to
/// confirm is dropped (even with its confirmation on the wire, whose answer
/// then belongs to nobody); a kept lease is next due from the new expiry.
#[test]
fn a_renewal_by_its_holder_stands_for_keep_alive_own() {
    let ttl = Duration::from_secs(6);
    let t0 = start();
    let mut keep = KeepAlive::new(ttl);
    let handed = lease(1, t0, Duration::from_millis(800));
    keep.confirm(t0, &handed);
    let at = keep.poll_timeout().unwrap();
    assert!(matches!(keep.handle_timeout(at), Some(Effect::Renew(_))));
    keep.sent(&handed.id, RequestId(30), at);
    keep.extended(&lease(1, at, ttl));
    assert!(!keep.is_renewal(RequestId(30)), "its answer is nobody's");
    assert_eq!(keep.poll_timeout(), None);

    let kept = lease(2, t0, ttl);
    keep.keep(t0, &kept);
    assert_eq!(keep.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    let later = t0 + Duration::from_secs(1);
    keep.extended(&lease(2, later, ttl));
    assert!(
        keep.handle_timeout(t0 + Duration::from_secs(2)).is_none(),
        "not due at the old time"
    );
    assert_eq!(keep.poll_timeout(), Some(later + Duration::from_secs(2)));
}
