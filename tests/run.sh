#!/usr/bin/env bash
# tests/run.sh MODE: run folio's test binaries (built by the Makefile) and
# print one line per test (PASS/FAIL/SKIP, name, seconds) and a summary.
#
#   normal    build/tests/test_* (linked with build/libfolio.so), then the
#             real programs tests/programs/*.sh under LD_PRELOAD, then
#             tests/install/run.sh (make install, consumers) and
#             tests/top/run.sh (folio top on a running program)
#   sanitize  build/tests-san/test_*  (ASan+UBSan, folio_* names)
#   tsan      build/tests-tsan/test_* whose source is tagged "folio-test: tsan"
#             (ThreadSanitizer, folio_* names)
#   (in every mode, a binary whose source is gone is not run)
#   debug     build/tests-debug/test_* (folio built with FOLIO_DEBUG: lock
#             order and zone invariants checked; standard names, static),
#             then the real programs tests/programs/*.sh under LD_PRELOAD of
#             build/libfolio-debug.so (but census and rusage, which check
#             the measuring tools, not the library)
#
# A test exits 0 to pass, 77 to skip (something it needs is missing), any
# other status to fail.  Each runs under `timeout` (FOLIO_TEST_TIMEOUT
# seconds, default 120 for a test and 300 for a program), so a hang fails.
# FOLIO_TEST_FILTER=REGEX runs only the tests whose name matches.
# The output of each test is kept in build/test-logs/MODE/NAME.log; a
# failure prints its tail, a pass the lines that start with "SKIP " (parts
# it skipped, and why).  Exits 1 if any test failed.
set -u

MODE=${1:-normal}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build
case $MODE in
normal) BIN_DIR=$BUILD/tests ;;
sanitize) BIN_DIR=$BUILD/tests-san ;;
tsan) BIN_DIR=$BUILD/tests-tsan ;;
debug) BIN_DIR=$BUILD/tests-debug ;;
*)
    echo "usage: $0 normal|sanitize|tsan|debug" >&2
    exit 2
    ;;
esac

LOG_DIR=$BUILD/test-logs/$MODE
mkdir -p "$LOG_DIR"
TEST_TIMEOUT=${FOLIO_TEST_TIMEOUT:-120}
PROG_TIMEOUT=${FOLIO_TEST_TIMEOUT:-300}
FILTER=${FOLIO_TEST_FILTER:-}

# Sanitizer runtime settings: any report fails the test.  LeakSanitizer is
# off: folio's memory is invisible to it, so it would only judge libc's.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0:halt_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66:second_deadlock_stack=1:history_size=5}
# Normal-mode binaries find libfolio.so by their rpath; this is a fallback.
export LD_LIBRARY_PATH=$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

passed=0
failed=0
skipped=0
failed_names=()

now() { date +%s.%N; }

# report NAME STATUS SECONDS LOG
report() {
    local name=$1 rc=$2 secs=$3 log=$4 note
    if [ "$rc" -eq 0 ]; then
        printf 'PASS %-28s %6.2fs\n' "$name" "$secs"
        # A passing test lists the parts it skipped, with their reasons.
        grep '^SKIP ' "$log" 2>/dev/null | sed 's/^/    | /'
        passed=$((passed + 1))
    elif [ "$rc" -eq 77 ]; then
        note=$(grep -m1 -o 'SKIP.*' "$log" 2>/dev/null)
        printf 'SKIP %-28s %6.2fs  %s\n' "$name" "$secs" "${note:-skipped}"
        skipped=$((skipped + 1))
    else
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            note="timed out"
        elif [ "$rc" -gt 128 ]; then
            note="killed by signal $((rc - 128))"
        else
            note="exit status $rc"
        fi
        printf 'FAIL %-28s %6.2fs  (%s)\n' "$name" "$secs" "$note"
        tail -n 40 "$log" | sed 's/^/    | /'
        failed=$((failed + 1))
        failed_names+=("$name")
    fi
}

# descendants PID: the pids of PID's children, grandchildren, ...
descendants() {
    local c
    for c in $(pgrep -P "$1"); do
        echo "$c"
        descendants "$c"
    done
}

# watchdog PID SECONDS LOG: if the test started under PID is still running
# after SECONDS, append the stacks of its processes (gdb, when there is one)
# to LOG, so a hang that `timeout` is about to kill leaves a diagnosis.
watchdog() {
    local top=$1 secs=$2 log=$3 s pid
    sleep "$secs" &
    s=$!
    trap 'kill $s 2>/dev/null; exit 0' TERM
    wait $s
    command -v gdb >/dev/null 2>&1 || exit 0
    for pid in $(descendants "$top"); do
        case $(cat /proc/"$pid"/comm 2>/dev/null) in timeout | "") continue ;; esac
        {
            echo "=== still running after ${secs}s: stacks of pid $pid ($(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null))"
            timeout 30 gdb -p "$pid" -batch -nx -ex 'thread apply all bt' 2>&1 |
                grep -v -e '^\[New LWP' -e '^$'
        } >>"$log"
    done
}

# run_test NAME TIMEOUT CMD...
run_test() {
    local name=$1 limit=$2 start end rc log tpid wd
    shift 2
    if [ -n "$FILTER" ] && ! [[ $name =~ $FILTER ]]; then
        return
    fi
    log=$LOG_DIR/$name.log
    mkdir -p "$(dirname "$log")"
    start=$(now)
    # timeout runs the test in a process group of its own and kills the
    # whole group at the limit.  The subshell keeps bash's notice of a test
    # killed by a signal ("Aborted") in the log.
    (
        timeout -k 10 "$limit" "$@"
        exit $?
    ) </dev/null >"$log" 2>&1 &
    tpid=$!
    watchdog "$tpid" "$((limit > 10 ? limit - 5 : limit))" "$log" </dev/null >/dev/null 2>&1 &
    wd=$!
    wait "$tpid"
    rc=$?
    kill "$wd" 2>/dev/null
    wait "$wd" 2>/dev/null
    end=$(now)
    report "$name" "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')" "$log"
}

echo "== folio tests: $MODE ($BIN_DIR)"

if [ "$MODE" = normal ] || [ "$MODE" = debug ]; then
    FOLIO_LIB=$BUILD/libfolio.so
    [ "$MODE" = debug ] && FOLIO_LIB=$BUILD/libfolio-debug.so
    if [ ! -r "$FOLIO_LIB" ]; then
        echo "FAIL: $FOLIO_LIB is missing (run make first)"
        exit 1
    fi
    export FOLIO_LIB
fi
if [ "$MODE" = normal ]; then
    # The early-call test needs a shared library whose constructor runs
    # before folio's: build it here.
    unset FOLIO_TEST_EARLY_LIB
    mkdir -p "$BUILD/tests/support"
    early_so=$BUILD/tests/support/libfolio_early.so
    if command -v "${CC:-cc}" >/dev/null 2>&1; then
        if "${CC:-cc}" -shared -fPIC -O1 -g -Wall -Wextra -Werror -pthread -I"$ROOT/tests" \
            "$ROOT/tests/support/early_lib.c" -o "$early_so" >"$LOG_DIR/support-early_lib.log" 2>&1; then
            export FOLIO_TEST_EARLY_LIB=$early_so
        else
            report support/early_lib 1 0 "$LOG_DIR/support-early_lib.log"
        fi
    fi
fi

shopt -s nullglob
bins=("$BIN_DIR"/test_*)
if [ ${#bins[@]} -eq 0 ]; then
    echo "no test binaries in $BIN_DIR (run make first)"
fi
# The source a test binary is built from (test_unit_X: tests/unit/test_X.c).
test_source() {
    case $1 in
    test_unit_*) echo "$ROOT/tests/unit/test_${1#test_unit_}.c" ;;
    *) if [ -f "$ROOT/tests/$1.cc" ]; then echo "$ROOT/tests/$1.cc"; else echo "$ROOT/tests/$1.c"; fi ;;
    esac
}
for bin in "${bins[@]}"; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    # only what make builds now: a binary whose source is gone (a test
    # removed or renamed) or, under tsan, no longer tagged for it would run
    # stale from an older build directory
    src=$(test_source "$(basename "$bin")")
    [ -f "$src" ] || continue
    if [ "$MODE" = tsan ] && ! grep -q 'folio-test: tsan' "$src"; then
        continue
    fi
    run_test "$(basename "$bin")" "$TEST_TIMEOUT" "$bin"
done

if [ "$MODE" = normal ]; then
    # A C++ test whose binary the Makefile could not build for want of a
    # compiler shows up as a skip, not silently.
    for src in "$ROOT"/tests/test_*.cc; do
        name=$(basename "$src" .cc)
        if [ ! -x "$BIN_DIR/$name" ] && ! command -v "${CXX:-g++}" >/dev/null 2>&1; then
            printf 'SKIP %-28s %6.2fs  %s\n' "$name" 0 "no C++ compiler"
            skipped=$((skipped + 1))
        fi
    done
    for prog in "$ROOT"/tests/programs/*.sh; do
        run_test "program/$(basename "$prog" .sh)" "$PROG_TIMEOUT" bash "$prog"
    done
    # folio as a user has it: installed (tests/install), and `folio top` on a
    # running program (tests/top)
    for t in cli install top; do
        [ -f "$ROOT/tests/$t/run.sh" ] && run_test "$t" "$PROG_TIMEOUT" bash "$ROOT/tests/$t/run.sh"
    done
fi
if [ "$MODE" = debug ]; then
    # the real programs with the library's invariants and lock order checked
    for prog in "$ROOT"/tests/programs/*.sh; do
        case $(basename "$prog" .sh) in census | rusage) continue ;; esac
        run_test "program/$(basename "$prog" .sh)" "$PROG_TIMEOUT" bash "$prog"
    done
fi

echo "== $MODE: ${#failed_names[@]} failed${failed_names[*]:+: ${failed_names[*]}}"
echo "$MODE: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
