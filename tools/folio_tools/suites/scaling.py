"""Suite ``scaling``: what serialises a process, from 1 to 64 threads (issue 15).

Six workloads, each at 1, 2, 4, 8, 16, 32 and 64 threads (``--threads`` picks
some), every allocator: will-it-scale's malloc1 (128 MiB untouched) and
page_fault1 through malloc (32 MiB here, so that 64 threads fit in memory),
ebizzy-like copies into 512 KiB and 64 MiB buffers, a larson-like server
(bench/scaling_server.c) and a thread pool whose tasks allocate bursts of
4-64 KiB blocks (bench/scaling_pool.c).  Every program measures a window that
opens once each thread has warmed up; ``perfwrap.py`` counts, in that window
only, the mmap family's system calls (``perf stat -e syscalls:sys_enter_*``)
and minor faults, for every allocator alike.  folio runs with
``FOLIO_LOCK_STATS=1``: its report gives each lock's acquisitions and hold
time.

This machine has 2 CPUs: beyond 2 threads throughput cannot grow; what is
measured is whether anything serialises.  Each lock's utilisation at N CPUs
is projected as hold time x acquisitions per second per thread x N, that is
(hold time / CPU time of the run) x N, where a thread runs on a CPU of its
own; a lock with an index (a pageset, a huge shard) is per CPU, so its
projection is the average CPU's share, not multiplied; the zone's depot
shards (split by page count, shared by every CPU) are each projected like a
process-wide lock, and the busiest one is shown.  The projection is taken from the runs with no more threads than
CPUs (a holder preempted by a thread of its own process lengthens the holds
of oversubscribed runs); the table of every run shows both.
"""

import os
import sys

from .. import allocators, paths
from .base import Metric, Suite, Workload, parse_result_line

THREADS = (1, 2, 4, 8, 16, 32, 64)
QUICK_THREADS = (1, 4, 64)
CALLS = ("mmap", "munmap", "mremap", "mprotect", "brk")
MIN_ACQUIRED = 100  # fewer acquisitions in a run: a start-up lock, left out of the projection (the
# zone lock, now taken a few hundred times a run by pool, held ~1 us each, is not one)

OPS = Metric("ops_per_sec", "throughput", "ops/s", "higher")
CALLS_PER_MOP = Metric("calls_per_mop", "mmap-family calls per 10^6 ops", "", "lower")
MADVISE_PER_MOP = Metric("madvise_per_mop", "madvise per 10^6 ops", "", "lower")
FAULTS_PER_OP = Metric("faults_per_op", "minor faults per op", "", "lower")


def parse(stdout):
    """The bench line, perfwrap's window counts, and the rates derived from them."""
    out = parse_result_line(stdout)
    for line in stdout.splitlines():
        if line.startswith("perf_window "):
            for tok in line.split()[1:]:
                k, _, v = tok.partition("=")
                try:
                    out["perf_" + k] = float(v)
                except ValueError:
                    pass
    ops = out.get("ops")
    if isinstance(ops, float) and ops > 0 and "perf_mmap" in out:
        out["calls_per_mop"] = sum(out.get("perf_" + c, 0.0) for c in CALLS) * 1e6 / ops
        out["madvise_per_mop"] = out.get("perf_madvise", 0.0) * 1e6 / ops
        out["faults_per_op"] = out.get("perf_minor_faults", 0.0) / ops
    return out


KINDS = [
    # name, binary, what, args (window and threads added), est. seconds of a 64-thread run
    ("malloc1", "faults_malloc1", "malloc + free 128 MiB, untouched", []),
    ("page_fault1", "faults_page_fault1", "malloc 32 MiB, write each page, free",
     ["--size", str(32 << 20)]),
    ("ebizzy-512k", "faults_ebizzy", "malloc 512 KiB, copy records, search, free",
     ["--chunk-size", str(512 << 10)]),
    ("ebizzy-64m", "faults_ebizzy", "malloc 64 MiB, copy records, search, free",
     ["--chunk-size", str(64 << 20), "--chunks", "2"]),
    ("server", "scaling_server", "larson-like: replace objects of 16..1024 B, swap some "
     "through shared mailboxes", []),
    ("pool", "scaling_pool", "thread pool: bursts of 8..64 blocks of 4..64 KiB, touched, one "
     "passed on", []),
]


def _command(binary, args, threads, seconds):
    def command(quick):
        win = seconds[1] if quick else seconds[0]
        return [sys.executable, os.path.join(paths.REPO, "tools", "folio_tools", "perfwrap.py"),
                "--", paths.bench_binary(binary), "--threads", str(threads),
                "--seconds", str(win)] + args
    return command


def _workloads():
    out = []
    for name, binary, what, args in KINDS:
        for t in THREADS:
            out.append(Workload(
                f"{name}-{t}t", f"{t} thread{'s' if t > 1 else ''}: {what}", OPS,
                command=_command(binary, args, t, (0.5, 0.2)), parse=parse,
                extra_metrics=[CALLS_PER_MOP, MADVISE_PER_MOP, FAULTS_PER_OP],
                full_only=t not in QUICK_THREADS, timeout=120))
    return out


def _split(name):
    kind, _, t = name.rpartition("-")
    return kind, int(t[:-1])


def _lock_shares(rep, cpu_s):
    """{lock: (share of one CPU's time held, per-CPU lock)} from one folio report."""
    out = {}
    if not rep or not cpu_s:
        return out
    for lk in rep.get("locks") or []:
        # a lock taken a few times in the run (start-up: init, the clearing engine's
        # calibration) is not what the threads queue on in a steady state
        if not isinstance(lk, dict) or not lk.get("held_ns") or lk.get("acquired", 0) < MIN_ACQUIRED:
            continue
        share = lk["held_ns"] / (cpu_s * 1e9)
        if lk.get("name") == "depot":
            # the zone's depot is split by page count, not by CPU: every CPU
            # may take each shard's lock, so each is a process-wide lock of
            # its own (projected x N); the busiest one is what queues first
            key = "depot (busiest shard)"
            out[key] = (max(out.get(key, (0.0, False))[0], share), False)
            continue
        per_cpu = lk.get("index", -1) >= 0   # each pageset, each huge shard: one per CPU
        key = lk.get("name") + (" (per CPU)" if per_cpu else "")
        prev = out.get(key, (0.0, per_cpu))[0]
        out[key] = (prev + share, per_cpu)
    return out


def _projection(shares, n):
    return {k: (s if per_cpu else s * n) for k, (s, per_cpu) in shares.items()}


def _fmt(v, digits=3):
    return Metric("", "", "", "lower", digits).format(v)


def scaling_tables(t, results):
    from ..summary import workload_runs
    allocs = t.allocators
    kinds = list(dict.fromkeys(_split(r.workload.name)[0] for r in t.rows))
    tables = []
    proj_rows, worst = [], {}
    for kind in kinds:
        rows = []
        for r in t.rows:
            k, threads = _split(r.workload.name)
            if k != kind:
                continue
            runs, _ = workload_runs(results, t.suite.name, r.workload.name)
            for a in allocs:
                cell = r.primary(a)
                if cell.n == 0 and not cell.failed:
                    continue
                def med(key):
                    c = r.cells.get(key, {}).get(a)
                    return c.median if c else None
                mine = [x for x in runs if x["allocator"] == a and x.get("ok")]
                lock_txt, os_txt = "", ""
                reps = [(x.get("folio_report"), x.get("measures", {}).get("cpu_s")) for x in mine]
                reps = [(rep, c) for rep, c in reps if rep]
                if reps:
                    rep, cpu_s = reps[0]
                    shares = _lock_shares(rep, cpu_s)
                    if shares:
                        top = max(shares, key=lambda k2: _projection(shares, 64)[k2])
                        p16, p64 = _projection(shares, 16)[top], _projection(shares, 64)[top]
                        lock_txt = f"{top}: {100 * p16:.2g}% / {100 * p64:.2g}%"
                        if threads <= (os.cpu_count() or 1):
                            p16s = _projection(shares, 16)
                            for lk, v in _projection(shares, 64).items():
                                key = (kind, a, lk)
                                old = worst.get(key, (0.0, 0.0))
                                worst[key] = (max(old[0], p16s[lk]), max(old[1], v))
                    calls = sum(rep.get(f"os_{c}_calls", 0) for c in ("mmap", "munmap", "mremap", "mprotect"))
                    os_txt = f"{calls}"
                rows.append([str(threads), a,
                             "FAIL" if cell.n == 0 else OPS.format(cell.median),
                             _fmt(med("calls_per_mop")), _fmt(med("madvise_per_mop")),
                             _fmt(med("faults_per_op")), os_txt, lock_txt])
        header = ["threads", "allocator", "ops/s", "mmap-family calls / 10^6 ops (window)",
                  "madvise / 10^6 ops (window)", "minor faults / op (window)",
                  "folio os_* mmap-family calls (whole run)",
                  "folio's busiest lock: projected use at 16 / 64 CPUs"]
        desc = next((r.workload.description.split(": ", 1)[1] for r in t.rows
                     if _split(r.workload.name)[0] == kind), "")
        tables.append((f"scaling: {kind} ({desc})", header, rows, []))
    for (kind, a, lk), (v16, v64) in sorted(worst.items()):
        proj_rows.append([kind, a, lk, f"{100 * v16:.3g}%", f"{100 * v64:.3g}%"])
    notes = [
        "window counts: perf stat counting only the measured window (perfwrap.py, bench.h's "
        "bench_perf_ctl); mmap-family: mmap, munmap, mremap, mprotect, brk (each takes the "
        "mmap lock for writing); madvise takes it for reading.",
        "projection: a lock's hold time over the run's CPU time, times N CPUs (per-CPU locks, "
        "the pagesets and the huge shards: their summed hold time over the CPU time, the "
        "average CPU's share, not multiplied; the depot's shards, split by page count and "
        "shared by every CPU: the busiest one, multiplied), from the runs with no more threads than this "
        f"machine's {os.cpu_count()} CPUs (the largest of them); locks taken fewer than "
        f"{MIN_ACQUIRED} times in a run (start-up: init, the clearing engine's calibration) are "
        "left out. The lock that saturates first is the one with the highest figure.",
    ]
    if proj_rows:
        first = max(proj_rows, key=lambda row: float(row[4].rstrip("%")))
        notes.append(f"first to saturate: {first[2]} under {first[0]} ({first[1]}), "
                     f"{first[4]} of its time at 64 CPUs.")
        tables.append(("scaling: folio's locks projected to 16 and 64 CPUs",
                       ["workload", "allocator", "lock", "16 CPUs", "64 CPUs"], proj_rows, notes))
    return tables


def _allocators(names):
    """Every allocator asked for, and mimalloc 3.4.3 from ../shared/anchors when present."""
    return allocators.with_anchor(names)


SUITE = Suite(
    name="scaling",
    title="what serialises a process, 1 to 64 threads",
    description="will-it-scale malloc1 (128 MiB untouched) and page_fault1 through malloc (32 MiB), "
                "ebizzy-like with 512 KiB and 64 MiB buffers, a larson-like server and a thread "
                "pool, at 1, 2, 4, 8, 16, 32 and 64 threads (--quick: 1, 4, 64; --threads picks). "
                "Per run: throughput, mmap-family calls and madvise per 10^6 operations and "
                "minor faults per operation in the measured window (perf stat), folio's lock "
                "hold times (FOLIO_LOCK_STATS=1), projected to 16 and 64 CPUs.",
    workloads=_workloads(),
    reps=1,
    allocators=_allocators,
    tables=scaling_tables,
)
