#!/usr/bin/env bash
# What RocketMQ ACL costs a send: two `tidemark dev` servers in one run, one open and one checking
# every request against an ACL file (the client signs with HMAC-SHA1, the broker verifies it and
# the topic permission), benched in turn with the same client, body size and senders (1 and 8).
#
#   bench/acl.sh              # release build; BENCH_SECONDS (default 10) per measurement
#
# Prints one JSON line per measurement, then a table of msgs/s and the ACL/open ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}

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
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
start() { # name namesrv-port extra-args...
  local name=$1 ns=$2
  shift 2
  mkdir -p "$work/$name"
  target/release/tidemark dev --data-dir "$work/$name" --namesrv-port "$ns" --broker-port $((ns + 100)) \
    --grpc-port 0 --http-port 0 "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 120); do
    grep -q "tidemark dev ready" "$work/$name.log" && return
    sleep 0.5
  done
  echo "$name did not start:" >&2
  tail -20 "$work/$name.log" >&2
  exit 1
}
open_ns=$((20000 + RANDOM % 5000))
acl_ns=$((open_ns + 1000))
start open "$open_ns"
start acl "$acl_ns" --acl-file "$work/plain_acl.yml" --acl-access-key bench-admin --acl-secret-key bench-admin-secret
bench() { # namesrv-port senders duration extra...
  local ns=$1 senders=$2 duration=$3
  shift 3
  target/release/tidemark bench produce -n "127.0.0.1:$ns" -t BenchAcl --json --producers "$senders" \
    --duration "$duration" "$@" 2>/dev/null
}
signed=(--access-key bench-user --secret-key bench-secret)
# Warm-up: creates the topic on both and lets them settle.
bench "$open_ns" 8 3 >/dev/null
bench "$acl_ns" 8 3 "${signed[@]}" >/dev/null
for senders in 1 8; do
  line=$(bench "$open_ns" "$senders" "$seconds"); echo "$line"; echo "$senders open $line" >>"$out"
  line=$(bench "$acl_ns" "$senders" "$seconds" "${signed[@]}"); echo "$line"; echo "$senders acl $line" >>"$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    senders, kind, text = line.split(" ", 2)
    rows[(senders, kind)] = json.loads(text)
print("\n| senders | open msg/s | ACL msg/s | ratio | open p99 ms | ACL p99 ms |")
print("|---:|---:|---:|---:|---:|---:|")
for senders in ("1", "8"):
    o, a = rows[(senders, "open")], rows[(senders, "acl")]
    ratio = a["msgsPerSec"] / o["msgsPerSec"] if o["msgsPerSec"] else 0
    print(f"| {senders} | {o['msgsPerSec']:,.0f} | {a['msgsPerSec']:,.0f} | {ratio:.2f} | {o['p99Ms']:.2f} | {a['p99Ms']:.2f} |")
PY
