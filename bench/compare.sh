#!/usr/bin/env bash
# Tidemark next to Apache RocketMQ on this machine, in alternating rounds, with the same client
# (`tidemark bench`, release build) for every load. Apache runs as compat/java's stand-in (4.9.7;
# APACHE=5 for compat/java5's, 5.3.3): name server and broker in one JVM with the same command
# line as `tidemark dev`, a 2 GiB G1 heap as Apache's scripts tune it within this machine's
# memory, so its RSS includes its name server, as Tidemark's does.
#
#   bench/compare.sh                       # 2 rounds, 10 s per run, 128 B bodies
#   ROUNDS=3 DURATION=20 bench/compare.sh
#   APACHE=5 bench/compare.sh              # against Apache RocketMQ 5.3.3's broker
#   SERIALIZE=rocketmq bench/compare.sh    # binary request headers instead of JSON
#   E2E_RATE=10000 bench/compare.sh        # the paced end-to-end run's offered rate (msgs/s)
#
# Loads, async flush: sync sends with 1, 8 and 64 senders; async (4 senders x 32 in flight);
# batches of 16 and 128 (8 senders); consume (a fresh group reading the batch backlog); end to
# end at E2E_RATE (default 10,000/s, about half of Apache 4.9's sync x8 rate here: both servers
# get the same offered load). Sync flush (a new server with --sync-flush): 1 and 64 senders.
# RSS: idle (5 s after start) and loaded (after the async-flush loads). Each round first
# measures the floor under a sync call, `tidemark bench rtt` (bare 256 B frames over loopback
# TCP between two tokio runtimes): no sync sender can beat it, and it moves with the machine.
#
# Prints a Markdown table: each server's median msgs/s and p99 over the rounds, every round's
# figure, and the ratio of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
rounds="${ROUNDS:-2}"
duration="${DURATION:-10}"
serialize="${SERIALIZE:-json}"
size="${SIZE:-128}"
e2e_rate="${E2E_RATE:-10000}"
apache_version="${APACHE:-4}"
case "$apache_version" in
  4) suite=compat/java ;;
  5) suite=compat/java5 ;;
  *) echo "APACHE must be 4 or 5" >&2; exit 2 ;;
esac

cargo build --release --locked -p tidemark >&2
mvn --batch-mode --no-transfer-progress -q -f "$suite" process-test-classes -Pcompat-suite >&2
tidemark="$root/target/release/tidemark"
apache="$root/$suite/scripts/apache-dev"
export APACHE_DEV_JVM_OPTS="${APACHE_DEV_JVM_OPTS:--Xms2g -Xmx2g -XX:+UseG1GC -XX:MaxGCPauseMillis=50}"

work="$(mktemp -d)"
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

namesrv=""
# start <name> <binary> [dev args...]: a server on fresh ports and a fresh data directory.
start() {
  local name="$1" bin="$2"
  shift 2
  local ns_port broker_port log="$work/$name.log"
  ns_port="$(free_port)"
  broker_port="$(free_port)"
  rm -rf "$work/data"
  "$bin" dev --data-dir "$work/data" --namesrv-port "$ns_port" --broker-port "$broker_port" \
    --grpc-port 0 "$@" >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    grep -q "tidemark dev ready" "$log" && break
    sleep 0.1
  done
  grep -q "tidemark dev ready" "$log" || { echo "$name did not start:" >&2; tail -20 "$log" >&2; exit 1; }
  namesrv="127.0.0.1:$ns_port"
}

# measure <round> <server> <load> <bench subcommand and args...>: one run, one result line.
measure() {
  local round="$1" server="$2" load="$3"
  shift 3
  local line
  # A failed run is recorded as 0 msgs/s with errors -1, not the end of the comparison.
  line=$("$tidemark" bench "$@" -n "$namesrv" --duration "$duration" \
    --serialize "$serialize" --json 2>/dev/null | tail -1) || true
  python3 - "$round" "$server" "$load" "$line" >>"$work/results" <<'PY'
import json, sys
round_, server, load, line = sys.argv[1:]
try:
    run = json.loads(line)
    print(round_, server, load, round(run["msgsPerSec"]), run["p99Us"], run["errors"])
except (ValueError, KeyError):
    print(round_, server, load, 0, 0, -1)
PY
  echo "  round $round $server $load: $(tail -1 "$work/results" | awk '{print $(NF-2), "msgs/s, p99", $(NF-1), "µs, errors", $NF}')" >&2
}

# pass <round> <server> <binary>: every load against one server, then its sync-flush runs.
pass() {
  local round="$1" server="$2" bin="$3"
  start "$server" "$bin"
  sleep 5
  echo "$round $server idle_rss $(rss_kib "$server_pid")" >>"$work/results"
  measure "$round" "$server" "sync x1" produce --size "$size" -t CmpSync --producers 1
  measure "$round" "$server" "sync x8" produce --size "$size" -t CmpSync --producers 8
  measure "$round" "$server" "sync x64" produce --size "$size" -t CmpSync --producers 64
  measure "$round" "$server" "async 4x32" produce --size "$size" -t CmpAsync --mode async --producers 4 --inflight 32
  measure "$round" "$server" "batch 16 x8" produce --size "$size" -t CmpBatch --mode batch --batch 16 --producers 8
  measure "$round" "$server" "batch 128 x8" produce --size "$size" -t CmpBatch --mode batch --batch 128 --producers 8
  measure "$round" "$server" "consume" consume -t CmpBatch
  measure "$round" "$server" "e2e @${e2e_rate}/s" e2e --size "$size" -t CmpE2e --rate "$e2e_rate"
  echo "$round $server loaded_rss $(rss_kib "$server_pid")" >>"$work/results"
  stop_server
  start "$server" "$bin" --sync-flush
  measure "$round" "$server" "sync-flush x1" produce --size "$size" -t CmpFlush --producers 1
  measure "$round" "$server" "sync-flush x64" produce --size "$size" -t CmpFlush --producers 64
  stop_server
}

: >"$work/results"
for round in $(seq 1 "$rounds"); do
  "$tidemark" bench rtt --duration "$duration" --json 2>/dev/null | tail -1 |
    python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(sys.argv[1], "floor", round(r["msgsPerSec"]), r["p50Us"], r["p99Us"])' \
      "$round" >>"$work/results"
  echo "  round $round loopback floor: $(tail -1 "$work/results" | awk '{print $3, "round trips/s, p50", $4, "µs"}')" >&2
  pass "$round" tidemark "$tidemark"
  pass "$round" apache "$apache"
done

python3 - "$work/results" "$rounds" "$duration" "$size" "$serialize" "$apache_version" <<'PY'
import statistics, sys
path, rounds, duration, size, serialize, version = sys.argv[1:]
runs, rss, floor = {}, {}, []
for fields in (line.split() for line in open(path)):
    if fields[1] == "floor":
        floor.append((int(fields[2]), int(fields[3]), int(fields[4])))
        continue
    if fields[2] in ("idle_rss", "loaded_rss"):
        rss.setdefault((fields[1], fields[2]), []).append(int(fields[3]))
        continue
    load = " ".join(fields[2:-3])
    rate, p99, errors = int(fields[-3]), int(fields[-2]), int(fields[-1])
    runs.setdefault((fields[1], load), []).append((rate, p99, errors))
apache = "Apache RocketMQ 4.9.7" if version == "4" else "Apache RocketMQ 5.3.3"
print(f"Tidemark and {apache}, same client (tidemark bench), {size} B, {serialize} headers, "
      f"{rounds} alternating rounds of {duration} s per run; medians (every round in brackets).\n")
print("| load | Tidemark msgs/s | Apache msgs/s | ratio | Tidemark p99 µs | Apache p99 µs | errors T/A |")
print("|---|---:|---:|---:|---:|---:|---:|")
loads = [load for (server, load) in runs if server == "tidemark"]
for load in loads:
    t, a = runs[("tidemark", load)], runs.get(("apache", load), [(0, 0, -1)])
    tm, am = statistics.median(r[0] for r in t), statistics.median(r[0] for r in a)
    each = lambda rs: "/".join(str(r[0]) for r in rs)
    ratio = f"{tm / am:.2f}x" if am else "-"
    # A backlog read's latency is the backlog's age, not the server's: left out.
    p99 = lambda rs: "-" if load == "consume" else f"{statistics.median(r[1] for r in rs):,.0f}"
    print(f"| {load} | {tm:,.0f} ({each(t)}) | {am:,.0f} ({each(a)}) | {ratio} | "
          f"{p99(t)} | {p99(a)} | {sum(r[2] for r in t)}/{sum(r[2] for r in a)} |")
for kind, label in (("idle_rss", "idle RSS"), ("loaded_rss", "RSS after the loads")):
    t = statistics.median(rss[("tidemark", kind)]) / 1024
    a = statistics.median(rss[("apache", kind)]) / 1024
    print(f"| {label} (MiB) | {t:.1f} | {a:.1f} | {a / t:.1f}x less | | | |")
if floor:
    rate = statistics.median(f[0] for f in floor)
    sync1 = statistics.median(r[0] for r in runs.get(("tidemark", "sync x1"), [(0, 0, 0)]))
    print(f"\nLoopback floor (tidemark bench rtt, 256 B each way): {rate:,.0f} round trips/s "
          f"({'/'.join(str(f[0]) for f in floor)}), p50 {statistics.median(f[1] for f in floor):,.0f} µs, "
          f"p99 {statistics.median(f[2] for f in floor):,.0f} µs; Tidemark's sync x1 is "
          f"{sync1 / rate:.0%} of it.")
PY
