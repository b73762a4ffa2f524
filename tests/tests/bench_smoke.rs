//! The benchmark harness runs end to end and produces its table. A smoke test:
//! no timing is asserted here (timings belong to `--bin bench`).

use inflight_tests::alloc_counter::CountingAlloc;
use inflight_tests::bench::{self, Budget};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmark_runs_and_produces_its_table() {
    let results = bench::run(Budget::smoke()).await;
    let table = results.table();
    println!("{table}");
    for row in [
        "limit: raw pipelined",
        "inflight: 64 tasks, 1 limiter(s)",
        "baseline: 64 tasks",
        "live leases",
    ] {
        assert!(table.contains(row), "missing {row:?} in\n{table}");
    }
    assert!(
        results
            .rows
            .iter()
            .all(|r| r.cycles_per_sec.is_finite() && r.cycles_per_sec > 0.0),
        "{table}"
    );
    assert!(
        results.latency.is_some() && results.bytes_per_permit.is_some_and(|b| b > 0.0),
        "{table}"
    );
    assert_eq!(results.ratios.len(), 5);
}

#[test]
fn the_composite_bench_runs_and_fills_its_tables() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_composite_bench"))
        .arg("0.2")
        .output()
        .expect("run composite_bench");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for row in [
        "| 1 | acquire_all of 3 keys |",
        "| 64 | 3 acquires in turn |",
        "cycles/s composite ÷ singles",
    ] {
        assert!(text.contains(row), "missing {row:?} in\n{text}");
    }
}
