//! Redis Sentinel with TLS on one side only, against a real sentinel and a
//! real data node: the limiter reaches the sentinels as their URLs' scheme
//! says and the data nodes as `Builder::node_tls` says, each over its own
//! transport; given the wrong one for a side, it cannot connect.

use std::time::Duration;

use bytes::Bytes;
use inflight_core::resp::Frame;
use inflight_tests::tls_sentinel::{LoneSentinel, TlsSide, MASTER};
use inflight_tests::TestPki;
use inflight_tokio::{Builder, ConnectError, Key, Limiter};

const PREFIX: &str = "apart";

fn builder(set: &LoneSentinel, pki: &TestPki) -> Builder {
    Limiter::sentinel_builder([set.sentinel_url()], MASTER)
        .key_prefix(PREFIX)
        .default_limit(2)
        .timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(2))
        .tls_root_certificates(pki.ca_pem.clone())
}

fn key() -> Key {
    Key::new("tier", "apart").unwrap()
}

/// Live leases of `key()`, read over the data node's plain port.
fn live(set: &LoneSentinel) -> i64 {
    let redis_key = Bytes::from(format!("{PREFIX}:{{tier|apart}}:leases"));
    match set.data.client().call(&[b"ZCARD", &redis_key]).unwrap() {
        Frame::Integer(n) => n,
        other => panic!("ZCARD answered {other:?}"),
    }
}

/// A limiter set up for `side` takes and gives back a lease on the data
/// node; one that reaches the data node the other way cannot connect.
async fn each_side_its_own_way(side: TlsSide) {
    let pki = TestPki::new(&["localhost", "127.0.0.1"]);
    let set = LoneSentinel::start(&pki, side);
    let node_tls = side == TlsSide::DataNode;
    let limiter = builder(&set, &pki).node_tls(node_tls).connect().await.unwrap();
    let permit = limiter.acquire(&key()).await.unwrap();
    assert!(permit.is_enforced());
    assert_eq!(live(&set), 1);
    permit.release().await.unwrap();
    assert_eq!(live(&set), 0);
    limiter.drain().await;

    let wrong = builder(&set, &pki).node_tls(!node_tls).connect().await.unwrap_err();
    assert!(!matches!(wrong, ConnectError::Config(_)), "{wrong}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sentinels_and_tls_data_nodes() {
    each_side_its_own_way(TlsSide::DataNode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_sentinels_and_plain_data_nodes() {
    each_side_its_own_way(TlsSide::Sentinel).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_tls_against_a_standalone_scheme_is_a_config_error() {
    let error = Limiter::builder("redis://127.0.0.1:6379")
        .node_tls(true)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::Config(_)), "{error}");
    assert!(error.to_string().contains("node_tls"), "{error}");
}
