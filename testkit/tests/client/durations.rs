//! Any duration in any setting, and any wait: a typed `ConfigError` or a
//! client that runs, never a panic (an overflowing `Instant + Duration`
//! took a whole limiter down once: `acquire_wait(Duration::MAX)`).

use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use inflight_core::config::MAX_DURATION;
use inflight_core::key::SubjectKeys;
use inflight_core::lease_id::Claim;
use inflight_core::{Client, Recovery, ReleasePolicy, ReplicaAcks};

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        (1u64..10_000).prop_map(Duration::from_millis),
        Just(MAX_DURATION),
        Just(MAX_DURATION + Duration::from_millis(1)),
        Just(Duration::from_secs(u64::MAX / 2)),
        Just(Duration::MAX),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500),
        .. ProptestConfig::default()
    })]

    #[test]
    fn any_durations_give_a_config_error_or_a_client_that_runs(
        d in proptest::collection::vec(duration(), 13),
        wait in duration(),
        step in duration(),
    ) {
        let config = Config {
            lease_ttl: d[0],
            acquire_timeout: d[1],
            request_liveness: d[2],
            connect_timeout: d[3],
            reconnect_initial_backoff: d[4],
            reconnect_max_backoff: d[5],
            release: ReleasePolicy {
                initial_backoff: d[6],
                max_backoff: d[7],
                ..ReleasePolicy::default()
            },
            waiter_lifetime: d[8],
            idle_probe: d[9],
            recovery: Recovery::Reassert { window: Some(d[10]) },
            replica_acks: (d[11] > Duration::ZERO).then_some(ReplicaAcks { replicas: 1, timeout: d[11] }),
            ..Config::default()
        };
        let now = start();
        // Either refused, with a message that names sane numbers...
        let _ = config.recovery_window();
        let _ = config.waiter_recheck();
        let mut client = match Client::new(config, [3; 16], now) {
            Ok(client) => client,
            Err(error) => {
                prop_assert!(error.to_string().len() < 300, "{error}");
                return Ok(());
            }
        };
        // ...or a client that takes calls and time, whatever they are.
        let keys = SubjectKeys::new("p", &key("t", "s"));
        let limit = NonZeroU32::new(2).unwrap();
        client
            .acquire_claim(now, client.request_ids().draw(), keys.clone(), limit, &inflight_core::Claim::default(), None)
            .unwrap();
        let until = now.checked_add(wait.min(MAX_DURATION));
        let _ = client.acquire_claim(now, client.request_ids().draw(), keys, limit, &Claim::default(), until);
        let mut at = now;
        for _ in 0..4 {
            while client.poll_action().is_some() {}
            while client.poll_transmit().is_some() {}
            while client.poll_event().is_some() {}
            let _ = client.poll_timeout();
            at = at.checked_add(step.min(MAX_DURATION)).unwrap_or(at);
            client.handle_timeout(at);
        }
    }
}
