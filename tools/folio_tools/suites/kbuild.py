"""Suite ``kbuild``: the kernel-build benchmark of seeds 001 and 003, for real (issue 3).

Debian's ``linux-source-6.1`` is installed (apt-get, as root) and unpacked
once into a cache directory outside the repository (``FOLIO_KBUILD_DIR``,
default /var/tmp/folio-kbuild), configured once with ``make defconfig`` and
``make prepare``, and the target directories are built once to warm the tree
and the page cache.  Each run then deletes the object files of the target
directories (not timed) and times ``make -jN DIRS`` (N = ``FOLIO_KBUILD_JOBS``,
default 2) with the allocator under test in LD_PRELOAD, so that make, the
shells, gcc, cc1, as, ld and the kernel's own helpers all run on it.  The
command starts with bench/preload_exec (static: it does not load the
allocator itself), which prints which library make will load and then becomes
make (same pid: the runner's wait4 measures the whole
build, children included).  Figures: real (wall), user and sys time as in seed
001's table, peak RSS (the largest process).  Full run only.

Size: the directory (``mm/``: 65 objects, about 60 s of CPU, 30-35 s of real
time on 2 cores) and 3 repetitions are chosen so that the full ``folio bench``
of every suite stays under 30 minutes on 2 cores: kbuild runs 5 allocators x 3
repetitions, and pageset's kbuild borrows these runs (folio's as folio-auto)
and adds folio-fixed x 3, interleaved with them: 18 builds, 10-11 minutes of
the budget on an idle machine.  (``mm/`` with
``kernel/sched/``, as the issue suggested, would add 6-8 s per build.)
"""

import glob
import os
import shutil
import subprocess
import sys

from .. import paths
from .base import Metric, Suite, Workload, USER, build_bench_programs, parse_result_line

VERSION = "6.1"
PACKAGE = f"linux-source-{VERSION}"
TARBALL = f"/usr/src/{PACKAGE}.tar.xz"
CACHE = os.environ.get("FOLIO_KBUILD_DIR", "/var/tmp/folio-kbuild")
TREE = os.path.join(CACHE, PACKAGE)
JOBS = int(os.environ.get("FOLIO_KBUILD_JOBS", "2") or 2)
DIRS = ["mm/"]
STAMP = os.path.join(CACHE, ".folio-ready")
# packages the configured build needs besides gcc and make, with a file that shows each
BUILD_DEPS = [("flex", "/usr/bin/flex"), ("bison", "/usr/bin/bison"), ("bc", "/usr/bin/bc"),
              ("libelf-dev", "/usr/include/libelf.h"),
              ("libssl-dev", "/usr/include/openssl/ssl.h"), ("xz-utils", "/usr/bin/xz")]

REAL = Metric("wall_s", "real", "s", "lower")
SYS = Metric("sys_s", "sys", "s", "lower")


def _say(msg):
    print(f"kbuild: {msg}", file=sys.stderr, flush=True)


def _run(argv, what, cwd=None, env=None):
    res = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        tail = "\n".join(res.stdout.strip().splitlines()[-15:])
        raise paths.BuildError(f"{what} failed (status {res.returncode}): "
                               f"{' '.join(argv)}\n{tail}")
    return res.stdout


def _install(pkgs):
    if os.geteuid() != 0:
        raise paths.BuildError(f"needs {' '.join(pkgs)}: run as root, or "
                               f"apt-get install {' '.join(pkgs)} first")
    _say(f"installing {' '.join(pkgs)} with apt-get (once) ...")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends"] + pkgs
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        _run(cmd, "apt-get install", env=env)


def _stamp_text():
    st = os.stat(TARBALL)
    return f"{PACKAGE} size={st.st_size} mtime={int(st.st_mtime)} defconfig prepare\n"


def _host_env():
    """The environment of the setup steps: the system allocator, no folio report."""
    return {k: v for k, v in os.environ.items()
            if k != "LD_PRELOAD" and not k.startswith("FOLIO_")}


_prepared = False


def prepare_tree():
    """Install, unpack, configure and warm the kernel tree once (cached across invocations)."""
    global _prepared
    if _prepared:
        return
    build_bench_programs()
    missing = [p for p, f in BUILD_DEPS if not os.path.exists(f)]
    if not os.path.exists(TARBALL):
        missing.insert(0, PACKAGE)
    for tool in ("make", "gcc"):
        if shutil.which(tool) is None:
            missing.append("build-essential")
            break
    if missing:
        _install(missing)
    if not os.path.exists(TARBALL):
        raise paths.BuildError(f"{TARBALL} is missing after installing {PACKAGE}")
    try:
        with open(STAMP) as f:
            ready = f.read() == _stamp_text()
    except OSError:
        ready = False
    if not ready or not os.path.exists(os.path.join(TREE, ".config")):
        os.makedirs(CACHE, exist_ok=True)
        if os.path.exists(STAMP):
            os.unlink(STAMP)
        if os.path.exists(TREE):
            shutil.rmtree(TREE)
        _say(f"unpacking {TARBALL} into {CACHE} (once, ~20 s) ...")
        _run(["tar", "-xf", TARBALL, "-C", CACHE], "unpacking the kernel source")
        env = _host_env()
        _say("make defconfig && make prepare (once, ~15 s) ...")
        _run(["make", "-C", TREE, "defconfig"], "make defconfig", env=env)
        _run(["make", "-C", TREE, f"-j{JOBS}", "prepare"], "make prepare", env=env)
        _say(f"first build of {' '.join(DIRS)} (once, to warm the tree, ~1 min) ...")
        _run(["make", "-C", TREE, f"-j{JOBS}"] + DIRS, "the first build", env=env)
        with open(STAMP, "w") as f:
            f.write(_stamp_text())
    _prepared = True


def clean_objects(quick=False):
    """Delete the target directories' objects and archives, so make rebuilds them (not timed)."""
    for d in DIRS:
        for path in glob.glob(os.path.join(TREE, d, "**", "*.[oa]"), recursive=True):
            os.unlink(path)


def command(quick):
    return [paths.bench_binary("preload_exec"), "make", "-C", TREE, f"-j{JOBS}"] + DIRS


def workload():
    """The build, as a workload (the pageset suite runs the same one)."""
    return Workload(
        "kbuild", f"make -j{JOBS} {' '.join(DIRS)} of Linux {VERSION} (defconfig), objects deleted "
                  "before each run; every process of the build on the allocator",
        REAL, command=command, parse=parse_result_line, extra_metrics=[USER, SYS],
        full_only=True, prepare=prepare_tree, before_run=clean_objects, est_s=35.0,
        timeout=900, reps=3)


def _busy(results, suite, workload, alloc):
    from ..render import runner_share
    from ..summary import median
    xs = [runner_share(r) for r in results["runs"] if r["suite"] == suite
          and r["workload"] == workload and r["allocator"] == alloc and r.get("ok")]
    xs = [x for x in xs if x is not None]
    return "-" if not xs else f"{100 * median(xs):.0f}%"


def _pct(x, base):
    return "-" if x is None or not base else f"{100.0 * (x / base - 1.0):+.1f}%"


def seed_table(t, results):
    """Seed 001's table: real, user and sys time per allocator, and their change against glibc."""
    out = []
    for r in t.rows:
        if r.workload.name != "kbuild":
            continue
        cells = {m: r.cells.get(m, {}) for m in ("wall_s", "user_s", "sys_s")}
        base = {m: (cells[m].get("glibc").median if cells[m].get("glibc") else None)
                for m in cells}
        rows = []
        for a in t.allocators:
            vals = [cells[m][a].median if a in cells[m] else None for m in cells]
            if all(v is None for v in vals):
                continue
            rows.append([a] + ["-" if v is None else f"{v:.1f}" for v in vals]
                        + [_pct(v, base[m]) for v, m in zip(vals, cells)]
                        + [_busy(results, t.suite.name, r.workload.name, a)])
        counters = r.folio_counters
        notes = []
        if counters.get("processes"):
            notes.append(f"folio's reports: {counters['processes']:.0f} processes per build wrote "
                         f"one, {counters.get('processes_allocating', 0):.0f} of them with "
                         "allocations (make, gcc, cc1, as, ld, fixdep, objtool, coreutils ...; "
                         "the shell, dash, leaves with _exit and writes none).")
        out.append((f"{r.workload.name}: seed 001's table (medians; change against glibc)",
                    ["allocator", "real [s]", "user [s]", "sys [s]", "real", "user", "sys",
                     "others' CPU"], rows, notes + [
                        "others' CPU: the share of the machine's CPU time that other processes "
                        "used during this allocator's builds (median); a build that shares 2 "
                        "CPUs with other work takes longer in real time, and its user time "
                        "grows too (caches, frequency)."]))
    return out


SUITE = Suite(
    name="kbuild",
    title="Linux kernel build, seeds 001 and 003",
    description=f"`make -j{JOBS} {' '.join(DIRS)}` of Linux {VERSION} (Debian's {PACKAGE}, "
                "defconfig), every process of the build (make, sh, gcc, cc1, as, ld) on the "
                "allocator under test via LD_PRELOAD; its objects are deleted "
                "before each run. real/user/sys as in seed 001's table. Sized for the 30-minute "
                "budget of the full run on 2 cores: one directory (65 objects, ~60 s of CPU, "
                "30-35 s real) and 3 repetitions by default. Full run only.",
    workloads=[workload()],
    prepare=build_bench_programs,
    tables=seed_table,
)
