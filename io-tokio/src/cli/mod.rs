//! The `inflight` command: what the keys hold, for operators at 3 a.m.
//!
//! ```text
//! inflight holders <redis-url> <namespace> <subject> [--group G] [--prefix P] [--cluster]
//! inflight usage   <redis-url> <namespace> <subject> [--group G] [--prefix P] [--cluster]
//! inflight keys    <redis-url> [--limit N] [--prefix P] [--cluster]
//! inflight top     <redis-url> [--limit N] [--interval SECONDS] [--refreshes N] [--prefix P] [--cluster]
//! ```
//!
//! Kept in the library (hidden) so that the tests drive exactly what the
//! binary runs; `src/bin/inflight.rs` only maps its result to an exit code.

mod render;

use std::io::Write;
use std::time::{Duration, Instant};

use crate::{ConnectError, Error, Key, KeyError, Limiter};

pub use render::{bar, holders as holders_table};

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
    #[error("cannot read the keys: {0}")]
    Read(#[from] Error),
    /// What was read could not be written (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

/// How to call it.
pub const USAGE: &str = "usage: inflight <command> <redis-url> [arguments] [options]\n\
    \n  holders <url> <namespace> <subject>   the key's live leases: id, weight, time left, holder label\
    \n  usage   <url> <namespace> <subject>   the units it holds, its waiters, its limit if Redis knows it\
    \n  keys    <url>                         the busiest keys: held, limit, waiting\
    \n  top     <url>                         the busiest keys, refreshed, with bars and holders\
    \n\
    \n  --group G        holders and usage: the key's group (a key kept in G's cluster slot)\
    \n  --prefix P       the services' key prefix (default \"inflight\")\
    \n  --cluster        the URL is a Redis Cluster seed node\
    \n  --limit N        keys and top: show at most N keys (default 20)\
    \n  --interval S     top: seconds between refreshes (default 2)\
    \n  --refreshes N    top: stop after N screens (default: until Ctrl-C)\
    \n  -h, --help       this text";

/// What to do, parsed.
enum Command {
    Holders(Key),
    Usage(Key),
    Keys,
    Top { interval: Duration, refreshes: Option<u64> },
}

struct Args {
    command: Command,
    url: String,
    prefix: String,
    cluster: bool,
    limit: usize,
}

fn value<T: std::str::FromStr>(flag: &str, arg: Option<String>) -> Result<T, CliError> {
    let arg = arg.ok_or_else(|| CliError::Usage(format!("{flag} needs a value")))?;
    arg.parse()
        .map_err(|_| CliError::Usage(format!("{flag} {arg:?} is not a valid value")))
}

/// The arguments as a command; `None` for `--help`.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Args>, CliError> {
    let mut positional = Vec::new();
    let mut prefix = "inflight".to_string();
    let mut cluster = false;
    let mut limit = 20;
    let mut interval = 2.0_f64;
    let mut refreshes = None;
    let mut group: Option<String> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--prefix" => prefix = value("--prefix", args.next())?,
            "--cluster" => cluster = true,
            "--limit" => limit = value("--limit", args.next())?,
            "--interval" => interval = value("--interval", args.next())?,
            "--refreshes" => refreshes = Some(value("--refreshes", args.next())?),
            "--group" => group = Some(value("--group", args.next())?),
            "-h" | "--help" => return Ok(None),
            flag if flag.starts_with('-') => return Err(CliError::Usage(format!("unknown option {flag}"))),
            _ => positional.push(arg),
        }
    }
    if !(0.1..=3600.0).contains(&interval) {
        return Err(CliError::Usage(format!(
            "--interval {interval} is out of range (0.1 to 3600 seconds)"
        )));
    }
    let mut positional = positional.into_iter();
    let (Some(command), Some(url)) = (positional.next(), positional.next()) else {
        return Err(CliError::Usage("a command and a Redis URL are needed".into()));
    };
    let rest: Vec<String> = positional.collect();
    let command = match (command.as_str(), rest.len()) {
        ("holders" | "usage", 2) => {
            let [namespace, subject]: [String; 2] = rest.try_into().expect("two arguments");
            let mut key = Key::new(namespace, subject)?;
            if let Some(group) = group {
                key = key.in_group(group)?;
            }
            if command == "holders" {
                Command::Holders(key)
            } else {
                Command::Usage(key)
            }
        }
        ("holders" | "usage", given) => {
            return Err(CliError::Usage(format!(
                "{command} needs a namespace and a subject after the URL, got {given} arguments"
            )))
        }
        ("keys" | "top", _) if group.is_some() => {
            return Err(CliError::Usage(format!(
                "--group names one key: {command} lists them all"
            )))
        }
        ("keys", 0) => Command::Keys,
        ("top", 0) => Command::Top {
            interval: Duration::from_secs_f64(interval),
            refreshes,
        },
        ("keys" | "top", _) => {
            return Err(CliError::Usage(format!(
                "{command} takes only the URL, got {rest:?} after it"
            )))
        }
        _ => return Err(CliError::Usage(format!("unknown command {command:?}"))),
    };
    Ok(Some(Args {
        command,
        url,
        prefix,
        cluster,
        limit,
    }))
}

/// The whole program: runs the process's arguments on a runtime of its own,
/// prints to stdout, and maps the result to the exit code (0; 2 for a bad
/// argument; 1 for anything else, the reason on stderr).
#[cfg(not(madsim))]
pub fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("inflight: cannot start a runtime: {error}");
            return std::process::ExitCode::from(1);
        }
    };
    let mut stdout = std::io::stdout();
    match runtime.block_on(run(std::env::args().skip(1), &mut stdout)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error @ CliError::Usage(_)) => {
            eprintln!("inflight: {error}");
            std::process::ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("inflight: {error}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Runs the command `args` (without the program name), writing what it
/// prints to `out`.
pub async fn run(args: impl IntoIterator<Item = String>, out: &mut (dyn Write + Send)) -> Result<(), CliError> {
    let Some(args) = parse(args)? else {
        writeln!(out, "{USAGE}")?;
        return Ok(());
    };
    let target = inflight_core::redact_url(&args.url);
    let mut builder = Limiter::builder(args.url)
        .key_prefix(args.prefix)
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(3));
    if args.cluster {
        builder = builder.cluster();
    }
    let limiter = builder.connect().await?;
    let result = command(&limiter, &args.command, &target, args.limit, out).await;
    limiter.drain().await;
    result
}

async fn command(
    limiter: &Limiter,
    command: &Command,
    target: &str,
    limit: usize,
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    match command {
        Command::Usage(key) => write!(out, "{}", render::usage(&limiter.usage(key).await?))?,
        Command::Holders(key) => write!(out, "{}", render::holders(&limiter.holders(key).await?, Instant::now()))?,
        Command::Keys => write!(out, "{}", render::keys(&limiter.busy_keys(limit).await?))?,
        Command::Top { interval, refreshes } => {
            let mut frame = 0;
            while refreshes.is_none_or(|most| frame < most) {
                frame += 1;
                let busy = limiter.busy_keys(limit).await?;
                let mut labels = Vec::with_capacity(busy.keys.len());
                for (key, _) in &busy.keys {
                    labels.push(render::by_label(&limiter.holders(key).await?));
                }
                // Home the cursor and clear the screen: each refresh
                // replaces the last, as `top` does.
                write!(out, "\x1b[H\x1b[2J{}", render::top_frame(target, &busy, &labels, frame))?;
                out.flush()?;
                if refreshes.is_none_or(|most| frame < most) {
                    tokio::time::sleep(*interval).await;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Option<Args>, CliError> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn the_commands_parse_with_their_options_and_refuse_what_is_off() {
        let top = args("top redis://h --limit 5 --interval 0.5 --refreshes 3 --cluster")
            .unwrap()
            .unwrap();
        assert!(matches!(top.command, Command::Top { refreshes: Some(3), .. }));
        assert_eq!((top.limit, top.cluster), (5, true));
        assert!(matches!(
            args("keys redis://h").unwrap().unwrap().command,
            Command::Keys
        ));
        assert!(args("--help").unwrap().is_none());
        assert!(args("usage redis://h -h").unwrap().is_none());
        for bad in [
            "keys",
            "keys redis://h extra",
            "usage redis://h only-namespace",
            "top redis://h --interval 0",
            "top redis://h --interval x",
            "keys redis://h --limit -1",
            "keys redis://h --frobnicate",
            "frob redis://h",
        ] {
            assert!(matches!(args(bad), Err(CliError::Usage(_))), "{bad}");
        }
        assert!(args("usage redis://h ns ''x").unwrap().is_some());
        let Command::Usage(grouped) = args("usage redis://h route /upload --group acme")
            .unwrap()
            .unwrap()
            .command
        else {
            panic!("usage parses");
        };
        assert_eq!(grouped.group(), Some("acme"));
        assert_eq!(render::key_name(&grouped), "{acme}route//upload");
        assert!(matches!(args("keys redis://h --group acme"), Err(CliError::Usage(_))));
        assert!(matches!(
            parse(["usage", "redis://h", "ns", ""].map(String::from)),
            Err(CliError::Key(_))
        ));
    }
}
