//! How long this limiter's permits hold their slots, on average: the hint in
//! every `Exceeded` (a full key frees a slot about that soon), whether the
//! caller is the tower layer or code of its own writing a 429.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What `Exceeded` says before any permit of the limiter was given back:
/// nothing measured yet, one second (the unit of an HTTP `Retry-After`).
pub(crate) const UNMEASURED: Duration = Duration::from_secs(1);

/// A moving average of hold times, shared by every permit of a limiter.
#[derive(Debug, Default)]
pub(crate) struct HoldTimes {
    /// Microseconds; 0 until the first hold ends.
    average_micros: AtomicU64,
}

impl HoldTimes {
    /// Each new hold weighs 1/8: recent enough to follow a change of load,
    /// steady enough that one slow request does not swing it.
    pub(crate) fn record(&self, held: Duration) {
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

    /// The average hold, once one was measured.
    pub(crate) fn average(&self) -> Option<Duration> {
        match self.average_micros.load(Ordering::Relaxed) {
            0 => None,
            micros => Some(Duration::from_micros(micros)),
        }
    }

    /// When a request refused because its key is full may try again.
    pub(crate) fn retry_after(&self) -> Duration {
        self.average().unwrap_or(UNMEASURED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_second_before_a_hold_ends_then_a_moving_average() {
        let holds = HoldTimes::default();
        assert_eq!(holds.average(), None);
        assert_eq!(holds.retry_after(), UNMEASURED);
        holds.record(Duration::from_millis(800));
        assert_eq!(holds.retry_after(), Duration::from_millis(800));
        holds.record(Duration::from_millis(0));
        assert_eq!(holds.retry_after(), Duration::from_millis(700));
        for _ in 0..100 {
            holds.record(Duration::from_secs(4));
        }
        let settled = holds.retry_after();
        assert!(
            settled > Duration::from_millis(3990) && settled <= Duration::from_secs(4),
            "{settled:?}"
        );
    }
}
