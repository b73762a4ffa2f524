//! The driver publishes what happened under the documented metric names.
//! (Its own binary: a global metrics recorder can be installed only once.)

use std::time::Duration;

use inflight_tests::RedisServer;
use inflight_tokio::{metric_names, Error, Key, Limiter};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_denials_and_latency_are_counted_under_their_names() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this test binary");

    let server = RedisServer::start();
    let limiter = Limiter::builder(server.url())
        .default_limit(1)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let key = Key::new("tier", "metrics").unwrap();
    let permit = limiter.acquire(&key).await.unwrap();
    assert_eq!(limiter.acquire(&key).await.unwrap_err(), Error::Exceeded);
    permit.release().await.unwrap();
    limiter.close().await;

    let snapshot = snapshotter.snapshot().into_vec();
    let counter = |name: &str| {
        snapshot
            .iter()
            .find(|(key, ..)| key.kind() == MetricKind::Counter && key.key().name() == name)
            .map(|(.., value)| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
    };
    assert_eq!(counter(metric_names::GRANTED), Some(1));
    assert_eq!(counter(metric_names::DENIED), Some(1));
    assert_eq!(counter(metric_names::UNAVAILABLE), None, "nothing was unavailable");
    let latencies = snapshot
        .iter()
        .find(|(key, ..)| key.kind() == MetricKind::Histogram && key.key().name() == metric_names::ACQUIRE_SECONDS)
        .map(|(.., value)| match value {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        });
    assert_eq!(latencies, Some(2), "one latency sample per acquire");
}
