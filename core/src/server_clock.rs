//! The server's clock, as seen from the client's monotonic one.
//!
//! Requests carry a *valid-until* in the server's milliseconds (`TIME`), and
//! the scripts refuse to act after it. The client learns the server's time at
//! each handshake (and again every [`RESYNC`] while requests flow) and maps
//! its own instants onto it. The reply to `TIME` was produced somewhere
//! between our writing the request (`t0`) and reading the reply (`t1`); we
//! anchor at `t1`, which makes the mapping a *lower bound* of the server's
//! time: at client instant `c`, the server's clock reads at least
//! `server_ms + (c - t1)`, give or take drift. So once our clock passes a
//! request's valid-until (plus [`ServerClock::margin`] for drift), the server
//! has passed it too, and the request can no longer take a slot.
//!
//! Assumptions (docs/operations.md, "Clocks"): the server's wall clock and our
//! monotonic clock run at rates within [`MAX_DRIFT_PPM`] of each other, and
//! the server's clock is not stepped backwards by more than the margin.

use std::time::{Duration, Instant};

/// How far apart the two clocks' rates may be, in parts per million. Real
/// clocks under NTP stay within tens of ppm; 1000 leaves room for a poorly
/// disciplined VM (measured on this project's machine: docs/operations.md).
pub const MAX_DRIFT_PPM: u32 = 1_000;

/// How often the mapping is refreshed while requests flow, so drift never
/// accumulates over more than this (plus the requests' own liveness).
pub const RESYNC: Duration = Duration::from_secs(10);

/// One reading of the server's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServerClock {
    /// When we read the reply (`t1`).
    read_at: Instant,
    /// What the server's clock said, in Unix milliseconds.
    server_ms: u64,
}

impl ServerClock {
    /// A reading: `TIME` answered `seconds` and `micros`, read at `read_at`.
    pub(crate) fn new(read_at: Instant, seconds: u64, micros: u64) -> Self {
        Self {
            read_at,
            server_ms: seconds.saturating_mul(1000).saturating_add(micros / 1000),
        }
    }

    /// The server's milliseconds at client instant `at` (a lower bound, up
    /// to drift).
    pub(crate) fn server_ms(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.read_at).as_millis();
        self.server_ms.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }

    /// How much later than `at` our clock must read before the server's has
    /// surely passed `server_ms(at)`: one millisecond of `TIME`'s rounding,
    /// plus drift over the time since the reading.
    pub(crate) fn margin(&self, at: Instant) -> Duration {
        let since = at.saturating_duration_since(self.read_at);
        Duration::from_millis(1) + since * MAX_DRIFT_PPM / 1_000_000
    }

    /// Whether a fresh reading is due at `now`.
    pub(crate) fn stale(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.read_at) >= RESYNC
    }
}

/// A lease granted for `ttl` by a script that ran no earlier than `sent_at`
/// lives, on our clock, at least until this: its score is the server's
/// rounded-down milliseconds plus `ttl`, and the server's clock may run up to
/// [`MAX_DRIFT_PPM`] faster than ours over those `ttl`.
pub(crate) fn lease_expiry(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl.saturating_sub(Duration::from_millis(1) + ttl * MAX_DRIFT_PPM / 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::disallowed_methods)]
    fn start() -> Instant {
        Instant::now()
    }

    #[test]
    fn maps_our_instants_onto_the_servers_milliseconds() {
        let t1 = start();
        let clock = ServerClock::new(t1, 1_700_000_000, 123_999);
        assert_eq!(clock.server_ms(t1), 1_700_000_000_123);
        assert_eq!(clock.server_ms(t1 + Duration::from_millis(2_500)), 1_700_000_002_623);
        // An instant before the reading maps to the reading (never earlier).
        assert_eq!(clock.server_ms(t1 - Duration::from_millis(5)), 1_700_000_000_123);
        assert_eq!(clock.margin(t1), Duration::from_millis(1));
        assert_eq!(clock.margin(t1 + Duration::from_secs(10)), Duration::from_millis(11));
        assert!(!clock.stale(t1 + Duration::from_secs(9)));
        assert!(clock.stale(t1 + RESYNC));
    }

    #[test]
    fn a_lease_is_promised_a_little_less_than_its_ttl() {
        let sent = start();
        let ttl = Duration::from_secs(30);
        assert_eq!(lease_expiry(sent, ttl), sent + ttl - Duration::from_millis(31));
        assert_eq!(lease_expiry(sent, Duration::from_micros(500)), sent);
    }
}
