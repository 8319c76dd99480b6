#!/usr/bin/env bash
# POP next to pull consumption, in one run against one server: a backlog is produced, then one
# pull consumer, one POP consumer and eight POP consumers (separate groups) each read it for the
# same time. POP consumers acknowledge every message; their latency is the ack's round trip.
#
#   bench/pop.sh             # against `tidemark dev` (release build)
#   bench/pop.sh --apache    # against Apache RocketMQ 5.3.3 (compat/java5's stand-in;
#                                 # build it once: mvn -f compat/java5 process-test-classes -Pcompat-suite)
#
# Prints one JSON line per run (msgsPerSec, p50Ms/p99Ms of the ack or born-to-consume latency).
set -euo pipefail
cd "$(dirname "$0")/.."
server=(target/release/tidemark)
label=tidemark
if [ "${1:-}" = "--apache" ]; then
  server=(compat/java5/scripts/apache-dev)
  label=apache-5.3.3
fi
seconds=${BENCH_SECONDS:-10}
# The backlog must outlast every reader (each group reads it from the start).

cargo build --release --locked -p tidemark >&2
data=$(mktemp -d)
log=$(mktemp)
ns=$((20000 + RANDOM % 10000))
broker=$((ns + 100))
"${server[@]}" dev --data-dir "$data" --namesrv-port "$ns" --broker-port "$broker" --grpc-port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data" "$log"' EXIT
for _ in $(seq 1 120); do
  grep -q "tidemark dev ready" "$log" && break
  sleep 0.5
done
grep -q "tidemark dev ready" "$log" || { echo "server did not start:" >&2; tail -20 "$log" >&2; exit 1; }
bench=(target/release/tidemark bench)
common=(-n "127.0.0.1:$ns" -t BenchPop --json)
echo "{\"server\":\"$label\"}"
"${bench[@]}" produce "${common[@]}" --duration "${BENCH_PRODUCE_SECONDS:-$((seconds * 3))}" --producers 8 2>/dev/null
"${bench[@]}" consume "${common[@]}" --duration "$seconds" -g bench_pull 2>/dev/null
"${bench[@]}" consume "${common[@]}" --duration "$seconds" -g bench_pop1 --pop 2>/dev/null
"${bench[@]}" consume "${common[@]}" --duration "$seconds" -g bench_pop8 --pop --consumers 8 2>/dev/null
