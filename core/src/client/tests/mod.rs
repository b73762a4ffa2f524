//! The sub-machines driven alone, by their own timers: what each asks the
//! client to do (its effects), with no client around it.

use std::time::Instant;

/// The one clock read of these tests: an arbitrary starting point.
#[allow(clippy::disallowed_methods)]
fn start() -> Instant {
    Instant::now()
}

mod hand_over;
mod handshake;
mod keep_alive;
mod redirects;
mod release_queue;
mod replies;
mod sentinel;
mod waiters;
mod wake_ups;
