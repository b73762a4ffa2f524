//! `cargo run --release -p inflight-tests --bin bench` — the full benchmark,
//! printed as a table and written to docs/performance.md.
//! `--smoke` runs every measurement briefly and writes nothing.

use inflight_tests::alloc_counter::CountingAlloc;
use inflight_tests::bench::{self, Budget};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let budget = if smoke { Budget::smoke() } else { Budget::full() };
    let started = std::time::Instant::now();
    let results = bench::run(budget).await;
    let table = results.table();
    println!("{table}");
    println!("measured in {:.1}s", started.elapsed().as_secs_f64());
    if !smoke {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/performance.md");
        let document = std::fs::read_to_string(path).unwrap_or_default();
        std::fs::write(path, bench::splice(&document, &bench::report(&table))).expect("write docs/performance.md");
        println!("written to docs/performance.md");
    }
}
