//! The sub-machines driven alone, by their own timers: what each asks the
//! client to do (its effects), with no client around it.

use std::time::Instant;

/// The one clock read of these tests: an arbitrary starting point.
#[allow(clippy::disallowed_methods)]
fn start() -> Instant {
    Instant::now()
}

mod keep_alive {
    use super::start;
    use crate::client::keep_alive::{Effect, KeepAlive, Renewed};
    use crate::event::{Lease, LeaseLost, RequestId};
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
        assert!(keep.on_renewed(RequestId(10), Renewed::Unanswered).is_none());
        assert_eq!(keep.poll_timeout(), Some(at + Duration::from_secs(1)), "a sixth later");

        let again = at + Duration::from_secs(1);
        let Some(Effect::Renew(_)) = keep.handle_timeout(again) else {
            panic!("retried");
        };
        keep.sent(&held.id, RequestId(11), again);
        let extended = lease(1, again, ttl);
        match keep.on_renewed(RequestId(11), Renewed::Extended(extended.clone())) {
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
        assert!(keep.on_renewed(RequestId(12), Renewed::Unanswered).is_none());
        let mut lost = None;
        while let Some(at) = keep.poll_timeout() {
            if let Some(effect) = keep.handle_timeout(at) {
                match effect {
                    Effect::Renew(lease) => keep.sent(&lease.id, RequestId(13), at),
                    Effect::Lost { reason, .. } => lost = Some((reason, at)),
                    Effect::Kept { .. } => panic!("nothing was extended"),
                }
            }
            if keep.is_renewal(RequestId(13)) {
                assert!(keep.on_renewed(RequestId(13), Renewed::Unanswered).is_none());
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
        assert!(keep.on_renewed(RequestId(3), Renewed::Gone).is_none());
        assert!(
            keep.handle_timeout(t0 + ttl * 2).is_none(),
            "nothing due for a released lease"
        );
    }
}

mod waiters {
    use super::start;
    use std::num::NonZeroU32;

    use crate::client::request::AcquireOp;
    use crate::client::request::{Call, Wait};
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
            wait: Some(Wait { until, patience_ms: 0 }),
        }
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
        assert!(waiters.queued(t0, waiting(1, until)).is_none());
        assert!(waiters.queued(t0, waiting(2, until)).is_none());
        assert_eq!(waiters.poll_timeout(), Some(t0 + recheck));

        assert_eq!(checked(waiters.woken(&channel, 1)), [1], "the first parked");
        // Two slots: 2 is parked and checks; 3 in flight checks once answered.
        assert_eq!(checked(waiters.woken(&channel, 2)), [2]);
        assert_eq!(
            checked(waiters.queued(t0, waiting(3, until)).into_iter().collect()),
            [3]
        );

        // 1 was in flight when the second wake-up walked past it: its
        // answer "queued" sends it again at once (the slot may have freed
        // after its check ran). Parked then, it checks on its own timer.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(
            checked(waiters.queued(later, waiting(1, until)).into_iter().collect()),
            [1]
        );
        assert!(waiters.queued(later, waiting(1, until)).is_none());
        assert!(waiters.handle_timeout(later).is_none());
        let due = waiters.poll_timeout().unwrap();
        assert_eq!(due, later + recheck);
        assert_eq!(checked(waiters.handle_timeout(due).into_iter().collect()), [1]);

        // A slot handed to 2 (parked) is delivered; one handed to an id no
        // waiter here has, but that we issued and do not hold, is left.
        assert!(waiters.queued(due, waiting(2, until)).is_none());
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

    #[test]
    fn an_injected_deafness_ignores_wake_ups_but_not_own_checks() {
        let t0 = start();
        let mut waiters = Waiters::new(Duration::from_secs(1), Duration::from_secs(5));
        waiters.ignore_wake_ups_for_test();
        let until = t0 + Duration::from_secs(30);
        waiters.start(&waiting(1, until));
        assert!(waiters.queued(t0, waiting(1, until)).is_none());
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
}

mod release_queue {
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
}

mod wake_ups {
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
}

mod redirects {
    use std::time::Duration;

    use crate::address::Endpoint;
    use crate::client::error_class::Redirect;
    use crate::client::network::Network;
    use crate::client::reconnect::Reconnect;
    use crate::client::redirects::Next;
    use crate::client::topology::Topology;
    use crate::event::Stats;

    fn seed() -> Network {
        let mut net = Network::new(Topology::cluster(1, false));
        let endpoint = Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 7000,
        };
        net.node_at(&endpoint, reconnect);
        net
    }

    fn reconnect(_: usize) -> Reconnect {
        Reconnect::new(Duration::from_millis(10), Duration::from_secs(1), [0; 16])
    }

    #[test]
    fn a_request_follows_five_redirects_in_a_row_and_gives_up_at_the_sixth() {
        let mut net = seed();
        let (mut redirects, mut stats) = (0, Stats::default());
        for round in 1..=5 {
            let (next, refresh) = net.redirected(
                0,
                Redirect::Moved,
                "MOVED 3999 127.0.0.1:7001",
                &mut redirects,
                &mut stats,
                reconnect,
            );
            assert_eq!((next, refresh), (Next::Route { ask: None }, true), "round {round}");
        }
        assert_eq!(net.nodes.len(), 2, "the node a MOVED names is added once");
        let (next, _) = net.redirected(
            0,
            Redirect::Ask,
            "ASK 3999 127.0.0.1:7001",
            &mut redirects,
            &mut stats,
            reconnect,
        );
        assert_eq!(next, Next::GiveUp);
        assert_eq!((stats.moved, stats.asked), (5, 0));
    }

    #[test]
    fn a_wait_starts_the_count_again_and_an_ask_goes_once_to_its_target() {
        let mut net = seed();
        let (mut redirects, mut stats) = (4, Stats::default());
        let (next, refresh) = net.redirected(
            0,
            Redirect::TryAgain,
            "TRYAGAIN x",
            &mut redirects,
            &mut stats,
            reconnect,
        );
        assert_eq!((next, refresh, redirects, stats.try_again), (Next::Later, false, 0, 1));
        let (next, refresh) = net.redirected(
            0,
            Redirect::ReadOnly,
            "READONLY no",
            &mut redirects,
            &mut stats,
            reconnect,
        );
        assert_eq!((next, refresh), (Next::Later, true));
        let (next, refresh) = net.redirected(
            0,
            Redirect::Ask,
            "ASK 12 127.0.0.1:7002",
            &mut redirects,
            &mut stats,
            reconnect,
        );
        assert_eq!((next, refresh, stats.asked), (Next::Route { ask: Some(1) }, false, 1));
        let (next, _) = net.redirected(
            0,
            Redirect::Moved,
            "MOVED nowhere",
            &mut redirects,
            &mut stats,
            reconnect,
        );
        assert_eq!(next, Next::GiveUp, "a redirect that names no node");
    }
}

mod handshake {
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
        assert_eq!(left, steps.len() - 1);
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
}
