#!/usr/bin/env bash
# Two builds of `tidemark` on the remoting send path, in alternating rounds: each round runs a
# fresh `tidemark dev` of each build in turn (the order alternates too) under the same loads,
# driven by one client (AFTER's `tidemark bench`). Single runs on a shared 2-core VM move by
# ±15 %; the medians over alternating rounds are what a change can be judged by.
#
#   bench/send-ab.sh BEFORE_BINARY AFTER_BINARY
#   ROUNDS=7 DURATION=10 bench/send-ab.sh /tmp/before/target/release/tidemark target/release/tidemark
#
# Loads (async flush, 128 B bodies): sync sends with 8 senders (the issue-50 yardstick), with
# 1 sender, and batches of 16 with 8 senders. Prints every run, then per load each build's
# median msgs/s and the ratio AFTER / BEFORE.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
before=$1 after=$2
rounds=${ROUNDS:-5} duration=${DURATION:-10}
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# pass ROUND LABEL BINARY: one fresh server of BINARY, every load against it.
pass() {
  local round=$1 label=$2 binary=$3 ns_port broker_port log=$work/$2.log load line
  ns_port=$(free_port)
  broker_port=$(free_port)
  rm -rf "$work/data"
  "$binary" dev --data-dir "$work/data" --namesrv-port "$ns_port" --broker-port "$broker_port" \
    --grpc-port 0 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q "tidemark dev ready" "$log" && break
    sleep 0.1
  done
  grep -q "tidemark dev ready" "$log" || { echo "$label did not start:" >&2; tail -20 "$log" >&2; exit 1; }
  for load in "sync x8|--producers 8" "sync x1|--producers 1" "batch 16 x8|--mode batch --batch 16 --producers 8"; do
    # shellcheck disable=SC2086
    line=$("$after" bench produce -n "127.0.0.1:$ns_port" -t AbSend --size 128 \
      --duration "$duration" --json ${load#*|} 2>/dev/null | tail -1) || line=""
    python3 - "$round" "$label" "${load%%|*}" "$line" >>"$work/results" <<'PY'
import json, sys
round_, label, load, line = sys.argv[1:]
try:
    run = json.loads(line)
    print(f"{round_}\t{label}\t{load}\t{round(run['msgsPerSec'])}\t{run['errors']}")
except (ValueError, KeyError):
    print(f"{round_}\t{label}\t{load}\t0\t-1")
PY
    tail -1 "$work/results" | awk -F'\t' '{printf "  round %s %s %s: %s msgs/s, errors %s\n", $1, $2, $3, $4, $5}' >&2
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=
}

: >"$work/results"
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then
    pass "$round" before "$before"
    pass "$round" after "$after"
  else
    pass "$round" after "$after"
    pass "$round" before "$before"
  fi
done

python3 - "$work/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    round_, label, load, rate, errors = line.rstrip("\n").split("\t")
    runs.setdefault(load, {}).setdefault(label, []).append(int(rate))
print("| load | before msgs/s (median; runs) | after msgs/s (median; runs) | after / before |")
print("|---|---|---|---|")
for load, by in runs.items():
    b, a = statistics.median(by["before"]), statistics.median(by["after"])
    print(f"| {load} | {b:,.0f}; {', '.join(map(str, by['before']))} | {a:,.0f}; "
          f"{', '.join(map(str, by['after']))} | {a / b:.2f} |")
PY
