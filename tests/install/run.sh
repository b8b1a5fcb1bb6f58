#!/usr/bin/env bash
# tests/install/run.sh: `make install` into a temporary prefix gives a folio
# that programs build against and run on, as a user would use it:
#  - the files: the versioned library and its soname and development links,
#    libfolio.a, folio.h, folio.pc, folio-static.pc, the CMake package, the
#    command, both man pages; the soname recorded in the library;
#  - consumers (consumer.c, consumer_cxx.cc) built with pkg-config and with
#    CMake, shared and static (and fully static with -static when the C
#    library's archive is there): each checks that folio's counters move by
#    exactly its malloc/new calls, so malloc is folio's, and a static one must
#    not load libfolio.so at all;
#  - `man folio` and `man 3 folio` from the installed pages; folio(3) names
#    every FOLIO_* variable of src/base/base.h;
#  - the installed `folio run` preloads the installed library (not build/);
#  - DESTDIR stages under its root; `make uninstall` leaves no file behind.
# A tool that is missing (cmake, pkg-config, man, g++) skips its part with a
# SKIP line; exit 77 only if nothing could be checked.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/install
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
have() { command -v "$1" >/dev/null 2>&1; }
CC=${CC:-cc}
CXX=${CXX:-g++}

if ! make -s -C "$ROOT" install PREFIX="$P" >"$TMP/install.log" 2>&1; then
    cat "$TMP/install.log"
    echo "FAIL: make install PREFIX=$P"
    exit 1
fi
VERSION=$(sed -n 's/^Version: //p' "$P/lib/pkgconfig/folio.pc")
MAJOR=${VERSION%%.*}

# the files and links
for f in "lib/libfolio.so.$VERSION" lib/libfolio.a include/folio.h lib/pkgconfig/folio.pc \
    lib/pkgconfig/folio-static.pc lib/cmake/folio/folioConfig.cmake \
    lib/cmake/folio/folioConfigVersion.cmake bin/folio share/man/man1/folio.1 \
    share/man/man3/folio.3 share/folio/folio_tools/run.py; do
    [ -f "$P/$f" ] || fail "make install did not install $f"
done
[ "$(readlink "$P/lib/libfolio.so.$MAJOR")" = "libfolio.so.$VERSION" ] || fail "libfolio.so.$MAJOR is not a link to libfolio.so.$VERSION"
[ "$(readlink "$P/lib/libfolio.so")" = "libfolio.so.$MAJOR" ] || fail "libfolio.so is not a link to libfolio.so.$MAJOR"
soname=$(readelf -d "$P/lib/libfolio.so.$VERSION" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libfolio.so.$MAJOR" ] && ok "soname $soname" || fail "soname is '$soname', want libfolio.so.$MAJOR"

# run_consumer NAME BINARY shared|static: it runs, says malloc is folio's, and
# loads libfolio.so from the prefix (shared) or not at all (static)
run_consumer() {
    local name=$1 bin=$2 kind=$3 out
    if ! out=$(LD_LIBRARY_PATH= "$bin" 2>&1); then
        fail "$name: $out"
        return
    fi
    local deps
    deps=$(LD_LIBRARY_PATH= ldd "$bin" 2>&1 | grep libfolio)
    if [ "$kind" = shared ] && ! grep -q "$P/lib/libfolio.so.$MAJOR" <<<"$deps"; then
        fail "$name: does not load $P/lib/libfolio.so.$MAJOR (ldd: ${deps:-no libfolio})"
    elif [ "$kind" = static ] && [ -n "$deps" ]; then
        fail "$name: linked statically but loads $deps"
    elif [ "$kind" = static ] && ! grep -q ' T malloc$' <<<"$(nm "$bin" 2>/dev/null)"; then
        fail "$name: malloc is not defined in the program"
    else
        ok "$name ($kind): $out"
    fi
}

# pkg-config
if have pkg-config; then
    export PKG_CONFIG_PATH=$P/lib/pkgconfig
    libdir=$(pkg-config --variable=libdir folio)
    # shellcheck disable=SC2046
    "$CC" -O1 -Wall -Werror "$HERE/consumer.c" -o "$TMP/pc_shared" $(pkg-config --cflags --libs folio) \
        -Wl,-rpath,"$libdir" && run_consumer pkg-config "$TMP/pc_shared" shared || fail "pkg-config shared build"
    # shellcheck disable=SC2046
    "$CC" -O1 -Wall -Werror "$HERE/consumer.c" -o "$TMP/pc_static" $(pkg-config --cflags --libs folio-static) &&
        run_consumer pkg-config "$TMP/pc_static" static || fail "pkg-config static build"
    if have "$CXX"; then
        # shellcheck disable=SC2046
        "$CXX" -O1 -Wall -Werror "$HERE/consumer_cxx.cc" -o "$TMP/pc_cxx_static" $(pkg-config --cflags --libs folio-static) &&
            run_consumer "pkg-config C++" "$TMP/pc_cxx_static" static || fail "pkg-config C++ static build"
    else
        echo "SKIP C++ consumer: no $CXX"
    fi
    # fully static (-static): folio's malloc instead of the C library's own, in libc.a too
    if "$CC" -print-file-name=libc.a | grep -q /; then
        # shellcheck disable=SC2046
        if "$CC" -static -O1 -Wall -Werror "$HERE/consumer.c" -o "$TMP/pc_allstatic" \
            $(pkg-config --cflags --libs folio-static) 2>"$TMP/allstatic.log"; then
            run_consumer "pkg-config -static" "$TMP/pc_allstatic" static
        else
            fail "fully static link: $(tail -3 "$TMP/allstatic.log")"
        fi
    else
        echo "SKIP fully static consumer: no libc.a (libc6-dev)"
    fi
    unset PKG_CONFIG_PATH
else
    echo "SKIP pkg-config consumers: pkg-config is not installed (apt-get install pkg-config)"
fi

# CMake
if have cmake; then
    if cmake -S "$HERE" -B "$TMP/cmake" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_BUILD_TYPE=Release \
        >"$TMP/cmake.log" 2>&1 && cmake --build "$TMP/cmake" >>"$TMP/cmake.log" 2>&1; then
        run_consumer cmake "$TMP/cmake/consumer_shared" shared
        run_consumer cmake "$TMP/cmake/consumer_static" static
        if [ -x "$TMP/cmake/consumer_cxx_static" ]; then
            run_consumer "cmake C++" "$TMP/cmake/consumer_cxx_static" static
        fi
    else
        tail -20 "$TMP/cmake.log"
        fail "CMake consumer: find_package(folio) or the build failed"
    fi
else
    echo "SKIP CMake consumer: cmake is not installed (apt-get install cmake)"
fi

# the man pages
if have man; then
    m1=$(MANPATH=$P/share/man MANWIDTH=200 man -P cat 1 folio 2>&1)
    m3=$(MANWIDTH=200 man -P cat -l "$P/share/man/man3/folio.3" 2>&1)
    grep -q "folio top" <<<"$m1" && ok "man folio" || fail "man folio: $(head -3 <<<"$m1")"
    grep -q "folio_report_json" <<<"$m3" || fail "man -l folio.3: $(head -3 <<<"$m3")"
    missing=()
    for v in $(grep -o '"FOLIO_[A-Z0-9_]*"' "$ROOT/src/base/base.h" | tr -d '"' | sort -u); do
        grep -q "^ *$v\$" <<<"$m3" || missing+=("$v")
    done
    [ ${#missing[@]} -eq 0 ] && ok "man 3 folio: every FOLIO_* variable of base.h" ||
        fail "folio(3) does not document ${missing[*]}"
else
    echo "SKIP man pages: man is not installed"
fi

# the installed command runs the installed library
maps=$(cd "$TMP" && "$P/bin/folio" run -- cat /proc/self/maps 2>"$TMP/run.err")
if grep -q "$P/lib/libfolio.so.$VERSION" <<<"$maps"; then
    ok "installed folio run preloads $P/lib/libfolio.so.$VERSION"
else
    fail "installed folio run: $(grep libfolio <<<"$maps" | head -1) $(tail -3 "$TMP/run.err")"
fi

# DESTDIR: staged under its root, the final paths inside the files
make -s -C "$ROOT" install DESTDIR="$TMP/stage" PREFIX=/usr >"$TMP/stage.log" 2>&1 || fail "make install DESTDIR"
[ -f "$TMP/stage/usr/lib/libfolio.so.$VERSION" ] && grep -q '^prefix=/usr$' "$TMP/stage/usr/lib/pkgconfig/folio.pc" &&
    ok "DESTDIR staging" || fail "DESTDIR=$TMP/stage PREFIX=/usr: files not staged with final paths"

# uninstall leaves nothing
make -s -C "$ROOT" uninstall PREFIX="$P" >/dev/null 2>&1
left=$(find "$P" ! -type d 2>/dev/null)
[ -z "$left" ] && ok "make uninstall removed every file" || fail "left after uninstall: $left"

[ "$fails" -eq 0 ] || exit 1
echo "install: all checks passed"
