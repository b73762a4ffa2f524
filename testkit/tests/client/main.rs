//! Protocol stories for the `Client`, told through the test bench: the real
//! client against the model server, over a simulated wire, in virtual time.

use std::time::{Duration, Instant};

use inflight_core::event::{ConnectionError, Event, Outcome, ReleaseFailure, ReleaseOf, Renewal, Unavailable};
use inflight_core::resp::ProtocolError;
use inflight_core::{Config, Credentials, ServerErrorKind, UnavailablePolicy};
use inflight_testkit::Pair;

mod acquires;
mod batching;

mod cluster;
mod composite;
mod connections;
mod durations;
mod keep_alive;
mod recovery;
mod releases;
mod renewals;
mod stale;

/// The one clock read of these tests: an arbitrary starting point.
#[allow(clippy::disallowed_methods)]
fn start() -> Instant {
    Instant::now()
}

fn config() -> Config {
    Config {
        lease_ttl: Duration::from_secs(3600),
        ..Config::default()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn renewed(pair: &Pair, request: inflight_core::event::RequestId) -> Option<&Renewal> {
    pair.events.iter().find_map(|event| match event {
        Event::Renewed(r, renewal) if *r == request => Some(renewal),
        _ => None,
    })
}

fn key(namespace: &str, subject: &str) -> inflight_core::Key {
    inflight_core::Key::new(namespace, subject).unwrap()
}

fn limit(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).unwrap()
}

/// Reconnect delays after failed attempts, for a client built with `entropy`.
fn reconnect_delays(entropy: [u8; 16], attempts: usize) -> Vec<Duration> {
    use inflight_core::event::Action;
    use inflight_core::Client;
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
fn short_ttl() -> Config {
    Config {
        lease_ttl: Duration::from_secs(1),
        request_liveness: Duration::from_secs(2),
        ..Config::default()
    }
}
