# tests/support/programs.bash: sourced by tests/programs/*.sh.
#
# A program test runs a real program with LD_PRELOAD=$FOLIO_LIB and checks
# its output, usually against the same program run without folio.  It exits
# 0 (pass), 77 (skip: the program is missing) or anything else (fail), and
# says why on stderr.
#
#   need CMD...          skip unless every command exists
#   folio CMD ARGS...    run CMD under folio, with FOLIO_REPORT set to
#                        $WORK/reports/report-%p.json (one file per process)
#   check_report [MIN]   at least one report file exists and its "allocs"
#                        is > MIN (default 0): folio really served the program
#   fail MESSAGE         fail the test
#
# $WORK is a fresh temporary directory, removed at exit.

set -u
set -o pipefail

if [ -z "${FOLIO_LIB:-}" ] || [ ! -r "$FOLIO_LIB" ]; then
    echo "FOLIO_LIB must name build/libfolio.so (got '${FOLIO_LIB:-}')" >&2
    exit 2
fi
case $FOLIO_LIB in
/*) ;;
*) FOLIO_LIB=$(cd "$(dirname "$FOLIO_LIB")" && pwd)/$(basename "$FOLIO_LIB") ;;
esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/folio-prog.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/reports"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

need() {
    local c
    for c in "$@"; do
        if ! command -v "$c" >/dev/null 2>&1; then
            echo "SKIP: $c not found" >&2
            exit 77
        fi
    done
}

folio() {
    FOLIO_REPORT="$WORK/reports/report-%p.json" LD_PRELOAD="$FOLIO_LIB${LD_PRELOAD:+ $LD_PRELOAD}" "$@"
}

# The largest "allocs" value over the report files.
report_allocs() {
    local f v max=0
    for f in "$WORK"/reports/report-*.json; do
        [ -e "$f" ] || continue
        v=$(grep -o '"allocs"[[:space:]]*:[[:space:]]*[0-9]*' "$f" | grep -o '[0-9]*$' | head -n1)
        [ -n "$v" ] && [ "$v" -gt "$max" ] && max=$v
    done
    echo "$max"
}

check_report() {
    local min=${1:-0} n files
    files=$(ls "$WORK"/reports/report-*.json 2>/dev/null | wc -l)
    [ "$files" -gt 0 ] || fail "no FOLIO_REPORT file was written: folio did not serve the program?"
    n=$(report_allocs)
    [ "$n" -gt "$min" ] || fail "FOLIO_REPORT: \"allocs\" is $n (want > $min) in $files report(s)"
    echo "  folio served it: $files report(s), largest \"allocs\" $n" >&2
    rm -f "$WORK"/reports/report-*.json
}
