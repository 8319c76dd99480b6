#!/usr/bin/env bash
# Two builds of `tidemark`, compared on server CPU per message in alternating rounds: one round
# is a fresh `tidemark dev` of each build in turn, each serving remoting and gRPC sends and then
# receive+ack (POP over remoting, ReceiveMessage/AckMessage over gRPC) of part of that backlog.
# Single runs on a shared 2-core VM move by ±15 %; medians over alternating rounds are what a
# change can be judged by.
#
#   bench/grpc-ab.sh BEFORE_BINARY AFTER_BINARY
#   ROUNDS=5 SENDERS=8 SEND_SECONDS=6 RECV_SECONDS=4 bench/grpc-ab.sh /tmp/tm-before target/release/tidemark
#
# Receive+ack reads for less time than the sends wrote, so the backlog never runs dry inside a
# run (an idle consumer would add its polling to the messages' cost). Prints every round, then
# the medians per load.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
before=$1 after=$2
rounds=${ROUNDS:-5} senders=${SENDERS:-8} send_s=${SEND_SECONDS:-6} recv_s=${RECV_SECONDS:-4}
results=$(mktemp)
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work" "$results"
}
trap cleanup EXIT

# pass LABEL BINARY: one server of BINARY, every load against it, one line per load in $results.
pass() {
  local label=$1 binary=$2
  local data=$work/$label log=$work/$label.log
  rm -rf "$data"
  local ns=$((20000 + RANDOM % 10000))
  local broker=$((ns + 100)) grpc=$((ns + 200))
  "$binary" dev --data-dir "$data" --namesrv-port "$ns" --broker-port "$broker" \
    --grpc-port "$grpc" --http-port 0 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    grep -q "tidemark dev ready" "$log" && break
    sleep 0.5
  done
  grep -q "tidemark dev ready" "$log" || { echo "$label did not start:" >&2; tail -20 "$log" >&2; exit 1; }
  for topic in AbRemoting AbGrpc; do
    "$binary" admin send-message -n "127.0.0.1:$ns" -t "$topic" >/dev/null 2>&1
  done
  local common=(-n "127.0.0.1:$ns" --warmup 0 --json)
  local load args seconds before_ticks after_ticks line
  for load in "remoting send" "grpc send" "remoting recv+ack" "grpc recv+ack"; do
    case $load in
      "remoting send") args=(produce -t AbRemoting --producers "$senders"); seconds=$send_s ;;
      "grpc send") args=(produce -t AbGrpc --producers "$senders" --grpc "127.0.0.1:$grpc"); seconds=$send_s ;;
      "remoting recv+ack") args=(consume -t AbRemoting -g ab --pop --consumers "$senders"); seconds=$recv_s ;;
      "grpc recv+ack") args=(consume -t AbGrpc -g ab --consumers "$senders" --grpc "127.0.0.1:$grpc"); seconds=$recv_s ;;
    esac
    before_ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    line=$("$binary" bench "${args[@]}" "${common[@]}" --duration "$seconds" 2>/dev/null | tail -1)
    after_ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    python3 - "$label" "$load" "$before_ticks" "$after_ticks" "$(getconf CLK_TCK)" "$line" >>"$results" <<'EOF'
import json, sys
label, load, before, after, tick, line = sys.argv[1:]
messages = max(json.loads(line)["messages"], 1)
print(json.dumps({"build": label, "load": load,
                  "us": round((int(after) - int(before)) * 1e6 / int(tick) / messages, 2)}))
EOF
  done
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  pid=
}

for round in $(seq 1 "$rounds"); do
  pass before "$before"
  pass after "$after"
  echo "round $round of $rounds done" >&2
done

python3 - "$results" "x$senders" <<'EOF'
import json, statistics, sys
path, width = sys.argv[1:]
runs = [json.loads(line) for line in open(path)]
loads = ["remoting send", "grpc send", "remoting recv+ack", "grpc recv+ack"]
def rounds(build, load):
    return [run["us"] for run in runs if run["build"] == build and run["load"] == load]
print(f"server CPU us/msg, {width}, every round then (median)")
print(f"{'load':20} {'before':44} {'after':44} change")
for load in loads:
    before, after = rounds("before", load), rounds("after", load)
    mb, ma = statistics.median(before), statistics.median(after)
    cell = lambda xs, m: " ".join(f"{x:.1f}" for x in xs) + f" ({m:.1f})"
    print(f"{load:20} {cell(before, mb):44} {cell(after, ma):44} {100 * (ma - mb) / mb:+.0f}%")
for build in ("before", "after"):
    send = statistics.median(rounds(build, "grpc send")) / statistics.median(rounds(build, "remoting send"))
    recv = statistics.median(rounds(build, "grpc recv+ack")) / statistics.median(rounds(build, "remoting recv+ack"))
    print(f"{build}: gRPC/remoting send {send:.2f}x, recv+ack {recv:.2f}x")
EOF
