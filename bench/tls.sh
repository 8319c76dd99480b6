#!/usr/bin/env bash
# What TLS costs a send: plaintext and TLS clients (`tidemark bench produce` with and without
# --tls) against one `tidemark dev` in permissive mode, which serves both on the same port, with
# the same body size and senders (1 and 8), in one run.
#
#   bench/tls.sh              # release build; BENCH_SECONDS (default 10) per measurement
#
# One server throughout, so the two kinds of client meet the same server; measured in the
# order plain, TLS, TLS, plain to cancel drift. Prints one JSON line per measurement, then a
# table of mean msgs/s, the TLS/plaintext ratio and the server's CPU time per message (from
# /proc: steadier than throughput on a shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}   # ROUNDS (default 2): pairs of measurements

cargo build --release --locked -p tidemark >&2
work=$(mktemp -d)
out="$work/results"
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
ns=$((20000 + RANDOM % 10000))
target/release/tidemark dev --data-dir "$work/data" --namesrv-port "$ns" --broker-port $((ns + 100)) \
  --grpc-port 0 --http-port 0 --tls-mode permissive >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  grep -q "tidemark dev ready" "$work/server.log" && break
  sleep 0.5
done
grep -q "tidemark dev ready" "$work/server.log" || { tail -20 "$work/server.log" >&2; exit 1; }
cpu_ticks() { # the server's user + system CPU so far, in clock ticks
  awk '{print $14 + $15}' "/proc/$pid/stat"
}
bench() { # senders duration extra...
  local senders=$1 duration=$2
  shift 2
  target/release/tidemark bench produce -n "127.0.0.1:$ns" -t BenchTls --json --producers "$senders" \
    --duration "$duration" --warmup 0 "$@" 2>/dev/null
}
bench 8 3 >/dev/null # warm-up: creates the topic, settles the server
# ROUNDS pairs, alternating which kind goes first (default 2: plain tls tls plain).
order=()
for round in $(seq 1 "${ROUNDS:-2}"); do
  if [ $((round % 2)) -eq 1 ]; then order+=(plain tls); else order+=(tls plain); fi
done
for kind in "${order[@]}"; do
  dial=()
  [ "$kind" = tls ] && dial=(--tls)
  for senders in 1 8; do
    before=$(cpu_ticks)
    line=$(bench "$senders" "$seconds" "${dial[@]}")
    after=$(cpu_ticks)
    echo "$line"
    echo "$senders $kind $((after - before)) $line" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    senders, kind, ticks, text = line.split(" ", 3)
    run = json.loads(text)
    # server CPU per message, microseconds (clock ticks are 1/100 s)
    run["cpuUs"] = int(ticks) * 10_000 / run["messages"] if run["messages"] else 0
    rows.setdefault((senders, kind), []).append(run)
def mean(runs, key):
    return sum(run[key] for run in runs) / len(runs)
print("\n| senders | plaintext msg/s | TLS msg/s | ratio | plaintext p99 ms | TLS p99 ms | plaintext server CPU µs/msg | TLS server CPU µs/msg |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for senders in ("1", "8"):
    p, t = rows[(senders, "plain")], rows[(senders, "tls")]
    ratio = mean(t, "msgsPerSec") / mean(p, "msgsPerSec") if mean(p, "msgsPerSec") else 0
    print(f"| {senders} | {mean(p, 'msgsPerSec'):,.0f} | {mean(t, 'msgsPerSec'):,.0f} | {ratio:.2f} | {mean(p, 'p99Ms'):.2f} | {mean(t, 'p99Ms'):.2f} | {mean(p, 'cpuUs'):.1f} | {mean(t, 'cpuUs'):.1f} |")
PY
