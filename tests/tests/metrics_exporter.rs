//! The metrics as a Prometheus scrape reads them, through the exporter users
//! install (its own binary: a global recorder can be installed only once).
//! Every series exists from a limiter's start, also one that never
//! connects; a gauge is never below zero, also when the recorder came after
//! the limiter started and while Redis comes and goes.

use std::time::{Duration, Instant};

use inflight_tests::redis_server::free_port;
use inflight_tests::RedisServer;
use inflight_tokio::{metric_names as names, Key, Limiter};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The value of `name{labels}` in a scrape (`labels` as rendered, e.g.
/// `namespace="lazy"`).
fn value(scrape: &str, name: &str, labels: &str) -> Option<f64> {
    let series = format!("{name}{{{labels}}} ");
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(|value| value.trim().parse().expect("a number"))
}

/// Every gauge sample of the scrape is at least zero.
fn assert_no_negative_gauge(scrape: &str) {
    for gauge in [names::CONNECTIONS_UP, names::ACQUIRES_IN_FLIGHT, names::WAITING] {
        for line in scrape.lines().filter(|line| line.starts_with(gauge)) {
            let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            assert!(value >= 0.0, "a gauge below zero: {line}\n{scrape}");
        }
    }
}

/// Scrapes until `condition` holds, checking every scrape on the way.
async fn until(handle: &PrometheusHandle, what: &str, condition: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let scrape = handle.render();
        assert_no_negative_gauge(&scrape);
        if condition(&scrape) {
            return scrape;
        }
        assert!(Instant::now() < deadline, "no scrape showed {what}:\n{scrape}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_starts_at_zero_and_no_gauge_goes_below_it() {
    let mut server = RedisServer::start();
    // A limiter that starts before the recorder is installed: what it
    // published then went nowhere.
    let early = Limiter::builder(server.url())
        .metrics_namespace("early")
        .timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(20))
        .connect()
        .await
        .unwrap();
    let key = Key::new("tier", "scrape").unwrap();
    drop(early.acquire(&key).await.unwrap());

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");

    // A lazy limiter whose Redis is not there: every counter and gauge is a
    // series at 0 at once, so `connections_up == 0` alerts can fire.
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    let lazy = Limiter::builder(nowhere)
        .metrics_namespace("lazy")
        .connect_lazy()
        .await
        .unwrap();
    let scrape = until(&handle, "the lazy limiter's series", |scrape| {
        value(scrape, names::CONNECTIONS_UP, r#"namespace="lazy""#).is_some()
    })
    .await;
    let every = names::COUNTERS.iter().chain(&names::GAUGES);
    for name in every {
        assert_eq!(
            value(&scrape, name, r#"namespace="lazy""#),
            Some(0.0),
            "{name} is not a series at 0 for a limiter that never connected:\n{scrape}"
        );
    }

    // The early limiter's gauge: its true figure once it reports again
    // (with increments, the +1 it published before went nowhere, and the
    // -1 when Redis went away read as -1).
    drop(early.acquire(&key).await.unwrap());
    until(&handle, "the early limiter up", |scrape| {
        value(scrape, names::CONNECTIONS_UP, r#"namespace="early""#) == Some(1.0)
    })
    .await;
    // Redis goes away and comes back, five times: every scrape on the way
    // reads 0 or 1, never less.
    for _ in 0..5 {
        server.stop();
        until(&handle, "the early limiter down", |scrape| {
            value(scrape, names::CONNECTIONS_UP, r#"namespace="early""#) == Some(0.0)
        })
        .await;
        server.start_again();
        until(&handle, "the early limiter up again", |scrape| {
            value(scrape, names::CONNECTIONS_UP, r#"namespace="early""#) == Some(1.0)
        })
        .await;
    }
    // Each restart came back empty: a data loss the counters tell.
    let scrape = handle.render();
    assert!(
        value(&scrape, names::DATA_LOSS, r#"namespace="early""#).is_some_and(|n| n >= 1.0),
        "{scrape}"
    );

    // A stopped limiter takes its share out.
    early.drain().await;
    lazy.drain().await;
    until(&handle, "both limiters gone", |scrape| {
        value(scrape, names::CONNECTIONS_UP, r#"namespace="early""#) == Some(0.0)
            && value(scrape, names::ACQUIRES_IN_FLIGHT, r#"namespace="lazy""#) == Some(0.0)
    })
    .await;
}
