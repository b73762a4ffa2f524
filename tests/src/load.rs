//! The load of the resharding and failover tests: `tasks` callers acquire
//! and hold for about a millisecond, over and over, until `finish`; a
//! ledger of our own counts holders at every instant and remembers the
//! peak (an over-admission shows there, whatever the limiter believes),
//! and the longest time between two grants (how long a failover stopped
//! them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use inflight_tokio::{Error, Key, Limiter};

pub struct Load {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicUsize>,
    gaps: Arc<Gaps>,
    tasks: Vec<tokio::task::JoinHandle<HashMap<String, usize>>>,
}

/// What a load saw: the most holders at once, the outcomes by kind
/// (`granted`, `denied`, or the error's text), and the longest time
/// between two grants.
pub struct Seen {
    pub peak: usize,
    pub outcomes: HashMap<String, usize>,
    pub longest_gap: Duration,
}

/// Grant times, as microseconds since the load started.
struct Gaps {
    start: Instant,
    last: AtomicU64,
    longest: AtomicU64,
}

impl Gaps {
    fn granted(&self) {
        let now = self.start.elapsed().as_micros() as u64;
        let before = self.last.swap(now, Ordering::SeqCst);
        self.longest.fetch_max(now.saturating_sub(before), Ordering::SeqCst);
    }
}

impl Load {
    /// Starts `tasks` callers on `Key::new("tenant", subject)`, spread over
    /// `limiters`; each stops by itself after a minute.
    pub fn start(limiters: &[Limiter], subject: &str, tasks: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let holders = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let gaps = Arc::new(Gaps {
            start: Instant::now(),
            last: AtomicU64::new(0),
            longest: AtomicU64::new(0),
        });
        let handles = (0..tasks)
            .map(|n| {
                let limiter = limiters[n % limiters.len()].clone();
                let (stop, holders, peak, gaps) = (stop.clone(), holders.clone(), peak.clone(), gaps.clone());
                let key = Key::new("tenant", subject).expect("a valid subject");
                tokio::spawn(async move {
                    let mut outcomes: HashMap<String, usize> = HashMap::new();
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                        let outcome = limiter.acquire(&key).await;
                        let kind = match &outcome {
                            Ok(_) => "granted".to_string(),
                            Err(Error::Exceeded { .. }) => "denied".to_string(),
                            Err(other) => other.to_string(),
                        };
                        *outcomes.entry(kind).or_default() += 1;
                        match outcome {
                            Ok(permit) => {
                                gaps.granted();
                                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                                peak.fetch_max(now, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(1)).await;
                                holders.fetch_sub(1, Ordering::SeqCst);
                                drop(permit);
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
                        }
                    }
                    outcomes
                })
            })
            .collect();
        Load {
            stop,
            peak,
            gaps,
            tasks: handles,
        }
    }

    /// Stops the callers and sums what they saw.
    pub async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        let mut outcomes: HashMap<String, usize> = HashMap::new();
        for task in self.tasks {
            for (kind, n) in task.await.expect("a load task") {
                *outcomes.entry(kind).or_default() += n;
            }
        }
        Seen {
            peak: self.peak.load(Ordering::SeqCst),
            outcomes,
            longest_gap: Duration::from_micros(self.gaps.longest.load(Ordering::SeqCst)),
        }
    }
}
