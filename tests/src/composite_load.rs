//! The load of the composite-limit tests: tasks take slots of several keys
//! at once (`Limiter::acquire_all`), each over a random subset of the keys
//! in a random order, sometimes dropping the acquire at a random point. A
//! ledger of our own checks what the limiter promises, per key:
//!
//! - `held`: callers holding a permit of the key, counted after the grant
//!   and before the release is sent (never more than Redis holds): its peak
//!   must stay within the key's limit;
//! - after the run, from every acquire's outcome: a granted one may have
//!   held its keys in Redis from its send until its release was confirmed,
//!   a dropped one from its send on; a refused one held nothing (all or
//!   nothing; across cluster slots, where keys are taken one slot after
//!   another, it may have held some from its send to its answer). A refusal that names a key must find, at some instant
//!   between its send and its answer, `limit` such possible holders of that
//!   key, or Redis could not have found it full.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight_tokio::{Error, Key, Limiter};

use crate::Rng;

/// One key of the load and its limit.
#[derive(Clone)]
pub struct Limited {
    pub key: Key,
    pub limit: u32,
}

struct Ledger {
    held: Vec<AtomicUsize>,
    peak: Vec<AtomicUsize>,
}

/// One acquire, as its caller saw it.
struct Attempt {
    keys: Vec<usize>,
    sent: Instant,
    answered: Instant,
    ended: Ended,
}

enum Ended {
    /// Held until its release was confirmed then.
    Released(Instant),
    /// Refused, naming this key.
    Refused(usize),
    /// Dropped before its answer: it may hold its keys until the end.
    Dropped,
    Failed,
}

/// How many acquires may have held a key in Redis, at each change.
struct Possible(Vec<(Instant, usize)>);

impl Possible {
    fn of(key: usize, attempts: &[Attempt], atomic: bool) -> Self {
        let mut changes: Vec<(Instant, isize)> = Vec::new();
        for attempt in attempts.iter().filter(|a| a.keys.contains(&key)) {
            match attempt.ended {
                Ended::Released(at) => changes.extend([(attempt.sent, 1), (at, -1)]),
                Ended::Dropped => changes.push((attempt.sent, 1)),
                Ended::Refused(_) if !atomic => changes.extend([(attempt.sent, 1), (attempt.answered, -1)]),
                Ended::Refused(_) | Ended::Failed => {}
            }
        }
        // At one instant, a release before a grant: never more than there were.
        changes.sort_by_key(|(at, by)| (*at, *by));
        let mut count = 0isize;
        Self(
            changes
                .into_iter()
                .map(|(at, by)| {
                    count += by;
                    (at, count as usize)
                })
                .collect(),
        )
    }

    /// The most possible holders at any instant of `[from, to]`.
    fn most(&self, from: Instant, to: Instant) -> usize {
        let first = self.0.partition_point(|(at, _)| *at <= from);
        let before = first.checked_sub(1).map_or(0, |i| self.0[i].1);
        self.0[first..]
            .iter()
            .take_while(|(at, _)| *at <= to)
            .map(|(_, n)| *n)
            .fold(before, usize::max)
    }
}

/// What a composite load saw.
pub struct Seen {
    /// The most holders of each key at once, by our count.
    pub peaks: Vec<usize>,
    /// Grants, refusals by the key named, and other errors by their text.
    pub granted: usize,
    pub refused: Vec<usize>,
    pub errors: HashMap<String, usize>,
    /// Acquires dropped before their answer.
    pub cancelled: usize,
    /// Refusals whose key never had `limit` possible holders while the
    /// acquire was out.
    pub unfounded: usize,
    /// Refusals that only other refused acquires' brief holds explain
    /// (keys taken one slot after another): what the partial holds cost.
    pub by_partial_holds: usize,
}

/// Runs `tasks` callers over `keys` on `limiters` for `run`: each asks for
/// 1 to 3 keys (every key in the mix), holds a grant for 0 to 2 ms, and
/// one acquire in `cancel_one_in` is dropped after 0 to 1 ms. `atomic`:
/// the keys are taken in one call (a refused acquire held none of them).
pub async fn run(
    limiters: &[Limiter],
    keys: &[Limited],
    tasks: usize,
    run: Duration,
    cancel_one_in: u64,
    atomic: bool,
) -> Seen {
    let ledger = Arc::new(Ledger {
        held: keys.iter().map(|_| AtomicUsize::new(0)).collect(),
        peak: keys.iter().map(|_| AtomicUsize::new(0)).collect(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|n| {
            let limiter = limiters[n % limiters.len()].clone();
            let (ledger, stop, keys) = (ledger.clone(), stop.clone(), keys.to_vec());
            tokio::spawn(async move {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1));
                let (mut attempts, mut errors) = (Vec::new(), HashMap::<String, usize>::new());
                let deadline = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    // 1 to 3 distinct keys, in a random order.
                    let mut picked: Vec<usize> = (0..keys.len()).collect();
                    for i in (1..picked.len()).rev() {
                        picked.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    picked.truncate(1 + rng.below(keys.len().min(3) as u64) as usize);
                    let asked: Vec<(&Key, u32)> = picked.iter().map(|i| (&keys[*i].key, keys[*i].limit)).collect();
                    let sent = Instant::now();
                    let acquire = limiter.acquire_all(&asked);
                    let outcome = if rng.below(cancel_one_in) == 0 {
                        let after = Duration::from_micros(rng.below(1_000));
                        tokio::time::timeout(after, acquire).await.ok()
                    } else {
                        Some(acquire.await)
                    };
                    let answered = Instant::now();
                    let ended = match outcome {
                        Some(Ok(permits)) => {
                            for i in &picked {
                                let now = ledger.held[*i].fetch_add(1, Ordering::SeqCst) + 1;
                                ledger.peak[*i].fetch_max(now, Ordering::SeqCst);
                            }
                            tokio::time::sleep(Duration::from_micros(rng.below(2_000))).await;
                            for i in &picked {
                                ledger.held[*i].fetch_sub(1, Ordering::SeqCst);
                            }
                            let _ = permits.release().await;
                            Ended::Released(Instant::now())
                        }
                        Some(Err(Error::Exceeded { key: Some(at), .. })) => {
                            tokio::time::sleep(Duration::from_micros(500)).await;
                            Ended::Refused(picked[at])
                        }
                        Some(Err(other)) => {
                            *errors.entry(other.to_string()).or_default() += 1;
                            Ended::Failed
                        }
                        None => Ended::Dropped,
                    };
                    attempts.push(Attempt {
                        keys: picked,
                        sent,
                        answered,
                        ended,
                    });
                }
                (attempts, errors)
            })
        })
        .collect();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::SeqCst);
    let mut seen = Seen {
        peaks: ledger.peak.iter().map(|p| p.load(Ordering::SeqCst)).collect(),
        granted: 0,
        refused: vec![0; keys.len()],
        errors: HashMap::new(),
        cancelled: 0,
        unfounded: 0,
        by_partial_holds: 0,
    };
    let mut attempts = Vec::new();
    for handle in handles {
        let (mut theirs, errors) = handle.await.expect("a load task");
        attempts.append(&mut theirs);
        for (error, n) in errors {
            *seen.errors.entry(error).or_default() += n;
        }
    }
    let possible: Vec<Possible> = (0..keys.len())
        .map(|key| Possible::of(key, &attempts, atomic))
        .collect();
    let held: Vec<Possible> = (0..keys.len()).map(|key| Possible::of(key, &attempts, true)).collect();
    for attempt in &attempts {
        match attempt.ended {
            Ended::Released(_) => seen.granted += 1,
            Ended::Dropped => seen.cancelled += 1,
            Ended::Failed => {}
            Ended::Refused(key) => {
                seen.refused[key] += 1;
                let most = possible[key].most(attempt.sent, attempt.answered);
                let limit = keys[key].limit as usize;
                if most < limit {
                    seen.unfounded += 1;
                } else if held[key].most(attempt.sent, attempt.answered) < limit {
                    seen.by_partial_holds += 1;
                }
            }
        }
    }
    seen.peaks = ledger.peak.iter().map(|p| p.load(Ordering::SeqCst)).collect();
    seen
}
