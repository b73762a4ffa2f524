//! What the library logs, read as an operator reads it (its own binary: the
//! log subscriber is global). Lines that would repeat per request or per
//! reconnect attempt come at most once per interval, with a count of those
//! left out; the connection's lifecycle is logged at `info`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight_tests::RedisServer;
use inflight_tokio::{Key, Limiter, UnavailablePolicy};

/// Every line the library wrote, shared with the subscriber.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
    fn count(&self, what: &str) -> usize {
        self.text().lines().filter(|line| line.contains(what)).count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeating_warnings_are_throttled_and_the_lifecycle_is_at_info() {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let mut server = RedisServer::start();
    let limiter = Limiter::builder(server.url())
        .on_unavailable(UnavailablePolicy::Allow)
        .timeout(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(20))
        .connect()
        .await
        .unwrap();
    assert_eq!(lines.count("INFO"), 1, "{}", lines.text());
    assert!(
        lines.text().contains("inflight: connected to Redis"),
        "{}",
        lines.text()
    );

    // Redis goes away: 200 requests fail open, and the driver tries to
    // reconnect every 20 ms for a second.
    server.stop();
    // Once the driver has seen the connection go (its first reconnect
    // failed), every request is refused for want of one: the first line
    // carries the operating system's reason. (A request sent before it
    // noticed is told the connection was lost instead.)
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while lines.count("connecting to Redis failed") == 0 {
        assert!(std::time::Instant::now() < deadline, "{}", lines.text());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let key = Key::new("tenant", "logs").unwrap();
    for _ in 0..200 {
        let permit = limiter.acquire(&key).await.unwrap();
        assert!(!permit.is_enforced());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = lines.text();
    println!("{text}");
    assert_eq!(lines.count("letting requests through unenforced"), 1, "{text}");
    // With its cause: the operating system's words.
    assert!(text.contains("not connected to Redis: "), "{text}");
    assert_eq!(lines.count("connecting to Redis failed"), 1, "{text}");

    // Back: one info line, with the attempts that failed meanwhile.
    server.start_again();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while lines.count("inflight: connected to Redis") < 2 {
        assert!(std::time::Instant::now() < deadline, "{}", lines.text());
        let _ = limiter.acquire(&key).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let text = lines.text();
    let again = text
        .lines()
        .filter(|l| l.contains("inflight: connected to Redis"))
        .nth(1)
        .unwrap();
    let attempts: u64 = again
        .split("failed_attempts=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of failed attempts: {again}"));
    assert!(attempts >= 10, "{again}");
    assert!(limiter.drain().await.is_complete());
}
