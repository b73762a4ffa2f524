//! What a drain did: everything given back, or what it left owed when its
//! time ran out.

use std::fmt;
use std::time::Duration;

/// How [`Limiter::drain`](crate::Limiter::drain) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    waited: Duration,
    releases_owed: usize,
    acquires_in_flight: usize,
}

impl Drained {
    pub(crate) fn new(waited: Duration, releases_owed: usize, acquires_in_flight: usize) -> Self {
        Self {
            waited,
            releases_owed,
            acquires_in_flight,
        }
    }

    /// Whether the driver owed nothing at the end: every release and
    /// compensation confirmed by Redis or given up, no acquire in flight.
    pub fn is_complete(&self) -> bool {
        self.releases_owed == 0 && self.acquires_in_flight == 0
    }

    /// Releases (and compensations, and leaves of a wait queue) still owed
    /// when the drain gave up: the driver keeps trying while the process
    /// lives; if it exits, those leases come back at their TTL (a queue
    /// place, within the waiter lifetime).
    pub fn releases_owed(&self) -> usize {
        self.releases_owed
    }

    /// Acquires still waiting for their answer when the drain gave up (work
    /// that other clones of the limiter were still doing).
    pub fn acquires_in_flight(&self) -> usize {
        self.acquires_in_flight
    }

    /// How long the drain took.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl fmt::Display for Drained {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_complete() {
            return write!(f, "drained in {:?}: nothing owed", self.waited);
        }
        write!(
            f,
            "gave up draining after {:?}: {} releases still owed (their leases come back at their TTL), \
             {} acquires in flight",
            self.waited, self.releases_owed, self.acquires_in_flight
        )
    }
}
