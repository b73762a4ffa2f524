//! Admission: a [`Decision`] becomes a held permit or a [`Rejection`]. Both
//! layers (HTTP and any-request) admit through [`Gate`], so they agree on
//! every outcome.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inflight_core::LeaseId;
use tokio::time::Instant;

use crate::tower::{Decision, Rejection};
use crate::{Acquire, Error, Limiter, Permit};

/// The limiter and what the layer has learnt about how long requests hold
/// their slots.
#[derive(Clone, Debug)]
pub(crate) struct Gate {
    limiter: Limiter,
    holds: Arc<HoldTimes>,
    /// Wait up to this long for a slot instead of rejecting at once.
    wait: Option<Duration>,
}

impl Gate {
    pub(crate) fn new(limiter: Limiter) -> Self {
        Self {
            limiter,
            holds: Arc::default(),
            wait: None,
        }
    }

    /// Waits up to `wait` for a slot (in the key's fleet-wide queue).
    pub(crate) fn waiting(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Takes the permit the decision asks for, waiting for a slot if the
    /// layer was told to. Cancel-safe as the limiter's acquire is: dropped
    /// here, nothing is held (and a waiter leaves its queue).
    pub(crate) async fn admit(&self, decision: Decision) -> Result<Held, Rejection> {
        let limited = match decision {
            Decision::Limit(limited) => limited,
            Decision::Pass => return Ok(Held::nothing()),
            Decision::Refuse(reason) => return Err(Rejection::Refused { reason }),
        };
        let mut options = Acquire::default();
        if let Some(limit) = limited.limit() {
            options = options.limit(limit);
        }
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        let taken = self.limiter.acquire_opts(limited.key(), options).await;
        let key = limited.key().clone();
        match taken {
            Ok(permit) => Ok(Held::new(permit, Arc::clone(&self.holds))),
            Err(Error::Exceeded { retry_after }) => Err(Rejection::Exceeded {
                key,
                // Redis's own estimate when it shed a wait; else ours.
                retry_after: retry_after.or_else(|| self.holds.estimate()),
            }),
            Err(Error::Config(error)) => Err(Rejection::Misconfigured { key, error }),
            Err(error) => Err(Rejection::Unavailable {
                key,
                retry_after: self.limiter.retry_after(&error),
                error,
            }),
        }
    }
}

/// The permit of one admitted request (or nothing, for a request that is
/// not limited). Dropping it gives the slot back and notes how long it was
/// held.
#[derive(Debug)]
pub(crate) struct Held {
    taken: Option<(Permit, Instant, Arc<HoldTimes>)>,
}

impl Held {
    fn new(permit: Permit, holds: Arc<HoldTimes>) -> Self {
        Self {
            taken: Some((permit, Instant::now(), holds)),
        }
    }

    pub(crate) fn nothing() -> Self {
        Self { taken: None }
    }

    /// What a handler may want to know about its admission.
    pub(crate) fn admitted(&self) -> Admitted {
        let permit = self.taken.as_ref().map(|(permit, _, _)| permit);
        Admitted {
            lease_id: permit.and_then(Permit::lease_id),
            fencing_token: permit.and_then(Permit::fencing_token),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((permit, since, holds)) = self.taken.take() {
            if permit.is_enforced() {
                holds.record(since.elapsed());
            }
            drop(permit); // the release goes out in the background
        }
    }
}

/// Put in the request's extensions by the HTTP layer before the inner
/// service runs: the handler can read the lease and pass its fencing token
/// to the resource it guards (`Extension<Admitted>` in axum).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    lease_id: Option<LeaseId>,
    fencing_token: Option<u64>,
}

impl Admitted {
    /// Whether a slot is held for this request: `false` for a request the
    /// extractor let pass, or one admitted fail-open while Redis was away.
    pub fn is_enforced(&self) -> bool {
        self.lease_id.is_some()
    }

    /// The lease's id in Redis.
    pub fn lease_id(&self) -> Option<LeaseId> {
        self.lease_id.clone()
    }

    /// The grant's fencing token (see [`Permit::fencing_token`]).
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }
}

/// A moving average of how long admitted requests held their slots, for a
/// `Retry-After` when a key is full: a slot there frees about that soon.
#[derive(Debug, Default)]
pub(crate) struct HoldTimes {
    /// Microseconds; 0 until the first hold ends.
    average_micros: AtomicU64,
}

impl HoldTimes {
    /// Each new hold weighs 1/8: recent enough to follow a change of load,
    /// steady enough that one slow request does not swing it.
    fn record(&self, held: Duration) {
        let sample = u64::try_from(held.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self
            .average_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |average| {
                Some(match average {
                    0 => sample,
                    _ => average - average / 8 + sample / 8,
                })
            });
    }

    fn estimate(&self) -> Option<Duration> {
        match self.average_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_estimate_before_a_hold_ends_then_a_moving_average() {
        let holds = HoldTimes::default();
        assert_eq!(holds.estimate(), None);
        holds.record(Duration::from_millis(800));
        assert_eq!(holds.estimate(), Some(Duration::from_millis(800)));
        holds.record(Duration::from_millis(0));
        assert_eq!(holds.estimate(), Some(Duration::from_millis(700)));
        for _ in 0..100 {
            holds.record(Duration::from_secs(4));
        }
        let settled = holds.estimate().unwrap();
        assert!(
            settled > Duration::from_millis(3990) && settled <= Duration::from_secs(4),
            "{settled:?}"
        );
    }
}
