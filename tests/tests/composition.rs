//! Where the scripts' features meet: waiting and failover, per-call limits
//! and the queue, the recovery hold and hand-overs, late write-backs, keys
//! that must expire, arguments that must be checked first. Each test is one
//! finding of the adversarial review, run on a real redis-server the way
//! the review ran it; a failover is a lagging copy of the subject's keys
//! restored (`DUMP`/`RESTORE` of an earlier snapshot).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use inflight_core::resp::Frame;
use inflight_core::scripts::{Scripts, WaitArgs};
use inflight_tests::mutations;
use inflight_tests::subject::{command, Subject};
use inflight_tests::{RedisServer, RespClient};

const LONG: u64 = 60_000;
const HOUR: u64 = 3_600_000;
static NEXT: AtomicU32 = AtomicU32::new(0);

fn setup(server: &RedisServer, scripts: Scripts, prefix: &str) -> (RespClient, Subject) {
    let mut redis = server.client();
    // Each run its own keys: the same server runs the findings with their
    // fixes undone too.
    let prefix = format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let subject = Subject::with_scripts(&prefix, "s", scripts);
    subject.load(&mut redis);
    (redis, subject)
}

/// Finding 1. After a failover an id can be both held and queued (its
/// queue entry restored after it was served). A release must not hand it a
/// second slot: that rewrote the expiry its holder believes in to a short
/// reservation, and the limit was over-run once the reservation ran out.
fn a_hand_over_never_touches_a_lease_its_holder_still_holds(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f1");
    assert_eq!(s.acquire(&mut redis, "a", 2, LONG).status, 1);
    assert_eq!(s.acquire(&mut redis, "b", 2, LONG).status, 1);
    assert_eq!(s.wait(&mut redis, "w", 2, LONG, 5_000).status, 2);
    let lagging = s.snapshot(&mut redis);
    // On the primary: a's release hands the slot to w, and w's client
    // confirms it for a minute.
    assert_eq!(s.release(&mut redis, &["a"]), 1);
    assert_eq!(s.wait(&mut redis, "w", 2, LONG, 5_000).status, 1);
    // The replica had w queued, a held. Recovery, as a client does it: the
    // hold, a's release again, then b and w written back (w's restored
    // queue entry goes: it holds).
    s.restore(&mut redis, &lagging);
    let now = Subject::now(&mut redis);
    s.hold_for(&mut redis, 100);
    assert_eq!(s.release(&mut redis, &["a"]), 1);
    assert_eq!(s.reassert(&mut redis, "b", 2, now + LONG, now + HOUR), 1);
    assert_eq!(s.reassert(&mut redis, "w", 2, now + LONG, now + HOUR), 2);
    assert!(s.queue(&mut redis).is_empty(), "w holds: its restored entry is gone");
    std::thread::sleep(Duration::from_millis(150)); // the hold is over
    let believed = s.score(&mut redis, "w").unwrap();
    assert_eq!(believed, now + LONG, "its holder's expiry");
    // b's release: w must keep the expiry its holder believes in.
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(s.release(&mut redis, &["b"]), 1);
    assert_eq!(s.score(&mut redis, "w"), Some(believed), "w's lease was shortened");
    assert_eq!(s.acquire(&mut redis, "m", 2, LONG).status, 1);
    assert_eq!(
        s.acquire(&mut redis, "p", 2, LONG).status,
        0,
        "w and m hold the limit of 2"
    );
}

/// Finding 1, the same state reached without a write-back: a release finds
/// the queue entry of an id that holds a lease (a repeated call, or the
/// held branch of a waiting acquire): it is dropped, and the next waiter is
/// served instead.
fn a_release_skips_and_drops_a_queue_entry_whose_id_already_holds(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f1b");
    assert_eq!(s.acquire(&mut redis, "a", 2, LONG).status, 1);
    assert_eq!(s.acquire(&mut redis, "b", 2, LONG).status, 1);
    assert_eq!(s.wait(&mut redis, "w", 2, LONG, 5_000).status, 2);
    assert_eq!(s.wait(&mut redis, "x", 2, LONG, 5_000).status, 2);
    let before = s.snapshot(&mut redis);
    assert_eq!(s.release(&mut redis, &["a"]), 1);
    assert_eq!(s.wait(&mut redis, "w", 2, LONG, 5_000).status, 1);
    let held = s.score(&mut redis, "w").unwrap();
    // The queue comes back as it was (w first), the leases stay.
    let queue_keys = [s.keys.queue(), s.keys.waiters(), s.keys.holds()];
    s.restore_only(&mut redis, &before, &queue_keys);
    assert_eq!(s.queue(&mut redis), vec!["w", "x"]);
    assert_eq!(s.release(&mut redis, &["b"]), 1);
    assert_eq!(s.score(&mut redis, "w"), Some(held), "w keeps its lease");
    assert!(s.score(&mut redis, "x").is_some(), "x is served instead");
    assert!(s.queue(&mut redis).is_empty(), "w's stale entry went with it");
}

/// Finding 2. While the recovery hold is set the lease set may still miss
/// leases that count against the limit: a release hands nothing over (a
/// hand-over is a grant like any other).
fn during_the_recovery_hold_a_release_hands_nothing_over(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f2");
    for id in ["a", "b", "c"] {
        assert_eq!(s.acquire(&mut redis, id, 3, LONG).status, 1);
    }
    assert_eq!(s.wait(&mut redis, "w1", 3, LONG, 5_000).status, 2);
    assert_eq!(s.wait(&mut redis, "w2", 3, LONG, 5_000).status, 2);
    // The loss takes a; the hold goes up.
    command(&mut redis, &[b"ZREM", s.keys.leases(), b"a"]);
    s.hold_for(&mut redis, LONG);
    assert_eq!(s.acquire(&mut redis, "n", 3, LONG).status, -3);
    assert_eq!(s.release(&mut redis, &["b"]), 1);
    assert!(s.score(&mut redis, "w1").is_none(), "no grant while a is missing");
    assert!(s.score(&mut redis, "w2").is_none());
    let now = Subject::now(&mut redis);
    assert_eq!(s.reassert(&mut redis, "a", 3, now + LONG, now + HOUR), 2);
    assert_eq!(s.units(&mut redis), 2, "a and c: nobody was let in meanwhile");
}

/// Finding 3. A write-back carries a valid-until and an absolute expiry: a
/// held-up one cannot bring a released lease back, nor make it longer.
fn a_late_write_back_neither_resurrects_nor_lengthens_a_lease(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f3");
    let t0 = Subject::now(&mut redis);
    assert_eq!(s.acquire(&mut redis, "a", 1, 10_000).status, 1);
    assert_eq!(s.release(&mut redis, &["a"]), 1);
    // Past its valid-until: refused, nothing written.
    assert_eq!(s.reassert(&mut redis, "a", 1, t0 + 10_000, t0.saturating_sub(1)), -2);
    assert_eq!(s.score(&mut redis, "a"), None);
    assert_eq!(s.acquire(&mut redis, "n", 1, LONG).status, 1, "the slot is free");
    assert_eq!(s.release(&mut redis, &["n"]), 1);
    // Within its valid-until, after the holder gave the lease back with a
    // tombstone (its write-back was still on its way): refused.
    let compensate = s.encode_compensate("a", t0 + HOUR);
    assert_eq!(redis.call_raw(&compensate).unwrap(), Frame::BulkString("a".into()));
    assert_eq!(s.reassert(&mut redis, "a", 1, t0 + 10_000, t0 + HOUR), -1);
    assert_eq!(s.score(&mut redis, "a"), None);
    // A write-back that runs late keeps the holder's expiry, not "now +
    // what was left when it was sent".
    assert_eq!(s.acquire(&mut redis, "b", 1, 10_000).status, 1);
    command(&mut redis, &[b"ZREM", s.keys.leases(), b"b"]);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(s.reassert(&mut redis, "b", 1, t0 + 10_000, t0 + HOUR), 2);
    assert_eq!(s.score(&mut redis, "b"), Some(t0 + 10_000));
}

/// Finding 5. Every key the scripts write expires: the held hash goes with
/// its queue.
fn the_held_hash_expires_with_the_queue(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f5");
    assert_eq!(s.acquire(&mut redis, "a", 1, LONG).status, 1);
    assert_eq!(s.wait(&mut redis, "w", 1, LONG, 100).status, 2);
    let pttl = Subject::pttl(&mut redis, &s.keys.holds());
    assert!((1..=201).contains(&pttl), "held hash PTTL {pttl}");
    let leave = s.encode_leave("w");
    assert_eq!(redis.call_raw(&leave).unwrap(), Frame::Integer(1));
    assert_eq!(s.release(&mut redis, &["a"]), 1);
    std::thread::sleep(Duration::from_millis(250));
    for key in s.all_keys(&mut redis) {
        let ttl = Subject::pttl(&mut redis, &key);
        assert!(ttl != -1, "{} has no expiry", String::from_utf8_lossy(&key));
    }
    assert_eq!(Subject::pttl(&mut redis, &s.keys.holds()), -2, "gone with the queue");
}

/// Finding 6. Waiters with different limits share a queue (a rolling change
/// of a limit): each is handed a slot only if its own limit admits it, and
/// one held back by its own lower limit does not hold back a higher one.
fn each_waiter_is_served_under_its_own_limit(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f6");
    for id in ["a", "b", "c", "d"] {
        assert_eq!(s.acquire(&mut redis, id, 4, LONG).status, 1);
    }
    assert_eq!(s.wait(&mut redis, "w1", 2, LONG, 5_000).status, 2);
    assert_eq!(s.wait(&mut redis, "w2", 4, LONG, 5_000).status, 2);
    assert_eq!(s.release(&mut redis, &["a"]), 1);
    assert!(
        s.score(&mut redis, "w1").is_none(),
        "3 others hold: over w1's limit of 2"
    );
    assert!(s.score(&mut redis, "w2").is_some(), "w2's limit of 4 admits it");
    assert_eq!(s.queue(&mut redis), vec!["w1"]);
    assert_eq!(s.acquire(&mut redis, "n", 2, LONG).status, 0);
    // w1's own check says the same.
    assert_eq!(s.wait(&mut redis, "w1", 2, LONG, 5_000).status, 2);
    // Releases down to one holder (w2): w1 fits its limit then.
    assert_eq!(s.release(&mut redis, &["b", "c", "d"]), 3);
    assert!(s.score(&mut redis, "w1").is_some());
}

/// Finding 6, the fail-fast side: a newcomer whose limit is above the
/// queue's waiters' is not denied for slots those waiters could never take.
fn a_newcomer_with_a_higher_limit_is_not_blocked_by_waiters_held_back_by_their_own(
    server: &RedisServer,
    scripts: Scripts,
) {
    let (mut redis, s) = setup(server, scripts, "f6b");
    for id in ["a", "b"] {
        assert_eq!(s.acquire(&mut redis, id, 2, LONG).status, 1);
    }
    assert_eq!(s.wait(&mut redis, "low", 2, LONG, 5_000).status, 2);
    assert_eq!(s.acquire(&mut redis, "high", 3, LONG).status, 1);
    assert_eq!(s.acquire(&mut redis, "high2", 3, LONG).status, 0, "3 held: its limit");
    // The same limit as the waiter, or lower: behind it.
    assert_eq!(s.release(&mut redis, &["high"]), 1);
    assert!(s.score(&mut redis, "low").is_none(), "2 still held, low's limit is 2");
    assert_eq!(s.acquire(&mut redis, "same", 2, LONG).status, 0);
}

/// Finding 9 (the second review). A caller under a higher limit must not
/// take a unit a waiter ahead under a lower limit is owed: the waiter fits
/// its own limit now, and would not once the newcomer holds. A lease given
/// back without its hand-over (its `ZREM` only: the `RELEASE` behind it was
/// lost, or the lease expired) leaves the unit free with the waiter queued;
/// a fail-fast acquire, a batch and a later waiter under limit 3 are each
/// refused, and the waiter's own check takes the unit.
fn a_higher_limit_never_takes_a_unit_owed_to_a_lower_limit_waiter(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f9");
    assert_eq!(s.acquire(&mut redis, "a", 2, LONG).status, 1);
    assert_eq!(s.acquire(&mut redis, "b", 2, LONG).status, 1);
    assert_eq!(s.wait(&mut redis, "w", 2, LONG, 5_000).status, 2);
    assert_eq!(redis.call_raw(&s.encode_removal(&["a"])).unwrap(), Frame::Integer(1));
    assert_eq!(s.units(&mut redis), 1, "a's unit is free, w is still queued");
    assert_eq!(s.acquire(&mut redis, "n", 3, LONG).status, 0, "w is owed that unit");
    let now = Subject::now(&mut redis);
    let batch = s.encode_acquire_many(&["m1", "m2"], 3, now + LONG, now + HOUR);
    match redis.call_raw(&batch).unwrap() {
        Frame::Array(items) => assert_eq!(items[0], Frame::Integer(0), "{items:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.wait(&mut redis, "later", 3, LONG, 5_000).status, 2, "behind w");
    assert_eq!(s.wait(&mut redis, "w", 2, LONG, 5_000).status, 1, "w takes its unit");
    assert_eq!(s.units(&mut redis), 2);
    // Past w, the limit of 3 has one unit more: the later waiter's.
    assert_eq!(s.wait(&mut redis, "later", 3, LONG, 5_000).status, 1);
}

/// Finding 10 (the second review). The fail-fast acquire prunes expired
/// units only when they fill the subject; an id whose own earlier lease
/// expired unpruned must still get a fresh lease, not a grant on its old,
/// past expiry that the next acquire to fill the subject prunes away.
fn an_id_whose_lease_expired_unpruned_gets_a_fresh_lease(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f10");
    assert_eq!(s.acquire(&mut redis, "y", 3, LONG).status, 1);
    assert_eq!(s.acquire(&mut redis, "x", 3, 50).status, 1);
    // Redis's own clock must pass x's expiry.
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(
        s.acquire(&mut redis, "x", 3, LONG).status,
        1,
        "x again: room even counting its old units"
    );
    let now = Subject::now(&mut redis);
    assert!(s.score(&mut redis, "x").unwrap() > now + LONG / 2, "a fresh lease");
    assert_eq!(s.acquire(&mut redis, "b", 3, LONG).status, 1);
    assert_eq!(
        s.acquire(&mut redis, "c", 3, LONG).status,
        0,
        "y, x and b hold the three units"
    );
}

/// Finding 11 (the second review). The same id may be compensated twice
/// (its acquire, then a write-back of its lease) with different
/// valid-untils: the second must not shorten the tombstone, or the request
/// that may still run comes back after it and takes a slot.
fn a_second_compensation_never_shortens_the_tombstone(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f11");
    let now = Subject::now(&mut redis);
    let tombstone = s.keys.tombstone_of(b"x");
    redis.call_raw(&s.encode_compensate("x", now + 10_000)).unwrap();
    redis.call_raw(&s.encode_compensate("x", now + 50)).unwrap();
    let ttl = Subject::pttl(&mut redis, &tombstone);
    assert!(ttl > 5_000, "the tombstone keeps the later valid-until: PTTL {ttl}");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(s.acquire(&mut redis, "x", 3, LONG).status, -1, "still refused");
}

/// Finding 12 (the second review). A `#` in an id could name another
/// lease's extra unit (`a*2`'s second unit is `a*2#2`): refused before
/// anything is written.
fn an_id_with_a_hash_is_refused(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f12");
    assert_eq!(s.acquire(&mut redis, "a*2", 4, LONG).status, 1);
    let now = Subject::now(&mut redis);
    let clash = s.encode_acquire("a*2#2", 4, now + LONG, now + HOUR, None);
    assert!(matches!(redis.call_raw(&clash).unwrap(), Frame::Error(e) if e.contains('#')));
    assert_eq!(s.units(&mut redis), 2, "a*2's two units, nothing more");
}

/// Finding 13 (the second review). A key of a foreign type where the fence
/// counter lives fails a fencing acquire before its lease is written (the
/// client compensates an error reply; nothing is left to compensate).
fn a_foreign_fence_key_fails_the_acquire_before_it_writes(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f13");
    command(&mut redis, &[b"HSET", &s.keys.fence(), b"not", b"ours"]);
    let now = Subject::now(&mut redis);
    let acquire = s.encode_acquire("a", 3, now + LONG, now + HOUR, None);
    assert!(matches!(redis.call_raw(&acquire).unwrap(), Frame::Error(e) if e.contains("WRONGTYPE")));
    assert_eq!(s.score(&mut redis, "a"), None, "no lease written");
    // A batch of one subject, with a weighted lease in it, and a waiting acquire.
    let batch = s.encode_acquire_many(&["b", "c*2"], 3, now + LONG, now + HOUR);
    assert!(matches!(redis.call_raw(&batch).unwrap(), Frame::Error(e) if e.contains("WRONGTYPE")));
    let wait = WaitArgs {
        lifetime_ms: 5_000,
        patience_ms: HOUR,
        previous: b"",
    };
    let waiting = s.encode_acquire("d", 3, now + LONG, now + HOUR, Some(wait));
    assert!(matches!(redis.call_raw(&waiting).unwrap(), Frame::Error(e) if e.contains("WRONGTYPE")));
    assert_eq!(
        s.all_keys(&mut redis),
        vec![s.keys.fence()],
        "nothing but the foreign key"
    );
}

/// Finding 8. A batch that names an id twice counts it once.
fn a_batch_counts_a_repeated_id_once(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f8a");
    let now = Subject::now(&mut redis);
    let batch = s.encode_acquire_many(&["a", "a", "b"], 2, now + LONG, now + HOUR);
    match redis.call_raw(&batch).unwrap() {
        Frame::Array(items) => {
            let statuses: Vec<_> = items.chunks(3).take(3).map(|t| t[0].clone()).collect();
            assert_eq!(statuses, vec![Frame::Integer(1); 3], "{items:?}");
            assert_eq!(items[2], items[5], "one acquire, one token");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.units(&mut redis), 2);
}

/// Finding 8. Weights out of range and malformed numbers are refused
/// before anything is written.
fn bad_arguments_write_nothing(server: &RedisServer, scripts: Scripts) {
    let (mut redis, s) = setup(server, scripts, "f8b");
    let now = Subject::now(&mut redis);
    assert_eq!(s.acquire(&mut redis, "a", 5, LONG).status, 1);
    assert_eq!(s.acquire(&mut redis, "b", 5, LONG).status, 1);
    // Weight 0, an expiry of 1.5 ms, or one written in any form but plain
    // decimal (the scripts hand the expiry on to `ZADD` and `PEXPIREAT` as
    // given, which would read some of these otherwise or not at all):
    // errors, and nothing written.
    let zero_weight = s.encode_acquire("c*0", 5, now + LONG, now + HOUR, None);
    assert!(matches!(redis.call_raw(&zero_weight).unwrap(), Frame::Error(e) if e.contains("weight")));
    // Waiters' ids no client makes: white space would split a wake-up
    // message, and `avg` and `limit` are the held hash's own fields.
    for odd in ["c d", "c\td", "avg", "limit"] {
        let wait = WaitArgs {
            lifetime_ms: 5_000,
            patience_ms: HOUR,
            previous: b"",
        };
        let call = s.encode_acquire(odd, 5, now + LONG, now + HOUR, Some(wait));
        assert!(
            matches!(redis.call_raw(&call).unwrap(), Frame::Error(e) if e.contains("not one a client makes")),
            "id {odd:?} was taken"
        );
    }
    // A batch past what Lua unpacks in one `ZADD` would fail after its
    // first writes: refused whole.
    let many: Vec<String> = (0..1001).map(|i| format!("m{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let batch = s.encode_acquire_many(&many, 5000, now + LONG, now + HOUR);
    assert!(matches!(redis.call_raw(&batch).unwrap(), Frame::Error(e) if e.contains("at most 1000")));
    for expiry in [
        "1.5", "012345", "1.2345e4", "+12345", " 12345", "0x3039", "12345 ", "-0", "",
    ] {
        let odd = with_expiry_written_as(&s, now, expiry);
        assert!(
            matches!(redis.call_raw(&odd).unwrap(), Frame::Error(e) if e.contains("expiry")),
            "expiry {expiry:?} was taken"
        );
    }
    assert_eq!(s.units(&mut redis), 2, "nothing was written");
    assert_eq!(s.score(&mut redis, "c"), None);
    for key in s.all_keys(&mut redis) {
        assert!(Subject::pttl(&mut redis, &key) != -1, "a key without expiry");
    }
}

/// A lease that ends while its own script call still runs keeps its set
/// alive to the call's end: Redis 7.0 deletes a key at once when an
/// absolute expiry (`PEXPIREAT`) has passed on its clock, which runs on
/// during a long call, and the call's next acquire on the subject would
/// then find room beside a lease it just granted. Forty heavy acquires
/// of other subjects make the `ACQUIRE_ACROSS` call last tens of
/// milliseconds; `a` ends 3 ms after the call is sent, `b` comes last.
fn a_lease_ending_during_its_call_keeps_its_set_to_the_end(server: &RedisServer, scripts: Scripts) {
    const FILLERS: usize = 40;
    let mut redis = server.client();
    let text = scripts.acquire_across.text;
    let prefix = format!("f12-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    for attempt in 0..20 {
        let now = Subject::now(&mut redis);
        let far = (now + HOUR).to_string();
        let subject = |name: String| {
            let base = format!("{prefix}:{{{name}}}");
            [":leases", ":gone", ":fence", ":queue", ":waiters", ":held"].map(|suffix| format!("{base}{suffix}"))
        };
        let mut keys: Vec<String> = Vec::new();
        let mut args: Vec<String> = Vec::new();
        for filler in 0..FILLERS {
            keys.extend(subject(format!("filler-{attempt}-{filler}")));
            args.extend([
                far.clone(),
                "1000".into(),
                "x*1000".into(),
                far.clone(),
                String::new(),
                "0".into(),
            ]);
        }
        let s = subject(format!("s-{attempt}"));
        keys.extend(s.clone());
        args.extend([
            (now + 3).to_string(),
            "1".into(),
            "a".into(),
            far.clone(),
            String::new(),
            "0".into(),
        ]);
        keys.extend(s.clone());
        args.extend([
            far.clone(),
            "1".into(),
            "b".into(),
            far.clone(),
            String::new(),
            "0".into(),
        ]);
        let count = keys.len().to_string();
        let mut call: Vec<&[u8]> = vec![b"EVAL", text.as_bytes(), count.as_bytes()];
        call.extend(keys.iter().map(|k| k.as_bytes()));
        call.extend(args.iter().map(|a| a.as_bytes()));
        let statuses: Vec<Frame> = match redis.call(&call).unwrap() {
            Frame::Array(items) => items.chunks(3).filter(|c| c.len() == 3).map(|c| c[0].clone()).collect(),
            other => panic!("{other:?}"),
        };
        if statuses[FILLERS] != Frame::Integer(1) {
            // The call started after `a`'s end (a slow machine): again.
            continue;
        }
        assert_eq!(
            statuses[FILLERS + 1],
            Frame::Integer(0),
            "limit 1: `b` was granted beside `a`, granted in the same call"
        );
        return;
    }
    panic!("in 20 attempts no call started before its first lease's end");
}

/// An acquire whose expiry argument is `expiry`, as written.
fn with_expiry_written_as(s: &Subject, now: u64, expiry: &str) -> Vec<u8> {
    let text = s.encode_acquire("c", 5, 12345, now + HOUR, None);
    let needle = b"$5\r\n12345\r\n";
    let at = text.windows(needle.len()).position(|w| w == needle).unwrap();
    let mut out = text[..at].to_vec();
    out.extend_from_slice(format!("${}\r\n{expiry}\r\n", expiry.len()).as_bytes());
    out.extend_from_slice(&text[at + needle.len()..]);
    out
}

/// Each finding, as the scripts stand.
mod fixed {
    use super::*;

    #[test]
    fn a_hand_over_never_touches_a_lease_its_holder_still_holds() {
        super::a_hand_over_never_touches_a_lease_its_holder_still_holds(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_release_skips_and_drops_a_queue_entry_whose_id_already_holds() {
        super::a_release_skips_and_drops_a_queue_entry_whose_id_already_holds(
            &RedisServer::start(),
            Scripts::default(),
        );
    }

    #[test]
    fn during_the_recovery_hold_a_release_hands_nothing_over() {
        super::during_the_recovery_hold_a_release_hands_nothing_over(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_late_write_back_neither_resurrects_nor_lengthens_a_lease() {
        super::a_late_write_back_neither_resurrects_nor_lengthens_a_lease(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn the_held_hash_expires_with_the_queue() {
        super::the_held_hash_expires_with_the_queue(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn each_waiter_is_served_under_its_own_limit() {
        super::each_waiter_is_served_under_its_own_limit(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_newcomer_with_a_higher_limit_is_not_blocked_by_waiters_held_back_by_their_own() {
        super::a_newcomer_with_a_higher_limit_is_not_blocked_by_waiters_held_back_by_their_own(
            &RedisServer::start(),
            Scripts::default(),
        );
    }

    #[test]
    fn a_higher_limit_never_takes_a_unit_owed_to_a_lower_limit_waiter() {
        super::a_higher_limit_never_takes_a_unit_owed_to_a_lower_limit_waiter(
            &RedisServer::start(),
            Scripts::default(),
        );
    }

    #[test]
    fn an_id_whose_lease_expired_unpruned_gets_a_fresh_lease() {
        super::an_id_whose_lease_expired_unpruned_gets_a_fresh_lease(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_second_compensation_never_shortens_the_tombstone() {
        super::a_second_compensation_never_shortens_the_tombstone(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn an_id_with_a_hash_is_refused() {
        super::an_id_with_a_hash_is_refused(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_foreign_fence_key_fails_the_acquire_before_it_writes() {
        super::a_foreign_fence_key_fails_the_acquire_before_it_writes(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_batch_counts_a_repeated_id_once() {
        super::a_batch_counts_a_repeated_id_once(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn bad_arguments_write_nothing() {
        super::bad_arguments_write_nothing(&RedisServer::start(), Scripts::default());
    }

    #[test]
    fn a_lease_ending_during_its_call_keeps_its_set_to_the_end() {
        super::a_lease_ending_during_its_call_keeps_its_set_to_the_end(&RedisServer::start(), Scripts::default());
    }
}

/// Each finding's test, with its fix undone (see `inflight_tests::mutations`):
/// it must fail. A test that passes either way proves nothing.
#[test]
fn each_finding_fails_with_its_fix_undone() {
    type Finding = fn(&RedisServer, Scripts);
    let pairs: [(&str, Finding); 13] = [
        (
            "hand-over-to-holder",
            a_release_skips_and_drops_a_queue_entry_whose_id_already_holds,
        ),
        (
            "hand-over-during-hold",
            during_the_recovery_hold_a_release_hands_nothing_over,
        ),
        (
            "reassert-unbounded",
            a_late_write_back_neither_resurrects_nor_lengthens_a_lease,
        ),
        ("held-hash-no-expiry", the_held_hash_expires_with_the_queue),
        ("last-limit-for-all", each_waiter_is_served_under_its_own_limit),
        (
            "newcomer-takes-owed-unit",
            a_higher_limit_never_takes_a_unit_owed_to_a_lower_limit_waiter,
        ),
        (
            "expired-own-id-kept",
            an_id_whose_lease_expired_unpruned_gets_a_fresh_lease,
        ),
        (
            "tombstone-shortened",
            a_second_compensation_never_shortens_the_tombstone,
        ),
        ("hash-in-ids", an_id_with_a_hash_is_refused),
        ("batch-counts-repeats", a_batch_counts_a_repeated_id_once),
        ("no-argument-checks", bad_arguments_write_nothing),
        ("fractional-arguments", bad_arguments_write_nothing),
        (
            "absolute-key-expiry",
            a_lease_ending_during_its_call_keeps_its_set_to_the_end,
        ),
    ];
    let server = RedisServer::start();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut passed = Vec::new();
    for (name, finding) in pairs {
        let mutation = mutations::find(name).expect("a known mutation");
        let scripts = mutation.scripts();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| finding(&server, scripts)));
        if outcome.is_ok() {
            passed.push(name);
        }
    }
    std::panic::set_hook(quiet);
    assert!(
        passed.is_empty(),
        "these findings' tests pass with their fix undone: {passed:?}"
    );
}
