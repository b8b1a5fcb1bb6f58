#!/usr/bin/env bash
# CPython's own regression tests under folio: threading, fork, subprocess,
# gc, dict, json, re, unicode, pickle and mmap from Debian's
# libpython3.11-testsuite, run by regrtest with PYTHONMALLOC=malloc so that
# every Python object comes from folio.  Tests no one here wrote.
#
# A test case that fails under folio is run again without folio (its whole
# module): if it fails there too, it is listed as SKIP with the reason seen
# without folio; if not, folio broke it and this test fails.  A module that
# hangs ends at regrtest's --timeout and counts as a failure of the test
# case that was running.
. "$(dirname "$0")/../support/programs.bash"

# Debian's interpreter: its test package is what libpython3.11-testsuite
# installs (python3 on PATH may be another build, e.g. pyenv's).
PY=/usr/bin/python3.11
MODULES="test_subprocess test_threading test_fork1 test_gc test_dict test_json test_re test_unicode test_pickle test_mmap"
# Seconds per module: several times the slowest module's run time
# (docs/notes/cpython-tests.md), short enough that a hang costs little.
MODULE_TIMEOUT=120
RESULTS=$(dirname "$0")/../support/cpython_results.py

[ -x "$PY" ] || { echo "SKIP: $PY not found (Debian's python3.11)" >&2; exit 77; }
mods=$(echo "$MODULES" | sed 's/\([a-z0-9_]*\)/test.\1/g; s/ /, /g')
"$PY" -c "import test.libregrtest, $mods" 2>/dev/null || {
    echo "SKIP: CPython's tests are not installed (apt-get install libpython3.11-testsuite)" >&2
    exit 77
}

# A fixed environment, the same with and without folio; no network (regrtest
# runs no test that needs a resource given with -u).
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONWARNINGS PYTHONDEVMODE PYTHONMALLOC
export HOME=$WORK/home TMPDIR=$WORK/tmp LC_ALL=C.UTF-8
mkdir -p "$HOME" "$TMPDIR"

# The processes of the regrtest runs still alive (a child a hung test left
# behind, in a session of its own): FOLIO_CPYTHON_RUN, in the environment
# of those runs only, finds them; they are killed by pid and listed.  The
# threads are searched too: a process whose main thread has exited is a
# zombie whose own environ cannot be read.
reap() {
    local p cmd
    for p in $(grep -lsz -F -x "FOLIO_CPYTHON_RUN=$WORK" /proc/[0-9]*/task/[0-9]*/environ | cut -d/ -f3 | sort -u); do
        cmd=$(tr '\0\n' '  ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-100)
        kill -KILL "$p" 2>/dev/null && echo "  killed pid $p, still running after its test: ${cmd:-(main thread exited)}" >&2
    done
}
trap 'reap; rm -rf "$WORK"' EXIT

# run_module folio|base MODULE: regrtest, verbose, for one module, under
# folio or not; its output and exit status go to $WORK/{folio,base}/MODULE.
# {out,rc}.  The outer timeout is for a regrtest whose --timeout failed.
run_module() {
    local label=$1 mod=$2 dir=$WORK/$1/$2 rc
    local envs=(env "FOLIO_CPYTHON_RUN=$WORK" PYTHONMALLOC=malloc)
    [ "$label" = folio ] &&
        envs+=("FOLIO_REPORT=$WORK/reports/report-%p.json" "LD_PRELOAD=$FOLIO_LIB${LD_PRELOAD:+ $LD_PRELOAD}")
    mkdir -p "$dir"
    (cd "$dir" && timeout --foreground -k 5 $((MODULE_TIMEOUT + 30)) "${envs[@]}" "$PY" -m test -v -u none \
        --timeout "$MODULE_TIMEOUT" --tempdir "$dir" "$mod") > "$WORK/$label/$mod.out" 2>&1
    rc=$?
    echo "$rc" > "$WORK/$label/$mod.rc"
}

# run_all folio|base MODULE...: the modules, two at a time (2 cores).
run_all() {
    local label=$1 m n=0
    shift
    mkdir -p "$WORK/$label"
    for m in "$@"; do
        if [ "$n" -ge 2 ]; then
            wait -n
            n=$((n - 1))
        fi
        run_module "$label" "$m" &
        n=$((n + 1))
    done
    wait
}

# PYTHONMALLOC=malloc really hands Python's allocations to folio.
got=$(PYTHONMALLOC=malloc folio "$PY" -c 'import _testcapi; print(_testcapi.pymem_getallocatorsname())') ||
    fail "python3.11 under folio exited with status $?"
[ "$got" = malloc ] || fail "PYTHONMALLOC=malloc: Python's allocator is '$got'"
check_report 10000

start=$SECONDS
run_all folio $MODULES
echo "  under folio ($((SECONDS - start)) s, PYTHONMALLOC=malloc, regrtest --timeout $MODULE_TIMEOUT):" >&2
failed=()
for m in $MODULES; do
    rc=$(cat "$WORK/folio/$m.rc")
    [ "$rc" -eq 0 ] || failed+=("$m")
    printf '    %-16s %s: %s\n' "$m" "$([ "$rc" -eq 0 ] && echo ok || echo "exit status $rc")" \
        "$("$PY" "$RESULTS" summary "$WORK/folio/$m.out" "$rc")" >&2
done
check_report 100000
reap

status=0
if [ "${#failed[@]}" -gt 0 ]; then
    start=$SECONDS
    run_all base "${failed[@]}"
    echo "  failed under folio, run again without folio ($((SECONDS - start)) s): ${failed[*]}" >&2
    for m in "${failed[@]}"; do
        "$PY" "$RESULTS" compare "$m" "$WORK/folio/$m.out" "$(cat "$WORK/folio/$m.rc")" \
            "$WORK/base/$m.out" "$(cat "$WORK/base/$m.rc")" >&2 || status=1
    done
fi
[ "$status" -eq 0 ] || fail "CPython's tests fail under folio and pass without it (above)"
echo "  CPython's tests pass under folio${failed[*]:+, but for failures that occur without folio too (SKIP above)}" >&2
