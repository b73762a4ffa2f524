//! The driver publishes what happened under the documented metric names.
//! (Its own binary: a global metrics recorder can be installed only once.)

use std::time::Duration;

use inflight_tests::RedisServer;
use inflight_tokio::{metric_names as names, Error, Key, Limiter};
use metrics::Unit;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

type Entry = (CompositeKey, Option<Unit>, Option<metrics::SharedString>, DebugValue);

/// The value of the metric `name` with exactly `labels` (`key=value`).
fn find<'a>(snapshot: &'a [Entry], kind: MetricKind, name: &'a str, labels: &'a [&'a str]) -> Option<&'a DebugValue> {
    all(snapshot, kind, name, labels).next()
}

fn all<'a>(
    snapshot: &'a [Entry],
    kind: MetricKind,
    name: &'a str,
    labels: &'a [&'a str],
) -> impl Iterator<Item = &'a DebugValue> + 'a {
    snapshot.iter().filter_map(move |(key, _, _, value)| {
        let mut have: Vec<String> = key
            .key()
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        have.sort();
        let mut want: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        want.sort();
        (key.kind() == kind && key.key().name() == name && have == want).then_some(value)
    })
}

/// The counter summed over every entry (several snapshots may hold it).
fn counter(snapshot: &[Entry], name: &str, labels: &[&str]) -> Option<u64> {
    let values: Vec<u64> = all(snapshot, MetricKind::Counter, name, labels)
        .map(|value| match value {
            DebugValue::Counter(n) => *n,
            other => panic!("{name} is not a counter: {other:?}"),
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

fn gauge(snapshot: &[Entry], name: &str, labels: &[&str]) -> Option<f64> {
    find(snapshot, MetricKind::Gauge, name, labels).map(|value| match value {
        DebugValue::Gauge(n) => n.into_inner(),
        other => panic!("{name} is not a gauge: {other:?}"),
    })
}

fn samples(snapshot: &[Entry], name: &str, labels: &[&str]) -> usize {
    all(snapshot, MetricKind::Histogram, name, labels)
        .map(|value| match value {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        })
        .sum()
}

fn snapshot(snapshotter: &Snapshotter) -> Vec<Entry> {
    snapshotter.snapshot().into_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_gauges_and_descriptions_are_published_under_their_names() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");

    let server = RedisServer::start();
    let plain = Limiter::builder(server.url())
        .default_limit(1)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let checkout = Limiter::builder(server.url())
        .default_limit(1)
        .key_prefix("checkout")
        .metrics_namespace("checkout")
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let key = Key::new("tier", "metrics").unwrap();
    let permit = plain.acquire(&key).await.unwrap();
    assert!(matches!(
        plain.acquire(&key).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    let other = checkout.acquire(&key).await.unwrap();

    // (A snapshot of this recorder takes every value, gauges included,
    // resetting it to zero: the figures below add both snapshots up.)
    let during = snapshot(&snapshotter);
    let now = &during;
    assert_eq!(gauge(now, names::CONNECTIONS_UP, &[]), Some(1.0));
    assert_eq!(gauge(now, names::CONNECTIONS_UP, &["namespace=checkout"]), Some(1.0));
    assert_eq!(gauge(now, names::ACQUIRES_IN_FLIGHT, &[]), Some(0.0));

    permit.release().await.unwrap();
    other.release().await.unwrap();
    plain.drain().await;
    checkout.drain().await;

    // (Gauges taken out by a stopped driver: `tests/metrics_exporter.rs`,
    // where a scrape reads them as Prometheus does.)
    let mut now: Vec<Entry> = during;
    now.extend(snapshot(&snapshotter));
    assert_eq!(counter(&now, names::GRANTED, &[]), Some(1));
    assert_eq!(counter(&now, names::DENIED, &[]), Some(1));
    assert_eq!(
        counter(&now, names::UNAVAILABLE, &[]),
        Some(0),
        "a series from the start, at 0"
    );
    assert_eq!(counter(&now, names::GRANTED, &["namespace=checkout"]), Some(1));
    assert_eq!(counter(&now, names::DENIED, &["namespace=checkout"]), Some(0));
    // One latency sample per acquire, labelled by how it ended.
    assert_eq!(samples(&now, names::ACQUIRE_SECONDS, &["outcome=granted"]), 1);
    assert_eq!(samples(&now, names::ACQUIRE_SECONDS, &["outcome=denied"]), 1);
    assert_eq!(
        samples(&now, names::ACQUIRE_SECONDS, &["namespace=checkout", "outcome=granted"]),
        1
    );
    // Every key carries no label but these: never the subject.
    for (key, ..) in &now {
        for label in key.key().labels() {
            assert!(["namespace", "outcome"].contains(&label.key()), "{key:?}");
        }
    }

    // Every metric emitted here is described, with its unit.
    let described: Vec<(String, Option<Unit>, bool)> = now
        .iter()
        .map(|(key, unit, help, _)| (key.key().name().to_string(), *unit, help.is_some()))
        .collect();
    let documented = [
        (names::GRANTED, Unit::Count),
        (names::DENIED, Unit::Count),
        (names::ACQUIRE_SECONDS, Unit::Seconds),
        (names::CONNECTIONS_UP, Unit::Count),
        (names::ACQUIRES_IN_FLIGHT, Unit::Count),
    ];
    for (name, unit) in documented {
        assert!(
            described
                .iter()
                .any(|(n, u, help)| n == name && *u == Some(unit) && *help),
            "{name} is not described with unit {unit:?}: {described:?}"
        );
    }
}

/// The one table in docs/operations.md and the crate's documentation name
/// every metric the driver publishes.
#[test]
fn every_metric_is_in_the_operations_table_and_the_crate_docs() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md")).unwrap();
    let crate_docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../io-tokio/src/lib.rs")).unwrap();
    let every = names::COUNTERS.iter().chain(&names::GAUGES).chain(&names::HISTOGRAMS);
    for name in every {
        assert!(
            doc.lines()
                .any(|line| line.starts_with('|') && line.contains(&format!("`{name}`"))),
            "{name} is missing from the metrics table of docs/operations.md"
        );
        assert!(
            crate_docs.contains(&format!("//! `{name}`")) || crate_docs.contains(&format!(" `{name}`")),
            "{name} is missing from the crate docs' metric list"
        );
    }
}
