#!/usr/bin/env bash
# tests/cli/run.sh: the folio command as its users see it.
#  - `folio run` prints the options as they are set: auto/none where 0 means
#    that, the clearing strategy by name, sizes and times with units; values
#    from the environment show as given;
#  - `folio report --json FILE` prints the file's reports and their sum;
#  - `folio bench` installs nothing unless --install: a missing allocator is
#    skipped with the command that installs it (`--no-install`, the old
#    opt-out, still parses), and a missing matplotlib is a note, not a pip run;
#  - a library given as NAME=/path that is a build of folio is folio's family
#    (its runs keep reports, and it is never the "best other" allocator).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FOLIO=$ROOT/folio
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# want LINE WORD...: every WORD is in LINE
want() {
    local line=$1 w missing=()
    shift
    for w in "$@"; do grep -qF -- " $w " <<<" $line " || missing+=("$w"); done
    [ ${#missing[@]} -eq 0 ] || echo "${missing[*]}"
}
opts=$("$FOLIO" run --report "$TMP/r.json" -- true 2>&1 | sed -n 's/^options: //p')
m=$(want "$opts" FOLIO_CLEAR=auto FOLIO_PCP_HIGH=auto FOLIO_MEMORY_LIMIT=none FOLIO_CLEAR_THREADS=auto \
    FOLIO_PURGE_DELAY_MS=1000ms FOLIO_ARENA_MIB=256MiB)
[ -z "$m" ] && ok "defaults as set: $opts" || fail "folio run's options lack $m: $opts"
opts=$(FOLIO_CLEAR=nt FOLIO_MEMORY_LIMIT=3M FOLIO_PCP_HIGH=500 "$FOLIO" run -- true 2>&1 | sed -n 's/^options: //p')
m=$(want "$opts" FOLIO_CLEAR=nt FOLIO_MEMORY_LIMIT=3MiB FOLIO_PCP_HIGH=500)
[ -z "$m" ] && ok "set from the environment: FOLIO_CLEAR=nt FOLIO_MEMORY_LIMIT=3MiB FOLIO_PCP_HIGH=500" ||
    fail "folio run's options lack $m: $opts"

python3 - "$FOLIO" "$TMP/r.json" <<'PY' && ok "report --json" || fail "report --json"
import json, subprocess, sys
out = subprocess.run([sys.argv[1], "report", "--json", sys.argv[2], sys.argv[2]],
                     capture_output=True, text=True, check=True).stdout
d = json.loads(out)
assert isinstance(d, list) and len(d) == 2, d
assert d[0]["processes"] == 1 and d[0]["summed"]["allocs"] == d[0]["reports"][0]["allocs"]
PY

python3 - "$ROOT/tools" <<'PY' && ok "bench: nothing installed without --install" || fail "bench installs without --install"
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from folio_tools import allocators, plots
ran = []
real = subprocess.run
def spy(cmd, *a, **k):
    ran.append(cmd)
    return real(cmd, *a, **k)
subprocess.run = spy
allocators.SPECS["jemalloc"] = allocators.Spec("jemalloc", "libjemalloc2", "libno-such-allocator.so.9",
                                               "libjemalloc")
found, skipped = allocators.resolve(["jemalloc"], install=False)
assert not found and skipped, (found, skipped)
assert "apt-get install libjemalloc2" in skipped[0][1], skipped
assert not any("apt-get" in c or "pip" in c for c in ran if isinstance(c, list)), ran
import builtins
real_import = builtins.__import__
def no_mpl(name, *a, **k):
    if name.startswith("matplotlib"):
        raise ImportError("no matplotlib here")
    return real_import(name, *a, **k)
builtins.__import__ = no_mpl
plt, note = plots._matplotlib(install=False)
assert plt is None and "pip install matplotlib" in note, note
assert not any("pip" in c for c in ran if isinstance(c, list)), ran
PY
python3 - "$ROOT/tools" "$ROOT/build/libfolio.so" "$TMP" <<'PY' && ok "bench: a folio build given by path is folio's family" || fail "bench: a folio build by path counted as another allocator"
import os, sys
sys.path.insert(0, sys.argv[1])
from folio_tools import allocators
other = os.path.join(sys.argv[3], "libother.so")
with open(other, "wb") as f:
    f.write(b"\x7fELF not folio")
names = allocators.parse_names(f"old={sys.argv[2]},other={other}")
found, skipped = allocators.resolve(names, install=False, build_folio=False)
fam = {a.name: a.family for a in found}
assert fam == {"old": "folio", "other": "other"}, (fam, skipped)
PY
python3 - "$ROOT/tools" <<'PY' && ok "the anchor given by path runs once" || fail "the anchor given by path runs twice"
import sys
sys.path.insert(0, sys.argv[1])
from folio_tools import allocators
from folio_tools.suites import folios, scaling
anchor = allocators.PATHS["mimalloc-3.4.3"][0]
names = allocators.parse_names(f"folio,glibc,m3={anchor}")
assert folios._allocators(names) == ["folio", "folio-thp-never", "glibc", "m3"], folios._allocators(names)
assert scaling._allocators(names) == ["folio", "glibc", "m3"], scaling._allocators(names)
assert scaling._allocators(["folio"]) == ["folio", "mimalloc-3.4.3"]
PY
python3 - "$ROOT/tools" <<'PY' && ok "programs runs the installed tools only" || fail "programs: a missing tool planned, or an installed one left out"
import shutil, sys
sys.path.insert(0, sys.argv[1])
from folio_tools.suites import programs
planned = {w.name for w in programs.SUITE.workloads}
for tool, w in programs.CANDIDATES:
    assert (w.name in planned) == bool(shutil.which(tool)), (tool, planned)
assert ("left out: " in programs.SUITE.description) == bool(programs.MISSING)
assert all(t in programs.SUITE.description.split("left out: ")[-1] for t in programs.MISSING)
PY
"$FOLIO" bench --no-install --list >/dev/null 2>&1 && ok "bench --no-install still parses" || fail "bench --no-install"
"$FOLIO" bench --help | grep -q -- "--install" && ok "bench --help shows --install" || fail "bench --help: no --install"

[ "$fails" -eq 0 ] || exit 1
echo "cli: all checks passed"
