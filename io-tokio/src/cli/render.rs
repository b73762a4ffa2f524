//! What the commands print: pure functions of what was read, so that tests
//! check the text without a terminal.

use std::fmt::Write as _;
use std::time::Instant;

use crate::{BusyKeys, Holder, Key, Usage};

/// `usage`: one line, the limit only as Redis knows it.
pub fn usage(usage: &Usage) -> String {
    let limit = match usage.limit_recorded {
        Some(limit) => format!("limit {limit} (recorded by its waiters)"),
        None => "limit unknown (no waiter recorded one: each service brings its own)".to_string(),
    };
    format!("{} units held, {limit}, {} waiting\n", usage.held, usage.waiting)
}

/// `holders`: a table, soonest to expire first, then the total.
pub fn holders(holders: &[Holder], now: Instant) -> String {
    let mut out = String::new();
    let width = holders.iter().map(|h| h.lease_id.len()).max().unwrap_or(5).max(5);
    let _ = writeln!(out, "{:<width$}  {:>6}  {:>10}  LABEL", "LEASE", "WEIGHT", "EXPIRES IN");
    for holder in holders {
        let left = holder.expires_at.saturating_duration_since(now);
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>9.1}s  {}",
            holder.lease_id,
            holder.weight,
            left.as_secs_f64(),
            holder.label.as_deref().unwrap_or("-")
        );
    }
    let units: u64 = holders.iter().map(|h| u64::from(h.weight)).sum();
    let _ = writeln!(out, "{} holders, {units} units", holders.len());
    out
}

/// `namespace/subject`, the way operators name a key; `{group}namespace/subject`
/// for a key kept in a group's slot.
pub fn key_name(key: &Key) -> String {
    match key.group() {
        Some(group) => format!("{{{group}}}{}/{}", key.namespace(), key.subject()),
        None => format!("{}/{}", key.namespace(), key.subject()),
    }
}

/// `keys`: the busiest keys, one line each, then what the scan covered.
pub fn keys(busy: &BusyKeys) -> String {
    let mut out = String::new();
    let width = key_width(busy);
    let _ = writeln!(
        out,
        "{:<width$}  {:>6}  {:>6}  {:>7}",
        "KEY", "HELD", "LIMIT", "WAITING"
    );
    for (key, usage) in &busy.keys {
        let _ = writeln!(out, "{}", key_columns(key, usage, width));
    }
    let _ = writeln!(out, "{}", coverage(busy));
    out
}

/// The width of the key column: the longest name, or its heading.
fn key_width(busy: &BusyKeys) -> usize {
    busy.keys
        .iter()
        .map(|(k, _)| key_name(k).len())
        .max()
        .unwrap_or(3)
        .max(3)
}

/// A key's name, units held, limit and waiters, as `keys` and `top` print them.
fn key_columns(key: &Key, usage: &Usage, width: usize) -> String {
    format!(
        "{:<width$}  {:>6}  {:>6}  {:>7}",
        key_name(key),
        usage.held,
        limit(usage),
        usage.waiting
    )
}

/// What a scan covered, in words.
fn coverage(busy: &BusyKeys) -> String {
    let shown = busy.keys.len();
    let mut line = format!("{shown} busy keys shown, {} keys with leases scanned", busy.scanned);
    if !busy.complete {
        line.push_str(&format!(" (stopped at {}: more exist)", crate::MAX_SCANNED_KEYS));
    }
    line
}

fn limit(usage: &Usage) -> String {
    usage.limit_recorded.map_or_else(|| "?".to_string(), |l| l.to_string())
}

/// A bar of `held` out of `limit`, `width` cells; over the limit (a
/// lowered limit, or leases a recovery brought back) it shows `!`.
pub fn bar(held: u64, limit: Option<u32>, width: usize) -> String {
    let Some(limit) = limit.filter(|l| *l > 0) else {
        return " ".repeat(width + 2);
    };
    let filled = (held.saturating_mul(width as u64) / u64::from(limit)).min(width as u64) as usize;
    let fill = if held > u64::from(limit) { '!' } else { '#' };
    format!("[{}{}]", fill.to_string().repeat(filled), " ".repeat(width - filled))
}

/// Who holds a key's units, by holder label, most first: `pod-3:4 pod-1:1`.
pub fn by_label(holders: &[Holder]) -> String {
    let mut units: Vec<(String, u64)> = Vec::new();
    for holder in holders {
        let label = holder.label.as_deref().unwrap_or("-");
        match units.iter_mut().find(|(l, _)| l == label) {
            Some((_, sum)) => *sum += u64::from(holder.weight),
            None => units.push((label.to_string(), u64::from(holder.weight))),
        }
    }
    units.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut out = String::new();
    for (label, sum) in units {
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(out, "{label}:{sum}");
    }
    out
}

/// One `top` screen: where it looks, then a line per busy key with its bar
/// and its holders by label.
pub fn top_frame(target: &str, busy: &BusyKeys, holders: &[String], frame: u64) -> String {
    const BAR: usize = 20;
    let mut out = String::new();
    let _ = writeln!(out, "inflight top: {target}   refresh {frame}   (Ctrl-C quits)");
    let _ = writeln!(out);
    let width = key_width(busy);
    let _ = writeln!(
        out,
        "{:<width$}  {:>6}  {:>6}  {:>7}  {:<w$}  HOLDERS",
        "KEY",
        "HELD",
        "LIMIT",
        "WAITING",
        "USE",
        w = BAR + 2
    );
    for (i, (key, usage)) in busy.keys.iter().enumerate() {
        let _ = writeln!(
            out,
            "{}  {}  {}",
            key_columns(key, usage, width),
            bar(usage.held, usage.limit_recorded, BAR),
            holders.get(i).map(String::as_str).unwrap_or("")
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", coverage(busy));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_fills_in_proportion_and_marks_over_admission() {
        assert_eq!(bar(0, Some(4), 4), "[    ]");
        assert_eq!(bar(2, Some(4), 4), "[##  ]");
        assert_eq!(bar(4, Some(4), 4), "[####]");
        assert_eq!(bar(5, Some(4), 4), "[!!!!]");
        assert_eq!(bar(u64::MAX, Some(1), 4), "[!!!!]");
        assert_eq!(bar(3, None, 4), "      ", "no limit known: no bar invented");
    }
}
