"""Instructions per unit of work of a bench/ program, counted by callgrind.

``python3 tools/folio_tools/callgrind.py --count-opt pairs --n N -- PROG ARGS...`` runs
``valgrind --tool=callgrind PROG ARGS --pairs N`` and again with ``--pairs 2N``: the difference
of the two instruction totals over N is the cost of one unit, start-up and exit cancelled.
The allocator is whatever LD_PRELOAD says in the environment (valgrind passes it on to the
program).  Prints the program's result line with ``instr_per_pair`` (and both totals) added,
so the runner checks ``malloc_lib`` as for any bench program.  Instruction counts are
repeatable where time on a shared machine is not.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

COLLECTED = re.compile(r"==\d+== Collected : (\d+)")


def count(argv):
    """(total instructions of all threads, the program's bench= line) of one callgrind run."""
    with tempfile.TemporaryDirectory(prefix="callgrind.") as d:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/out.%p"] + argv
        res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-2000:])
        raise SystemExit(f"callgrind.py: {' '.join(cmd)}: exit status {res.returncode}")
    totals = [int(x) for x in COLLECTED.findall(res.stderr)]
    line = next((x for x in res.stdout.splitlines() if x.startswith("bench=")), None)
    if not totals or line is None:
        sys.stderr.write(res.stderr[-2000:])
        raise SystemExit("callgrind.py: no instruction total or no result line")
    return sum(totals), line


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count-opt", default="pairs", help="the program's option giving N")
    p.add_argument("--n", type=int, default=200000, help="units of work of the first run")
    p.add_argument("prog", nargs=argparse.REMAINDER, help="-- PROG ARGS...")
    a = p.parse_args()
    prog = a.prog[1:] if a.prog[:1] == ["--"] else a.prog
    if not prog or a.n < 1:
        p.error("needs -- PROG ARGS... and --n >= 1")
    ir1, _ = count(prog + [f"--{a.count_opt}", str(a.n)])
    ir2, line = count(prog + [f"--{a.count_opt}", str(2 * a.n)])
    print(f"{line} instr_per_pair={(ir2 - ir1) / a.n:.2f} ir_n={ir1} ir_2n={ir2} n={a.n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
