//! The tokio `Limiter` against a real redis-server, with a misbehaving relay
//! in between: every behaviour of design.md §1–12, end to end.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use inflight_core::resp::Frame;
use inflight_tests::{Mode, RedisServer, Relay, Rng};
use inflight_tokio::{
    Builder, ConnectError, ConnectionError, Error, Key, Limiter, ReleaseError, ReleasePolicy, Unavailable,
    UnavailablePolicy,
};

const PREFIX: &str = "it";

fn builder(url: &str) -> Builder {
    Limiter::builder(url)
        .key_prefix(PREFIX)
        .default_limit(1)
        .lease_ttl(Duration::from_secs(30))
        .timeout(Duration::from_millis(150))
        .request_liveness(Duration::from_millis(600))
        .connect_timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("tier", subject).unwrap()
}

fn redis_key(subject: &str) -> Bytes {
    Bytes::from(format!("{PREFIX}:{{tier|{subject}}}:leases"))
}

fn live(server: &RedisServer, subject: &str) -> i64 {
    match server.client().call(&[b"ZCARD", &redis_key(subject)]).unwrap() {
        Frame::Integer(n) => n,
        other => panic!("ZCARD answered {other:?}"),
    }
}

/// Waits (bounded) until `subject` has no live lease in Redis.
async fn until_empty(server: &RedisServer, subject: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while live(server, subject) != 0 {
        assert!(
            Instant::now() < deadline,
            "leases of {subject} still live after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) until `condition` holds.
async fn until(what: &str, within: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_sharing_one_redis_enforce_one_limit() {
    let server = RedisServer::start();
    let a = builder(&server.url()).connect().await.unwrap();
    let b = builder(&server.url()).connect().await.unwrap();
    let permit = a.acquire(&key("shared")).await.unwrap();
    assert!(permit.is_enforced());
    assert!(matches!(
        b.acquire(&key("shared")).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    assert!(matches!(
        a.acquire(&key("shared")).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    permit.release().await.unwrap();
    let permit = b.acquire(&key("shared")).await.unwrap();
    // Per-call limits: a bigger tier on the same key admits one more.
    let second = a.acquire_with(&key("shared"), 2).await.unwrap();
    drop((permit, second));
    until_empty(&server, "shared", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_lease_is_reclaimed_after_its_ttl() {
    let server = RedisServer::start();
    let limiter = builder(&server.url())
        .lease_ttl(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    std::mem::forget(limiter.acquire(&key("forgotten")).await.unwrap());
    assert!(matches!(
        limiter.acquire(&key("forgotten")).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    tokio::time::sleep(Duration::from_millis(400)).await; // Redis's clock must pass the TTL
    let permit = limiter
        .acquire(&key("forgotten"))
        .await
        .expect("the expired slot is free again");
    drop(permit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_acquire_fails_at_its_timeout_and_the_limiter_recovers() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let timeout = Duration::from_millis(150);
    let limiter = builder(&relay.url()).timeout(timeout).connect().await.unwrap();
    relay.set(Mode::Blackhole);
    let started = Instant::now();
    let error = limiter.acquire(&key("blackhole")).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        error,
        Error::Unavailable {
            reason: Unavailable::Timeout
        }
    );
    assert!(took >= timeout, "failed after {took:?}, before its timeout");
    assert!(
        took < timeout + Duration::from_secs(1),
        "took {took:?}: not bounded by its timeout"
    );

    relay.set(Mode::Cut);
    relay.set(Mode::Forward);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match limiter.acquire(&key("blackhole")).await {
            Ok(permit) => {
                permit.release().await.unwrap();
                break;
            }
            Err(Error::Unavailable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(other) => panic!("the limiter did not recover: {other}"),
        }
    }
    until_empty(&server, "blackhole", Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_policy_admits_unenforced_when_redis_is_unavailable() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url())
        .on_unavailable(UnavailablePolicy::Allow)
        .connect()
        .await
        .unwrap();
    relay.set(Mode::Blackhole);
    let permit = limiter.acquire(&key("open")).await.expect("fail open");
    assert!(!permit.is_enforced());
    assert_eq!(permit.lease_id(), None);
}

/// Polls `future` exactly `polls` times (yielding to the driver in between),
/// then drops it. Returns whether it completed first.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> bool {
    let mut future: Pin<Box<F>> = Box::pin(future);
    for _ in 0..polls {
        let ready = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await;
        if ready {
            return true;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_dropped_at_any_poll_leaks_no_slot() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url()).connect().await.unwrap();
    for stall in [false, true] {
        for polls in 0..8 {
            if stall {
                relay.set(Mode::StallResponses);
            }
            poll_then_drop(limiter.acquire(&key("dropped")), polls).await;
            relay.set(Mode::Forward);
            until_empty(&server, "dropped", Duration::from_secs(3)).await;
        }
    }
    // Still exactly one slot: nothing leaked, nothing double-counted.
    let permit = limiter.acquire(&key("dropped")).await.unwrap();
    assert_eq!(live(&server, "dropped"), 1);
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_timeout_on_a_slow_server_keeps_the_connection() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url()).connect().await.unwrap();
    assert_eq!(relay.connections(), 1);
    relay.set(Mode::StallResponses);
    let error = limiter.acquire(&key("slow")).await.unwrap_err();
    assert_eq!(
        error,
        Error::Unavailable {
            reason: Unavailable::Timeout
        }
    );
    relay.set(Mode::Forward); // well within the liveness budget
    until_empty(&server, "slow", Duration::from_secs(2)).await;
    let permit = limiter
        .acquire(&key("slow"))
        .await
        .expect("the same connection serves the next acquire");
    assert_eq!(relay.connections(), 1, "a slow but healthy connection was replaced");
    permit.release().await.unwrap();
}

/// A timeout counts from the call, not from when the driver reads it: a
/// driver held up past the caller's timeout (its worker thread blocked by
/// other code) answers `Timeout` at once and never sends the acquire.
#[tokio::test]
async fn a_timeout_that_passed_before_the_driver_read_the_call_ends_it_unsent() {
    let server = RedisServer::start();
    let limiter = builder(&server.url()).connect().await.unwrap();
    limiter.acquire(&key("warm")).await.unwrap().release().await.unwrap();
    let scripts = |server: &RedisServer| {
        let calls = inflight_tests::cpu::redis_command_calls(server);
        calls.get("evalsha").copied().unwrap_or(0.0) + calls.get("eval").copied().unwrap_or(0.0)
    };
    let before = scripts(&server);
    let called = Instant::now();
    let subject = key("late-read");
    let mut call = Box::pin(limiter.acquire(&subject));
    // One poll sends the call to the driver, which has not run yet (and
    // does not: nothing here yields to the runtime).
    assert!(futures_util::future::poll_immediate(&mut call).await.is_none());
    // The runtime stands still past the 150 ms timeout.
    std::thread::sleep(Duration::from_millis(400));
    let outcome = call.await;
    let took = called.elapsed();
    assert_eq!(
        outcome.unwrap_err(),
        Error::Unavailable {
            reason: Unavailable::Timeout
        }
    );
    // Counted from when the driver read it, the timeout would end 150 ms
    // after the block did, with the acquire sent.
    assert!(took < Duration::from_millis(530), "took {took:?}");
    let permit = limiter.acquire(&key("after")).await.unwrap();
    permit.release().await.unwrap();
    // The script calls since: the acquire after (a release is a plain
    // `ZREM`), not the one whose caller was gone before it was written.
    assert_eq!(scripts(&server) - before, 1.0, "the timed-out acquire was sent");
    assert_eq!(live(&server, "late-read"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_arriving_after_the_caller_timed_out_is_released() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url()).connect().await.unwrap();
    relay.set(Mode::StallResponses);
    assert!(limiter.acquire(&key("late")).await.is_err());
    assert_eq!(live(&server, "late"), 1, "Redis granted it; the reply is held");
    relay.set(Mode::Forward);
    until_empty(&server, "late", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_echoing_another_lease_retires_the_connection_and_is_unavailable() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url()).connect().await.unwrap();
    relay.set(Mode::CorruptOneEcho);
    let error = limiter.acquire(&key("echo")).await.unwrap_err();
    assert_eq!(
        error,
        Error::Unavailable {
            reason: Unavailable::ConnectionLost(ConnectionError::EchoMismatch)
        }
    );
    until_empty(&server, "echo", Duration::from_secs(2)).await;
    until("a fresh connection", Duration::from_secs(2), || {
        relay.connections() == 2
    })
    .await;
    let permit = limiter.acquire(&key("echo")).await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_cap_refuses_at_once_and_leaves_the_connection_healthy() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url())
        .max_in_flight(2)
        .timeout(Duration::from_millis(400))
        .request_liveness(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    relay.set(Mode::StallResponses);
    let first = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire_with(&key("cap"), 5).await }
    });
    let second = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire_with(&key("cap"), 5).await }
    });
    until("two acquires in Redis", Duration::from_secs(2), || {
        live(&server, "cap") == 2
    })
    .await;
    let started = Instant::now();
    let refused = limiter.acquire_with(&key("cap"), 5).await.unwrap_err();
    assert_eq!(
        refused,
        Error::Unavailable {
            reason: Unavailable::Overloaded
        }
    );
    assert!(started.elapsed() < Duration::from_millis(200), "the refusal waited");
    relay.set(Mode::Forward);
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert!(first.is_ok() && second.is_ok());
    drop((first, second));
    let permit = limiter.acquire_with(&key("cap"), 5).await.unwrap();
    assert_eq!(relay.connections(), 1);
    permit.release().await.unwrap();
    until_empty(&server, "cap", Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_release_falls_through_to_a_fresh_connection() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url()).connect().await.unwrap();
    let permit = limiter.acquire(&key("stalled")).await.unwrap();
    relay.set(Mode::Blackhole);
    let release = tokio::spawn(permit.release());
    // The release's liveness budget runs out; a new connection is opened.
    until("a replacement connection", Duration::from_secs(3), || {
        relay.connections() >= 2
    })
    .await;
    relay.set(Mode::Forward);
    release
        .await
        .unwrap()
        .expect("the release succeeds on the fresh connection");
    assert_eq!(live(&server, "stalled"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_cannot_succeed_gives_up_within_the_ttl_and_says_so() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let ttl = Duration::from_millis(1500);
    let limiter = builder(&relay.url())
        .lease_ttl(ttl)
        .release_policy(ReleasePolicy {
            max_attempts: 100,
            ..ReleasePolicy::default()
        })
        .connect()
        .await
        .unwrap();
    let permit = limiter.acquire(&key("doomed")).await.unwrap();
    let granted = Instant::now();
    relay.set(Mode::Blackhole);
    let error = permit.release().await.unwrap_err();
    assert!(matches!(error, ReleaseError::Abandoned(_)), "{error}");
    assert!(
        granted.elapsed() <= ttl + Duration::from_millis(500),
        "gave up after {:?}",
        granted.elapsed()
    );
}

/// `drain` with Redis down returns at its timeout and says what it left,
/// instead of waiting out the owed release (up to the lease TTL); with Redis
/// up it returns as soon as everything is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_is_bounded_with_redis_down_and_says_what_it_left() {
    let mut server = RedisServer::start();
    // Healthy: complete, at once.
    let limiter = builder(&server.url()).connect().await.unwrap();
    drop(limiter.acquire(&key("drained")).await.unwrap());
    let drained = limiter.drain().await;
    assert!(drained.is_complete(), "{drained}");
    assert_eq!(live(&server, "drained"), 0);

    // Redis gone with a lease held (a 30 s TTL): the release cannot get
    // through, and the drain gives up at its timeout.
    let timeout = Duration::from_millis(400);
    let limiter = builder(&server.url()).drain_timeout(timeout).connect().await.unwrap();
    let permit = limiter.acquire(&key("stranded")).await.unwrap();
    server.stop();
    drop(permit);
    let started = Instant::now();
    let drained = limiter.drain().await;
    let took = started.elapsed();
    println!("{drained}");
    assert!(!drained.is_complete());
    assert_eq!(drained.releases_owed(), 1, "{drained}");
    assert_eq!(drained.acquires_in_flight(), 0, "{drained}");
    assert!(
        took >= timeout && took < Duration::from_secs(3),
        "returned after {took:?}"
    );
    assert!(drained.to_string().contains("1 releases still owed"), "{drained}");
    server.start_again();

    // A drain timeout longer than a year is refused at connect.
    let error = builder(&server.url())
        .drain_timeout(Duration::MAX)
        .connect()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("drain_timeout"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_fails_clearly_on_bad_config_wrong_password_and_no_server() {
    let server = RedisServer::start_with_password("s3cret");

    let wrong = format!("redis://:nope@127.0.0.1:{}/", server.port());
    match builder(&wrong).connect().await.unwrap_err() {
        ConnectError::Auth { reason, .. } => assert!(reason.contains("WRONGPASS"), "{reason}"),
        other => panic!("expected an auth error, got {other}"),
    }
    let missing = format!("redis://127.0.0.1:{}/", server.port());
    // No password where one is required: an authentication problem, said once.
    let error = builder(&missing).connect().await.unwrap_err();
    assert!(
        matches!(error, ConnectError::Auth { ref reason, .. } if reason.contains("NOAUTH")),
        "{error}"
    );
    let message = error.to_string();
    assert_eq!(message.matches("NOAUTH").count(), 1, "{message}");
    assert!(!message.contains("handshake"), "{message}");
    builder(&server.url())
        .connect()
        .await
        .expect("the right password connects");

    // Nothing listens on a port we just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = builder(&format!("redis://127.0.0.1:{port}"))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Unreachable { .. }), "{error}");
    assert!(error.to_string().contains(&port.to_string()), "{error}");

    // A server that accepts but never answers: bounded by the connect timeout.
    let relay = Relay::start(server.addr()).await;
    relay.set(Mode::Blackhole);
    let started = Instant::now();
    let error = builder(&relay.url()).connect().await.unwrap_err();
    assert!(matches!(error, ConnectError::Timeout { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));

    let url = server.url();
    let config_errors = [
        builder(&url).default_limit(0).connect().await.unwrap_err(),
        builder(&url).lease_ttl(Duration::ZERO).connect().await.unwrap_err(),
        builder(&url).timeout(Duration::ZERO).connect().await.unwrap_err(),
        builder(&url).key_prefix("a{b}").connect().await.unwrap_err(),
        builder("redis://").connect().await.unwrap_err(),
        builder("http://127.0.0.1:1").connect().await.unwrap_err(),
    ];
    for error in config_errors {
        assert!(matches!(error, ConnectError::Config(_)), "{error}");
    }
    let limiter = builder(&url).connect().await.unwrap();
    assert!(matches!(
        limiter.acquire_with(&key("zero"), 0).await,
        Err(Error::Config(_))
    ));
}

/// One holder in the fleet test's independent count. Dropping it counts the
/// holder out *before* the permit inside gives the slot back, so the count can
/// never run behind Redis, even when the task is aborted mid-hold.
struct Holding<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
    _permit: inflight_tokio::Permit,
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_limiters_never_exceeds_the_limit_and_leaves_nothing_behind() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    const LIMIT: usize = 10;
    const SUBJECTS: [&str; 3] = ["k0", "k1", "k2"];
    let server = RedisServer::start();
    let mut limiters = Vec::new();
    for _ in 0..8 {
        limiters.push(
            builder(&server.url())
                .default_limit(LIMIT as u32)
                .timeout(Duration::from_millis(300))
                .request_liveness(Duration::from_secs(2))
                .connect()
                .await
                .unwrap(),
        );
    }
    let holders: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let peaks: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let granted = Arc::new(AtomicUsize::new(0));
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut tasks = Vec::new();
    for limiter in &limiters {
        for _ in 0..200 {
            let which = rng.below(3) as usize;
            let hold = Duration::from_millis(rng.below(15));
            let arrival = Duration::from_millis(rng.below(300));
            // Most callers wait patiently; one in five gives up almost at once.
            let caller_timeout = match rng.below(5) {
                0 => Duration::from_micros(100 + rng.below(3_000)),
                _ => Duration::from_secs(2),
            };
            let abort_after = (rng.below(8) == 0).then(|| Duration::from_micros(rng.below(3_000)));
            let (limiter, holders, peaks, granted) = (limiter.clone(), holders.clone(), peaks.clone(), granted.clone());
            let task = tokio::spawn(async move {
                tokio::time::sleep(arrival).await;
                let subject = key(SUBJECTS[which]);
                let acquire = limiter.acquire(&subject);
                let Ok(Ok(permit)) = tokio::time::timeout(caller_timeout, acquire).await else {
                    return;
                };
                granted.fetch_add(1, Ordering::SeqCst);
                let now_holding = holders[which].fetch_add(1, Ordering::SeqCst) + 1;
                peaks[which].fetch_max(now_holding, Ordering::SeqCst);
                let _holding = Holding {
                    count: &holders[which],
                    _permit: permit,
                };
                // Aborting here drops `_holding`: counted out, then released.
                tokio::time::sleep(hold).await;
            });
            if let Some(after) = abort_after {
                // Aborted mid-acquire or mid-hold, whichever it is doing then.
                let abort = task.abort_handle();
                tokio::spawn(async move {
                    tokio::time::sleep(arrival + after).await;
                    abort.abort();
                });
            }
            tasks.push(task);
        }
    }
    for task in tasks {
        let _ = task.await;
    }
    for (i, peak) in peaks.iter().enumerate() {
        let peak = peak.load(Ordering::SeqCst);
        assert!(
            peak <= LIMIT,
            "{} had {peak} concurrent holders, limit {LIMIT}",
            SUBJECTS[i]
        );
    }
    let granted = granted.load(Ordering::SeqCst);
    println!(
        "fleet: {granted} grants, peaks {:?}",
        peaks.iter().map(|p| p.load(Ordering::SeqCst)).collect::<Vec<_>>()
    );
    assert!(granted > 300, "only {granted} grants: too few to mean anything");
    assert!(
        peaks.iter().all(|p| p.load(Ordering::SeqCst) == LIMIT),
        "the limit was never reached: no contention tested"
    );
    for limiter in limiters {
        limiter.drain().await;
    }
    for subject in SUBJECTS {
        assert_eq!(live(&server, subject), 0, "{subject} has leases left after close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_dropped_on_a_thread_without_a_runtime_is_still_released() {
    let server = RedisServer::start();
    let limiter = builder(&server.url()).connect().await.unwrap();
    let permit = limiter.acquire(&key("elsewhere")).await.unwrap();
    std::thread::spawn(move || drop(permit)).join().unwrap();
    until_empty(&server, "elsewhere", Duration::from_secs(2)).await;
}

#[test]
fn a_permit_outliving_its_runtime_does_not_panic_and_expires_by_ttl() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let permit = runtime.block_on(async {
        let limiter = builder(&server.url())
            .lease_ttl(Duration::from_millis(300))
            .connect()
            .await
            .unwrap();
        limiter.acquire(&key("orphan")).await.unwrap()
    });
    drop(runtime); // the driver task is gone
    drop(permit); // warns; nothing to release it with
    assert_eq!(live(&server, "orphan"), 1);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(live(&server, "orphan"), 0, "the lease expires at its TTL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_cannot_shift_the_next_reply_onto_the_wrong_caller() {
    let server = RedisServer::start();
    let relay = Relay::start(server.addr()).await;
    let limiter = builder(&relay.url()).default_limit(5).connect().await.unwrap();
    relay.set(Mode::DropOneReply);
    let first = limiter.acquire(&key("shift")).await.unwrap_err();
    assert_eq!(
        first,
        Error::Unavailable {
            reason: Unavailable::Timeout
        }
    );
    // The next reply meets the first request's slot in the FIFO; its echo
    // gives it away, so nobody is handed someone else's lease.
    let second = limiter.acquire(&key("shift")).await.unwrap_err();
    assert_eq!(
        second,
        Error::Unavailable {
            reason: Unavailable::ConnectionLost(ConnectionError::EchoMismatch)
        }
    );
    until_empty(&server, "shift", Duration::from_secs(2)).await;
    let permit = limiter.acquire(&key("shift")).await.unwrap();
    assert_eq!(relay.connections(), 2);
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_and_a_database_number_are_honoured() {
    let server = RedisServer::start();
    let mut admin = server.client();
    admin
        .call(&[b"ACL", b"SETUSER", b"svc", b"on", b">pw", b"~*", b"+@all"])
        .unwrap();
    let url = format!("redis://svc:pw@127.0.0.1:{}/3", server.port());
    let limiter = builder(&url).connect().await.unwrap();
    let permit = limiter.acquire(&key("acl")).await.unwrap();
    admin.call(&[b"SELECT", b"3"]).unwrap();
    match admin.call(&[b"ZCARD", &redis_key("acl")]).unwrap() {
        Frame::Integer(n) => assert_eq!(n, 1, "the lease lives in database 3"),
        other => panic!("{other:?}"),
    }
    permit.release().await.unwrap();
    let wrong = format!("redis://svc:nope@127.0.0.1:{}/3", server.port());
    assert!(matches!(
        builder(&wrong).connect().await,
        Err(ConnectError::Auth { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_permit_outlives_its_ttl_and_a_lost_one_says_so() {
    const TTL: Duration = Duration::from_secs(1);
    let server = RedisServer::start();
    let holder = builder(&server.url()).lease_ttl(TTL).connect().await.unwrap();
    let other = builder(&server.url()).lease_ttl(TTL).connect().await.unwrap();
    let mut permit = holder.acquire(&key("long")).await.unwrap();
    let first_expiry = permit.expires_at().unwrap();
    // Renew every tenth of the TTL for two and a half TTLs: the slot stays taken.
    let started = Instant::now();
    while started.elapsed() < TTL * 5 / 2 {
        tokio::time::sleep(TTL / 10).await;
        permit.renew().await.unwrap();
        assert!(matches!(
            other.acquire(&key("long")).await.unwrap_err(),
            Error::Exceeded { shed: false, .. }
        ));
    }
    assert!(permit.expires_at().unwrap() > first_expiry + TTL);
    assert_eq!(live(&server, "long"), 1);

    // A renewal dropped at any poll leaves the permit whole: it still holds
    // its slot, and releasing it frees the slot.
    for polls in 0..4 {
        poll_then_drop(permit.renew(), polls).await;
        assert!(permit.is_enforced());
    }
    assert!(matches!(
        other.acquire(&key("long")).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));

    // Stop renewing: past the TTL the slot comes back, and the holder is told.
    let wait = permit
        .expires_at()
        .unwrap()
        .saturating_duration_since(std::time::Instant::now());
    tokio::time::sleep(wait + TTL / 2).await;
    let newcomer = other.acquire(&key("long")).await.unwrap();
    assert_eq!(permit.renew().await.unwrap_err(), inflight_tokio::RenewError::Lost);
    assert!(!permit.is_enforced() && permit.expires_at().is_none());
    drop(permit); // holds nothing: must not touch the newcomer's slot
    newcomer.release().await.unwrap();
    until_empty(&server, "long", Duration::from_secs(2)).await;
    let stats = holder.stats();
    assert!(stats.renewals >= 10 && stats.leases_lost == 1, "{stats:?}");
}

#[tokio::test]
async fn the_tcp_connector_sets_nodelay_as_asked_and_a_coalescing_limiter_works() {
    use inflight_tokio::{Connector, TcpConnector};
    let server = RedisServer::start();
    let endpoint = inflight_core::Endpoint::Tcp {
        host: "127.0.0.1".into(),
        port: server.port(),
    };
    let stream = TcpConnector::new().connect(&endpoint).await.unwrap();
    assert!(stream.nodelay().unwrap(), "the default sends every write at once");
    let stream = TcpConnector::coalescing().connect(&endpoint).await.unwrap();
    assert!(!stream.nodelay().unwrap(), "coalescing leaves Nagle on");

    let limiter = builder(&server.url()).tcp_nodelay(false).connect().await.unwrap();
    let key = Key::new("nagle", "one").unwrap();
    let permits: Vec<_> = futures_util::future::join_all((0..4).map(|_| limiter.acquire_with(&key, 4))).await;
    assert!(permits.iter().all(Result::is_ok), "{permits:?}");
    assert!(matches!(
        limiter.acquire_with(&key, 4).await,
        Err(Error::Exceeded { .. })
    ));
    drop(permits);
    limiter.drain().await;
}

/// A server that may evict keys would drop lease data first (every key the
/// library writes has an expiry) and over-admit unnoticed: refused at the
/// handshake, unless the user accepts the risk, and then said at each one.
#[tokio::test]
async fn a_server_that_may_evict_lease_data_is_refused_unless_allowed() {
    let server = RedisServer::start_with(&["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]);
    let error = builder(&server.url()).connect().await.unwrap_err();
    assert!(
        matches!(&error, ConnectError::Eviction { policy, .. } if policy == "volatile-lru"),
        "{error}"
    );
    let limiter = builder(&server.url()).allow_eviction(true).connect().await.unwrap();
    let permit = limiter.acquire(&key("evicting")).await.unwrap();
    drop(permit);
    until("the warning is counted", Duration::from_secs(2), || {
        limiter.stats().server_warnings == 1
    })
    .await;
    limiter.drain().await;
    // Without a memory limit nothing is evicted, whatever the policy.
    let unlimited = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let limiter = builder(&unlimited.url()).connect().await.unwrap();
    assert_eq!(limiter.stats().server_warnings, 0);
    limiter.drain().await;
}

/// An ACL that refuses `INFO` hides the server's run and replication ids:
/// a failover to a lagging replica that keeps the lease-data marker cannot
/// be detected. The limiter works, and says so at each handshake.
#[tokio::test]
async fn a_server_that_refuses_info_is_used_and_the_blind_spot_is_said() {
    let server = RedisServer::start();
    let mut admin = server.client();
    let acl = admin
        .call(&[
            b"ACL", b"SETUSER", b"noinfo", b"on", b">secret", b"+@all", b"-info", b"~*", b"&*",
        ])
        .unwrap();
    assert_eq!(acl, Frame::SimpleString(Bytes::from_static(b"OK")));
    let url = format!("redis://noinfo:secret@127.0.0.1:{}", server.port());
    let limiter = builder(&url).connect().await.unwrap();
    let permit = limiter.acquire(&key("blind")).await.unwrap();
    drop(permit);
    assert_eq!(limiter.stats().server_warnings, 1);
    limiter.drain().await;
}
