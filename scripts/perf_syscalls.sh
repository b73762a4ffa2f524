#!/usr/bin/env bash
# System calls and context switches per cycle (acquire + awaited release) of
# one row and setup of the perf bench, counted by `perf stat` tracepoints:
# a figure that does not drift with the machine's noise as times do.
#
#   scripts/perf_syscalls.sh inflight 64k        # 64 tasks on 64 keys
#   scripts/perf_syscalls.sh raw-pipelined 1     # one task
#
# Rows: inflight, inflight,-Nagle, raw-pipelined, seed-design. Setups: 1, 64,
# 512 (one key), 64k. Needs `perf` (linux-perf) and root or a permissive
# perf_event_paranoid. Runs the bench 8 s per repetition, counts for 4 s.
set -euo pipefail
cd "$(dirname "$0")/.."
row="${1:?row}"
tasks="${2:?tasks}"
cargo build --release -q -p inflight-tests --bin perf
out="$(mktemp)"
PERF_ONLY="$row" PERF_TASKS="$tasks" ./target/release/perf 8 >"$out" 2>&1 &
bench=$!
sleep 3
pid=$bench
counts="$(perf stat -x, -p "$pid" \
  -e syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_write \
  -e syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_futex \
  -e context-switches -- sleep 4 2>&1 >/dev/null)"
wait "$bench" || true
[ -n "${DEBUG:-}" ] && printf "%s\n" "$counts"
rate="$(grep -E '^\| [0-9]+( \(64 keys\))? \|' "$out" | grep -v NaN | head -1 | awk -F'|' '{print $4}' | awk '{print $1}')"
rm -f "$out"
echo "$row, $tasks: $rate cycles/s (median of the bench's repetitions)"
printf "%s\n" "$counts" | awk -F, -v rate="$rate" '$1 ~ /^[0-9]+$/ { printf "  %-34s %.3f per cycle\n", $3, $1 / 4 / rate }'
