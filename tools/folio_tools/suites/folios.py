"""Suite ``folios``: page faults against memory, seed 001's tables (issue 14).

Three tables:

- ``kbuild``: seed 001's kernel-build table (real, user and sys time against
  glibc), the kbuild suite's workload (when both run, this suite borrows its
  runs).  Full run only.
- first touch: bench/faults_firsttouch grows a tree (8 children per node) or
  a chained hash table (bucket array doubled by realloc at load 1) of
  32-256-byte nodes to 256 MiB, and in the full run to 2 GiB, writing every
  byte once; minor faults, faults per MiB of peak RSS, peak RSS, hugepage
  coverage (AnonHugePages / Rss, read by the program from
  /proc/self/smaps_rollup before it exits) and build time for every allocator,
  with folio also as ``folio-thp-never`` (``FOLIO_THP=never``) to show what
  the huge pages buy.
- small programs: ``python3 -c pass`` (the python3 the runner's PATH finds:
  under pyenv the runner's own shim puts the interpreter's directory first, so
  the interpreter itself, not the shell shim), ``git status`` in the repository, ``gcc -c`` of a
  small file, ``ls -l /usr/bin``: peak RSS and minor faults against glibc, so
  that the small end never regresses.  Each starts through bench/preload_exec
  (same pid: the runner's wait4 measures the program and its children; a
  static program, so that the allocator's start-up is counted once, the
  program's).

mimalloc 3.4.3 from ../shared/anchors/ runs too when it is there.  The
2 GiB heaps need about 2.2 GiB free per run.
"""

import os
import tempfile

from .. import allocators, paths
from . import kbuild
from .base import MAXRSS, MINFLT, Metric, Suite, Workload, build_bench_programs, parse_result_line

BUILD = Metric("elapsed_s", "build time", "s", "lower")
COVERAGE = Metric("coverage", "hugepage coverage (AnonHugePages / Rss)", "", "higher")
FAULTS_PER_MIB = Metric("faults_per_mib", "minor faults per MiB resident", "", "lower")
THP_NEVER = "folio-thp-never"

SMALL_DIR = os.path.join(tempfile.gettempdir(), "folio-folios")
SMALL_C = os.path.join(SMALL_DIR, "small.c")


def _allocators(names):
    """folio also as folio-thp-never; mimalloc 3.4.3 (the anchor) added when not asked for."""
    out = []
    for n in names:
        out += ["folio", THP_NEVER] if n == "folio" else [n]
    return allocators.with_anchor(out)


def _kbuild():
    w = kbuild.workload()
    w.same_as = ("kbuild", "kbuild")
    return w


def _firsttouch(kind, name, heap, full_only):
    what = "a tree (8 children per node)" if kind == 0 else "a hash table (buckets doubled by realloc)"
    return Workload(
        f"{name}-{heap}", f"grow {what} of 32-256 B nodes to {heap}iB, every byte written once",
        MINFLT, "faults_firsttouch", ["--kind", kind, "--heap", heap], None,
        [FAULTS_PER_MIB, COVERAGE, BUILD, MAXRSS], full_only=full_only,
        est_s=1.0 if heap == "256M" else 8.0)


def _prepare_small():
    build_bench_programs()
    os.makedirs(SMALL_DIR, exist_ok=True)
    with open(SMALL_C, "w") as f:
        f.write("#include <stdio.h>\nstatic int twice(int x) { return 2 * x; }\n"
                "int main(void) { printf(\"%d\\n\", twice(21)); return 0; }\n")


def _small(name, argv, what):
    def command(quick):
        return [paths.bench_binary("preload_exec")] + argv
    return Workload(name, what, MAXRSS, command=command, parse=parse_result_line,
                    extra_metrics=[MINFLT], prepare=_prepare_small, est_s=0.3)


WORKLOADS = [
    _kbuild(),
    _firsttouch(0, "tree", "256M", False),
    _firsttouch(1, "hash", "256M", False),
    _firsttouch(0, "tree", "2G", True),
    _firsttouch(1, "hash", "2G", True),
    _small("python", ["python3", "-c", "pass"], "python3 -c pass (the python3 PATH finds)"),
    _small("git-status", ["git", "-C", paths.REPO, "status", "--short"], "git status in the repository"),
    _small("gcc-c", ["gcc", "-c", SMALL_C, "-o", os.path.join(SMALL_DIR, "small.o")],
           "gcc -c of a 3-line C file"),
    _small("ls", ["ls", "-l", "/usr/bin"], "ls -l /usr/bin"),
]


def _med(r, key, a):
    c = r.cells.get(key, {}).get(a)
    return c.median if c and c.n else None


def _ratio(x, base):
    return "-" if x is None or not base else f"{x / base:.3f}x"


def _fmt(v, digits=0):
    return "-" if v is None else f"{v:,.{digits}f}"


def tables(t, results):
    out = kbuild.seed_table(t, results)
    ft_rows, small_rows = [], []
    for r in t.rows:
        name = r.workload.name
        if name == "kbuild":
            continue
        base_flt, base_rss = _med(r, "minflt", "glibc"), _med(r, "maxrss_mib", "glibc")
        for a in t.allocators:
            flt, rss = _med(r, "minflt", a), _med(r, "maxrss_mib", a)
            if flt is None and rss is None:
                continue
            if r.workload.binary == "faults_firsttouch":
                cov = _med(r, "coverage", a)
                per = flt / rss if flt is not None and rss else None
                ft_rows.append([name, a, _fmt(flt), _ratio(flt, base_flt), _fmt(per, 1), _fmt(rss, 1),
                                _ratio(rss, base_rss), "-" if cov is None else f"{100 * cov:.0f}%",
                                _fmt(_med(r, "elapsed_s", a), 3)])
            else:
                small_rows.append([name, a, _fmt(rss, 1), _ratio(rss, base_rss), _fmt(flt),
                                   _ratio(flt, base_flt)])
    if ft_rows:
        out.append(("first touch (medians; ratios against glibc)",
                    ["workload", "allocator", "minor faults", "vs glibc", "faults/MiB peak RSS",
                     "peak RSS [MiB]", "vs glibc", "hugepage coverage", "build [s]"], ft_rows,
                    ["minor faults and peak RSS of the whole process (the runner's wait4); "
                     "coverage: AnonHugePages / Rss from /proc/self/smaps_rollup when the structure "
                     "is complete. MADV_POPULATE_WRITE faults count as minor faults too (the "
                     "kernel counts them), so batched faulting shows in time, not in the count."]))
    if small_rows:
        out.append(("small programs (medians; ratios against glibc)",
                    ["program", "allocator", "peak RSS [MiB]", "vs glibc", "minor faults", "vs glibc"],
                    small_rows, ["the goal: folio at most 1.05x glibc in both."]))
    return out


SUITE = Suite(
    name="folios",
    title="page faults against memory (seed 001's tables)",
    description="Seed 001's kernel-build table (borrowed from kbuild), first-touch workloads "
                "(a tree and a hash table grown to 256 MiB, and to 2 GiB in the full run: minor "
                "faults, faults per MiB, peak RSS, hugepage coverage, time; folio also with "
                "FOLIO_THP=never), and small programs (python3 -c pass, git status, gcc -c, "
                "ls -l: peak RSS and faults against glibc). mimalloc 3.4.3 from "
                "../shared/anchors/ is added when present.",
    workloads=WORKLOADS,
    allocators=_allocators,
    tables=tables,
)
