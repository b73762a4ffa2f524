#!/usr/bin/env bash
# The long simulator run: many more seeds than CI, in minutes. Run it before
# any change to recovery, waiting or release code lands, and put its last
# result in docs/simulation.md.
#
#   scripts/soak.sh                       # 10,000 turmoil seeds + 3,000 madsim seeds
#   TURMOIL_SEEDS=20000 MADSIM_SEEDS=0 scripts/soak.sh
#   FIRST_SEED=10000 scripts/soak.sh      # another range of seeds
#
# The turmoil seeds are split over the machine's cores (one simulator process
# each); madsim runs its seeds in one process. Every failing seed is printed
# with the command that replays it; the exit status is non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

turmoil_seeds="${TURMOIL_SEEDS:-10000}"
madsim_seeds="${MADSIM_SEEDS:-3000}"
first="${FIRST_SEED:-0}"
jobs="${JOBS:-$(nproc)}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
status=0
start=$(date +%s)

if [ "$turmoil_seeds" -gt 0 ]; then
  cargo build --release -q -p inflight-sim
  per=$(( (turmoil_seeds + jobs - 1) / jobs ))
  pids=()
  for ((j = 0; j < jobs; j++)); do
    from=$(( first + j * per ))
    count=$(( per ))
    if (( from + count > first + turmoil_seeds )); then count=$(( first + turmoil_seeds - from )); fi
    (( count > 0 )) || continue
    target/release/inflight-sim --first-seed "$from" --seeds "$count" >"$out/turmoil.$j" 2>&1 &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  echo "== turmoil: seeds $first..$(( first + turmoil_seeds - 1 )) ($jobs processes)"
  for ((j = 0; j < jobs; j++)); do
    [ -f "$out/turmoil.$j" ] || continue
    grep -E '^scenario|^[a-z-]+ +[0-9]+ ' "$out/turmoil.$j" | sed "s/^/  [$j] /" || true
    grep -E 'replay:' "$out/turmoil.$j" | sed 's/^ */  FAILED /' || true
    tail -n 2 "$out/turmoil.$j" | sed "s/^/  [$j] /"
  done
fi
turmoil_done=$(date +%s)

if [ "$madsim_seeds" -gt 0 ]; then
  echo "== madsim: seeds $(( first + 1 ))..$(( first + madsim_seeds ))"
  if RUSTFLAGS="--cfg madsim ${RUSTFLAGS:-}" CARGO_TARGET_DIR="${MADSIM_TARGET_DIR:-target/madsim}" \
    MADSIM_TEST_SEED=$(( first + 1 )) MADSIM_TEST_NUM="$madsim_seeds" \
    cargo test --release -q -p inflight-sim --test madsim the_fleet_keeps_every_invariant >"$out/madsim" 2>&1; then
    grep -E 'test result' "$out/madsim" | sed 's/^/  /'
  else
    status=1
    grep -E 'seed|VIOLATION|replay|test result|panicked' "$out/madsim" | head -40 | sed 's/^/  /'
  fi
fi
end=$(date +%s)
echo "== soak: turmoil $(( turmoil_done - start )) s, madsim $(( end - turmoil_done )) s, $( [ "$status" -eq 0 ] && echo clean || echo 'FAILURES above' )"
exit "$status"
