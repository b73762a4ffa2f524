//! When to try connecting again after failed attempts: capped exponential
//! backoff, jittered from the client's entropy.

use std::time::{Duration, Instant};

use crate::event::ConnectionError;
use crate::jitter::Jitter;

/// How every node's reconnect schedule is made: the same bounds, and for
/// each node a jitter stream of its own, drawn from the client's entropy.
#[derive(Debug, Clone, Copy)]
pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    entropy: [u8; 16],
}

impl Backoff {
    pub(super) fn new(initial: Duration, max: Duration, entropy: [u8; 16]) -> Self {
        Self { initial, max, entropy }
    }

    /// Node `node`'s schedule.
    pub(super) fn for_node(&self, node: usize) -> Reconnect {
        let mut entropy = self.entropy;
        entropy[15] ^= node as u8;
        entropy[14] ^= (node >> 8) as u8;
        Reconnect::new(self.initial, self.max, entropy)
    }
}

#[derive(Debug)]
pub(super) struct Reconnect {
    initial: Duration,
    max: Duration,
    /// Failed attempts in a row.
    failures: u32,
    /// While there is no connection: when to try again.
    at: Option<Instant>,
    last_error: ConnectionError,
    /// Spreads the delays so a fleet does not reconnect in lockstep.
    jitter: Jitter,
}

impl Reconnect {
    pub(super) fn new(initial: Duration, max: Duration, entropy: [u8; 16]) -> Self {
        Self {
            initial,
            max,
            failures: 0,
            at: None,
            last_error: ConnectionError::Closed,
            jitter: Jitter::new(entropy),
        }
    }

    /// An attempt is starting: nothing is scheduled any more.
    pub(super) fn attempting(&mut self) {
        self.at = None;
    }

    /// An attempt failed at `now`: the next one is due after the backoff.
    pub(super) fn failed(&mut self, now: Instant, error: ConnectionError) {
        self.failures += 1;
        self.last_error = error;
        let delay = self.jitter.spread(backoff(self.initial, self.max, self.failures));
        self.at = Some(now + delay);
    }

    /// Backing off: an attempt failed and the next is scheduled.
    pub(super) fn backing_off(&self) -> bool {
        self.at.is_some()
    }

    /// Nothing needs the node any more: no attempt is scheduled, and the
    /// next use starts afresh.
    pub(super) fn forget(&mut self) {
        self.at = None;
        self.failures = 0;
    }

    /// A connection became ready: the backoff starts over.
    pub(super) fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// Why the last attempt failed.
    pub(super) fn last_error(&self) -> &ConnectionError {
        &self.last_error
    }

    /// Whether a scheduled attempt is due at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.at.is_some_and(|at| at <= now)
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.at
    }
}

/// `initial * 2^(failures-1)`, capped at `max` (release retries use it too).
pub(super) fn backoff(initial: Duration, max: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    initial.saturating_mul(1 << doublings).min(max)
}
