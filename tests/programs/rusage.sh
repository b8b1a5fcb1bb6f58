#!/usr/bin/env bash
# bench/rusage_exec.c, the runner's measuring helper, must not count work of
# its own in the command's figures: a variable passed with -e (LD_PRELOAD,
# FOLIO_*: every row of a suite but the system allocator's) is set before
# the fork.  Set in the child, its putenv grew environ with malloc there and
# wrote pages copied from the helper, about 7 page faults that wait4
# counted as the command's (session 25).  Compares /bin/true's minor faults
# with and without a variable that changes nothing (the fewest of 9 runs
# each: a run's count moves by up to 6 with where the kernel puts the stack
# and the libraries, so medians of 7 differed by 3 on a noisy machine with
# the same library, while the putenv cost every run 7).
. "$(dirname "$0")/../support/programs.bash"
need cc true
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cc -std=c11 -O2 -o "$WORK/rusage_exec" "$ROOT/bench/rusage_exec.c" || fail "cannot build rusage_exec"
TRUE=$(command -v true)
fewest_faults() {
    local i out
    for i in 1 2 3 4 5 6 7 8 9; do
        "$WORK/rusage_exec" "$@" "$WORK/ru.txt" -- "$TRUE" || fail "rusage_exec exited with status $?"
        out=$(grep -o 'minflt=[0-9]*' "$WORK/ru.txt") || fail "no minflt in $(cat "$WORK/ru.txt")"
        echo "${out#minflt=}"
    done | sort -n | sed -n 1p
}
plain=$(fewest_faults)
with_e=$(fewest_faults -e FOLIO_RUSAGE_TEST=1 -e FOLIO_RUSAGE_TEST2=2)
echo "  rusage_exec: /bin/true took $plain faults, $with_e with two -e variables" >&2
[ "$with_e" -le $((plain + 2)) ] || fail "-e variables add $((with_e - plain)) faults to the command's count ($plain without, $with_e with)"
