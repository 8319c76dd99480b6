#!/usr/bin/env bash
# What RocketMQ ACL costs a send: `tidemark dev` open and `tidemark dev --acl-file` (the client
# signs every request with HMAC-SHA1, the broker verifies it and the topic permission), benched
# with the same client, body size and senders (1 and 8), in one run.
#
#   bench/acl.sh              # release build; BENCH_SECONDS (default 10) per measurement
#
# One server at a time, on the same ports and a fresh data directory, in the order open, ACL,
# ACL, open: two servers side by side differ by up to 30 % on their own on this 2-core machine
# (the second started is slower, ACL or not), and throughput drifts over consecutive runs.
# Prints one JSON line per measurement, then a table of mean msgs/s, the ACL/open ratio and
# the server's CPU time per message (from /proc: steadier than throughput on a shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}   # ROUNDS (default 2): pairs of measurements

cargo build --release --locked -p tidemark >&2
work=$(mktemp -d)
out="$work/results"
cat >"$work/plain_acl.yml" <<'YAML'
accounts:
  - accessKey: bench-user
    secretKey: bench-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
  - accessKey: bench-admin
    secretKey: bench-admin-secret
    admin: true
YAML
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
ns=$((20000 + RANDOM % 10000))
start() { # kind
  rm -rf "$work/data"
  local extra=()
  [ "$1" = acl ] && extra=(--acl-file "$work/plain_acl.yml" --acl-access-key bench-admin --acl-secret-key bench-admin-secret)
  target/release/tidemark dev --data-dir "$work/data" --namesrv-port "$ns" --broker-port $((ns + 100)) \
    --grpc-port 0 --http-port 0 "${extra[@]}" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    grep -q "tidemark dev ready" "$work/server.log" && return
    sleep 0.5
  done
  echo "server ($1) did not start:" >&2
  tail -20 "$work/server.log" >&2
  exit 1
}
stop() {
  kill "$pid" && wait "$pid" 2>/dev/null || true
  pid=""
}
cpu_ticks() { # the server's user + system CPU so far, in clock ticks
  awk '{print $14 + $15}' "/proc/$pid/stat"
}
bench() { # senders duration extra...
  local senders=$1 duration=$2
  shift 2
  target/release/tidemark bench produce -n "127.0.0.1:$ns" -t BenchAcl --json --producers "$senders" \
    --duration "$duration" --warmup 0 "$@" 2>/dev/null
}
# ROUNDS pairs, alternating which kind goes first (default 2: open acl acl open).
order=()
for round in $(seq 1 "${ROUNDS:-2}"); do
  if [ $((round % 2)) -eq 1 ]; then order+=(open acl); else order+=(acl open); fi
done
for kind in "${order[@]}"; do
  start "$kind"
  signed=()
  [ "$kind" = acl ] && signed=(--access-key bench-user --secret-key bench-secret)
  bench 8 3 "${signed[@]}" >/dev/null # warm-up: creates the topic, settles the server
  for senders in 1 8; do
    before=$(cpu_ticks)
    line=$(bench "$senders" "$seconds" "${signed[@]}")
    after=$(cpu_ticks)
    echo "$line"
    echo "$senders $kind $((after - before)) $line" >>"$out"
  done
  stop
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
print("\n| senders | open msg/s | ACL msg/s | ratio | open p99 ms | ACL p99 ms | open server CPU µs/msg | ACL server CPU µs/msg |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for senders in ("1", "8"):
    o, a = rows[(senders, "open")], rows[(senders, "acl")]
    ratio = mean(a, "msgsPerSec") / mean(o, "msgsPerSec") if mean(o, "msgsPerSec") else 0
    print(f"| {senders} | {mean(o, 'msgsPerSec'):,.0f} | {mean(a, 'msgsPerSec'):,.0f} | {ratio:.2f} | {mean(o, 'p99Ms'):.2f} | {mean(a, 'p99Ms'):.2f} | {mean(o, 'cpuUs'):.1f} | {mean(a, 'cpuUs'):.1f} |")
PY
