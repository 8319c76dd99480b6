#!/usr/bin/env bash
# gRPC next to remoting, in one run: sends with 1 and 8 senders over each protocol (separate
# topics), then receive+ack of each backlog — POP over remoting, ReceiveMessage/AckMessage over
# gRPC — with 1 and 8 consumers. The same `tidemark bench` client drives every run.
#
#   bench/grpc.sh            # against `tidemark dev` (release build)
#   bench/grpc.sh --apache   # and then the same runs against Apache RocketMQ 5.3.3's broker +
#                            # proxy (local mode; compat/grpc-java's stand-in; build it once:
#                            # mvn -f compat/grpc-java process-test-classes -Pcompat-suite)
#
# Each run prints one JSON line: the client's view (msgsPerSec; p50Ms/p99Ms of the send or the
# ack) plus the server's CPU time per message (serverCpuUsPerMsg, from /proc: what serving one
# message costs, with the client's own work left out). A table with gRPC/remoting ratios ends it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}
apache=false
[ "${1:-}" = "--apache" ] && apache=true
cargo build --release --locked -p tidemark >&2
if $apache && [ ! -f compat/grpc-java/target/suite-test.classpath ]; then
  mvn -B -q -ntp -f compat/grpc-java process-test-classes -Pcompat-suite >&2
fi
results=$(mktemp)
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work" "$results"
}
trap cleanup EXIT
bench=(target/release/tidemark bench)

# CPU time (user + system, in clock ticks) the server has used so far.
server_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }

# run LABEL SERVER ARGS...: one bench run, its JSON line extended with the server's CPU per message.
run() {
  local label=$1 server=$2
  shift 2
  local before after line
  before=$(server_ticks)
  line=$("${bench[@]}" "$@" --json 2>/dev/null | tail -1)
  after=$(server_ticks)
  python3 - "$label" "$server" "$before" "$after" "$(getconf CLK_TCK)" "$line" <<'EOF' | tee -a "$results"
import json, sys
label, server, before, after, tick, line = sys.argv[1:]
run = json.loads(line)
cpu_us = (int(after) - int(before)) * 1e6 / int(tick)
run.update(run=label, server=server, serverCpuUsPerMsg=round(cpu_us / max(run["messages"], 1), 2))
print(json.dumps(run))
EOF
}

# pass SERVER COMMAND...: starts the server, runs every load against it, stops it.
pass() {
  local server=$1
  shift
  local data=$work/$server log=$work/$server.log
  local ns=$((20000 + RANDOM % 10000))
  local broker=$((ns + 100)) grpc=$((ns + 200))
  "$@" dev --data-dir "$data" --namesrv-port "$ns" --broker-port "$broker" --grpc-port "$grpc" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    grep -q "tidemark dev ready" "$log" && break
    sleep 0.5
  done
  grep -q "tidemark dev ready" "$log" || { echo "$server did not start:" >&2; tail -20 "$log" >&2; exit 1; }
  # No warm-up inside a run: the server CPU per message is read over the whole run.
  local common=(-n "127.0.0.1:$ns" --duration "$seconds" --warmup 0)
  # Apache's proxy routes only topics that exist: one remoting send creates each (both servers
  # get it, so the runs stay alike).
  for topic in BenchRemoting BenchGrpc; do
    target/release/tidemark admin send-message -n "127.0.0.1:$ns" -t "$topic" >/dev/null
  done
  for senders in 1 8; do
    run "send x$senders remoting" "$server" produce "${common[@]}" -t BenchRemoting --producers "$senders"
    run "send x$senders grpc" "$server" produce "${common[@]}" -t BenchGrpc --producers "$senders" --grpc "127.0.0.1:$grpc"
  done
  for consumers in 1 8; do
    run "recv+ack x$consumers remoting(pop)" "$server" consume "${common[@]}" -t BenchRemoting -g "pop$consumers" --pop --consumers "$consumers"
    run "recv+ack x$consumers grpc" "$server" consume "${common[@]}" -t BenchGrpc -g "grpc$consumers" --consumers "$consumers" --grpc "127.0.0.1:$grpc"
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  pid=
}

pass tidemark target/release/tidemark
$apache && pass apache-5.3.3 compat/grpc-java/scripts/apache-dev

python3 - "$results" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by = {(r["server"], r["run"]): r for r in runs}
print()
print(f'{"server":<14}{"load":<12}{"remoting msg/s":>16}{"grpc msg/s":>12}{"ratio":>7}'
      f'{"remoting cpu us/msg":>21}{"grpc cpu us/msg":>17}{"ratio":>7}')
for server in dict.fromkeys(r["server"] for r in runs):
    for load, remoting_label in [("send x1", "send x1 remoting"), ("send x8", "send x8 remoting"),
                                 ("recv+ack x1", "recv+ack x1 remoting(pop)"),
                                 ("recv+ack x8", "recv+ack x8 remoting(pop)")]:
        remoting, grpc = by.get((server, remoting_label)), by.get((server, f"{load} grpc"))
        if not remoting or not grpc:
            continue
        rate = remoting["msgsPerSec"] / max(grpc["msgsPerSec"], 1e-9)
        cpu = grpc["serverCpuUsPerMsg"] / max(remoting["serverCpuUsPerMsg"], 1e-9)
        print(f'{server:<14}{load:<12}{remoting["msgsPerSec"]:>16.0f}{grpc["msgsPerSec"]:>12.0f}{rate:>6.2f}x'
              f'{remoting["serverCpuUsPerMsg"]:>21.1f}{grpc["serverCpuUsPerMsg"]:>17.1f}{cpu:>6.2f}x')
EOF
