//! Measures how far Redis's clock (`TIME`) and this process's monotonic clock
//! drift apart, the figure behind the valid-until margin (docs/operations.md,
//! "Clocks"). Starts its own redis-server; bounded in time.
//!
//!     cargo run --release -p inflight-tests --bin clock_drift -- [seconds, default 60]

use std::time::{Duration, Instant};

use inflight_core::resp::Frame;
use inflight_tests::RedisServer;

fn server_us(client: &mut inflight_tests::RespClient) -> (Instant, i128, Instant) {
    let sent = Instant::now();
    let reply = client.call(&[b"TIME"]).expect("TIME");
    let read = Instant::now();
    let Frame::Array(parts) = reply else {
        panic!("{reply:?}")
    };
    let number = |frame: &Frame| match frame {
        Frame::BulkString(digits) => std::str::from_utf8(digits).unwrap().parse::<i128>().unwrap(),
        other => panic!("{other:?}"),
    };
    (sent, number(&parts[0]) * 1_000_000 + number(&parts[1]), read)
}

fn main() {
    let seconds: u64 = std::env::args().nth(1).map_or(60, |s| s.parse().expect("seconds"));
    let server = RedisServer::start();
    let mut client = server.client();
    let (sent0, first, read0) = server_us(&mut client);
    println!("round trip of TIME: {:?}", read0 - sent0);
    println!(
        "{:>8} {:>14} {:>14} {:>10}",
        "after s", "ours us", "server us", "drift ppm"
    );
    let mut worst: f64 = 0.0;
    for step in 1..=seconds.div_ceil(5) {
        std::thread::sleep(Duration::from_secs(5).min(Duration::from_secs(seconds)));
        let (sent, now, read) = server_us(&mut client);
        // Our instant of the reading: the middle of the round trip.
        let ours = ((sent - read0) + (read - sent) / 2).as_micros() as i128;
        let theirs = now - first;
        let ppm = (theirs - ours) as f64 / ours as f64 * 1e6;
        worst = worst.max(ppm.abs());
        println!("{:>8} {:>14} {:>14} {:>10.1}", step * 5, ours, theirs, ppm);
    }
    println!("largest drift seen: {worst:.1} ppm (the client allows {} ppm)", 1000);
}
