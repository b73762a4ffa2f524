//! The stateful script test, long: random programs over the real scripts on
//! a real redis-server (which it starts) and on the model.
//!
//! ```text
//! cargo run --release -p inflight-tests --bin stateful                       # 10,000 programs
//! cargo run --release -p inflight-tests --bin stateful -- --programs 500 --seed 7
//! cargo run --release -p inflight-tests --bin stateful -- --bug hand-over-to-holder   # must fail
//! cargo run --release -p inflight-tests --bin stateful -- --bugs             # every bug, each must fail
//! ```
//!
//! A failure prints the invariant, the smallest failing program and the
//! command that draws the same programs again; the exit status is 1.

use std::process::ExitCode;
use std::time::Instant;

use inflight_tests::mutations::{self, MUTATIONS};
use inflight_tests::stateful::{run_programs, Options};
use inflight_tests::RedisServer;

struct Args {
    programs: u32,
    steps: usize,
    threads: u32,
    seed: u64,
    bug: Option<&'static mutations::Mutation>,
    every_bug: bool,
}

fn usage() -> ! {
    let names: Vec<&str> = MUTATIONS.iter().map(|m| m.name).collect();
    eprintln!(
        "usage: stateful [--programs N] [--steps N] [--threads N] [--seed N] [--bug NAME | --bugs]\nbugs: {}",
        names.join(", ")
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        programs: 10_000,
        steps: 40,
        threads: 32,
        seed: 1,
        bug: None,
        every_bug: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        let number = |v: String| v.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--programs" => args.programs = number(value()) as u32,
            "--steps" => args.steps = number(value()) as usize,
            "--threads" => args.threads = number(value()).max(1) as u32,
            "--seed" => args.seed = number(value()),
            "--bug" => args.bug = Some(mutations::find(&value()).unwrap_or_else(|| usage())),
            "--bugs" => args.every_bug = true,
            "--help" | "-h" => usage(),
            _ => usage(),
        }
    }
    args
}

fn main() -> ExitCode {
    let args = parse();
    let server = RedisServer::start();
    if args.every_bug {
        let mut missed = Vec::new();
        for mutation in MUTATIONS {
            let started = Instant::now();
            let options = Options {
                scripts: mutation.scripts(),
                check_model: false,
            };
            match run_programs(
                server.addr(),
                args.programs,
                args.steps,
                args.threads,
                args.seed,
                &options,
            ) {
                Err(failure) => {
                    let first = failure.lines().next().unwrap_or_default();
                    println!(
                        "{:<22} caught in {:.1}s: {first}",
                        mutation.name,
                        started.elapsed().as_secs_f64()
                    );
                }
                Ok(summary) => {
                    println!(
                        "{:<22} NOT CAUGHT in {} programs: {summary:?}",
                        mutation.name, args.programs
                    );
                    missed.push(mutation.name);
                }
            }
        }
        return if missed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let options = match args.bug {
        Some(mutation) => Options {
            scripts: mutation.scripts(),
            check_model: false,
        },
        None => Options::default(),
    };
    let started = Instant::now();
    let outcome = run_programs(
        server.addr(),
        args.programs,
        args.steps,
        args.threads,
        args.seed,
        &options,
    );
    let elapsed = started.elapsed().as_secs_f64();
    let replay = format!(
        "cargo run --release -p inflight-tests --bin stateful -- --programs {} --steps {} --threads {} --seed {}{}",
        args.programs,
        args.steps,
        args.threads,
        args.seed,
        args.bug.map(|m| format!(" --bug {}", m.name)).unwrap_or_default()
    );
    match outcome {
        Ok(summary) => {
            println!(
                "{} programs ({} steps at most, seed {}) in {elapsed:.0} s: every invariant held{}",
                args.programs,
                args.steps,
                args.seed,
                if options.check_model {
                    ", the model answered as Redis did"
                } else {
                    ""
                }
            );
            println!(
                "{} steps, {} script calls, {} grants, {} hand-overs ({} releases found a queue; {} heard late and checked again; {} waiters queued again under a new id), {} failovers, {} flushes, {} requests held back ({} delivered late), {} all-or-nothing calls, {:.0} s of sleeps, {} programs cut short as inconclusive (a write-back not landed within the recovery window: the machine too slow)",
                summary.steps,
                summary.script_calls,
                summary.grants,
                summary.hand_overs,
                summary.queue_found,
                summary.late_hand_overs,
                summary.renamed_waiters,
                summary.failovers,
                summary.flushes,
                summary.held_back,
                summary.delivered_late,
                summary.all_or_nothing,
                summary.slept_ms as f64 / 1000.0,
                summary.inconclusive
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            println!("FAILED after {elapsed:.0} s: {failure}\nreplay: {replay}");
            ExitCode::FAILURE
        }
    }
}
