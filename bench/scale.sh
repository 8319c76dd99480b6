#!/usr/bin/env bash
# Scale curves of `tidemark dev` (release build): sync sends with 8 senders (the `tidemark bench
# produce` default) while one thing grows — topics the sends are spread over (1, 100, 10,000),
# idle connections held open to the broker (10, 1,000, 9,000; the broker takes 10,000 by
# default) and the body size (128 B to 1 MiB). Each point runs on a fresh server; the table
# gives msgs/s, MB/s, p50/p99 over the measured part, the server's CPU per message over (about)
# the same part, and its RSS at the end. The 10,000-topic point warms up for 20 s: its first
# seconds are the client looking up 10,000 routes and the broker making 80,000 consume queues.
#
#   bench/scale.sh                      # 10 s per point
#   DURATION=20 bench/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# 10,000 idle connections need as many descriptors in the bench and in the server.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
duration="${DURATION:-10}"
cargo build --release --locked -p tidemark >&2
tidemark="$PWD/target/release/tidemark"
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# point LABEL WARMUP BENCH_ARGS...: a fresh server, one bench run, one table row.
point() {
  local label=$1 warmup=$2
  shift 2
  local ns=$((20000 + RANDOM % 10000))
  local broker=$((ns + 100))
  rm -rf "$work/data"
  "$tidemark" dev --data-dir "$work/data" --namesrv-port "$ns" --broker-port "$broker" \
    --grpc-port 0 --http-port 0 --max-connections 20000 >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    grep -q "tidemark dev ready" "$work/log" && break
    sleep 0.2
  done
  local rss before after started ended
  "$tidemark" bench produce -n "127.0.0.1:$ns" --duration "$duration" --warmup "$warmup" --json "$@" \
    2>/dev/null | tail -1 >"$work/run.json" &
  local bench=$!
  # The server's CPU is read from one second after the warm-up (set-up included) to the end.
  sleep $((warmup + 1))
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  started=$(date +%s.%N)
  wait "$bench"
  ended=$(date +%s.%N)
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
  python3 - "$label" "$(cat "$work/run.json")" "$rss" "$before" "$after" "$started" "$ended" "$(getconf CLK_TCK)" <<'PY'
import json, sys
label, line, rss_kb, before, after, started, ended, tick = sys.argv[1:]
run = json.loads(line)
# CPU seconds in the window over the messages the run's rate puts in it.
window = max(float(ended) - float(started), 0.001)
cpu_us = (int(after) - int(before)) * 1e6 / int(tick) / max(run["msgsPerSec"] * window, 1)
print(f"| {label} | {run['msgsPerSec']:,.0f} | {run['mbPerSec']:,.1f} | {run['p50Us'] / 1000:.2f} | "
      f"{run['p99Us'] / 1000:.2f} | {int(rss_kb) / 1024:.0f} | {cpu_us:.1f} |")
PY
}

echo "| point | msgs/s | MB/s | p50 ms | p99 ms | server RSS MiB | server CPU µs/msg |"
echo "|---|---:|---:|---:|---:|---:|---:|"
point "topics 1, 8 queues" 3 -t ScaleTopic
point "topics 100" 3 -t ScaleTopic --topics 100
point "topics 10000" 20 -t ScaleTopic --topics 10000
for queues in 64 1024; do
  point "queues $queues" 3 -t "ScaleQueues$queues" --queues "$queues"
done
for idle in 10 1000 10000; do
  point "idle connections $idle" 5 -t ScaleIdle --idle-connections "$idle"
done
for size in 128 1024 16384 262144 1048576; do
  point "body $size B" 3 -t ScaleSize --size "$size"
done
