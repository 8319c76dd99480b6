#!/usr/bin/env bash
# What TLS costs a send: plaintext and TLS clients (`tidemark bench produce` with and without
# --tls) against one `tidemark dev` in permissive mode, which serves both on the same port, with
# the same body size and senders (1 and 8), in one run.
#
#   bench/tls.sh              # release build; BENCH_SECONDS (default 10) per measurement
#
# One server throughout, so the two kinds of client meet the same server; measured in the
# order plain, TLS, TLS, plain to cancel drift. Prints one JSON line per measurement, then a
# table of mean msgs/s and the TLS/plaintext ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}

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
bench() { # senders duration extra...
  local senders=$1 duration=$2
  shift 2
  target/release/tidemark bench produce -n "127.0.0.1:$ns" -t BenchTls --json --producers "$senders" \
    --duration "$duration" "$@" 2>/dev/null
}
bench 8 3 >/dev/null # warm-up: creates the topic, settles the server
for kind in plain tls tls plain; do
  dial=()
  [ "$kind" = tls ] && dial=(--tls)
  for senders in 1 8; do
    line=$(bench "$senders" "$seconds" "${dial[@]}")
    echo "$line"
    echo "$senders $kind $line" >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    senders, kind, text = line.split(" ", 2)
    rows.setdefault((senders, kind), []).append(json.loads(text))
def mean(runs, key):
    return sum(run[key] for run in runs) / len(runs)
print("\n| senders | plaintext msg/s | TLS msg/s | ratio | plaintext p99 ms | TLS p99 ms |")
print("|---:|---:|---:|---:|---:|---:|")
for senders in ("1", "8"):
    p, t = rows[(senders, "plain")], rows[(senders, "tls")]
    ratio = mean(t, "msgsPerSec") / mean(p, "msgsPerSec") if mean(p, "msgsPerSec") else 0
    print(f"| {senders} | {mean(p, 'msgsPerSec'):,.0f} | {mean(t, 'msgsPerSec'):,.0f} | {ratio:.2f} | {mean(p, 'p99Ms'):.2f} | {mean(t, 'p99Ms'):.2f} |")
PY
