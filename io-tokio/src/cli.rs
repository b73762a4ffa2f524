//! The `inflight` command: what a key holds, for operators at 3 a.m.
//!
//! ```text
//! inflight holders <redis-url> <namespace> <subject> [--prefix P] [--cluster]
//! inflight usage   <redis-url> <namespace> <subject> [--prefix P] [--cluster]
//! ```
//!
//! Kept in the library (hidden) so that the tests drive exactly what the
//! binary runs; `src/bin/inflight.rs` only maps its result to an exit code.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::{ConnectError, Error, Holder, Key, KeyError, Limiter};

/// What went wrong, each saying what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The arguments do not make a command.
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    /// The key is not one the library accepts.
    #[error("bad key: {0}")]
    Key(#[from] KeyError),
    /// Redis could not be reached (or refused us).
    #[error("cannot connect: {0}")]
    Connect(#[from] ConnectError),
    /// Connected, but the read got no answer.
    #[error("cannot read the key: {0}")]
    Read(#[from] Error),
}

/// How to call it.
pub const USAGE: &str = "usage: inflight <holders|usage> <redis-url> <namespace> <subject> [--prefix P] [--cluster]\n\
    \n  holders   the live leases of the key: id, weight, time left, holder label\
    \n  usage     the units held now, and the limit as far as Redis knows it\
    \n  --prefix  the services' key prefix (default \"inflight\")\
    \n  --cluster the URL is a Redis Cluster seed node";

struct Args {
    command: String,
    url: String,
    key: Key,
    prefix: String,
    cluster: bool,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, CliError> {
    let mut positional = Vec::new();
    let mut prefix = "inflight".to_string();
    let mut cluster = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--prefix" => {
                prefix = args
                    .next()
                    .ok_or_else(|| CliError::Usage("--prefix needs a value".into()))?
            }
            "--cluster" => cluster = true,
            "-h" | "--help" => return Err(CliError::Usage("".into())),
            flag if flag.starts_with("--") => return Err(CliError::Usage(format!("unknown option {flag}"))),
            _ => positional.push(arg),
        }
    }
    let [command, url, namespace, subject]: [String; 4] = positional
        .try_into()
        .map_err(|given: Vec<String>| CliError::Usage(format!("expected 4 arguments, got {}", given.len())))?;
    if command != "holders" && command != "usage" {
        return Err(CliError::Usage(format!("unknown command {command:?}")));
    }
    Ok(Args {
        command,
        url,
        key: Key::new(namespace, subject)?,
        prefix,
        cluster,
    })
}

/// Runs the command `args` (without the program name) and returns what it
/// prints.
pub async fn run(args: impl IntoIterator<Item = String>) -> Result<String, CliError> {
    let args = parse(args)?;
    let mut builder = Limiter::builder(args.url)
        .key_prefix(args.prefix)
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(3));
    if args.cluster {
        builder = builder.cluster();
    }
    let limiter = builder.connect().await?;
    let out = match args.command.as_str() {
        "usage" => {
            let usage = limiter.usage(&args.key).await?;
            format!("{} units held, limit {}\n", usage.held, usage.limit_hint)
        }
        _ => table(&limiter.holders(&args.key).await?, Instant::now()),
    };
    limiter.drain().await;
    Ok(out)
}

/// The holders as a table, soonest to expire first.
pub fn table(holders: &[Holder], now: Instant) -> String {
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
