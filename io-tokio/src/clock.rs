//! The clock the driver feeds the core, and its timers, under tokio,
//! turmoil and madsim alike.

use std::time::Instant;

/// The clock the core is fed. Under turmoil, tokio's clock is the simulated
/// one and std's is not, so read tokio's; under madsim both are simulated and
/// tokio's `Instant` is std's.
#[cfg(not(madsim))]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

#[cfg(madsim)]
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now()
}

/// When the driver's timer fires: the core's deadline, or never.
#[cfg(not(madsim))]
pub(crate) fn timer_at(deadline: Option<Instant>) -> tokio::time::Instant {
    deadline.map_or_else(far_future, tokio::time::Instant::from_std)
}

#[cfg(madsim)]
pub(crate) fn timer_at(deadline: Option<Instant>) -> tokio::time::Instant {
    deadline.unwrap_or_else(far_future)
}

fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + std::time::Duration::from_secs(86_400 * 365)
}
