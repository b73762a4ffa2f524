//! Protocol stories for the `Client`, told through the test bench.

use std::time::{Duration, Instant};

use crate::event::{ConnectionError, Event, Outcome, ReleaseFailure, ReleaseOf, Renewal, Unavailable};
use crate::resp::ProtocolError;
use crate::testkit::Pair;
use crate::{Config, Credentials, ServerErrorKind, UnavailablePolicy};

mod acquires;
mod batching;
#[cfg(feature = "model")]
mod cluster;
mod connections;
mod durations;
mod keep_alive;
mod recovery;
mod releases;
mod renewals;
mod stale;
mod sub_machines;

/// The one clock read of these tests: an arbitrary starting point.
#[allow(clippy::disallowed_methods)]
pub(super) fn start() -> Instant {
    Instant::now()
}

pub(super) fn config() -> Config {
    Config {
        lease_ttl: Duration::from_secs(3600),
        ..Config::default()
    }
}

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) fn renewed(pair: &Pair, request: crate::event::RequestId) -> Option<&Renewal> {
    pair.events.iter().find_map(|event| match event {
        Event::Renewed(r, renewal) if *r == request => Some(renewal),
        _ => None,
    })
}

pub(super) fn key(namespace: &str, subject: &str) -> crate::Key {
    crate::Key::new(namespace, subject).unwrap()
}

pub(super) fn limit(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).unwrap()
}

/// Reconnect delays after failed attempts, for a client built with `entropy`.
pub(super) fn reconnect_delays(entropy: [u8; 16], attempts: usize) -> Vec<Duration> {
    use crate::event::Action;
    use crate::Client;
    let mut now = start();
    let mut client = Client::new(config(), entropy, now).unwrap();
    let mut delays = Vec::new();
    for _ in 0..attempts {
        let Some(Action::Connect(id, _)) = client.poll_action() else {
            panic!("a connect was asked for")
        };
        client.handle_closed(now, id); // refused
        while client.poll_action().is_some() {}
        let at = client.poll_timeout().expect("a reconnect is scheduled");
        delays.push(at - now);
        now = at;
        client.handle_timeout(now);
    }
    delays
}

/// A short-TTL limiter, as in the fleets where ghost leases hurt most.
pub(super) fn short_ttl() -> Config {
    Config {
        lease_ttl: Duration::from_secs(1),
        request_liveness: Duration::from_secs(2),
        ..Config::default()
    }
}
