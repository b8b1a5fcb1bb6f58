"""Suite ``instr``: instructions per small malloc+free pair, counted by callgrind (issue 11).

Time on this shared 2-core machine is noisy; instruction counts are not.  Each workload runs
bench/alloc_pairs under ``valgrind --tool=callgrind`` twice, with N and 2N pairs, through
tools/folio_tools/callgrind.py: (instructions(2N) - instructions(N)) / N is the cost of one
malloc+free pair with start-up and exit cancelled (all threads counted, folio's purger
included).  Sizes are random in the row's range from a fixed seed, the same for every
allocator.  ``batch`` rows make 100 mallocs, then free them; ``new-delete`` calls C++'s
operator new and sized operator delete instead.  The ``loop`` row is the
harness alone (``--dry 1``): every row includes it.  perf's hardware counters do not work on
this machine, so valgrind it is; callgrind is about 50x slower, hence small N.
"""

import shutil

from .. import paths
from .base import Metric, Suite, Workload, build_bench_programs, parse_result_line

INSTR = Metric("instr_per_pair", "instructions per malloc+free pair", "", "lower", digits=4)
N_FULL, N_QUICK = 200000, 100000
RANGES = [("16-1k", 16, 1024, "16 B-1 KiB"), ("1k-16k", 1025, 16384, "1-16 KiB"),
          ("16k-32k", 16385, 32768, "16-32 KiB")]


def _command(args):
    def command(quick):
        return ["python3", paths.REPO + "/tools/folio_tools/callgrind.py",
                "--n", str(N_QUICK if quick else N_FULL), "--",
                paths.bench_binary("alloc_pairs")] + args
    return command


def _prepare():
    if shutil.which("valgrind") is None:
        raise paths.BuildError("the instr suite needs valgrind (apt-get install -y valgrind)")
    build_bench_programs()


def _workloads():
    out = []
    for batch, what in ((1, "malloc then free"), (100, "100 mallocs, then their frees")):
        for key, lo, hi, label in RANGES:
            name = f"{'pairs' if batch == 1 else 'batch'}-{key}"
            out.append(Workload(
                name, f"{label}, {what}: instructions per pair (callgrind, N and 2N pairs)",
                INSTR, command=_command(["--lo", str(lo), "--hi", str(hi),
                                         "--batch", str(batch)]),
                parse=parse_result_line, reps=1, est_s=3.0))
    out.append(Workload(
        "new-delete-16-1k", "16 B-1 KiB, operator new then sized operator delete (a C++ program's"
        " calls; libstdc++'s for an allocator without its own): instructions per pair",
        INSTR, command=_command(["--lo", "16", "--hi", "1024", "--cxx", "1"]),
        parse=parse_result_line, reps=1, est_s=3.0))
    out.append(Workload(
        "loop", "the harness alone, no malloc/free (--dry 1): included in every row",
        INSTR, command=_command(["--dry", "1"]), parse=parse_result_line, reps=1, est_s=2.0))
    return out


SUITE = Suite(
    name="instr",
    title="instructions per small malloc+free pair (callgrind)",
    description=__doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
    workloads=_workloads(),
    prepare=_prepare,
    reps=1,
)
