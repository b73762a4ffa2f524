//! README.md's whole-service example, run as a new user would: against a
//! real Redis, limited per tenant, then shut down with Ctrl-C and drained.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use http::StatusCode;
use inflight_tests::{http_client, RedisServer};
use inflight_tokio::{Key, Limiter};

#[test]
fn the_readme_shows_the_service_the_tests_run() {
    let readme = include_str!("../../README.md");
    let source = include_str!("../src/bin/readme_service.rs");
    let code = &source[source.find("use inflight_tokio").unwrap()..];
    assert!(
        readme.contains(&format!("```rust,no_run\n{code}```")),
        "README.md's service example differs from tests/src/bin/readme_service.rs: keep them one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_service_limits_per_tenant_and_drains_on_ctrl_c() {
    let server = RedisServer::start();
    let mut service = Command::new(env!("CARGO_BIN_EXE_readme_service"))
        .env("REDIS_URL", server.url())
        .env("LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the example runs");
    let mut stdout = BufReader::new(service.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr: SocketAddr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the service says where it listens: {line:?}"))
        .trim()
        .parse()
        .unwrap();

    let hello = http_client::get(addr, "/", &[("x-tenant", "acme")]).await;
    assert_eq!(hello.status(), StatusCode::OK);
    assert_eq!(hello.rest().await, "hello");

    // Another replica holds all 20 of acme's slots: this one answers 429.
    let replica = Limiter::builder(server.url())
        .default_limit(20)
        .connect()
        .await
        .unwrap();
    let acme = Key::new("tenant", "acme").unwrap();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(replica.acquire(&acme).await.unwrap());
    }
    let full = http_client::get(addr, "/", &[("x-tenant", "acme")]).await;
    assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(full.header("retry-after").is_some());
    let other = http_client::get(addr, "/", &[("x-tenant", "globex")]).await;
    assert_eq!(other.status(), StatusCode::OK, "another tenant is not limited by acme");
    drop(held);
    replica.drain().await;

    // Ctrl-C: the server stops, the limiter drains, the process exits 0.
    let interrupted = Command::new("kill")
        .args(["-INT", &service.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = service.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the service did not stop on Ctrl-C");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(
        rest.starts_with("drained in ") && rest.contains("nothing owed"),
        "{rest}"
    );
}
