#!/usr/bin/env bash
# Side-by-side throughput of Tidemark and Apache RocketMQ 4.9.7 on this machine, with the same
# client (`tidemark bench produce`, release build), the same message sizes and duration, async
# flush on both. Apache runs as compat/java's stand-in (name server + broker in one JVM, the same
# command line as `tidemark dev`), so its RSS includes its name server; so does Tidemark's.
#
#   bench/compare.sh                 # 20 s per run, 8 concurrent senders
#   DURATION=5 PRODUCERS=4 bench/compare.sh
#   SERIALIZE=rocketmq bench/compare.sh   # binary request headers instead of JSON
#
# Prints a Markdown table: msgs/s, p99 latency, idle RSS for each server, and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
duration="${DURATION:-20}"
producers="${PRODUCERS:-8}"
serialize="${SERIALIZE:-json}"
sizes=(128 1024)

cargo build --release --locked -p tidemark
mvn --batch-mode --no-transfer-progress -q -f compat/java process-test-classes -Pcompat-suite
tidemark="$root/target/release/tidemark"
apache="$root/compat/java/scripts/apache-dev"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# run <name> <binary>: starts the server, measures idle RSS, runs the produce benchmarks.
run() {
  local name="$1" bin="$2"
  local namesrv_port broker_port
  namesrv_port="$(free_port)"; broker_port="$(free_port)"
  local log="$work/$name.log"
  "$bin" dev --data-dir "$work/$name-data" --namesrv-port "$namesrv_port" --broker-port "$broker_port" --grpc-port 0 >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    grep -q "tidemark dev ready" "$log" && break
    sleep 0.1
  done
  grep -q "tidemark dev ready" "$log" || { echo "$name did not start:"; tail -20 "$log"; exit 1; }
  sleep 5
  echo "$name idle_rss_kib $(rss_kib "$server_pid")" >>"$work/results"
  for size in "${sizes[@]}"; do
    local topic="Bench_${name}_${size}"
    # A short warm-up creates the topic and fills connection pools.
    "$tidemark" bench produce -n "127.0.0.1:$namesrv_port" -t "$topic" --duration 5 --producers "$producers" --size "$size" --serialize "$serialize" --json >/dev/null 2>&1
    "$tidemark" bench produce -n "127.0.0.1:$namesrv_port" -t "$topic" --duration "$duration" --producers "$producers" --size "$size" --serialize "$serialize" --json 2>/dev/null \
      | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sys.argv[1], sys.argv[2], r["msgsPerSec"], r["p99Ms"], r["errors"])' "$name" "$size" >>"$work/results"
    echo "$name $size peak_rss_kib $(rss_kib "$server_pid")" >>"$work/results"
  done
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
}

: >"$work/results"
run tidemark "$tidemark"
run apache "$apache"

python3 - "$work/results" "$duration" "$producers" "$serialize" <<'PY'
import sys
rows = [line.split() for line in open(sys.argv[1])]
idle = {r[0]: int(r[2]) for r in rows if r[1] == "idle_rss_kib"}
peak = {(r[0], r[1]): int(r[3]) for r in rows if len(r) == 4 and r[2] == "peak_rss_kib"}
perf = {(r[0], r[1]): (float(r[2]), float(r[3]), int(r[4])) for r in rows if len(r) == 5}
print(f"Same client (tidemark bench produce, {sys.argv[3]} sync senders, {sys.argv[4]} headers), {sys.argv[2]} s per run, async flush.\n")
print("| size | Tidemark msgs/s | Apache msgs/s | ratio | Tidemark p99 ms | Apache p99 ms | Tidemark RSS MiB | Apache RSS MiB | errors T/A |")
print("|---|---|---|---|---|---|---|---|---|")
for size in ("128", "1024"):
    t, a = perf[("tidemark", size)], perf[("apache", size)]
    print(f"| {size} B | {t[0]:.0f} | {a[0]:.0f} | {t[0]/a[0]:.2f}x | {t[1]:.2f} | {a[1]:.2f} | "
          f"{peak[('tidemark', size)]/1024:.0f} | {peak[('apache', size)]/1024:.0f} | {t[2]}/{a[2]} |")
print(f"\nIdle RSS (name server + broker, 5 s after start): Tidemark {idle['tidemark']/1024:.1f} MiB, "
      f"Apache {idle['apache']/1024:.1f} MiB ({idle['apache']/idle['tidemark']:.1f}x).")
PY
