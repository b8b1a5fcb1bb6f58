#!/usr/bin/env bash
# tests/top/run.sh: `folio top` against running programs.
#  - a program under LD_PRELOAD: `folio top --once PID` shows its pid, the
#    allocation rate, resident and mapped memory, page faults, the zone lock,
#    purges, clears and a pageset table; `folio report --json PID` reads the
#    same statistics (their "pid" is the process's);
#  - the same under `folio run`: given the pid of `folio run`, top watches
#    the command;
#  - a fork child publishes its own file with its own pid, and its exit
#    removes it; the parent's file still holds the parent's pid;
#  - `folio top` exits 0 with "has exited" when the process ends while
#    watched, and the library removed its file at exit;
#  - it exits 1 with a message on a pid that does not run folio, one that
#    does not exist, and one that runs folio with FOLIO_LIVE=0 (no file);
#  - a killed process's file is removed by `folio top` (no pid), and by the
#    next folio process that makes its own file;
#  - a process that never ticked before exit makes no file in a library
#    destructor that allocates after folio's.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FOLIO=$ROOT/folio
LIB=$ROOT/build/libfolio.so
W=$ROOT/tests/top/workload.py
TMP=$(mktemp -d)
pids=()
cleanup() {
    touch "$TMP/stop"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
[ -d /dev/shm ] && [ -w /dev/shm ] || { echo "SKIP: /dev/shm is not writable"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

# expect_screen NAME FILE PID: a screen of pid PID with every field
expect_screen() {
    local name=$1 f=$2 pid=$3 missing=()
    grep -q "^folio top: pid $pid (" "$f" || missing+=("the pid $pid")
    for field in allocations frees "live bytes" resident mapped "minor page faults" \
        "zone lock taken" "zone lock contended" "pages from zone" purges cleared "pagesets"; do
        grep -q "^$field" "$f" || missing+=("$field")
    done
    # allocations: a total and a rate above zero (the workload allocates all the time)
    grep -Eq '^allocations +[0-9,]+ +[1-9][0-9,]*/s' "$f" || missing+=("an allocation rate")
    grep -Eq '^[0-9]+ +[0-9,]+ +[0-9,]+ +[0-9]+\.\.[0-9]+' "$f" || missing+=("a pageset row")
    if [ ${#missing[@]} -eq 0 ]; then ok "$name: $(grep '^allocations' "$f" | tr -s ' ')"; else
        cat "$f"
        fail "$name: no ${missing[*]}"
    fi
}

# 1. under LD_PRELOAD, with a fork child
LD_PRELOAD=$LIB python3 "$W" "$TMP/stop" "$TMP/child" &
main=$!
pids+=("$main")
for _ in $(seq 50); do [ -f "$TMP/child" ] && break; sleep 0.1; done
child=$(cat "$TMP/child" 2>/dev/null)
"$FOLIO" top --once "$main" >"$TMP/once" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "folio top --once $main: status $rc"
expect_screen "top --once (LD_PRELOAD)" "$TMP/once" "$main"
"$FOLIO" report --json "$main" >"$TMP/json" 2>&1
jpid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reports"][0]["pid"])' "$TMP/json" 2>/dev/null)
[ "$jpid" = "$main" ] && ok "report --json PID: pid $jpid" || fail "report --json $main: pid '$jpid' ($(head -3 "$TMP/json"))"

# the fork child: its own file, its own pid
if [ -n "$child" ]; then
    for _ in $(seq 40); do [ -e "/dev/shm/folio.$child" ] && break; sleep 0.1; done
    "$FOLIO" report --json "$child" >"$TMP/cjson" 2>&1
    cpid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["reports"][0]["pid"])' "$TMP/cjson" 2>/dev/null)
    [ "$cpid" = "$child" ] && ok "fork child $child publishes its own file" || fail "fork child $child: pid '$cpid' ($(head -3 "$TMP/cjson"))"
    grep -q "/dev/shm/folio.$main\$" "/proc/$child/maps" && fail "fork child $child still maps its parent's file"
    jpid=$("$FOLIO" report --json "$main" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["reports"][0]["pid"])')
    [ "$jpid" = "$main" ] || fail "after the fork, the parent's file holds pid '$jpid'"
else
    fail "the workload's fork child did not start"
fi

# the process ends while watched: top says so and exits 0; the files are gone
"$FOLIO" top -n 100 "$main" >"$TMP/watch" 2>&1 &
top=$!
sleep 1.5
touch "$TMP/stop"
wait "$main"
wait "$top"
rc=$?
if [ $rc -eq 0 ] && grep -q "folio top: pid $main has exited" "$TMP/watch"; then
    ok "top exits when pid $main ends: $(grep 'has exited' "$TMP/watch")"
else
    tail -3 "$TMP/watch"
    fail "folio top on an ending process: status $rc"
fi
sleep 0.2
[ -e "/dev/shm/folio.$main" ] && fail "/dev/shm/folio.$main left after a normal exit"
[ -n "$child" ] && [ -e "/dev/shm/folio.$child" ] && fail "/dev/shm/folio.$child left after the child's exit"
rm -f "$TMP/stop"

# 2. under folio run: top given the pid of `folio run`
"$FOLIO" run -- python3 "$W" "$TMP/stop" 2>"$TMP/run.err" &
run=$!
pids+=("$run")
sleep 1.5
"$FOLIO" top --once "$run" >"$TMP/once_run" 2>"$TMP/once_run.err"
rc=$?
watched=$(sed -n 's/.*watching its descendant \([0-9]*\).*/\1/p' "$TMP/once_run.err")
if [ $rc -eq 0 ] && [ -n "$watched" ]; then
    expect_screen "top --once on folio run $run (watching $watched)" "$TMP/once_run" "$watched"
else
    cat "$TMP/once_run.err"
    fail "folio top --once on folio run: status $rc"
fi
touch "$TMP/stop"
wait "$run"
rm -f "$TMP/stop"

# 3. a process that does not run folio, one that does not exist, FOLIO_LIVE=0
sleep 30 &
plain=$!
pids+=("$plain")
out=$("$FOLIO" top --once "$plain" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "does not run folio" <<<"$out" && ok "not folio's: $out" || fail "top on a plain process: status $rc: $out"
kill "$plain"
wait "$plain" 2>/dev/null
out=$("$FOLIO" top --once "$plain" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "does not exist" <<<"$out" && ok "gone: $out" || fail "top on a dead pid: status $rc: $out"
FOLIO_LIVE=0 LD_PRELOAD=$LIB python3 "$W" "$TMP/stop" &
off=$!
pids+=("$off")
sleep 1.5
out=$("$FOLIO" top --once "$off" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -q "publishes no statistics" <<<"$out" && [ ! -e "/dev/shm/folio.$off" ] &&
    ok "FOLIO_LIVE=0: no file; $out" || fail "FOLIO_LIVE=0: status $rc: $out"
touch "$TMP/stop"
wait "$off"
rm -f "$TMP/stop"

# 4. a killed process leaves its file; folio top (no pid) removes it
LD_PRELOAD=$LIB python3 "$W" "$TMP/stop" &
victim=$!
for _ in $(seq 40); do [ -e "/dev/shm/folio.$victim" ] && break; sleep 0.1; done
kill -KILL "$victim"
wait "$victim" 2>/dev/null
if [ -e "/dev/shm/folio.$victim" ]; then
    "$FOLIO" top >"$TMP/list" 2>&1
    [ ! -e "/dev/shm/folio.$victim" ] && ok "stale file of killed pid $victim removed by folio top" ||
        fail "folio top left /dev/shm/folio.$victim of a killed process"
else
    fail "no /dev/shm/folio.$victim within 4 s of the start of a folio process"
fi

# 5. the next folio process to make its file removes the files of processes
# that ended without exit handlers (a dead pid, written a minute ago or more),
# and keeps those of live pids, recent ones, and names not of the form
true &
dead=$!
wait "$dead"
sleep 60 &
plain=$!
pids+=("$plain")
for f in "folio.$dead" "folio.$plain" "folio.${dead}x"; do
    echo stale >"/dev/shm/$f"
    touch -d '2 minutes ago' "/dev/shm/$f"
done
true &
recent=$!
wait "$recent"
echo stale >"/dev/shm/folio.$recent"
LD_PRELOAD=$LIB python3 "$W" "$TMP/stop" &
maker=$!
pids+=("$maker")
for _ in $(seq 40); do [ -e "/dev/shm/folio.$maker" ] && break; sleep 0.1; done
[ -e "/dev/shm/folio.$maker" ] || fail "no /dev/shm/folio.$maker within 4 s of the start of a folio process"
[ -e "/dev/shm/folio.$dead" ] && fail "/dev/shm/folio.$dead (dead pid, 2 minutes old) left by a new file's maker" ||
    ok "a new file's maker removed the stale file of dead pid $dead"
left=0
for f in "folio.$plain" "folio.${dead}x" "folio.$recent"; do
    [ -e "/dev/shm/$f" ] || { fail "a new file's maker removed /dev/shm/$f"; left=1; }
done
[ $left -eq 0 ] && ok "it kept the files of a live pid, a recent one and another name"
touch "$TMP/stop"
wait "$maker"
kill "$plain"
wait "$plain" 2>/dev/null
rm -f "/dev/shm/folio.$plain" "/dev/shm/folio.${dead}x" "/dev/shm/folio.$recent" "/dev/shm/folio.$dead"
rm -f "$TMP/stop"

# 6. a process that never ticked before its exit handlers makes no file
#    after them: here a library's destructor that runs after folio's (a
#    library the program links, folio preloaded) allocates for 1.6 s, past
#    two due ticks a second apart
cat >"$TMP/hook.c" <<'HOOK'
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((destructor)) static void hook_dtor(void) {
    void *slot[64] = {0};
    unsigned long r = 1;
    for (double end = now() + 1.6; now() < end;) {
        r = r * 6364136223846793005ul + 1442695040888963407ul;
        int k = (int)((r >> 33) % 64);
        free(slot[k]);
        slot[k] = malloc((r >> 20) & 3 ? 16 + (r >> 45) % 2048 : 40000 + (r >> 40) % 1000000);
        if (slot[k]) memset(slot[k], 1, 16);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    for (int k = 0; k < 64; k++) free(slot[k]);
}
HOOK
cat >"$TMP/dx.c" <<'DX'
#include <stdio.h>
#include <unistd.h>
int main(void) { /* no malloc: the process does not tick before exit */
    char b[24];
    int n = snprintf(b, sizeof b, "%d\n", (int)getpid());
    return write(1, b, (size_t)n) == n ? 0 : 1;
}
DX
if cc -shared -fPIC -O1 -o "$TMP/libhook.so" "$TMP/hook.c" &&
    cc -O1 -o "$TMP/dx" "$TMP/dx.c" -Wl,--no-as-needed -L"$TMP" -lhook -Wl,-rpath,"$TMP"; then
    dpid=$(LD_PRELOAD=$LIB "$TMP/dx")
    if [ -z "$dpid" ]; then
        fail "the destructor program printed no pid"
    elif [ -e "/dev/shm/folio.$dpid" ]; then
        fail "a library destructor allocating after folio's exit made /dev/shm/folio.$dpid"
        rm -f "/dev/shm/folio.$dpid"
    else
        ok "a library destructor allocating after folio's exit left no file"
    fi
else
    fail "cannot build the destructor program"
fi

[ "$fails" -eq 0 ] || exit 1
echo "top: all checks passed"
