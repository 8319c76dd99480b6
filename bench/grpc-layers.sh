#!/usr/bin/env bash
# Where a message's server CPU goes, remoting next to gRPC, by layer (docs/book/src/benchmarks/grpc.md's "where the
# difference goes" table). For each ×8 load — sends, then receive+ack of the backlog — one run
# reads the server's CPU per message from /proc, and a second run samples the server with
# `perf record --call-graph dwarf`; each sample is put in one layer by its stack:
#
#   journal threads     the sample is on a journal writer thread
#   HTTP/2              any frame is in `h2` or in `http`'s header map / HPACK
#   broker and store    else any frame is in the broker, the store or the storage crate
#   protocol layer      else any frame is in the gRPC gateway, remoting or protocol crate
#   other               the rest (runtime, allocator with no caller of ours, idle work)
#
# each split into user and kernel (the sample's innermost frame in the kernel). A layer's share
# of the samples times the unprofiled run's CPU per message is its µs per message.
#
#   bench/grpc-layers.sh     # BENCH_SECONDS=5 per run; needs perf (linux-perf)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-5}
command -v perf >/dev/null || { echo "perf is needed (apt-get install linux-perf)" >&2; exit 1; }
cargo build --release --locked -p tidemark >&2
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
bin=target/release/tidemark
ns=$((20000 + RANDOM % 10000))
"$bin" dev --data-dir "$work/data" --namesrv-port "$ns" --broker-port $((ns + 100)) \
  --grpc-port $((ns + 200)) --http-port 0 >"$work/dev.log" 2>&1 &
pid=$!
for _ in $(seq 1 240); do
  grep -q "tidemark dev ready" "$work/dev.log" && break
  sleep 0.5
done
grep -q "tidemark dev ready" "$work/dev.log" || { tail -20 "$work/dev.log" >&2; exit 1; }
grpc=(--grpc "127.0.0.1:$((ns + 200))")
for topic in BenchRemoting BenchGrpc; do
  "$bin" admin send-message -n "127.0.0.1:$ns" -t "$topic" >/dev/null
done

# load NAME RUN: the bench arguments of one load (RUN tells the two runs' groups apart).
load() {
  case $1 in
    "send remoting") echo produce -t BenchRemoting --producers 8 ;;
    "send grpc") echo produce -t BenchGrpc --producers 8 "${grpc[@]}" ;;
    "recv+ack remoting") echo consume -t BenchRemoting -g "layers$2" --pop --consumers 8 ;;
    "recv+ack grpc") echo consume -t BenchGrpc -g "layers$2" --consumers 8 "${grpc[@]}" ;;
  esac
}

server_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }

cat >"$work/layers.py" <<'EOF'
import collections, json, re, sys
name, before, after, tick, line = sys.argv[1:]
messages = max(json.loads(line)["messages"], 1)
us_per_message = (int(after) - int(before)) * 1e6 / int(tick) / messages
HTTP2 = re.compile(r"\bh2::|\bhttp::header|hpack")
BROKER = re.compile(r"tidemark_broker|tidemark_store|tidemark_storage")
PROTOCOL = re.compile(r"tidemark_grpc|tidemark_remoting|tidemark_protocol")
layers, samples = collections.Counter(), 0

def place(thread, frames):
    global samples
    if not frames:
        return
    samples += 1
    stack = " | ".join(frames)
    kernel = " (kernel)" if "kernel.kallsyms" in frames[0] else ""
    if thread.startswith("journal"):
        layers["journal threads"] += 1
    elif HTTP2.search(stack):
        layers["HTTP/2" + kernel] += 1
    elif BROKER.search(stack):
        layers["broker and store" + kernel] += 1
    elif PROTOCOL.search(stack):
        layers["protocol layer" + kernel] += 1
    else:
        layers["other" + kernel] += 1

thread, frames = "", []
for raw in sys.stdin:
    if not raw.strip():
        place(thread, frames)
        frames = []
    elif raw[0] in " \t":
        # "    ADDRESS SYMBOL (DSO)": the address is left out.
        frames.append(raw.strip().split(None, 1)[-1])
    else:
        thread = raw.split()[0]
place(thread, frames)
print(f"{name}: {us_per_message:.1f} µs per message ({messages} messages; {samples} samples)")
for layer, count in sorted(layers.items()):
    print(f"  {layer:<28}{count * 100 / max(samples, 1):6.1f} %{count * us_per_message / max(samples, 1):7.1f} µs")
EOF

for name in "send remoting" "send grpc" "recv+ack remoting" "recv+ack grpc"; do
  # shellcheck disable=SC2046 # the load's words are meant to split
  set -- $(load "$name" a)
  before=$(server_ticks)
  line=$("$bin" bench "$@" -n "127.0.0.1:$ns" --duration "$seconds" --warmup 0 --json 2>/dev/null | tail -1)
  after=$(server_ticks)
  # shellcheck disable=SC2046
  set -- $(load "$name" b)
  perf record -q -F 1999 -e cpu-clock --call-graph dwarf,16384 -p "$pid" -o "$work/perf.data" \
    -- sleep "$((seconds + 1))" >/dev/null 2>&1 &
  recorder=$!
  sleep 0.3
  "$bin" bench "$@" -n "127.0.0.1:$ns" --duration "$seconds" --warmup 0 --json >/dev/null 2>&1
  wait "$recorder" || true
  perf script --no-inline -i "$work/perf.data" -F comm,ip,sym,dso 2>/dev/null |
    python3 "$work/layers.py" "$name" "$before" "$after" "$(getconf CLK_TCK)" "$line"
done
