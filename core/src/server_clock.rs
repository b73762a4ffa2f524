//! The server's clock, as seen from the client's monotonic one.
//!
//! Requests carry a *valid-until* in the server's milliseconds (`TIME`), and
//! the scripts refuse to act after it. The client learns the server's time at
//! each handshake (and again every [`RESYNC`] while requests flow) and maps
//! its own instants onto it. The reply to `TIME` was produced somewhere
//! between our writing the request (`t0`) and reading the reply (`t1`), so
//! at client instant `c` the server's clock reads at least
//! `server_ms + (c - t1)` (the *lower* bound, [`ServerClock::server_ms`]) and
//! at most `server_ms + 1 + (c - t0)` (the *upper* bound,
//! [`ServerClock::upper_ms`]), give or take drift. Valid-untils are written
//! with the lower bound: once our clock passes one (plus
//! [`ServerClock::margin`] for drift), the server has passed it too, and the
//! request can no longer act. Expiries are written with the upper bound: a
//! lease the server keeps until `upper_ms(c) + ttl` lives at least until our
//! `c + ttl`, so a holder that counts its lease from `c` never believes in it
//! longer than the server keeps it.
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
    /// When we wrote the request (`t0`).
    asked_at: Instant,
    /// When we read the reply (`t1`).
    read_at: Instant,
    /// What the server's clock said, in Unix milliseconds.
    server_ms: u64,
}

impl ServerClock {
    /// A reading: `TIME`, written at `asked_at`, answered `seconds` and
    /// `micros`, read at `read_at`.
    pub(crate) fn new(asked_at: Instant, read_at: Instant, seconds: u64, micros: u64) -> Self {
        Self {
            asked_at: asked_at.min(read_at),
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

    /// The server's milliseconds at client instant `at`, at the most: the
    /// reading's last millisecond, plus the time since the request was
    /// written, plus drift over it (rounded up).
    pub(crate) fn upper_ms(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.asked_at);
        let drift = since.as_micros() * u128::from(MAX_DRIFT_PPM) / 1_000_000_000 + 1;
        let since = since.as_millis() + 1 + drift;
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
        let clock = ServerClock::new(t1 - Duration::from_millis(3), t1, 1_700_000_000, 123_999);
        assert_eq!(clock.server_ms(t1), 1_700_000_000_123);
        assert_eq!(clock.server_ms(t1 + Duration::from_millis(2_500)), 1_700_000_002_623);
        // An instant before the reading maps to the reading (never earlier).
        assert_eq!(clock.server_ms(t1 - Duration::from_millis(5)), 1_700_000_000_123);
        assert_eq!(clock.margin(t1), Duration::from_millis(1));
        assert_eq!(clock.margin(t1 + Duration::from_secs(10)), Duration::from_millis(11));
        // At most: the millisecond the reading was in, the 3 ms the request
        // took, and drift (1 ms per second) rounded up.
        assert_eq!(clock.upper_ms(t1), 1_700_000_000_123 + 1 + 3 + 1);
        assert_eq!(
            clock.upper_ms(t1 + Duration::from_millis(9_997)),
            1_700_000_000_123 + 1 + 10_000 + 11
        );
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
