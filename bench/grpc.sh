#!/usr/bin/env bash
# gRPC next to remoting, in one run against one `tidemark dev` (release build): sends with 1 and
# 8 senders over each protocol (separate topics), then receive+ack of each backlog — POP over
# remoting and ReceiveMessage/AckMessage over gRPC — with 1 and 8 consumers.
#
#   bench/grpc.sh          # BENCH_SECONDS=10 by default
#
# Prints one JSON line per run (msgsPerSec; p50Ms/p99Ms of the send or of the ack).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}
cargo build --release --locked -p tidemark >&2
data=$(mktemp -d)
log=$(mktemp)
ns=$((20000 + RANDOM % 10000))
broker=$((ns + 100))
grpc=$((ns + 200))
target/release/tidemark dev --data-dir "$data" --namesrv-port "$ns" --broker-port "$broker" --grpc-port "$grpc" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$data" "$log"' EXIT
for _ in $(seq 1 120); do
  grep -q "tidemark dev ready" "$log" && break
  sleep 0.5
done
grep -q "tidemark dev ready" "$log" || { echo "server did not start:" >&2; tail -20 "$log" >&2; exit 1; }
bench=(target/release/tidemark bench)
for senders in 1 8; do
  "${bench[@]}" produce -n "127.0.0.1:$ns" -t BenchRemoting --json --duration "$seconds" --producers "$senders" 2>/dev/null
  "${bench[@]}" produce -n "127.0.0.1:$ns" -t BenchGrpc --json --duration "$seconds" --producers "$senders" --grpc "127.0.0.1:$grpc" 2>/dev/null
done
for consumers in 1 8; do
  "${bench[@]}" consume -n "127.0.0.1:$ns" -t BenchRemoting --json --duration "$seconds" -g "pop$consumers" --pop --consumers "$consumers" 2>/dev/null
  "${bench[@]}" consume -n "127.0.0.1:$ns" -t BenchGrpc --json --duration "$seconds" -g "grpc$consumers" --consumers "$consumers" --grpc "127.0.0.1:$grpc" 2>/dev/null
done
