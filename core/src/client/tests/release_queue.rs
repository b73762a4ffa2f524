use super::start;
use std::time::{Duration, Instant};

use crate::client::release_queue::{Given, ReleaseQueue};
use crate::client::request::{ReleaseJob, ReleaseKind};
use crate::config::ReleasePolicy;
use crate::event::{Lease, ReleaseFailure};
use crate::key::{Key, SubjectKeys};
use crate::lease_id::LeaseId;

fn job(counter: u64, now: Instant, ttl: Duration) -> ReleaseJob {
    let lease = Lease {
        id: LeaseId::from_parts(5, counter),
        keys: SubjectKeys::new("p", &Key::new("t", "s").unwrap()),
        expires_at: now + ttl,
        fencing_token: 1,
        granted_at: now,
        release_until: now + ttl,
    };
    ReleaseJob::of(lease, ReleaseKind::Release, now)
}

fn policy() -> ReleasePolicy {
    ReleasePolicy {
        max_attempts: 4,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(250),
        max_retrying: 2,
    }
}

fn reason(given: Option<Given>) -> Option<ReleaseFailure> {
    given.map(|Given::Up(_, reason)| reason)
}

/// Driven alone: backoff doubling to its cap, due only on a ready
/// node, given up after its attempts, past its deadline, or for room.
#[test]
fn retries_back_off_and_give_up_for_a_reason() {
    let t0 = start();
    let mut queue = ReleaseQueue::new(policy());
    let ms = Duration::from_millis;
    assert!(queue.retry(t0, job(1, t0, Duration::from_secs(60))).is_none());
    assert_eq!(queue.poll_timeout(|_| true), Some(t0 + ms(100)), "the first backoff");
    assert_eq!(
        queue.poll_timeout(|_| false),
        Some(t0 + Duration::from_secs(60)),
        "not sendable: only its deadline"
    );
    assert!(queue.take_due(t0 + ms(99), |_| true).is_empty());
    let mut retried = queue.take_due(t0 + ms(100), |_| true);
    assert_eq!(retried.len(), 1);
    let again = retried.pop().unwrap();
    let at = t0 + ms(100);
    assert!(queue.retry(at, again).is_none());
    assert_eq!(queue.poll_timeout(|_| true), Some(at + ms(200)), "doubled");
    let mut third = queue.take_due(at + ms(200), |_| true);
    let at = at + ms(200);
    assert!(queue.retry(at, third.pop().unwrap()).is_none());
    assert_eq!(queue.poll_timeout(|_| true), Some(at + ms(250)), "capped");
    let fourth = queue.take_due(at + ms(250), |_| true).pop().unwrap();
    assert_eq!(
        reason(queue.retry(at + ms(250), fourth)),
        Some(ReleaseFailure::AttemptsExhausted)
    );

    // A backoff that would end past the deadline gives up at once.
    assert_eq!(
        reason(queue.retry(t0, job(2, t0, ms(50)))),
        Some(ReleaseFailure::Expired)
    );
    // A deadline that passes while waiting: taken out as expired.
    assert!(queue.queue(job(3, t0, ms(500))).is_none());
    assert!(queue.take_expired(t0 + ms(499)).is_empty());
    assert_eq!(queue.take_expired(t0 + ms(500)).len(), 1);
    // No room beyond `max_retrying`.
    assert!(queue.queue(job(4, t0, Duration::from_secs(60))).is_none());
    assert!(queue.queue(job(5, t0, Duration::from_secs(60))).is_none());
    assert_eq!(
        reason(queue.queue(job(6, t0, Duration::from_secs(60)))),
        Some(ReleaseFailure::Overloaded)
    );
    assert_eq!(queue.len(), 2);
}

/// A `TRYAGAIN` (its slot moving) spends no attempt: more refusals than
/// `max_attempts` keep the job, backing off to the cap, until its deadline.
#[test]
fn refusals_while_a_slot_moves_back_off_but_spend_no_attempt() {
    let t0 = start();
    let mut queue = ReleaseQueue::new(policy());
    let ms = Duration::from_millis;
    let mut job = job(1, t0, Duration::from_secs(2));
    let mut now = t0;
    let mut waits = Vec::new();
    for _ in 0..6 {
        assert!(queue.defer(now, job).is_none(), "kept: no attempt spent");
        let due = queue.poll_timeout(|_| true).unwrap();
        waits.push(due - now);
        now = due;
        job = queue.take_due(now, |_| true).pop().unwrap();
    }
    assert_eq!(waits, [ms(100), ms(200), ms(250), ms(250), ms(250), ms(250)]);
    assert_eq!(job.failures, 0);
    // A failure after them is the first one.
    assert!(queue.retry(now, job).is_none());
    let job = queue.take_due(now + ms(100), |_| true).pop().unwrap();
    assert_eq!(job.failures, 1);
    // Its deadline still bounds it.
    assert_eq!(
        reason(queue.defer(t0 + Duration::from_secs(2) - ms(10), job)),
        Some(ReleaseFailure::Expired)
    );
}
