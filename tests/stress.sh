#!/usr/bin/env bash
# tests/stress.sh [ROUNDS] [MODE...]: the tests whose threads, forks and
# exits race, run ROUNDS times (default 10) in each MODE (default: normal
# and debug), because a race shows in some interleavings only: one pass of
# `make test` proves little about them.  Each round is tests/run.sh MODE
# with FOLIO_TEST_FILTER set to those tests; a round that fails keeps its
# logs in build/stress-logs/MODE-ROUND/.  Prints one line per round and a
# summary; exits 1 if any round failed.  Needs the test binaries (`make
# stress` builds them).  Not part of `make test` (it takes minutes): run it
# before a change to threads, frees, forks or exits lands.
set -u

ROUNDS=${1:-10}
shift || true
MODES=("$@")
[ ${#MODES[@]} -eq 0 ] && MODES=(normal debug)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build

# the tests that run threads, forks or exits against each other
RACY='^test_(stress|fork|fork_storm|float_race|float_handoff|exit|thread_exit|thread_churn|remote_bursts|slab_generations|slab_recycle|far_links|realloc_stress|handoff|preempt|cancel|leak|huge_steady|dirty_bound|big_returns)$'

failed=0
for mode in "${MODES[@]}"; do
    for ((round = 1; round <= ROUNDS; round++)); do
        out=$(FOLIO_TEST_FILTER=$RACY bash "$ROOT/tests/run.sh" "$mode" 2>&1)
        status=$?
        summary=$(printf '%s\n' "$out" | grep -E "^$mode: " | tail -1)
        if [ $status -ne 0 ]; then
            failed=$((failed + 1))
            keep=$BUILD/stress-logs/$mode-$round
            rm -rf "$keep"
            mkdir -p "$keep"
            cp -r "$BUILD/test-logs/$mode/." "$keep/"
            printf '%s\n' "$out" | grep -E '^FAIL' >"$keep/FAILED"
            echo "round $round $mode: FAIL ($summary; logs in $keep)"
            grep -E '^FAIL' "$keep/FAILED" | sed 's/^/    /'
        else
            echo "round $round $mode: ok ($summary)"
        fi
    done
done
total=$((ROUNDS * ${#MODES[@]}))
echo "stress: $((total - failed)) of $total rounds passed"
[ $failed -eq 0 ]
