//! The stateful test of the script layer: random programs over the real
//! scripts on a real redis-server, run command for command on the model,
//! by clients that act as the library's client does (each with its own view
//! of what it holds and until when), with faults (a failover to a lagging
//! copy, a flush, requests held back and delivered late) and time passing.
//! After every step: from the holders' view no grant over-runs its limit;
//! every holder's lease is in Redis at least as long as its holder counts
//! on it; no lease outlives what its requests asked for, and none comes back
//! once given back; fencing tokens strictly increase; every key expires.
//!
//! `run_programs` runs many programs on threads (each its own keys); a
//! failure is shrunk by proptest to a smallest failing program. With
//! `ST_TRACE=1` a program prints the subject's data before and after each
//! step (and the messages published).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::RespClient;

pub mod program;
mod world;

pub use program::{ClientSetup, Program, Step};
pub use world::{Options, Summary};

static PROGRAM: AtomicU64 = AtomicU64::new(0);

/// Runs one program against the server at `addr`, with keys of its own.
pub fn run(addr: SocketAddr, program: &Program, options: &Options) -> Result<Summary, String> {
    let redis = RespClient::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let subscriber = RespClient::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let prefix = format!("st{}", PROGRAM.fetch_add(1, Ordering::Relaxed));
    world::run(redis, subscriber, &prefix, program, options)
}

/// `programs` random programs of up to `steps` steps, on `threads` threads,
/// each thread's programs drawn from `seed` and its index (the same seed
/// gives the same programs). Stops at the first failure, shrunk: its text
/// and the smallest program that fails.
pub fn run_programs(
    addr: SocketAddr,
    programs: u32,
    steps: usize,
    threads: u32,
    seed: u64,
    options: &Options,
) -> Result<Summary, String> {
    let total = Mutex::new(Summary::default());
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (total, failure, options) = (&total, &failure, options);
            let cases = programs / threads + u32::from(thread < programs % threads);
            scope.spawn(move || {
                let config = Config {
                    cases,
                    failure_persistence: None,
                    max_shrink_iters: 2_000,
                    ..Config::default()
                };
                let mut bytes = [0u8; 32];
                bytes[..8].copy_from_slice(&seed.to_le_bytes());
                bytes[8..12].copy_from_slice(&thread.to_le_bytes());
                let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
                let mut runner = TestRunner::new_with_rng(config, rng);
                let outcome = runner.run(&program::program(steps), |program| {
                    if failure.lock().unwrap().is_some() {
                        return Ok(()); // another thread failed: stop drawing
                    }
                    let summary = run(addr, &program, options).map_err(TestCaseError::fail)?;
                    *total.lock().unwrap() += summary;
                    Ok(())
                });
                if let Err(error) = outcome {
                    let text = match error {
                        TestError::Fail(reason, program) => {
                            format!("{reason}\nsmallest failing program (thread {thread}, seed {seed}):\n{program:#?}")
                        }
                        TestError::Abort(reason) => format!("aborted: {reason}"),
                    };
                    failure.lock().unwrap().get_or_insert(text);
                }
            });
        }
    });
    match failure.into_inner().unwrap() {
        Some(text) => Err(text),
        None => Ok(total.into_inner().unwrap()),
    }
}
