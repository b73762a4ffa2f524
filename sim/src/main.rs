//! `inflight-sim`: run seeds of the simulated fleet and print what happened.
//!
//! ```text
//! cargo run --release -p inflight-sim -- --seeds 200          # 200 seeds across all scenarios
//! cargo run --release -p inflight-sim -- --scenario mixed --seed 17   # replay one run
//! cargo run --release -p inflight-sim -- --list
//! cargo run --release -p inflight-sim -- --seeds 200 --bug no-echo-check   # show it is caught
//! cargo run --release -p inflight-sim -- --seeds 100 --hashes > before.txt   # trace hash per seed
//! ```

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use inflight_sim::scenario::{self, Scenario};
use inflight_sim::{run_seed, Bug, Report};

struct Args {
    seeds: u64,
    first_seed: u64,
    one_seed: Option<u64>,
    scenario: Option<&'static Scenario>,
    bug: Option<Bug>,
    /// Print every seed's trace hash (to show a refactoring changed nothing).
    hashes: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: inflight-sim [--seeds N] [--first-seed N] [--seed N] [--scenario NAME] [--bug NAME] [--hashes] [--list]\n\
         bugs: {}",
        Bug::ALL.map(|b| b.name()).join(", ")
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        seeds: 200,
        first_seed: 0,
        one_seed: None,
        scenario: None,
        bug: None,
        hashes: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        let number = |v: String| v.parse::<u64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--seeds" => args.seeds = number(value()),
            "--first-seed" => args.first_seed = number(value()),
            "--seed" => args.one_seed = Some(number(value())),
            "--scenario" => {
                let scenario = scenario::find(&value()).unwrap_or_else(|| usage());
                if cfg!(madsim) && scenario.sentinel {
                    eprintln!(
                        "the {} scenario runs under turmoil only (without scripts/madsim.sh)",
                        scenario.name
                    );
                    std::process::exit(2);
                }
                args.scenario = Some(scenario);
            }
            "--bug" => args.bug = Some(Bug::parse(&value()).unwrap_or_else(|| usage())),
            "--hashes" => args.hashes = true,
            "--list" => {
                for s in scenario::all() {
                    println!("{:<12} {}", s.name, s.about);
                }
                std::process::exit(0);
            }
            _ => usage(),
        }
    }
    args
}

#[derive(Default)]
struct Row {
    seeds: u64,
    failed: u64,
    acquires: u64,
    granted: u64,
    denied: u64,
    unavailable: u64,
    fail_open: u64,
    compensations: u64,
    release_retries: u64,
    renewals: u64,
    lost: u64,
    weighted: u64,
    composites: u64,
    kept_alive: u64,
    keep_alive_lost: u64,
    handed_late: u64,
    abandoned: u64,
    replaced: u64,
    faults: u64,
    /// (peak holders, limit) per key, worst over the seeds.
    peaks: BTreeMap<&'static str, (u32, u32)>,
}

impl Row {
    fn add(&mut self, report: &Report) {
        let c = report.counters;
        self.seeds += 1;
        self.failed += u64::from(!report.violations.is_empty());
        self.acquires += c.acquires;
        self.granted += c.granted;
        self.denied += c.denied;
        self.unavailable += c.unavailable;
        self.fail_open += c.fail_open;
        self.compensations += c.compensations;
        self.release_retries += c.release_retries;
        self.renewals += c.renewals;
        self.lost += c.leases_lost;
        self.weighted += c.weighted;
        self.composites += c.composites_granted;
        self.kept_alive += c.kept_alive;
        self.keep_alive_lost += c.keep_alive_lost;
        self.handed_late += c.handed_late;
        self.abandoned += c.releases_abandoned;
        self.replaced += c.connections_replaced;
        self.faults += c.faults;
        for &(key, peak, limit) in &report.peaks {
            let entry = self.peaks.entry(key).or_insert((0, limit));
            entry.0 = entry.0.max(peak);
        }
    }
}

fn main() -> ExitCode {
    // `INFLIGHT_SIM_LOG=debug` (a level) shows the limiters' own logs.
    if let Some(level) = std::env::var("INFLIGHT_SIM_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
    {
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    let args = parse();
    let runs: Vec<(&'static Scenario, u64)> = match (args.one_seed, args.scenario) {
        (Some(seed), Some(scenario)) => vec![(scenario, seed)],
        (Some(seed), None) => vec![(scenario::for_seed(seed), seed)],
        (None, Some(scenario)) => (0..args.seeds).map(|i| (scenario, args.first_seed + i)).collect(),
        (None, None) => (0..args.seeds)
            .map(|i| (scenario::for_seed(args.first_seed + i), args.first_seed + i))
            .collect(),
    };
    let started = Instant::now();
    let mut rows: BTreeMap<usize, Row> = BTreeMap::new();
    let mut failures: Vec<Report> = Vec::new();
    let total = runs.len();
    for (done, (scenario, seed)) in runs.into_iter().enumerate() {
        let report = run_seed(scenario, seed, args.bug);
        if total == 1 || args.hashes {
            println!("{} seed {}: trace hash {:016x}", scenario.name, seed, report.trace_hash);
        }
        let position = scenario::all().position(|s| s.name == scenario.name).expect("listed");
        rows.entry(position).or_default().add(&report);
        if !report.violations.is_empty() {
            if args.bug.is_none() {
                eprintln!("\n{}", report.describe_failure());
            }
            failures.push(report);
        }
        eprint!(
            "\r{} / {total} seeds, {} with violations, {:.1}s   ",
            done + 1,
            failures.len(),
            started.elapsed().as_secs_f64()
        );
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    print_table(&rows);
    println!("{} seeds in {:.1}s", total, started.elapsed().as_secs_f64());

    match args.bug {
        None if failures.is_empty() => {
            println!("no violations");
            ExitCode::SUCCESS
        }
        None => {
            println!(
                "{} seeds violated an invariant; replay each with the command printed above",
                failures.len()
            );
            ExitCode::FAILURE
        }
        Some(bug) => match failures.first() {
            Some(first) => {
                println!(
                    "injected bug {} caught: {} of {total} seeds violated an invariant; first: seed {} ({}), {}",
                    bug.name(),
                    failures.len(),
                    first.seed,
                    first.scenario,
                    first.violations[0].invariant
                );
                println!("replay: {}", first.replay_command());
                ExitCode::SUCCESS
            }
            None => {
                println!(
                    "injected bug {} was NOT caught in {total} seeds: the simulator lacks teeth here",
                    bug.name()
                );
                ExitCode::FAILURE
            }
        },
    }
}

fn print_table(rows: &BTreeMap<usize, Row>) {
    println!(
        "{:<11} {:>5} {:>8} {:>7} {:>6} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>5} {:>5} {:>5} {:>5} {:>6} {:>6} {:>6}  {:<26} {:>5}",
        "scenario",
        "seeds",
        "acquires",
        "grants",
        "weighd",
        "multi",
        "denied",
        "unavail",
        "f-open",
        "compen",
        "retries",
        "renew",
        "lost",
        "kept",
        "klost",
        "late",
        "abandn",
        "replcd",
        "faults",
        "peak/limit per key",
        "viol"
    );
    for (position, row) in rows {
        let peaks: Vec<String> = row.peaks.iter().map(|(k, (p, l))| format!("{k} {p}/{l}")).collect();
        println!(
            "{:<11} {:>5} {:>8} {:>7} {:>6} {:>5} {:>7} {:>7} {:>6} {:>6} {:>7} {:>6} {:>5} {:>5} {:>5} {:>5} {:>6} {:>6} {:>6}  {:<26} {:>5}",
            scenario::all().nth(*position).expect("listed").name,
            row.seeds,
            row.acquires,
            row.granted,
            row.weighted,
            row.composites,
            row.denied,
            row.unavailable,
            row.fail_open,
            row.compensations,
            row.release_retries,
            row.renewals,
            row.lost,
            row.kept_alive,
            row.keep_alive_lost,
            row.handed_late,
            row.abandoned,
            row.replaced,
            row.faults,
            peaks.join(", "),
            row.failed
        );
    }
}
