//! What one cycle costs Redis, counted: the commands a fail-fast acquire and
//! its release run, and the three script calls of a waiting grant (the
//! script calls and every `redis.call` inside them), read from `INFO
//! commandstats` on a private server. Counts do not drift
//! with the machine's load as times do, so this is the guard against a
//! change that makes every request pay for a feature it does not use: it
//! fails when a count grows (and when one shrinks, so that the expectation
//! here is updated with the gain).

use std::collections::BTreeMap;
use std::time::Duration;

use inflight_core::resp::Frame;
use inflight_tests::subject::Subject;
use inflight_tests::RedisServer;
use inflight_tokio::{Error, Key, Limiter};

/// Calls per command since the server started, `INFO` itself left out.
fn calls(server: &RedisServer) -> BTreeMap<String, u64> {
    let info = match server.client().call(&[b"INFO", b"commandstats"]) {
        Ok(Frame::BulkString(info)) => String::from_utf8_lossy(&info).into_owned(),
        other => panic!("INFO commandstats: {other:?}"),
    };
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| name != "info")
        .collect()
}

/// The commands run between `before` and `after`, per command.
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, calls)| (name.clone(), calls - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, calls)| *calls > 0)
        .collect()
}

fn expect(counted: &BTreeMap<String, u64>, per: u64, expected: &[(&str, u64)]) {
    let expected: BTreeMap<String, u64> = expected
        .iter()
        .map(|(name, calls)| ((*name).to_owned(), calls * per))
        .collect();
    let total = |map: &BTreeMap<String, u64>| map.values().sum::<u64>() as f64 / per as f64;
    assert_eq!(
        counted,
        &expected,
        "Redis commands per cycle changed: {:.2} now, {:.2} expected (update the expectation with the reason if this is a gain)",
        total(counted),
        total(&expected)
    );
}

/// A limiter whose connection is up and whose scripts are loaded: one
/// cycle done before anything is counted.
async fn limiter(server: &RedisServer) -> Limiter {
    fenced_or_not(server, false).await
}

/// As [`limiter`], giving fencing tokens or not.
async fn fenced_or_not(server: &RedisServer, fencing: bool) -> Limiter {
    let limiter = Limiter::builder(server.url())
        .key_prefix("counts")
        .fencing_tokens(fencing)
        .default_limit(10)
        .lease_ttl(Duration::from_secs(60))
        // No probe or clock refresh inside a measurement.
        .idle_probe(Duration::from_secs(600))
        .connect()
        .await
        .expect("connect");
    let key = Key::new("tenant", "warm-up").unwrap();
    limiter.acquire(&key).await.unwrap().release().await.unwrap();
    limiter
}

/// The fail-fast cycle of a subject nobody waits on, weight 1, no recovery
/// in progress, no fencing token asked for: what every request of a
/// multi-tenant service pays.
const CYCLE: &[(&str, u64)] = &[
    // The acquire: its call, then TIME, one EXISTS for tombstone, queue and
    // hold, the count, the add, the set's expiry. (No prune: the subject
    // has room even counting its expired units, if any.)
    ("evalsha", 1),
    ("time", 1),
    ("exists", 2),
    ("zcard", 1),
    ("zadd", 1),
    ("pexpire", 1),
    // The release, no script: the removal, and whether anyone waits (the
    // second EXISTS above).
    ("zrem", 1),
];

/// Twenty cycles on twenty tenants, one after another.
async fn cycles(server: &RedisServer, limiter: &Limiter) -> (u64, BTreeMap<String, u64>) {
    const CYCLES: u64 = 20;
    let before = calls(server);
    for cycle in 0..CYCLES {
        let key = Key::new("tenant", format!("t{cycle}")).unwrap();
        let permit = limiter.acquire(&key).await.unwrap();
        permit.release().await.unwrap();
    }
    (CYCLES, delta(&before, &calls(server)))
}

#[tokio::test]
async fn a_fail_fast_cycle_runs_eight_commands() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;
    let (cycles, counted) = cycles(&server, &limiter).await;
    expect(&counted, cycles, CYCLE);
}

#[tokio::test]
async fn a_fencing_token_costs_one_set_per_grant() {
    let server = RedisServer::start();
    let limiter = fenced_or_not(&server, true).await;
    let key = Key::new("tenant", "t").unwrap();
    let permit = limiter.acquire(&key).await.unwrap();
    assert!(
        permit.fencing_token().is_some(),
        "a limiter that asks for tokens gets them"
    );
    permit.release().await.unwrap();
    let (cycles, counted) = cycles(&server, &limiter).await;
    let mut fenced = CYCLE.to_vec();
    fenced.push(("set", 1));
    expect(&counted, cycles, &fenced);
}

/// 32 tenants' cycles at once: the acquires meet in the driver's one
/// wake-up and go as two `ACQUIRE_ACROSS` calls of 16 (`MAX_BATCH`), one
/// `TIME` each; the work inside is each acquire's, as alone. The releases
/// meet in one wake-up too: one `ZREM` each, and one `EXISTS` of all their
/// queues. (The test's
/// runtime has one thread: the 32 tasks all ask before the driver runs, so
/// the batches are the same every run.)
#[tokio::test]
async fn many_tenants_at_once_share_script_calls() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;

    const TENANTS: u64 = 32;
    let before = calls(&server);
    let tasks: Vec<_> = (0..TENANTS)
        .map(|tenant| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let key = Key::new("tenant", format!("t{tenant}")).unwrap();
                limiter.acquire(&key).await.unwrap().release().await.unwrap();
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut counted = delta(&before, &calls(&server));
    let calls = ["evalsha", "time"].map(|name| counted.remove(name).unwrap_or(0));
    assert_eq!(
        calls,
        [2, 2],
        "32 acquires of 32 tenants at once: two script calls (16 each), one TIME each"
    );
    *counted.get_mut("exists").expect("EXISTS ran") -= 1;
    // Per tenant, the rest of a lone cycle: everything but the call, its
    // clock and the release's queue check (one for all, taken off above).
    let per_tenant: Vec<(&str, u64)> = CYCLE
        .iter()
        .copied()
        .filter(|(name, _)| !["evalsha", "time"].contains(name))
        .map(|(name, calls)| (name, if name == "exists" { calls - 1 } else { calls }))
        .collect();
    expect(&counted, TENANTS, &per_tenant);
}

#[tokio::test]
async fn a_denial_reads_and_writes_nothing_more() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;
    let key = Key::new("tenant", "full").unwrap();
    let _held = limiter.acquire_with(&key, 1).await.unwrap();

    const DENIALS: u64 = 10;
    let before = calls(&server);
    for _ in 0..DENIALS {
        match limiter.acquire_with(&key, 1).await {
            Err(Error::Exceeded { .. }) => {}
            other => panic!("expected a denial, got {other:?}"),
        }
    }
    // The call, TIME, the EXISTS, the count; the prune, since the subject
    // looks full; the ZSCORE that tells a repeated id from a new one.
    let denial = &[
        ("evalsha", 1),
        ("time", 1),
        ("exists", 1),
        ("zcard", 1),
        ("zremrangebyscore", 1),
        ("zscore", 1),
    ];
    expect(&delta(&before, &calls(&server)), DENIALS, denial);
}

/// Expired units are pruned when they fill the subject, not before: a
/// forgotten lease that has expired is counted as held until then, and then
/// removed by the acquire that needs its room (which says so: `reclaimed`).
#[tokio::test]
async fn expired_units_are_pruned_only_when_they_leave_no_room() {
    let server = RedisServer::start();
    let limiter = limiter(&server).await;
    let key = Key::new("tenant", "forgetful").unwrap();
    // A holder that never gave its lease back (a process gone), expired a
    // second ago by Redis's clock; its set lives on with its other leases.
    let leases = inflight_core::key::SubjectKeys::new("counts", &key).leases().clone();
    let mut redis = server.client();
    let now_ms = match redis.call(&[b"TIME"]).unwrap() {
        Frame::Array(parts) => match &parts[0] {
            Frame::BulkString(secs) => std::str::from_utf8(secs).unwrap().parse::<u64>().unwrap() * 1000,
            other => panic!("TIME: {other:?}"),
        },
        other => panic!("TIME: {other:?}"),
    };
    let expired = (now_ms - 1_000).to_string();
    redis
        .call(&[b"ZADD", &leases, expired.as_bytes(), b"gone-holder"])
        .unwrap();
    redis.call(&[b"PEXPIRE", &leases, b"60000"]).unwrap();
    let before = calls(&server);
    let held = limiter.acquire_with(&key, 2).await.unwrap();
    let counted = delta(&before, &calls(&server));
    assert_eq!(
        counted.get("zremrangebyscore"),
        None,
        "one of two units counted: room, no prune"
    );
    let before = calls(&server);
    let again = limiter.acquire_with(&key, 2).await.unwrap();
    let counted = delta(&before, &calls(&server));
    assert_eq!(
        counted.get("zremrangebyscore"),
        Some(&1),
        "two of two counted: the prune makes room"
    );
    assert_eq!(limiter.stats().reclaimed, 1, "the forgotten lease, reclaimed");
    drop((held, again));
}

/// A slot handed to a waiter and given back before an eighth of its
/// reservation has passed costs no renewal: the holder's release (a
/// `RELEASE` script, its queue being there), the waiter's release, and
/// nothing else (the confirming renewal would be a second `evalsha`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_hold_after_a_hand_over_sends_no_confirming_renewal() {
    let server = RedisServer::start();
    let (holder, waiter) = (limiter(&server).await, limiter(&server).await);
    let key = Key::new("tenant", "handed").unwrap();
    let mut held = Vec::new();
    for _ in 0..10 {
        held.push(holder.acquire(&key).await.unwrap());
    }
    let waiting = {
        let (waiter, key) = (waiter.clone(), key.clone());
        tokio::spawn(async move { waiter.acquire_wait(&key, Duration::from_secs(10)).await })
    };
    // Queued, and subscribed to its wake-ups (whose confirmation sends the
    // waiter to check once more): then nothing moves until the release.
    let keys = inflight_core::key::SubjectKeys::new("counts", &key);
    let (queue, channel) = (keys.queue(), keys.wake_channel());
    let subscribed = Frame::Array(vec![Frame::BulkString(channel.clone()), Frame::Integer(1)]);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while server.client().call(&[b"ZCARD", &queue]).unwrap() != Frame::Integer(1)
        || server.client().call(&[b"PUBSUB", b"SHARDNUMSUB", &channel]).unwrap() != subscribed
    {
        assert!(std::time::Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = calls(&server);
    held.pop().unwrap().release().await.unwrap();
    waiting
        .await
        .unwrap()
        .expect("handed the slot")
        .release()
        .await
        .unwrap();
    // Past when the renewal would have gone (an eighth of a 1 s lifetime).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counted = delta(&before, &calls(&server));
    assert_eq!(counted.get("evalsha"), Some(&1), "{counted:?}");
    drop(held);
}

/// A waiting grant, script by script, with no client timing in the way:
/// the call that queues a waiter behind another, the `RELEASE` (as a
/// limiter with waiters on the subject sends it: alone) that hands it the
/// slot its predecessor frees, and the renewal that confirms the hand-over.
/// Three script calls per waiting grant whatever the wait (`wait_bench`
/// measures what they cost against polling). Each helper reads `TIME` once
/// by itself first (one `time` more in each count below).
#[test]
fn a_waiting_grant_runs_three_script_calls() {
    let server = RedisServer::start();
    let mut redis = server.client();
    let subject = Subject::new("counts", "queued");
    subject.load(&mut redis);
    const LONG: u64 = 60_000;
    assert_eq!(subject.acquire(&mut redis, "holder", 1, LONG).status, 1);
    assert_eq!(subject.wait(&mut redis, "first", 1, LONG, 5_000).status, 2);

    let before = calls(&server);
    // The first waiter's lifetime: its call gave each key twice that, so
    // this one reads each key's expiry and writes none (whatever the
    // milliseconds between the calls).
    assert_eq!(subject.wait(&mut redis, "second", 1, LONG, 5_000).status, 2);
    // The call, its clock, the tombstone and hold at once, the prune and
    // whether the id holds a lease, the count, the queue: its dead waiters,
    // its length, the id's place; the estimate, the ticket, the entry, the
    // waiter's expiry and limit, and the three keys' expiries read.
    let queued = &[
        ("evalsha", 1),
        ("time", 2),
        ("exists", 2),
        ("zremrangebyscore", 1),
        ("zscore", 1),
        ("zcard", 2),
        ("zrangebyscore", 1),
        ("zrank", 1),
        ("hget", 1),
        ("zrange", 1),
        ("zadd", 2),
        ("hset", 1),
        ("pttl", 3),
    ];
    expect(&delta(&before, &calls(&server)), 1, queued);

    // The subject's first hand-over (to "first"): it also starts the hold
    // time's average, and covers the held hash's expiry for it, once.
    assert_eq!(subject.release(&mut redis, &["holder"]), 1);
    assert!(subject.score(&mut redis, "first").is_some());

    // The held hash outlives the queue by far (each waiting call covers
    // both, a millisecond apart at times): the release's cover of it then
    // reads its expiry and writes nothing, every run.
    redis.call(&[b"PEXPIRE", &subject.keys.holds(), b"600000"]).unwrap();
    let before = calls(&server);
    assert_eq!(subject.release(&mut redis, &["first"]), 1);
    // The removal, the queue and held hash, the hold time folded in, the
    // queue's expiry and the held hash's, the ids given back looked up in
    // the queue; the clock,
    // dead waiters, the prune, the recovery hold, the count; the first
    // waiters, their limits, whether they hold a lease; the reservation's
    // end, the token, the lease, out of the queue (three places), the
    // set's expiry (set anew: the removal left the set empty, and Redis
    // dropped the key), the message.
    let handed = &[
        ("evalsha", 1),
        ("zrem", 3),
        ("exists", 2),
        ("hget", 1),
        ("hset", 1),
        ("pttl", 3),
        ("pexpire", 1),
        ("zmscore", 3),
        ("time", 1),
        ("zrangebyscore", 1),
        ("zremrangebyscore", 1),
        ("zcard", 1),
        ("zrange", 1),
        ("hmget", 1),
        ("set", 1),
        ("zadd", 1),
        ("hdel", 1),
        ("spublish", 1),
    ];
    expect(&delta(&before, &calls(&server)), 1, handed);

    let before = calls(&server);
    let now = Subject::now(&mut redis);
    // Longer than the holder's lease: the set's expiry grows.
    let confirm = subject.encode_renew("second", now + 2 * LONG, now + 3_600_000);
    assert_eq!(redis.call_raw(&confirm).unwrap(), renewed("second"));
    let confirmed = &[
        ("evalsha", 1),
        ("time", 2),
        ("zremrangebyscore", 1),
        ("zscore", 1),
        ("zadd", 1),
        ("pttl", 1),
        ("pexpire", 1),
    ];
    expect(&delta(&before, &calls(&server)), 1, confirmed);
}

/// `RENEW`'s reply for an extended lease.
fn renewed(id: &str) -> Frame {
    Frame::Array(vec![
        Frame::Integer(1),
        Frame::BulkString(bytes::Bytes::copy_from_slice(id.as_bytes())),
        Frame::Integer(0),
    ])
}
