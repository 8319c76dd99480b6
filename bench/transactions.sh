#!/usr/bin/env bash
# Transactional sends next to plain sends, in one run against one server: each transactional
# send is a half message, a local transaction that commits, and END_TRANSACTION (oneway); the
# plain sends use the same client, body size and number of senders.
#
#   bench/transactions.sh            # against `tidemark dev` (release build)
#   bench/transactions.sh --apache   # against Apache RocketMQ 4.9.7 (compat/java's stand-in;
#                                    # build it once: mvn -f compat/java process-test-classes -Pcompat-suite)
#
# Prints one JSON line per run, then a table of msgs/s and the transactional/plain ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
server=(target/release/tidemark)
label=tidemark
if [ "${1:-}" = "--apache" ]; then
  server=(compat/java/scripts/apache-dev)
  label=apache-4.9.7
fi
seconds=${BENCH_SECONDS:-10}

cargo build --release --locked -p tidemark >&2
data=$(mktemp -d)
log=$(mktemp)
out=$(mktemp)
ns=$((20000 + RANDOM % 10000))
broker=$((ns + 100))
"${server[@]}" dev --data-dir "$data" --namesrv-port "$ns" --broker-port "$broker" --grpc-port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data" "$log" "$out"' EXIT
for _ in $(seq 1 120); do
  grep -q "tidemark dev ready" "$log" && break
  sleep 0.5
done
grep -q "tidemark dev ready" "$log" || { echo "server did not start:" >&2; tail -20 "$log" >&2; exit 1; }
bench=(target/release/tidemark bench produce -n "127.0.0.1:$ns" -t BenchTx --json)
# Warm-up: creates the topic and lets both servers settle.
"${bench[@]}" --duration 3 --producers 8 >/dev/null 2>&1
echo "{\"server\":\"$label\"}"
for senders in 1 8; do
  for kind in plain transactional; do
    flag=()
    [ "$kind" = transactional ] && flag=(--transactional)
    line=$("${bench[@]}" --duration "$seconds" --producers "$senders" "${flag[@]}" 2>/dev/null)
    echo "$line"
    echo "$senders $kind $line" >>"$out"
  done
done
python3 - "$out" "$label" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    senders, kind, text = line.split(" ", 2)
    rows[(senders, kind)] = json.loads(text)
print(f"\n| server | senders | plain msg/s | transactional msg/s | ratio | plain p99 ms | transactional p99 ms |")
print("|---|---:|---:|---:|---:|---:|---:|")
for senders in ("1", "8"):
    plain, tx = rows[(senders, "plain")], rows[(senders, "transactional")]
    ratio = tx["msgsPerSec"] / plain["msgsPerSec"] if plain["msgsPerSec"] else 0
    print(f"| {sys.argv[2]} | {senders} | {plain['msgsPerSec']:,.0f} | {tx['msgsPerSec']:,.0f} | {ratio:.2f} | {plain['p99Ms']:.2f} | {tx['p99Ms']:.2f} |")
PY
