#!/usr/bin/env bash
# The madsim harness: the simulator rebuilt with `--cfg madsim`, so that
# madsim's deterministic runtime stands in for tokio under the real driver.
# It needs its own target directory (every dependency is rebuilt with the cfg).
#
#   scripts/madsim.sh                      # the madsim test suite (tests/madsim.rs)
#   scripts/madsim.sh --seeds 500          # the simulator CLI, 500 seeds, madsim harness
#   MADSIM_TEST_SEED=17 scripts/madsim.sh --scenario mixed --seed 17   # replay one run
#   MADSIM_TEST_NUM=20 MADSIM_TEST_CHECK_DETERMINISM=1 scripts/madsim.sh   # determinism
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg madsim ${RUSTFLAGS:-}"
export CARGO_TARGET_DIR="${MADSIM_TARGET_DIR:-target/madsim}"
if [ "$#" -eq 0 ]; then
  # 200 seeds from a fixed start (override with MADSIM_TEST_SEED / _NUM), then
  # a determinism check: five seeds, each run twice and compared by madsim.
  MADSIM_TEST_SEED="${MADSIM_TEST_SEED:-1}" MADSIM_TEST_NUM="${MADSIM_TEST_NUM:-200}" \
    cargo test --release -p inflight-sim --test madsim
  MADSIM_TEST_SEED="${MADSIM_TEST_SEED:-1}" MADSIM_TEST_NUM=5 MADSIM_TEST_CHECK_DETERMINISM=1 \
    cargo test --release -p inflight-sim --test madsim the_fleet_keeps_every_invariant
else
  exec cargo run --release -p inflight-sim -- "$@"
fi
