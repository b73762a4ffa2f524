//! Jitter for retry delays, drawn from the entropy a client is built with.
//!
//! After a Redis restart every replica of a fleet loses its connection at the
//! same instant; with fixed backoff they would all reconnect in lockstep, and
//! again after each failure. Spreading each delay apart breaks the herd. The
//! core reads no randomness of its own, so the generator is seeded from the
//! construction-time entropy: a simulated run replays exactly.

use std::time::Duration;

/// A small generator (SplitMix64): statistically fine for spreading delays,
/// never used for anything that must be unpredictable.
#[derive(Clone, Debug)]
pub(crate) struct Jitter {
    state: u64,
}

impl Jitter {
    pub(crate) fn new(entropy: [u8; 16]) -> Self {
        let (low, high) = entropy.split_at(8);
        let low = u64::from_le_bytes(low.try_into().expect("8 bytes"));
        let high = u64::from_le_bytes(high.try_into().expect("8 bytes"));
        Self {
            state: low ^ high.rotate_left(29),
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `delay` spread uniformly over `[delay / 2, delay]` ("equal jitter"):
    /// never longer than asked, never less than half of it.
    pub(crate) fn spread(&mut self, delay: Duration) -> Duration {
        let half = delay / 2;
        let span = (delay - half).as_nanos();
        let offset = u128::from(self.next_u64()) % (span + 1);
        half + Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_stays_within_half_and_whole_and_varies() {
        let mut jitter = Jitter::new([3; 16]);
        let delay = Duration::from_millis(100);
        let drawn: Vec<Duration> = (0..1000).map(|_| jitter.spread(delay)).collect();
        assert!(drawn.iter().all(|d| *d >= delay / 2 && *d <= delay));
        let distinct: std::collections::BTreeSet<_> = drawn.iter().collect();
        assert!(distinct.len() > 900, "{} distinct delays", distinct.len());
        let low_half = drawn.iter().filter(|d| **d < delay * 3 / 4).count();
        assert!((400..600).contains(&low_half), "{low_half} of 1000 in the lower half");
        assert_eq!(jitter.spread(Duration::ZERO), Duration::ZERO);
    }
}
