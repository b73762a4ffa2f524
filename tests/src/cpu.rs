//! CPU time, for the benchmarks' per-cycle costs: this process's, a
//! redis-server's (`INFO cpu`), and the host's steal.

use crate::RedisServer;

/// CPU seconds this process has used (user + system, `/proc/self/stat`).
pub fn process_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which may hold spaces, in parentheses.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based); 11 and 12 after the `)`,
    // in clock ticks (`getconf CLK_TCK`: 100 on Linux).
    (ticks(11) + ticks(12)) / 100.0
}

/// CPU seconds `server` has used (`INFO cpu`: system + user).
pub fn redis_seconds(server: &RedisServer) -> f64 {
    info(server, "cpu")
        .lines()
        .filter(|line| line.starts_with("used_cpu_sys:") || line.starts_with("used_cpu_user:"))
        .filter_map(|line| line.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

/// Commands `server` has run, those its scripts called included (the sum of
/// `calls=` in `INFO commandstats`).
pub fn redis_commands(server: &RedisServer) -> f64 {
    info(server, "commandstats")
        .lines()
        .filter_map(|line| line.split("calls=").nth(1)?.split(',').next()?.parse::<f64>().ok())
        .sum()
}

/// Calls per command `server` has run (`INFO commandstats`, by name).
pub fn redis_command_calls(server: &RedisServer) -> std::collections::BTreeMap<String, f64> {
    info(server, "commandstats")
        .lines()
        .filter_map(|line| {
            let name = line.strip_prefix("cmdstat_")?.split(':').next()?;
            let calls = line.split("calls=").nth(1)?.split(',').next()?.parse::<f64>().ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// One section of `server`'s `INFO`.
fn info(server: &RedisServer, section: &str) -> String {
    match server.client().call(&[b"INFO", section.as_bytes()]) {
        Ok(inflight_core::resp::Frame::BulkString(info)) => String::from_utf8_lossy(&info).into_owned(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

/// The host's (all CPUs) total and steal jiffies (`/proc/stat`).
pub fn host_jiffies() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (0.0, 0.0);
    };
    let values: Vec<f64> = line.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal …
    let total: f64 = values.iter().take(8).sum();
    (total, values.get(7).copied().unwrap_or(0.0))
}
