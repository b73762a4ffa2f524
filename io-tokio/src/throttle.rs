//! Log lines that could repeat at the rate of requests (one per fail-open
//! admission) or of reconnect attempts: the first is written, then at most
//! one per interval, saying how many were left out since the last.

use std::time::{Duration, Instant};

/// At most one line per this long, per kind of line.
pub(crate) const EVERY: Duration = Duration::from_secs(10);

/// One kind of line's budget.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// Whether to write the line now; if so, how many were left out since
    /// the last one written.
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < EVERY)
        {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }

    /// The condition is over (a connection is up again): the next line is
    /// written at once. Returns how many were left out since the last.
    pub(crate) fn reset(&mut self) -> u64 {
        self.last = None;
        std::mem::take(&mut self.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_then_one_per_interval_with_the_count_left_out() {
        let start = Instant::now();
        let mut throttle = Throttle::default();
        assert_eq!(throttle.admit(start), Some(0));
        for i in 1..=199 {
            assert_eq!(throttle.admit(start + Duration::from_millis(i)), None);
        }
        assert_eq!(throttle.admit(start + EVERY), Some(199));
        assert_eq!(throttle.admit(start + EVERY + Duration::from_secs(1)), None);
        assert_eq!(throttle.reset(), 1);
        assert_eq!(throttle.admit(start + EVERY + Duration::from_secs(2)), Some(0));
    }
}
