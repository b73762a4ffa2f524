//! Redis Sentinel, against a real deployment: one primary, two replicas and
//! three sentinels (quorum 2) on loopback, shared by the tests of this
//! binary (each takes its turn). The limiter finds the primary through the
//! sentinels, follows a planned failover and an unplanned one under load
//! without over-admitting or leaving a lease behind, works with a sentinel
//! down, keeps its primary with all of them down, and never writes to a
//! replica that a stale sentinel names.

// Each test holds the deployment's turn for its whole run, awaits included:
// every test has its own runtime, blocked on by the thread that holds it,
// so the lock cannot be wanted by a task of the same runtime.
#![allow(clippy::await_holding_lock)]

use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use inflight_core::resp::Frame;
use inflight_tests::load::{Load, Seen};
use inflight_tests::redis_sentinel::MASTER;
use inflight_tests::stale_sentinel::StaleSentinel;
use inflight_tests::SentinelSet;
use inflight_tokio::{Builder, ConfigError, ConnectError, Error, Key, Limiter, SentinelError};

/// The one deployment of this binary, and the turn to use it.
fn sentinels() -> MutexGuard<'static, SentinelSet> {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_test_writer()
        .try_init();
    static SET: OnceLock<Mutex<SentinelSet>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(SentinelSet::start()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn builder(url: &str, prefix: &str) -> Builder {
    Limiter::builder(url)
        .key_prefix(prefix)
        .default_limit(1)
        .lease_ttl(Duration::from_secs(30))
        .timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(1000))
}

fn key(subject: &str) -> Key {
    Key::new("tenant", subject).unwrap()
}

/// Live leases of `subject`, read on the primary.
fn live(set: &SentinelSet, prefix: &str, subject: &str) -> i64 {
    let key = format!("{prefix}:{{tenant|{subject}}}:leases");
    match SentinelSet::client(set.primary())
        .call(&[b"ZCARD", key.as_bytes()])
        .unwrap()
    {
        Frame::Integer(n) => n,
        other => panic!("ZCARD answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_is_found_through_the_sentinels_by_url_and_by_builder() {
    let set = sentinels();
    let prefix = "s1";
    let by_url = builder(&set.url(), prefix).connect().await.unwrap();
    let by_builder = Limiter::sentinel_builder(set.sentinel_urls(), MASTER)
        .key_prefix(prefix)
        .default_limit(1)
        .connect()
        .await
        .unwrap();
    let held = by_url.acquire(&key("one")).await.unwrap();
    // One limit, on the one primary, for both.
    assert!(matches!(
        by_builder.acquire(&key("one")).await,
        Err(Error::Exceeded { .. })
    ));
    assert_eq!(live(&set, prefix, "one"), 1, "the lease is on the primary");
    drop(held);
    by_url.drain().await;
    assert!(by_builder.acquire(&key("one")).await.is_ok());
    by_builder.drain().await;
    assert_eq!(live(&set, prefix, "one"), 0);
}

/// 64 tasks on two limiters share a limit of 8 while the primary changes;
/// what the ledger saw and what the limiters counted, and how long grants
/// stopped.
async fn under_load(set: &mut SentinelSet, prefix: &str, switch: impl FnOnce(&mut SentinelSet) -> u16) -> Seen {
    let limit = 8;
    let limiters = [
        builder(&set.url(), prefix)
            .default_limit(limit)
            .connect()
            .await
            .unwrap(),
        Limiter::sentinel_builder(set.sentinel_urls(), MASTER)
            .key_prefix(prefix)
            .default_limit(limit)
            .timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap(),
    ];
    let load = Load::start(&limiters, "busy", 64);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let old = set.primary();
    let new = tokio::task::block_in_place(|| switch(set));
    assert_ne!(old, new);
    // Grants resume on the new primary (after the recovery hold, at most
    // its window: about 5 s with these settings), then the load runs on a
    // while.
    let granted = || limiters.iter().map(|l| l.stats().granted).sum::<u64>();
    let switched = granted();
    let deadline = Instant::now() + Duration::from_secs(10);
    while granted() == switched {
        assert!(Instant::now() < deadline, "no grant on the new primary within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // (How long grants stopped is a measurement, printed below, not a
    // pass mark: it is the sentinels' detection plus the recovery hold.)
    let seen = load.finish().await;
    assert!(
        seen.peak <= limit as usize,
        "over-admission: {} holders at once",
        seen.peak
    );
    // Each followed the switch; after a SIGKILL a sentinel that has not
    // voted yet may name the dead primary once more (a clean-clone CI run
    // saw 4 switches for the two), which costs a refused connection.
    for limiter in &limiters {
        assert!(
            limiter.stats().primary_switches >= 1,
            "a limiter never followed the switch"
        );
    }
    for limiter in limiters {
        limiter.drain().await;
    }
    assert_eq!(live(set, prefix, "busy"), 0, "no lease left behind");
    eprintln!(
        "grants stopped for at most {:?} around the switch; outcomes {:?}",
        seen.longest_gap, seen.outcomes
    );
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_failover_under_load_is_followed_without_over_admission() {
    let mut set = sentinels();
    let seen = under_load(&mut set, "s2", |set| set.failover()).await;
    assert!(
        seen.outcomes.get("granted").copied().unwrap_or(0) > 100,
        "{:?}",
        seen.outcomes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_failed_over_under_load_without_over_admission() {
    let mut set = sentinels();
    let seen = under_load(&mut set, "s3", |set| set.kill_primary()).await;
    assert!(
        seen.outcomes.get("granted").copied().unwrap_or(0) > 100,
        "{:?}",
        seen.outcomes
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sentinels_suffice_and_with_none_a_running_limiter_keeps_its_primary() {
    let mut set = sentinels();
    let prefix = "s4";
    set.stop_sentinel(0);
    // The URL names all three; the first does not answer.
    let limiter = builder(&set.url(), prefix).connect().await.unwrap();
    drop(limiter.acquire(&key("a")).await.unwrap());
    set.stop_sentinel(1);
    set.stop_sentinel(2);
    let error = builder(&set.url(), prefix).connect().await.unwrap_err();
    assert!(
        matches!(
            &error,
            ConnectError::Sentinel {
                error: SentinelError::Unreachable { .. },
                ..
            }
        ),
        "{error}"
    );
    // The running limiter still has its primary.
    let permit = limiter.acquire(&key("a")).await.unwrap();
    assert!(limiter.stats().sentinel_errors > 0);
    drop(permit);
    limiter.drain().await;
    for index in 0..3 {
        set.start_sentinel(index);
    }
    set.wait_healthy(Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_named_by_a_stale_sentinel_is_never_written_to() {
    let set = sentinels();
    let prefix = "s5";
    let primary = set.primary();
    let replica = *set.data_ports().iter().find(|port| **port != primary).unwrap();
    let mut client = SentinelSet::client(replica);
    client.call(&[b"CONFIG", b"RESETSTAT"]).unwrap();
    let stale = StaleSentinel::start(replica).await;
    // The stale sentinel is asked first.
    let hosts: Vec<String> = std::iter::once(stale.port())
        .chain(set.sentinel_ports())
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let url = format!("redis+sentinel://{}/{MASTER}", hosts.join(","));
    let limiter = builder(&url, prefix).connect().await.unwrap();
    drop(limiter.acquire(&key("r")).await.unwrap());
    assert!(limiter.stats().sentinel_errors >= 1, "the stale answer was counted");
    limiter.drain().await;
    let Frame::BulkString(stats) = client.call(&[b"INFO", b"commandstats"]).unwrap() else {
        panic!("INFO commandstats");
    };
    let stats = String::from_utf8_lossy(&stats);
    // The replica runs what the primary replicates (a script's effects:
    // `MULTI`, `ZADD`, `SET`...), so that is no sign. Ours would be a script
    // call (`SCRIPT LOAD`, a read of the handshake, may have run there), or
    // a write the read-only replica rejected.
    for command in ["cmdstat_evalsha:", "cmdstat_eval:"] {
        assert!(!stats.contains(command), "the replica ran {command}\n{stats}");
    }
    for line in stats.lines().filter(|line| line.starts_with("cmdstat_")) {
        let refused = !line.contains("rejected_calls=0,failed_calls=0");
        assert!(!refused, "the replica refused a command of ours: {line}");
    }
    drop(stale);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_settings_are_typed_errors() {
    let set = sentinels();
    let sentinel = set.sentinel_ports()[0];
    // No master name.
    let error = builder(&format!("redis+sentinel://127.0.0.1:{sentinel}"), "s6")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConnectError::Config(ConfigError::Url { .. })),
        "{error}"
    );
    // No sentinel reachable.
    let nobody = inflight_tests::redis_server::free_port();
    let started = Instant::now();
    let error = builder(&format!("redis+sentinel://127.0.0.1:{nobody}/{MASTER}"), "s6")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            ConnectError::Sentinel {
                error: SentinelError::Unreachable { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // A data node given as a sentinel.
    let data = set.primary();
    let error = builder(&format!("redis+sentinel://127.0.0.1:{data}/{MASTER}"), "s6")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            ConnectError::Sentinel {
                error: SentinelError::NotASentinel { .. },
                ..
            }
        ),
        "{error}"
    );
    // A master the sentinels do not monitor; the most telling error wins
    // over an unreachable sentinel in the same round.
    let error = builder(
        &format!("redis+sentinel://127.0.0.1:{nobody},127.0.0.1:{sentinel}/nosuch"),
        "s6",
    )
    .connect()
    .await
    .unwrap_err();
    assert!(
        matches!(
            &error,
            ConnectError::Sentinel {
                error: SentinelError::UnknownMaster { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("nosuch"), "{error}");
}

/// Composite limits behind Sentinel are the standalone server's: one
/// all-or-nothing call on the primary. Under load from two limiters no key
/// goes over its limit, every refusal names a key that was full, and a
/// refusal takes nothing on the other keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_limits_behind_sentinel_are_all_or_nothing() {
    use inflight_tests::composite_load::{self, Limited};
    let set = sentinels();
    let prefix = "s-composite";
    let limiters = [
        builder(&set.url(), prefix).connect().await.unwrap(),
        builder(&set.url(), prefix).connect().await.unwrap(),
    ];
    let keys: Vec<Limited> = [("c-a", 3), ("c-b", 5), ("c-c", 10)]
        .into_iter()
        .map(|(subject, limit)| Limited {
            key: key(subject),
            limit,
        })
        .collect();
    let seen = composite_load::run(&limiters, &keys, 64, Duration::from_secs(2), 8, true).await;
    println!(
        "granted {}, refused by key {:?}, cancelled {}, errors {:?}, peaks {:?}",
        seen.granted, seen.refused, seen.cancelled, seen.errors, seen.peaks
    );
    assert_eq!(seen.peaks, vec![3, 5, 10], "every key full, none over");
    assert_eq!(seen.unfounded, 0, "refusals of keys that were not full");
    assert!(seen.granted > 200 && seen.errors.is_empty(), "{:?}", seen.errors);
    // A full key refuses the whole request and is named; the others stay empty.
    let full = limiters[0].acquire_with(&key("c-d"), 1).await.unwrap();
    let (a, d) = (key("c-e"), key("c-d"));
    let refused = limiters[1].acquire_all(&[(&a, 5), (&d, 1)]).await;
    assert!(
        matches!(refused, Err(Error::Exceeded { key: Some(1), .. })),
        "{refused:?}"
    );
    assert_eq!(live(&set, prefix, "c-e"), 0);
    drop(full);
    for limiter in limiters {
        assert!(limiter.drain().await.is_complete());
    }
    for subject in ["c-a", "c-b", "c-c", "c-d", "c-e"] {
        assert_eq!(live(&set, prefix, subject), 0, "{subject} left a lease");
    }
}
