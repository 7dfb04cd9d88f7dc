#!/bin/bash
# Proctor's test step: apply the patch, run the task's eval script under a time limit.
#
# It runs inside the task's own image (or Proctor's process sandbox), so it needs
# nothing but bash and git (patch(1) is used when the image has it). Everything it
# reads and writes lies in the folder it sits in; the repository is at $TESTBED.
# No value from the task is ever pasted into this script: it is the same text for
# every item, and the patch, the eval script and the limit are files beside it.
#
# It exits 0 whatever the patch or the tests did; a non-zero exit means the step
# itself broke (the sandbox), which the grade step reports as error (sandbox).
set -uo pipefail

W="${BASH_SOURCE[0]%/*}"
W="$(cd "$W" && pwd)" || exit 3
: "${TESTBED:=/testbed}"
cd "$TESTBED" || { echo "test step: no repository at $TESTBED" >&2; exit 3; }
[ -f "$W/eval.sh" ] || { echo "test step: $W/eval.sh is missing" >&2; exit 3; }
LIMIT=1800
# Where the eval script's output goes: a file here, or (Docker, the process sandbox) this
# script's stdout, which the daemon or Proctor keeps where the eval script cannot rewrite it.
LOG="${PROCTOR_TEST_LOG:-$W/test_output.txt}"
[ -f "$W/time_limit" ] && LIMIT="$(<"$W/time_limit")"

# Undo a failed apply attempt, so that the next method starts from base_commit.
# Uses git alone (no rm): tracked paths are checked out, new ones cleaned.
restore() {
  local p
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    git checkout -q -- "$p" 2>/dev/null
    git clean -fqx -- "$p" "$p.rej" "$p.orig" 2>/dev/null
  done <"$W/paths.txt"
}

# The swebench fallback chain, each attempt logged; the first that works is recorded.
apply_patch() {
  local method
  local -a methods=("git apply -v" "git apply -v --3way" "git apply -v --reject")
  command -v patch >/dev/null && methods+=("patch --batch --fuzz=5 -p1 -i")
  for method in "${methods[@]}"; do
    echo ">>>>> Trying: $method" >>"$W/apply.log"
    if $method "$PATCH" >>"$W/apply.log" 2>&1; then
      echo "$method" >"$W/apply_method"
      echo ">>>>> Applied Patch ($method)" >>"$W/apply.log"
      return 0
    fi
    restore
  done
  echo none >"$W/apply_method"
  echo ">>>>> Patch Apply Failed" >>"$W/apply.log"
  return 1
}

# Run the eval script in its own process group; a watchdog kills the whole group
# past the limit. `read -t` on a pipe that never gets data is a sleep without
# coreutils.
run_eval() {
  local pid watchdog rc start="${EPOCHREALTIME:-}"
  set -m
  if [ "$LOG" = /dev/stdout ]; then
    # Written to the stdout it was given, not reopened by name: a test step dropped to
    # another user may not open the pipe its parent made.
    bash "$W/eval.sh" 2>&1 </dev/null &
  else
    bash "$W/eval.sh" >"$LOG" 2>&1 </dev/null &
  fi
  pid=$!
  (
    exec 3<> <(:)
    read -r -t "$LIMIT" -u 3
    : >"$W/timed_out"
    kill -TERM -- "-$pid" 2>/dev/null
    read -r -t 5 -u 3
    kill -KILL -- "-$pid" 2>/dev/null
  ) >/dev/null 2>&1 &
  watchdog=$!
  # Out of the job table: killing it below must not print "Killed" into the log.
  disown "$watchdog"
  wait "$pid"
  rc=$?
  kill -KILL -- "-$watchdog" 2>/dev/null
  set +m
  echo "$rc" >"$W/eval_exit"
  if [ -n "$start" ] && [ -n "${EPOCHREALTIME:-}" ]; then
    local end="$EPOCHREALTIME"
    echo "${start/,/.} ${end/,/.}" >"$W/eval_clock"
  fi
}

# apply.diff: the patch without its test-machinery parts (Proctor's screening), if any.
PATCH="$W/patch.diff"
[ -f "$W/apply.diff" ] && PATCH="$W/apply.diff"
: >"$W/apply.log"
if [ -s "$PATCH" ]; then
  apply_patch || exit 0
else
  echo "no patch" >"$W/apply_method"
  # Without a patch the tests only matter when validating a dataset.
  [ -f "$W/test_without_patch" ] || exit 0
fi
run_eval
exit 0
