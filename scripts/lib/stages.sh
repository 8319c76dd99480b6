# Wall time per stage of a test run: sourced by .ci/run and scripts/test, which share one record
# ($TIDEMARK_STAGES) so .ci/run can print every stage and hold the total to .ci/budget-seconds.
#
#   stage NAME COMMAND [ARGS...]   runs COMMAND (a function or a program) with errexit on inside,
#                                  records NAME, its seconds and its exit status, and returns it
#   stage_table                    prints the record and the total

if [ -z "${TIDEMARK_STAGES:-}" ]; then
  TIDEMARK_STAGES=$(mktemp "${TMPDIR:-/tmp}/tidemark-stages.XXXXXX")
  TIDEMARK_STAGES_OWNER=$$
fi
export TIDEMARK_STAGES

stage() {
  local name=$1 started=$SECONDS status=0
  shift
  echo "== $name"
  # A function called after `||` runs with errexit off (bash ignores -e there), so the command
  # runs in a subshell of its own with -e on and the status is read afterwards.
  set +e
  (
    set -e
    "$@"
  )
  status=$?
  set -e
  printf '%s\t%s\t%s\n' "$name" "$((SECONDS - started))" "$status" >>"$TIDEMARK_STAGES"
  return "$status"
}

# Rows with status "part" break the stage above them down; only whole stages add up.
stage_total() {
  awk -F'\t' '$3 != "part" { total += $2 } END { print total + 0 }' "$TIDEMARK_STAGES"
}

stage_table() {
  echo "== stages (wall time)"
  awk -F'\t' '$3 == "part" { printf "    %-54s %5d s\n", $1, $2; next }
    {
      printf "%-58s %5d s  %s\n", $1, $2, ($3 == 0 ? "" : "FAILED (exit " $3 ")")
      total += $2
    }
    END { printf "%-58s %5d s  (%d min %02d s)\n", "total", total, total / 60, total % 60 }' \
    "$TIDEMARK_STAGES"
}
