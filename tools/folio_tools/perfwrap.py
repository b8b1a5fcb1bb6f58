#!/usr/bin/env python3
"""Run a bench/ program under ``perf stat``, counting only its measured window.

Usage: perfwrap.py -- PROGRAM ARGS...

The scaling suite's runs go through this script: perf counts the mmap
family's system calls (``syscalls:sys_enter_*``: mmap, munmap, mremap,
mprotect, brk, madvise) and minor faults of the program, started disabled
(``-D -1``); the program enables and disables the counters around its window
through two FIFOs (``BENCH_PERF_CTL``, bench.h's ``bench_perf_ctl``).  The
program's output passes through, followed by one line
``perf_window mmap=N munmap=N ... minor_faults=N``.

The allocator's preload (``LD_PRELOAD``) and folio's ``FOLIO_REPORT`` are
handed to the program only (through ``env``), not to perf; this script leaves
with ``os._exit`` so that a folio preloaded into it writes no report of its own.
With ``FOLIO_LOCK_STATS`` unset, the program gets ``FOLIO_LOCK_STATS=1`` (folio's
lock hold times; other allocators ignore it).  Without a usable perf the
program runs as it is and the line is missing.
"""

import os
import shutil
import subprocess
import sys
import tempfile

CALLS = ["mmap", "munmap", "mremap", "mprotect", "brk", "madvise"]


def main(argv):
    if "--" not in argv:
        sys.stderr.write(__doc__)
        return 2
    prog = argv[argv.index("--") + 1:]
    env = dict(os.environ)
    child = [f"{k}={env.pop(k)}" for k in ("LD_PRELOAD", "FOLIO_REPORT") if k in env]
    if "FOLIO_LOCK_STATS" not in env:
        child.append("FOLIO_LOCK_STATS=1")
    perf = shutil.which("perf")
    if not perf:
        sys.stdout.flush()
        return subprocess.call(["env"] + child + prog, env=env)
    tmp = tempfile.mkdtemp(prefix="perfwrap.")
    try:
        ctl, ack, out = (os.path.join(tmp, n) for n in ("ctl", "ack", "out"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        env["BENCH_PERF_CTL"] = f"{ctl}:{ack}"
        events = [f"syscalls:sys_enter_{c}" for c in CALLS] + ["minor-faults"]
        cmd = [perf, "stat", "-x", ",", "-D", "-1", "--control", f"fifo:{ctl},{ack}",
               "-e", ",".join(events), "-o", out, "--", "env"] + child + prog
        sys.stdout.flush()
        rc = subprocess.call(cmd, env=env)
        counts = {}
        try:
            with open(out) as f:
                for line in f:
                    fields = line.strip().split(",")
                    if len(fields) < 3 or not fields[0].isdigit():
                        continue
                    name = fields[2].replace("syscalls:sys_enter_", "").replace("-", "_")
                    counts[name] = int(fields[0])
        except OSError:
            pass
        if counts:
            print("perf_window " + " ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
        return rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
