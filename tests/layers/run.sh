#!/usr/bin/env bash
# tests/layers/run.sh: check-layers catches what it must.  A copy of src/ is
# built (objects only, -O0), checked clean, then given one deliberate
# violation at a time; each must fail the check with its own message.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r "$ROOT/src" "$TMP/src"
LAYERS="base meta clear page obj api"
INC="-I$ROOT/include"
for l in $LAYERS; do INC="$INC -I$TMP/src/$l"; done
build() { # build the object of one source file of the copy
    local f=$1 o=$TMP/obj/${1#"$TMP/src/"}
    mkdir -p "$(dirname "$o")"
    cc -std=c11 -O0 -fPIC $INC -c "$f" -o "${o%.c}.o"
}
pids=() # the copy's objects, built side by side
for f in "$TMP"/src/*/*.c; do build "$f" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
check() { python3 "$ROOT/tools/check_layers.py" --src "$TMP/src" --obj "$TMP/obj"; }

fails=0
check >"$TMP/out" || { echo "FAIL: the unmodified tree does not pass"; cat "$TMP/out"; exit 1; }

# expect NAME FILE PATTERN: the check fails and names the violation
expect() {
    local name=$1 file=$2 pattern=$3
    if check >"$TMP/out"; then
        echo "FAIL $name: check-layers passed"
        fails=$((fails + 1))
    elif ! grep -q -- "$pattern" "$TMP/out"; then
        echo "FAIL $name: no line matching '$pattern' in:"
        cat "$TMP/out"
        fails=$((fails + 1))
    else
        echo "ok   $name: $(grep -m1 -- "$pattern" "$TMP/out")"
    fi
}
restore() { cp "$ROOT/src/$1" "$TMP/src/$1" && build "$TMP/src/$1"; }

# 1. the zone (page) calls the object layer's trim
cat >>"$TMP/src/page/zone.c" <<'C'
void heap_trim_current(void);
void zone_violation(void);
void zone_violation(void) { heap_trim_current(); }
C
build "$TMP/src/page/zone.c"
expect "page calls obj" page/zone.c "zone.o (layer page) uses heap_trim_current"
restore page/zone.c

# 2. a pageset runs the maintenance tick
cat >>"$TMP/src/page/pageset.c" <<'C'
void pageset_violation(void);
void pageset_violation(void) { purge_tick(); }
C
build "$TMP/src/page/pageset.c"
expect "page runs the tick" page/pageset.c "pageset.o (layer page) calls purge_tick"
restore page/pageset.c

# 3. the meta layer includes the page layer's header
sed -i 's/#include "meta.h"/#include "page.h"/' "$TMP/src/meta/pagemap.c"
expect "meta includes page" meta/pagemap.c "pagemap.c includes page.h"
restore meta/pagemap.c

# 4. a layer's header includes a higher layer's
sed -i 's/#include "base.h"/#include "base.h"\n#include "clear.h"/' "$TMP/src/meta/meta.h"
expect "header includes a higher one" meta/meta.h "meta.h includes clear.h"

[ "$fails" -eq 0 ] || exit 1
echo "check-layers catches all 4 violations"
