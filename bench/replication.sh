#!/usr/bin/env bash
# What replication costs a send in controller mode: one controller, one name server and a
# broker set of 1, 2 and 3 replicas (no slave, 1 slave, 2 slaves) on 127.0.0.1, in one run.
# With slaves in its SyncStateSet the master answers SEND_OK only once every one of them has
# the message, so this is the price of "no acknowledged message lost when the master dies".
#
#   bench/replication.sh      # release build; BENCH_SECONDS (default 10) per measurement
#
# Each set starts fresh (new stores), waits until every slave is in sync, warms up, then
# `tidemark bench produce` measures 8 and 64 senders of 1 KiB bodies. Prints one JSON line per
# measurement, then a table of msgs/s and the ratio to the no-slave set with as many senders.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}

cargo build --release --locked -p tidemark >&2
bin=target/release/tidemark
work=$(mktemp -d)
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_line() { # log line
  for _ in $(seq 1 120); do
    grep -q "$2" "$1" && return 0
    sleep 0.5
  done
  tail -20 "$1" >&2
  return 1
}

run_set() { # replicas
  local replicas=$1 dir="$work/set-$1"
  mkdir -p "$dir"
  local ctl="127.0.0.1:$(port)" ns="127.0.0.1:$(port)"
  "$bin" controller --id 1 --peers "1=$ctl" --listen "$ctl" --data-dir "$dir/controller" \
    >"$dir/controller.log" 2>&1 &
  pids+=($!)
  wait_line "$dir/controller.log" "tidemark controller ready"
  "$bin" namesrv --listen "$ns" >"$dir/namesrv.log" 2>&1 &
  pids+=($!)
  wait_line "$dir/namesrv.log" "tidemark namesrv ready"
  for i in $(seq 1 "$replicas"); do
    # The broker's fast port (-2) and HA port (+1) must be free too: step well apart.
    local listen=$((20000 + RANDOM % 20000 + i * 10))
    cat >"$dir/broker-$i.toml" <<EOF
broker_name = "broker-bench"
broker_ip1 = "127.0.0.1"
listen_ip = "127.0.0.1"
listen_port = $listen
grpc_listen_port = 0
namesrv_addr = "$ns"
store_path_root_dir = "$dir/broker-$i"
enable_controller_mode = true
controller_addr = "$ctl"
EOF
    "$bin" broker -c "$dir/broker-$i.toml" >"$dir/broker-$i.log" 2>&1 &
    pids+=($!)
    wait_line "$dir/broker-$i.log" "tidemark broker ready"
    if [ "$i" -eq 1 ]; then
      wait_line "$dir/broker-1.log" "became master"
    fi
  done
  # Every slave in the master's SyncStateSet.
  for _ in $(seq 1 120); do
    in_sync=$("$bin" admin controller-status --controllers "$ctl" -b broker-bench 2>/dev/null \
      | grep -v "not in sync" | grep -c "in sync" || true)
    [ "$in_sync" -ge $((replicas - 1)) ] && break
    sleep 0.5
  done
  [ "$in_sync" -ge $((replicas - 1)) ] || { echo "slaves never in sync" >&2; exit 1; }
  "$bin" bench produce -n "$ns" -t BenchReplication --json --producers 8 --size 1024 \
    --duration 3 >/dev/null 2>&1 # warm-up: creates the topic
  for senders in 8 64; do
    line=$("$bin" bench produce -n "$ns" -t BenchReplication --json --producers "$senders" \
      --size 1024 --duration "$seconds" 2>/dev/null)
    echo "$line"
    echo "$replicas $senders $line" >>"$work/results"
  done
  stop_all
}

for replicas in 1 2 3; do
  run_set "$replicas"
done
python3 - "$work/results" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    replicas, senders, text = line.split(" ", 2)
    rows[(int(replicas), int(senders))] = json.loads(text)
print("\n| replicas | senders | msgs/s | ratio to no slave | p50 ms | p99 ms |")
print("|---:|---:|---:|---:|---:|---:|")
for (replicas, senders) in sorted(rows):
    run = rows[(replicas, senders)]
    base = rows[(1, senders)]["msgsPerSec"]
    ratio = run["msgsPerSec"] / base if base else 0
    print(f"| {replicas} ({replicas - 1} slaves) | {senders} | {run['msgsPerSec']:,.0f} | {ratio:.2f} | {run['p50Ms']:.2f} | {run['p99Ms']:.2f} |")
PY
