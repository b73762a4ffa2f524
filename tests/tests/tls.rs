//! `rediss://` against a real redis-server speaking TLS: the same limiter
//! over rustls, and every way a TLS set-up can be wrong refused at `connect`
//! with the reason.

use std::time::Duration;

use bytes::Bytes;
use inflight_core::resp::Frame;
use inflight_tests::{RedisServer, TestPki};
use inflight_tokio::{Builder, ConnectError, Error, Key, Limiter};

const PREFIX: &str = "tls";

fn builder(url: &str) -> Builder {
    Limiter::builder(url)
        .key_prefix(PREFIX)
        .default_limit(2)
        .timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(3))
}

fn key() -> Key {
    Key::new("tier", "secure").unwrap()
}

/// Live leases of `key()`, read over the server's plain port.
fn live(server: &RedisServer) -> i64 {
    let redis_key = Bytes::from(format!("{PREFIX}:{{tier|secure}}:leases"));
    match server.client().call(&[b"ZCARD", &redis_key]).unwrap() {
        Frame::Integer(n) => n,
        other => panic!("ZCARD answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_over_tls_enforces_the_limit_and_releases() {
    let pki = TestPki::new(&["localhost"]);
    let server = RedisServer::start_tls(&pki, false);
    let url = format!("rediss://localhost:{}/", server.tls_port());
    let limiter = builder(&url)
        .tls_root_certificates(pki.ca_pem.clone())
        .connect()
        .await
        .unwrap();
    let first = limiter.acquire(&key()).await.unwrap();
    let second = limiter.acquire(&key()).await.unwrap();
    assert!(first.is_enforced() && second.is_enforced());
    assert!(matches!(
        limiter.acquire(&key()).await.unwrap_err(),
        Error::Exceeded { shed: false, .. }
    ));
    assert_eq!(live(&server), 2);
    first.release().await.unwrap();
    assert_eq!(live(&server), 1);
    drop(second);
    limiter.drain().await;
    assert_eq!(live(&server), 0);

    // The port really is TLS-only: the same URL as plain redis:// cannot talk to it.
    let plain = format!("redis://localhost:{}/", server.tls_port());
    let error = builder(&plain).connect().await.unwrap_err();
    assert!(!matches!(error, ConnectError::Config(_)), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_or_misnamed_server_is_refused_at_connect() {
    let pki = TestPki::new(&["localhost"]);
    let server = RedisServer::start_tls(&pki, false);
    let url = format!("rediss://localhost:{}/", server.tls_port());

    // Mozilla's roots (the default) do not include the test CA.
    let error = builder(&url).connect().await.unwrap_err();
    assert_handshake_refused(&error, "UnknownIssuer");
    // Nor does some other CA.
    let error = builder(&url)
        .tls_root_certificates(TestPki::unrelated_ca_pem())
        .connect()
        .await
        .unwrap_err();
    assert_handshake_refused(&error, "UnknownIssuer");
    // The right CA, the wrong name: the certificate names localhost, not 127.0.0.1.
    let by_ip = format!("rediss://127.0.0.1:{}/", server.tls_port());
    let error = builder(&by_ip)
        .tls_root_certificates(pki.ca_pem.clone())
        .connect()
        .await
        .unwrap_err();
    assert_handshake_refused(&error, "not valid for name");
}

fn assert_handshake_refused(error: &ConnectError, why: &str) {
    let message = error.to_string();
    assert!(
        matches!(error, ConnectError::Unreachable { .. })
            && message.contains("TLS handshake failed")
            && message.contains(why),
        "expected a refused TLS handshake ({why}), got: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_client_certificates_admits_only_with_one() {
    let pki = TestPki::new(&["localhost"]);
    let server = RedisServer::start_tls(&pki, true);
    let url = format!("rediss://localhost:{}/", server.tls_port());

    let error = builder(&url)
        .tls_root_certificates(pki.ca_pem.clone())
        .connect()
        .await
        .unwrap_err();
    // TLS 1.3: the client finishes its handshake first, and the server's
    // refusal arrives as an alert on the first read; or, when the server
    // has already closed by then, as the write of the first command
    // failing (a broken pipe or a reset): refused either way.
    let message = error.to_string();
    assert!(
        matches!(error, ConnectError::Unreachable { .. })
            && ["CertificateRequired", "Broken pipe", "reset"]
                .iter()
                .any(|why| message.contains(why)),
        "{error}"
    );

    let limiter = builder(&url)
        .tls_root_certificates(pki.ca_pem.clone())
        .tls_client_certificate(pki.client_chain_pem.clone(), pki.client_key_pem.clone())
        .connect()
        .await
        .unwrap();
    let permit = limiter.acquire(&key()).await.unwrap();
    assert_eq!(live(&server), 1);
    permit.release().await.unwrap();
    assert_eq!(live(&server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_tls_settings_are_typed_errors_before_any_connection() {
    // Port 1 on loopback: nothing is dialled, the settings fail first.
    let url = "rediss://localhost:1/";
    let pki = TestPki::new(&["localhost"]);
    let cases = [
        builder(url).tls_root_certificates("not a certificate"),
        builder(url).tls_root_certificates(""),
        builder(url).tls_client_certificate(pki.client_chain_pem.clone(), "not a key"),
        builder(url).tls_client_certificate("", pki.client_key_pem.clone()),
    ];
    for case in cases {
        let error = case.connect().await.unwrap_err();
        assert!(matches!(error, ConnectError::Tls { .. }), "{error}");
    }
}
