#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), on stable, two at a time.
#   scripts/fuzz.sh 600
# Needs cargo-fuzz (`cargo install cargo-fuzz`). `-s none` skips the address
# sanitizer, which needs nightly; libFuzzer's coverage guidance still works.
# New corpus entries land in fuzz/corpus/<target>/ and crashes in
# fuzz/artifacts/<target>/; both are replayed by `cargo test -p inflight-tests`.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
targets=(reply_decode client_ops key_encoding config_url cluster_replies handshake sentinel_replies)
cargo fuzz build -s none
mkdir -p logs
run() {
  cargo fuzz run -s none "$1" -- -max_total_time="$seconds" -print_final_stats=1 >"logs/$1.log" 2>&1 \
    && echo "$1: done" || echo "$1: FAILED (see fuzz/logs/$1.log and fuzz/artifacts/$1/)"
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "logs/$1.log" | sed "s/^/$1 /" || true
  echo "$1 corpus: $(ls "corpus/$1" | wc -l) files"
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  run "${targets[i]}" &
  if ((i + 1 < ${#targets[@]})); then run "${targets[i + 1]}" & fi
  wait
done
