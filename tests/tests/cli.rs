//! The `inflight` operator command against a real redis-server: what it
//! prints for a key (holders, usage), for the busiest keys (`keys`), and
//! as a refreshing view (`top`), and how it fails.

use std::time::{Duration, Instant};

use inflight_tests::RedisServer;
use inflight_tokio::cli::{run, CliError};
use inflight_tokio::{Acquire, Builder, ConnectError, Key, Limiter, Permit};

const PREFIX: &str = "cli";

fn builder(server: &RedisServer, prefix: &str) -> Builder {
    Limiter::builder(server.url())
        .key_prefix(prefix)
        .default_limit(10)
        .lease_ttl(Duration::from_secs(60))
        .timeout(Duration::from_millis(500))
}

fn key(subject: &str) -> Key {
    Key::new("upload", subject).unwrap()
}

async fn hold(limiter: &Limiter, subject: &str, weight: u32) -> Permit {
    limiter
        .acquire_opts(&key(subject), Acquire::default().weight(weight))
        .await
        .unwrap()
}

async fn cli(words: &[&str]) -> Result<String, CliError> {
    let mut out = Vec::new();
    run(words.iter().map(|w| w.to_string()), &mut out).await?;
    Ok(String::from_utf8(out).unwrap())
}

/// Waits until `key` has `count` waiters queued (read through the limiter).
async fn until_waiting(limiter: &Limiter, subject: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while limiter.usage(&key(subject)).await.unwrap().waiting != count {
        assert!(Instant::now() < deadline, "{count} waiters never queued on {subject}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_and_usage_print_what_redis_holds_and_no_invented_limit() {
    let server = RedisServer::start();
    let limiter = builder(&server, PREFIX).holder_label("pod-3").connect().await.unwrap();
    let subject = "one";
    let heavy = hold(&limiter, subject, 4).await;
    let light = limiter.acquire(&key(subject)).await.unwrap();
    let url = server.url();
    let table = cli(&["holders", &url, "upload", subject, "--prefix", PREFIX])
        .await
        .unwrap();
    println!("{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "a header, two holders, a total: {table}");
    assert!(lines[0].starts_with("LEASE") && lines[0].ends_with("LABEL"));
    let heavy_id = heavy.lease_id().unwrap().to_string();
    let heavy_line = lines
        .iter()
        .find(|l| l.split_whitespace().next() == Some(heavy_id.as_str()));
    let heavy_line = heavy_line.expect("the weight-4 lease is listed by its full id");
    assert_eq!(heavy_line.split_whitespace().nth(1), Some("4"));
    assert!(heavy_line.ends_with("pod-3"));
    assert_eq!(lines[3], "2 holders, 5 units");

    // Fail-fast acquires record no limit: the command says it does not
    // know rather than printing its own default.
    let usage = cli(&["usage", &url, "upload", subject, "--prefix", PREFIX])
        .await
        .unwrap();
    assert_eq!(
        usage,
        "5 units held, limit unknown (no waiter recorded one: each service brings its own), 0 waiting\n"
    );
    // A waiter records its limit: then the command knows it.
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .acquire_opts(&key("one"), Acquire::default().limit(5).wait(Duration::from_secs(5)))
                .await
        })
    };
    until_waiting(&limiter, subject, 1).await;
    let usage = cli(&["usage", &url, "upload", subject, "--prefix", PREFIX])
        .await
        .unwrap();
    assert_eq!(usage, "5 units held, limit 5 (recorded by its waiters), 1 waiting\n");
    drop(light);
    let granted = waiter.await.unwrap().expect("the freed unit goes to the waiter");
    drop((heavy, granted));
    limiter.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_lists_the_busiest_keys_of_the_prefix_busiest_first() {
    let server = RedisServer::start();
    let limiter = builder(&server, PREFIX).connect().await.unwrap();
    let other_prefix = builder(&server, "elsewhere").connect().await.unwrap();
    let mut held = Vec::new();
    // 300 keys holding 1 unit, three busier ones, one released (idle).
    for i in 0..300 {
        held.push(hold(&limiter, &format!("tenant-{i}"), 1).await);
    }
    held.push(hold(&limiter, "big", 7).await);
    held.push(hold(&limiter, "middle", 3).await);
    held.push(hold(&limiter, "queued", 2).await);
    let idle = hold(&limiter, "idle", 5).await;
    idle.release().await.unwrap();
    let _foreign = hold(&other_prefix, "not-ours", 9).await;
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .acquire_opts(&key("queued"), Acquire::default().limit(2).wait(Duration::from_secs(5)))
                .await
        })
    };
    until_waiting(&limiter, "queued", 1).await;

    let url = server.url();
    let out = cli(&["keys", &url, "--prefix", PREFIX, "--limit", "4"]).await.unwrap();
    println!("{out}");
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["KEY", "HELD", "LIMIT", "WAITING"]);
    assert_eq!(lines[1], ["upload/big", "7", "?", "0"]);
    assert_eq!(lines[2], ["upload/middle", "3", "?", "0"]);
    assert_eq!(lines[3], ["upload/queued", "2", "2", "1"], "a waiter records its limit");
    assert_eq!(lines[4][1..], ["1", "?", "0"]);
    assert!(lines[4][0].starts_with("upload/tenant-"));
    // 304 lease sets (the idle key's went with its last lease), none of
    // the other prefix's.
    assert_eq!(lines[5].join(" "), "4 busy keys shown, 303 keys with leases scanned");
    assert!(!out.contains("not-ours") && !out.contains("idle"));

    // The library call under it: every busy key, the whole scan.
    let busy = limiter.busy_keys(usize::MAX).await.unwrap();
    assert_eq!((busy.keys.len(), busy.scanned, busy.complete), (303, 303, true));

    // A key with hundreds of holders is listed whole, on the connection the
    // requests use (a reply over the limits would drop it).
    let crowd_claim = Acquire::default().limit(1000);
    for _ in 0..600 {
        held.push(limiter.acquire_opts(&key("crowd"), crowd_claim.clone()).await.unwrap());
    }
    assert_eq!(limiter.holders(&key("crowd")).await.unwrap().len(), 600);
    let table = cli(&["holders", &url, "upload", "crowd", "--prefix", PREFIX])
        .await
        .unwrap();
    assert!(
        table.ends_with("600 holders, 600 units\n"),
        "{}",
        &table[table.len() - 40..]
    );
    let before = limiter.stats();
    held.push(hold(&limiter, "after-crowd", 1).await);
    assert_eq!(limiter.stats().connections_replaced, before.connections_replaced);

    waiter.abort();
    drop(held);
    limiter.drain().await;
    other_prefix.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_refreshes_its_screen_with_bars_and_holders_until_its_bound() {
    let server = RedisServer::start();
    let limiter = builder(&server, PREFIX).holder_label("pod-a").connect().await.unwrap();
    let other_pod = builder(&server, PREFIX).holder_label("pod-b").connect().await.unwrap();
    let first = hold(&limiter, "full", 3).await;
    let second = hold(&other_pod, "full", 1).await;
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .acquire_opts(&key("full"), Acquire::default().limit(4).wait(Duration::from_secs(5)))
                .await
        })
    };
    until_waiting(&limiter, "full", 1).await;
    let url = server.url();
    let started = Instant::now();
    let out = cli(&["top", &url, "--prefix", PREFIX, "--interval", "0.2", "--refreshes", "2"])
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "one interval between the two screens"
    );
    let screens: Vec<&str> = out.split("\x1b[H\x1b[2J").skip(1).collect();
    assert_eq!(screens.len(), 2, "two screens, each clearing the last: {out:?}");
    let last = screens[1];
    println!("{last}");
    assert!(last.starts_with(&format!("inflight top: {url}   refresh 2")), "{last}");
    let row = last
        .lines()
        .find(|l| l.starts_with("upload/full"))
        .expect("the busy key has a row");
    let fields: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(fields[..4], ["upload/full", "4", "4", "1"]);
    assert!(row.contains(&format!("[{}]", "#".repeat(20))), "a full bar: {row}");
    assert!(row.ends_with("pod-a:3 pod-b:1"), "holders by label, most first: {row}");
    waiter.abort();
    drop((first, second));
    limiter.drain().await;
    other_pod.drain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_fails_clearly_and_helps() {
    let server = RedisServer::start();
    let help = cli(&["--help"]).await.unwrap();
    assert!(
        help.starts_with("usage: inflight <command>") && help.contains("top"),
        "{help}"
    );
    let error = cli(&["holders", "redis://127.0.0.1:1", "upload", "x"])
        .await
        .unwrap_err();
    assert!(
        matches!(error, CliError::Connect(ConnectError::Unreachable { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
    let error = cli(&["holders"]).await.unwrap_err();
    assert!(matches!(error, CliError::Usage(_)), "{error}");
    assert!(
        error.to_string().contains("usage: inflight"),
        "the usage follows the reason: {error}"
    );
    let url = server.url();
    assert!(matches!(
        cli(&["usage", &url, "upload", ""]).await,
        Err(CliError::Key(_))
    ));
    // A password never shows, not even in `top`'s header.
    let secret_url = url.replace("redis://", "redis://:hunter2@");
    let error = cli(&["keys", &secret_url]).await.unwrap_err();
    assert!(!error.to_string().contains("hunter2"), "{error}");
}

/// `inflight top` in a real terminal (tmux, 100×20): each refresh replaces
/// the last screen, the bars and holders render, and it ends at its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_draws_in_a_real_terminal() {
    use std::process::Command;
    if Command::new("tmux").arg("-V").output().is_err() {
        panic!("tmux was not found: this test runs `inflight top` in a real terminal. Install it with `apt-get install -y tmux`.");
    }
    let server = RedisServer::start();
    let limiter = builder(&server, PREFIX).holder_label("pod-t").connect().await.unwrap();
    let held = hold(&limiter, "terminal", 2).await;
    // A private tmux server, gone with the test.
    let socket = format!("inflight-cli-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .output()
            .expect("tmux runs")
    };
    let program = format!(
        "{} top {} --prefix {PREFIX} --interval 0.2 --refreshes 15; sleep 30",
        env!("CARGO_BIN_EXE_inflight_cli"),
        server.url()
    );
    struct KillOnDrop(String);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = Command::new("tmux").args(["-L", &self.0, "kill-server"]).output();
        }
    }
    let _tmux_server = KillOnDrop(socket.clone());
    let started = tmux(&["new-session", "-d", "-s", "top", "-x", "100", "-y", "20", &program]);
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let screen = || String::from_utf8(tmux(&["capture-pane", "-p", "-t", "top"]).stdout).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut shown = screen();
    while !shown.contains("refresh 3 ") {
        assert!(
            Instant::now() < deadline,
            "top never refreshed 3 times; the terminal shows:\n{shown}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        shown = screen();
    }
    println!("{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert!(
        lines[0].starts_with("inflight top: "),
        "the screen starts at the top: {shown}"
    );
    assert_eq!(
        shown.matches("inflight top: ").count(),
        1,
        "the last screen replaced the earlier ones: {shown}"
    );
    let row = lines
        .iter()
        .find(|l| l.starts_with("upload/terminal"))
        .expect("the key's row");
    assert!(row.trim_end().ends_with("pod-t:2"), "{row}");
    // Its bound: 15 screens 0.2 s apart, then the shell's sleep keeps the
    // pane for reading.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !screen().contains("refresh 15 ") {
        assert!(
            Instant::now() < deadline,
            "top did not reach its 15th screen:\n{}",
            screen()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
    limiter.drain().await;
}

/// A key kept in a group's slot (`Key::in_group`, for composite limits in a
/// cluster) is another lease set: `usage` and `holders` reach it with
/// `--group`, and `keys` lists it with its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_keys_are_read_with_their_group_and_listed_with_it() {
    let server = RedisServer::start();
    let prefix = "cli-group";
    let limiter = builder(&server, prefix).connect().await.unwrap();
    let route = Key::new("route", "/upload").unwrap().in_group("acme").unwrap();
    let tenant = Key::new("tenant", "acme").unwrap().in_group("acme").unwrap();
    let _held = limiter.acquire_all(&[(&route, 4), (&tenant, 4)]).await.unwrap();
    let url = server.url();
    let usage = cli(&["usage", &url, "route", "/upload", "--group", "acme", "--prefix", prefix])
        .await
        .unwrap();
    println!("{usage}");
    assert!(usage.starts_with("1 units held"), "{usage}");
    // Without the group it is another key, which holds nothing.
    let other = cli(&["usage", &url, "route", "/upload", "--prefix", prefix])
        .await
        .unwrap();
    assert!(other.starts_with("0 units held"), "{other}");
    let keys = cli(&["keys", &url, "--prefix", prefix]).await.unwrap();
    println!("{keys}");
    assert!(
        keys.contains("{acme}route//upload") && keys.contains("{acme}tenant/acme"),
        "{keys}"
    );
}
