# Wall time per stage of a test run: sourced by .ci/run and scripts/test, which share one record
# ($TIDEMARK_STAGES) so .ci/run can print every stage and hold the total to .ci/budget-seconds.
#
#   stage NAME COMMAND [ARGS...]   runs COMMAND (a function or a program) with errexit on inside,
#                                  records NAME, its seconds and its exit status, and returns it
#   lanes NAME LANE...             runs each LANE (a function calling `stage`) at the same time,
#                                  its output prefixed with the lane's name; records NAME with the
#                                  wall time of the whole, the lanes' stages under it
#   stage_table                    prints the record and the total
#
# A record row is `begin<TAB>id<TAB>depth<TAB>name`, `end<TAB>id<TAB>seconds<TAB>status`, or a
# finished row `row<TAB>-<TAB>depth<TAB>name<TAB>seconds` (a breakdown written by a tool, such
# as each package's share of `cargo test`). Rows print in the order they began, indented by
# depth; only depth 0 adds up to the total, deeper rows break the one above them down.

if [ -z "${TIDEMARK_STAGES:-}" ]; then
  TIDEMARK_STAGES=$(mktemp "${TMPDIR:-/tmp}/tidemark-stages.XXXXXX")
  TIDEMARK_STAGES_OWNER=$$
fi
export TIDEMARK_STAGES
export TIDEMARK_STAGE_DEPTH=${TIDEMARK_STAGE_DEPTH:-0}

stage() {
  local name=$1 started=$SECONDS status=0 id
  shift
  id="$BASHPID.$SECONDS.$RANDOM"
  echo "== $name"
  printf 'begin\t%s\t%s\t%s\n' "$id" "$TIDEMARK_STAGE_DEPTH" "$name" >>"$TIDEMARK_STAGES"
  # A function called after `||` runs with errexit off (bash ignores -e there), so the command
  # runs in a subshell of its own with -e on and the status is read afterwards.
  set +e
  (
    set -e
    TIDEMARK_STAGE_DEPTH=$((TIDEMARK_STAGE_DEPTH + 1))
    "$@"
  )
  status=$?
  set -e
  printf 'end\t%s\t%s\t%s\n' "$id" "$((SECONDS - started))" "$status" >>"$TIDEMARK_STAGES"
  return "$status"
}

# Each lane writes its rows to a file of its own, appended to the record when all lanes are done,
# so one lane's stages stay together in the table.
run_lanes() {
  local lane status=0 pids=() records=() i
  for lane in "$@"; do
    records+=("$(mktemp "${TMPDIR:-/tmp}/tidemark-lane.XXXXXX")")
    (
      set -o pipefail
      TIDEMARK_STAGES=${records[-1]}
      stage "lane: $lane" "$lane" 2>&1 | sed -u "s/^/[$lane] /"
    ) &
    pids+=("$!")
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    cat "${records[$i]}" >>"$TIDEMARK_STAGES"
    rm -f "${records[$i]}"
  done
  return "$status"
}

lanes() {
  local name=$1
  shift
  stage "$name" run_lanes "$@"
}

stage_total() {
  awk -F'\t' '$1 == "begin" && $3 == 0 { top[$2] = 1 } $1 == "end" && top[$2] { total += $3 }
    END { print total + 0 }' "$TIDEMARK_STAGES"
}

stage_table() {
  echo "== stages (wall time)"
  awk -F'\t' '
    $1 == "begin" { order[++n] = $2; depth[$2] = $3; name[$2] = $4; seconds[$2] = "?"; status[$2] = "unfinished" }
    $1 == "end"   { seconds[$2] = $3; status[$2] = $4 }
    $1 == "row"   { id = "row" NR; order[++n] = id; depth[id] = $3; name[id] = $4; seconds[id] = $5; status[id] = 0 }
    END {
      for (i = 1; i <= n; i++) {
        id = order[i]
        indent = sprintf("%" (depth[id] * 4) "s", "")
        format = "%s%-" (58 - depth[id] * 4) "s %5s s  %s\n"
        printf format, indent, name[id], seconds[id],
          (status[id] == 0 ? "" : (status[id] == "unfinished" ? "unfinished" : "FAILED (exit " status[id] ")"))
        if (depth[id] == 0 && seconds[id] != "?") total += seconds[id]
      }
      printf "%-58s %5d s  (%d min %02d s)\n", "total", total, total / 60, total % 60
    }' "$TIDEMARK_STAGES"
}
