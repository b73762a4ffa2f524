//! Waiting acquires on a real redis-server: first come, first served across
//! limiters, woken by releases (not by their periodic check), dead waiters
//! forgotten within their lifetime, deadlines kept, hopeless waits shed, a
//! slot handed over confirmed to a whole lease that its permit knows of.

use std::time::{Duration, Instant};

use inflight_core::key::SubjectKeys;
use inflight_core::resp::Frame;
use inflight_tests::RedisServer;
use inflight_tokio::{Acquire, Builder, Error, Key, Limiter, Lost, Permit};
use tokio::sync::mpsc;

const PREFIX: &str = "wait";

fn builder(server: &RedisServer) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(PREFIX)
        .default_limit(3)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("job", subject).unwrap()
}

/// Waiters queued in Redis for `subject`.
fn queued(server: &RedisServer, subject: &str) -> i64 {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    match server.client().call(&[b"ZCARD", &keys.queue()]) {
        Ok(Frame::Integer(n)) => n,
        other => panic!("ZCARD: {other:?}"),
    }
}

/// One waiter queued for `subject`, and one connection listening on its
/// wake channel: a hand-over published from here on reaches the waiter's
/// limiter (one published before its subscription took would reach nobody).
fn queued_and_listening(server: &RedisServer, subject: &str) -> bool {
    let channel = SubjectKeys::new(PREFIX, &key(subject)).wake_channel();
    let listening = Frame::Array(vec![Frame::BulkString(channel.clone()), Frame::Integer(1)]);
    queued(server, subject) == 1 && server.client().call(&[b"PUBSUB", b"SHARDNUMSUB", &channel]).ok() == Some(listening)
}

fn live(server: &RedisServer, subject: &str) -> i64 {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    match server.client().call(&[b"ZCARD", keys.leases()]) {
        Ok(Frame::Integer(n)) => n,
        other => panic!("ZCARD: {other:?}"),
    }
}

async fn eventually(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_waiters_on_three_limiters_are_served_in_arrival_order_each_by_a_wake_up() {
    let server = RedisServer::start();
    // A long lifetime: the periodic check comes every 10 s, so a grant
    // within a second of a release can only be the wake-up's doing.
    let limiters: Vec<Limiter> = futures_util::future::join_all(
        (0..3).map(|_| builder(&server).waiter_lifetime(Duration::from_secs(30)).connect()),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let subject = "fifo";
    let mut holders: Vec<Permit> = Vec::new();
    for limiter in &limiters {
        holders.push(limiter.acquire(&key(subject)).await.unwrap());
    }
    let (granted, mut grants) = mpsc::unbounded_channel::<(usize, Permit, Instant)>();
    let mut tasks = Vec::new();
    for arrival in 0..30 {
        let limiter = limiters[arrival % 3].clone();
        let granted = granted.clone();
        tasks.push(tokio::spawn(async move {
            let permit = limiter
                .acquire_wait(&key(subject), Duration::from_secs(60))
                .await
                .expect("a slot within the minute");
            let _ = granted.send((arrival, permit, Instant::now()));
        }));
        // The next one arrives only once this one is queued in Redis.
        eventually("the waiter is queued", Duration::from_secs(5), || {
            queued(&server, subject) == arrival as i64 + 1
        })
        .await;
    }
    // A fail-fast newcomer does not jump the queue.
    assert!(matches!(
        limiters[0].acquire(&key(subject)).await,
        Err(Error::Exceeded { .. })
    ));

    let mut order = Vec::new();
    let mut handoffs = Vec::new();
    let mut held: Vec<Permit> = Vec::new();
    for _ in 0..30 {
        // Free one slot; exactly the next waiter in line gets it.
        let released = Instant::now();
        let freed = if holders.is_empty() {
            held.remove(0)
        } else {
            holders.remove(0)
        };
        drop(freed);
        let (arrival, permit, at) = tokio::time::timeout(Duration::from_secs(5), grants.recv())
            .await
            .expect("a grant after the release")
            .expect("the channel is open");
        handoffs.push(at.duration_since(released));
        order.push(arrival);
        held.push(permit);
        assert_eq!(live(&server, subject), 3, "never more than the limit");
    }
    assert_eq!(order, (0..30).collect::<Vec<_>>(), "grants in arrival order");
    handoffs.sort();
    println!(
        "release -> next waiter granted: median {:?}, max {:?} (loopback; Redis round trip ~0.1 ms)",
        handoffs[handoffs.len() / 2],
        handoffs[handoffs.len() - 1]
    );
    assert!(
        handoffs[handoffs.len() - 1] < Duration::from_secs(1),
        "every hand-off came from a wake-up, not from the 10 s periodic check: {handoffs:?}"
    );
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(queued(&server, subject), 0);
    drop(held);
    for limiter in limiters {
        limiter.drain().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_replicas_waiter_stops_blocking_the_queue_within_its_lifetime() {
    let server = RedisServer::start();
    let subject = "crash";
    let lifetime = Duration::from_millis(600);
    let survivor = builder(&server).waiter_lifetime(lifetime).connect().await.unwrap();
    let holder = survivor.acquire_with(&key(subject), 1).await.unwrap();

    // The replica that will crash runs on a runtime of its own, and queues
    // first.
    let crashing = tokio::runtime::Runtime::new().unwrap();
    let url = server.url();
    crashing.spawn(async move {
        let limiter = Limiter::builder(url)
            .key_prefix(PREFIX)
            .waiter_lifetime(lifetime)
            .connect()
            .await
            .unwrap();
        let _ = limiter
            .acquire_opts(
                &key(subject),
                inflight_tokio::Acquire::default()
                    .limit(1)
                    .wait(Duration::from_secs(60)),
            )
            .await;
        std::future::pending::<()>().await;
    });
    eventually("the doomed waiter is queued", Duration::from_secs(5), || {
        queued(&server, subject) == 1
    })
    .await;
    let waiting = {
        let survivor = survivor.clone();
        tokio::spawn(async move {
            let options = inflight_tokio::Acquire::default()
                .limit(1)
                .wait(Duration::from_secs(10));
            survivor
                .acquire_opts(&key(subject), options)
                .await
                .map(|permit| (permit, Instant::now()))
        })
    };
    eventually("both are queued", Duration::from_secs(5), || {
        queued(&server, subject) == 2
    })
    .await;
    // The slot frees while the doomed waiter is first in line; then its
    // process dies without a word (no LEAVE, no more checks).
    drop(holder);
    let crashed = Instant::now();
    crashing.shutdown_background();

    let (permit, granted) = waiting.await.unwrap().expect("the survivor is served");
    let took = granted.duration_since(crashed);
    println!(
        "served {took:?} after the crash (lifetime {lifetime:?}, check every {:?})",
        lifetime / 3
    );
    // The bound: the dead entry expires a lifetime after its last check
    // (at most now), and the survivor checks every third of its lifetime.
    assert!(took <= lifetime + lifetime / 3 + Duration::from_millis(300), "{took:?}");
    drop(permit);
    survivor.drain().await;
}

/// A failover to a lagging replica can bring back the queue entry of a
/// waiter that was served (or left) meanwhile. A release then hands that
/// entry a slot nobody will claim; the limiter that issued the id gives it
/// back at once instead of letting it block the slot for a lifetime. (Found
/// by the madsim `failover` scenario: two such reservations outlived S10.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_entry_a_failover_brought_back_is_given_back_when_a_release_hands_it_a_slot() {
    let server = RedisServer::start();
    let subject = "restored";
    // Checks every 10 s, reservations for 30 s: a grant within seconds can
    // only come from the stray reservation being given back.
    let limiter = builder(&server)
        .waiter_lifetime(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let served = limiter.acquire_with(&key(subject), 1).await.unwrap();
    let stray = served.lease_id().unwrap().to_string();
    served.release().await.unwrap();

    let holder = limiter.acquire_with(&key(subject), 1).await.unwrap();
    let waiting = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let options = inflight_tokio::Acquire::default().limit(1).wait(Duration::from_secs(8));
            limiter.acquire_opts(&key(subject), options).await
        })
    };
    // Subscribed too: a hand-over published before the subscription took
    // would name the stray id to nobody, and its reservation would hold the
    // slot for its lifetime (seen once in CI, under the load of the other
    // tests).
    eventually("the waiter is queued and subscribed", Duration::from_secs(5), || {
        queued_and_listening(&server, subject)
    })
    .await;
    // What the failover restores: the served id's entry, first in line.
    let mut redis = server.client();
    let now_ms = redis.server_ms();
    let expiry = (now_ms + 30_000).to_string();
    redis.call(&[b"ZADD", &keys.queue(), b"0", stray.as_bytes()]).unwrap();
    redis
        .call(&[b"ZADD", &keys.waiters(), expiry.as_bytes(), stray.as_bytes()])
        .unwrap();

    let released = Instant::now();
    drop(holder);
    let permit = waiting.await.unwrap().expect("the live waiter is served");
    let took = released.elapsed();
    assert!(took < Duration::from_secs(3), "served only after {took:?}");
    let score = redis.call(&[b"ZSCORE", keys.leases(), stray.as_bytes()]).unwrap();
    assert!(
        matches!(score, Frame::Null),
        "the stray reservation is still there: {score:?}"
    );
    drop(permit);
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_deadline_passes_gets_exceeded_on_time_and_leaves_the_queue() {
    let server = RedisServer::start();
    let subject = "deadline";
    let limiter = builder(&server).connect().await.unwrap();
    let full = key(subject);
    let mut _held = Vec::new();
    for _ in 0..3 {
        _held.push(limiter.acquire(&full).await.unwrap());
    }
    for max_wait in [Duration::from_millis(50), Duration::from_millis(300)] {
        let started = Instant::now();
        let outcome = limiter.acquire_wait(&key(subject), max_wait).await;
        let took = started.elapsed();
        assert!(
            matches!(outcome, Err(Error::Exceeded { shed: false, .. })),
            "{outcome:?}"
        );
        assert!(
            took >= max_wait && took < max_wait + Duration::from_millis(100),
            "{took:?} for {max_wait:?}"
        );
        eventually("the waiter left the queue", Duration::from_secs(2), || {
            queued(&server, subject) == 0
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_wait_leaves_the_queue_at_once() {
    let server = RedisServer::start();
    let subject = "dropped";
    let limiter = builder(&server).connect().await.unwrap();
    let full = key(subject);
    let mut _held = Vec::new();
    for _ in 0..3 {
        _held.push(limiter.acquire(&full).await.unwrap());
    }
    let wait = limiter.acquire_wait(&full, Duration::from_secs(30));
    assert!(tokio::time::timeout(Duration::from_millis(100), wait).await.is_err());
    eventually("the abandoned waiter left", Duration::from_secs(2), || {
        queued(&server, subject) == 0
    })
    .await;
    assert_eq!(limiter.stats().waiters_left, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_cannot_be_served_in_time_is_shed_at_once() {
    let server = RedisServer::start();
    let subject = "shed";
    let limiter = builder(&server).default_limit(1).connect().await.unwrap();
    // Teach the subject its hold time: 300 ms holds, released while a
    // waiter is queued.
    for _ in 0..3 {
        let holder = limiter.acquire(&key(subject)).await.unwrap();
        let waiter = {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire_wait(&key(subject), Duration::from_secs(5)).await })
        };
        eventually("queued", Duration::from_secs(2), || queued(&server, subject) == 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(holder);
        drop(waiter.await.unwrap().unwrap());
        eventually("released", Duration::from_secs(2), || live(&server, subject) == 0).await;
    }
    let _holder = limiter.acquire(&key(subject)).await.unwrap();
    // One slot, held ~300 ms on average: a 50 ms wait cannot be served.
    let started = Instant::now();
    let outcome = limiter.acquire_wait(&key(subject), Duration::from_millis(50)).await;
    let took = started.elapsed();
    match outcome {
        Err(Error::Exceeded {
            retry_after: expected,
            shed: true,
            key: None,
        }) => {
            assert!(expected >= Duration::from_millis(100), "{expected:?}");
        }
        other => panic!("expected a shed, got {other:?}"),
    }
    assert!(
        took < Duration::from_millis(40),
        "shed at once, not at the deadline: {took:?}"
    );
    assert_eq!(limiter.stats().shed, 1);
    assert_eq!(queued(&server, subject), 0);
}

// ---- a slot handed to a waiter of another limiter --------------------------
//
// A reservation until the waiter's queue entry would have expired; the
// waiter's limiter confirms it to a whole lease an eighth of the way in,
// unless its holder gives it back or renews it first. What its permit
// believes must follow Redis through every order of those (the last four
// are an outside review's sequences).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_handed_to_a_waiter_is_confirmed_to_a_whole_lease_and_its_permit_knows() {
    let server = RedisServer::start();
    let (_holder, _waiter, permit) = handed(&server, "confirmed").await;
    let reserved = permit.expires_at().expect("a lease");
    eventually("the hand-over is confirmed", Duration::from_secs(1), || {
        permit
            .expires_at()
            .is_some_and(|at| at > Instant::now() + Duration::from_secs(30))
    })
    .await;
    let id = permit.lease_id().unwrap().to_string();
    let ttl = redis_ttl_ms(&server, "confirmed", &id).expect("held in Redis");
    assert!(ttl > 30_000, "a whole lease in Redis: {ttl} ms left");
    tokio::time::sleep_until((reserved + Duration::from_millis(100)).into()).await;
    assert_eq!(permit.loss(), None, "past the reservation, still held");
    permit.release().await.unwrap();
    eventually("the slot is free", Duration::from_secs(2), || {
        live(&server, "confirmed") == 0
    })
    .await;
}

/// A permit handed over by a release (a reservation until about 1 s from
/// the waiter's last check): the holder's limiter, the waiter's, the permit.
async fn handed(server: &RedisServer, subject: &'static str) -> (Limiter, Limiter, Permit) {
    let holder = builder(server).default_limit(1).connect().await.unwrap();
    let waiter = builder(server).default_limit(1).connect().await.unwrap();
    let held = holder.acquire(&key(subject)).await.unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move { w.acquire_wait(&key(subject), Duration::from_secs(10)).await });
    eventually("queued and subscribed", Duration::from_secs(2), || {
        queued_and_listening(server, subject)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.release().await.unwrap();
    let permit = waiting.await.unwrap().expect("handed the slot");
    assert!(
        permit.expires_at().unwrap() < Instant::now() + Duration::from_secs(2),
        "a reservation"
    );
    (holder, waiter, permit)
}

fn redis_ttl_ms(server: &RedisServer, subject: &str, id: &str) -> Option<i64> {
    let keys = SubjectKeys::new(PREFIX, &key(subject));
    let mut redis = server.client();
    let now_ms = redis.server_ms();
    match redis.call(&[b"ZSCORE", keys.leases(), id.as_bytes()]) {
        Ok(Frame::BulkString(score)) => {
            let expiry: i64 = std::str::from_utf8(&score).unwrap().parse().unwrap();
            Some(expiry - now_ms as i64)
        }
        _ => None,
    }
}

/// Released while its confirmation is on the wire: the answer is nobody's
/// (no renewal counted, no error logged for a caller that never was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_the_confirmation_is_on_the_wire_counts_no_renewal() {
    let server = RedisServer::start();
    let (_holder, waiter, permit) = handed(&server, "stray").await;
    let before = waiter.stats();
    tokio::time::sleep(Duration::from_millis(40)).await;
    server.pause();
    // The confirmation is due ~85-125 ms after the grant: now on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(permit);
    tokio::time::sleep(Duration::from_millis(30)).await;
    server.resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = waiter.stats();
    assert_eq!(
        after.renewals + after.leases_lost + after.unavailable,
        before.renewals + before.leases_lost + before.unavailable,
        "no user renewal was made"
    );
}

/// Kept alive only after its confirmation, past the reservation's end:
/// keep-alive starts from the whole lease's expiry, not the reservation's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_asked_after_the_confirmation_keeps_the_whole_lease() {
    let server = RedisServer::start();
    let (_holder, _waiter, permit) = handed(&server, "late-keep").await;
    eventually("confirmed", Duration::from_secs(1), || {
        permit
            .expires_at()
            .is_some_and(|at| at > Instant::now() + Duration::from_secs(30))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(permit.loss(), None, "held past the reservation");
    let id = permit.lease_id().unwrap().to_string();
    permit.keep_alive();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ttl = redis_ttl_ms(&server, "late-keep", &id);
    assert!(ttl.unwrap() > 50_000);
    assert_eq!(permit.loss(), None, "Redis holds it for ~58 s more");
}

/// Renewed by its holder before its confirmation was due, then a 1.3 s
/// stall: no confirmation is owed any more, and nothing reads it as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_its_holder_renews_needs_no_confirmation() {
    let server = RedisServer::start();
    let (_holder, _waiter, mut permit) = handed(&server, "renewed").await;
    permit.renew().await.unwrap();
    let renewed_until = permit.expires_at().unwrap();
    assert!(renewed_until > Instant::now() + Duration::from_secs(50));
    let id = permit.lease_id().unwrap().to_string();
    server.pause();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    server.resume();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ttl = redis_ttl_ms(&server, "renewed", &id);
    assert!(ttl.unwrap() > 50_000);
    assert_eq!(permit.loss(), None, "renewed by its holder, and held in Redis");
}

/// The confirmation finds the reservation gone (taken behind the client's
/// back, as a data loss without write-back would): the permit, though
/// nobody watched it, reads the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_that_finds_the_slot_gone_is_seen_by_the_permit() {
    let server = RedisServer::start();
    let (_holder, waiter, permit) = handed(&server, "gone").await;
    let id = permit.lease_id().unwrap().to_string();
    let keys = SubjectKeys::new(PREFIX, &key("gone"));
    server.client().call(&[b"ZREM", keys.leases(), id.as_bytes()]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiter.stats().keep_alive_lost, 1, "the confirmation found it gone");
    assert_eq!(permit.loss(), Some(Lost::Gone), "told");
}

/// A holder of one slot of each of `subjects` (limit 1) on a runtime of its
/// own, so it can release while the test's runtime is blocked: each send
/// on the returned channel releases the next, in order. Returns once all
/// are held.
fn hold_elsewhere(
    server: &RedisServer,
    subjects: &[&'static str],
) -> (std::thread::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (url, subjects) = (server.url(), subjects.to_vec());
    let holder = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let holder = Limiter::builder(url)
                .key_prefix(PREFIX)
                .default_limit(1)
                .connect()
                .await
                .unwrap();
            let mut held = Vec::new();
            for subject in subjects {
                held.push(holder.acquire(&key(subject)).await.unwrap());
            }
            held_tx.send(()).unwrap();
            // Waited for off the runtime, so its driver runs on meanwhile.
            let release_rx = std::sync::Arc::new(std::sync::Mutex::new(release_rx));
            for permit in held {
                let release_rx = release_rx.clone();
                tokio::task::spawn_blocking(move || release_rx.lock().unwrap().recv())
                    .await
                    .unwrap()
                    .unwrap();
                permit.release().await.unwrap();
            }
        });
    });
    held_rx.recv().unwrap();
    (holder, release_tx)
}

/// The waiter's runtime blocked (a caller blocking its thread) while a
/// release handed it the slot, until the reservation ran out: the
/// hand-over read afterwards must not reach the caller as a permit already
/// spent. Its check again gets the slot (free again) with a whole lease.
#[tokio::test(flavor = "current_thread")]
async fn a_hand_over_heard_after_its_reservation_ran_out_is_not_delivered_spent() {
    let server = RedisServer::start();
    let subject = "blocked";
    let (holder, release_tx) = hold_elsewhere(&server, &[subject]);
    let waiter = builder(&server)
        .default_limit(1)
        .waiter_lifetime(Duration::from_millis(600))
        .connect()
        .await
        .unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move { w.acquire_wait(&key(subject), Duration::from_secs(10)).await });
    eventually("queued and subscribed", Duration::from_secs(2), || {
        queued_and_listening(&server, subject)
    })
    .await;
    // From here the runtime is blocked: the release hands the slot over
    // (the queue empties, the reservation is the one lease), and the
    // reservation runs out, before the waiter's driver reads a byte.
    release_tx.send(()).unwrap();
    let blocked = Instant::now();
    while !(queued(&server, subject) == 0 && live(&server, subject) == 1) {
        assert!(
            blocked.elapsed() < Duration::from_secs(2),
            "the release did not hand over"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    while live(&server, subject) != 0 {
        assert!(
            blocked.elapsed() < Duration::from_secs(3),
            "the reservation did not run out"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    holder.join().unwrap();
    let permit = waiting.await.unwrap().expect("the slot, free again");
    let expires_at = permit.expires_at().expect("a lease");
    assert!(
        expires_at > Instant::now() + Duration::from_secs(30),
        "a whole lease, not the spent reservation: {:?} left",
        expires_at.saturating_duration_since(Instant::now())
    );
    let id = permit.lease_id().unwrap().to_string();
    assert!(redis_ttl_ms(&server, subject, &id).unwrap() > 30_000, "held in Redis");
    assert_eq!(waiter.stats().handed_over, 0, "not served from the message");
    assert_eq!(waiter.stats().handed_late, 1, "heard late, and checked again");
    permit.release().await.unwrap();
}

/// A waiting composite acquire holds the part it got while it waits for
/// the next. Here the first part is handed over, and the runtime blocks
/// (a caller blocking its thread) before that reservation is confirmed and
/// until it runs out, while the second part is handed over too: the
/// permits must not reach the caller with the first part spent. The lost
/// part is given back and taken again, in order, and both end up held
/// with whole leases (the simulator found this: madsim seed 1025 of
/// `mixed`).
#[tokio::test(flavor = "current_thread")]
async fn a_composite_part_spent_while_the_next_is_waited_for_is_taken_again() {
    let server = RedisServer::start();
    let mut subjects = ["part-a", "part-b"];
    // The order every limiter takes a composite's keys in: by slot, then key.
    subjects.sort_by_key(|s| {
        let keys = SubjectKeys::new(PREFIX, &key(s));
        (keys.slot(), keys.leases().clone())
    });
    let [first, second] = subjects;
    let (holder, release_tx) = hold_elsewhere(&server, &[first, second]);
    let waiter = builder(&server)
        .default_limit(1)
        .waiter_lifetime(Duration::from_millis(1600))
        .connect()
        .await
        .unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move {
        let keys = [(&key(first), 1), (&key(second), 1)];
        w.acquire_all_opts(&keys, Acquire::default().wait(Duration::from_secs(10)))
            .await
    });
    eventually("queued on the first key", Duration::from_secs(2), || {
        queued(&server, first) == 1
    })
    .await;
    // Its first check just ran: the hand-over's confirmation is due an
    // eighth of the 1.6 s reservation later, 200 ms from now.
    release_tx.send(()).unwrap();
    eventually(
        "the first key handed over, queued on the second",
        Duration::from_secs(1),
        || live(&server, first) == 1 && queued(&server, second) == 1,
    )
    .await;
    // From here the runtime is blocked, unconfirmed, past both
    // reservations; the second key is handed over meanwhile.
    release_tx.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(1_900));
    holder.join().unwrap();
    let permits = waiting.await.unwrap().expect("both keys, free again");
    assert!(permits.is_enforced(), "a part reached the caller spent: {permits:?}");
    for (subject, permit) in [first, second].into_iter().zip(permits.parts()) {
        let id = permit.lease_id().unwrap().to_string();
        let ttl = redis_ttl_ms(&server, subject, &id);
        assert!(
            ttl.is_some_and(|ttl| ttl > 30_000),
            "{subject}: a whole lease in Redis, not {ttl:?}"
        );
    }
    permits.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_is_counted_from_the_call_not_from_when_the_driver_reads_it() {
    let server = RedisServer::start();
    let limiter = builder(&server).default_limit(1).connect().await.unwrap();
    let busy = key("busy");
    let held = limiter.acquire(&busy).await.unwrap();
    let called = Instant::now();
    let wait = Acquire::default().wait(Duration::from_millis(300));
    let mut call = Box::pin(limiter.acquire_opts(&busy, wait));
    // One poll sends the call to the driver, which has not run yet (and
    // does not: nothing here yields to the runtime).
    assert!(futures_util::future::poll_immediate(&mut call).await.is_none());
    // The runtime stands still past the whole wait (user code blocking the
    // driver's worker), and the driver reads the call only afterwards.
    std::thread::sleep(Duration::from_millis(600));
    let outcome = call.await;
    let waited = called.elapsed();
    // No check could run within the wait: it ends unanswered.
    assert!(
        matches!(outcome, Err(Error::Unavailable { .. })),
        "the wait ran out before any check: {outcome:?}"
    );
    // Counted from when the driver read it, the wait would end 300 ms
    // after the block did.
    assert!(
        waited < Duration::from_millis(800),
        "waited {waited:?} for a 300 ms wait that ran out during a 600 ms block"
    );
    held.release().await.unwrap();
}
