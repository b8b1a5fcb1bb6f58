#!/usr/bin/env bash
# sort under folio: a ~50 MB generated file sorted in memory (several
# threads), with a small buffer (temporary files and merges), numerically
# by a key, and uniquely; each output must equal (cmp) sort's output
# without folio.
. "$(dirname "$0")/../support/programs.bash"
need sort awk cmp
export LC_ALL=C

awk 'BEGIN {
    x = 42
    for (i = 0; i < 1800000; i++) {
        x = (x * 1103515245 + 12345) % 2147483648
        y = (x * 69069 + 1) % 2147483648
        printf "%08x %d %s%s\n", x, y % 100000, substr("abcdefghijklmnopqrstuvwxyz", 1 + x % 26, 1 + y % 20), substr("0123456789", 1 + y % 10)
    }
}' > "$WORK/in.txt"
size=$(wc -c < "$WORK/in.txt")
[ "$size" -gt 40000000 ] || fail "generated input is only $size bytes"

# check NAME SORT-ARGS...: sort with and without folio, compare.
check() {
    local name=$1
    shift
    sort "$@" "$WORK/in.txt" > "$WORK/ref.$name" || fail "sort $* without folio failed"
    folio sort "$@" "$WORK/in.txt" > "$WORK/out.$name" || fail "sort $* under folio exited with status $?"
    cmp -s "$WORK/ref.$name" "$WORK/out.$name" || fail "sort $* under folio: output differs ($(cmp "$WORK/ref.$name" "$WORK/out.$name"))"
    rm -f "$WORK/ref.$name" "$WORK/out.$name"
}

check plain --parallel=2
check_report 0
check small -S 4M -T "$WORK" --parallel=2
check numeric -n -k2,2 -s
check unique -u -k1,1
echo "  $size-byte input: 4 sort modes match without folio" >&2
