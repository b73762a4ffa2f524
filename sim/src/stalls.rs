//! The `driver_stalls` fault: a replica's main driver stops now and then,
//! and what S3 grants the callers that waited on it meanwhile.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight_tokio::Limiter;
use tokio::time::Instant;

use crate::ledger::Ledger;
use crate::rng::Rng;

/// When a replica's main driver stood still (the `driver_stalls` fault).
/// Its callers run on, as tasks on the runtime's other workers do while
/// one worker is blocked with the driver in its queue; S3 grants each call
/// the time its driver stood still while it waited.
#[derive(Clone, Default)]
pub struct DriverStalls(Arc<Mutex<Vec<(Instant, Instant)>>>);

impl DriverStalls {
    fn record(&self, from: Instant, to: Instant) {
        self.0.lock().unwrap().push((from, to));
    }

    /// How long the driver stood still between `from` and `to`.
    pub fn within(&self, from: Instant, to: Instant) -> Duration {
        let stalls = self.0.lock().unwrap();
        stalls
            .iter()
            .map(|&(start, end)| end.min(to).saturating_duration_since(start.max(from)))
            .sum()
    }
}

/// Stops the main driver of replica `name` now and then until `end`, as a
/// worker thread blocked by user code stops the tasks queued on it (the
/// `driver_stalls` fault). Its leases have a TTL far longer than any stall;
/// the renewing limiter's, which a stall past their TTL would lose (as
/// any holder stalled past its TTL does: the TTL is what frees its slot),
/// run on.
pub async fn stall_driver(
    limiter: Limiter,
    stalls: DriverStalls,
    mut rng: Rng,
    ledger: Arc<Mutex<Ledger>>,
    name: String,
    end: Instant,
    at: fn() -> Duration,
) {
    loop {
        let gap = Duration::from_millis(rng.range(500, 3_000));
        if rng.chance(1, 2) {
            // Half the stalls come as soon as the limiter hands a slot to one
            // of its waiters, if that is sooner: the moment a reservation
            // waits for its confirming renewal, and a waiting composite
            // acquire holds a part while it asks for the next.
            after_hand_over(&limiter, gap).await;
        } else {
            tokio::time::sleep(gap).await;
        }
        let stall = Duration::from_millis(rng.range(200, 2_000));
        if Instant::now() + stall >= end {
            return;
        }
        {
            let mut ledger = ledger.lock().unwrap();
            ledger.counters.faults += 1;
            ledger.note(at(), format!("{name}'s driver stalls for {stall:?}"));
        }
        stalls.record(Instant::now(), Instant::now() + stall);
        limiter.stall_driver(stall);
        // One stall at a time: the next is drawn once this one is over.
        tokio::time::sleep(stall).await;
    }
}

/// Returns once `limiter` has handed a slot to a waiter, or after `longest`.
async fn after_hand_over(limiter: &Limiter, longest: Duration) {
    let (before, start) = (limiter.stats().handed_over, Instant::now());
    while limiter.stats().handed_over == before && start.elapsed() < longest {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
