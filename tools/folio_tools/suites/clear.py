"""Suite ``clear``: folio's clearing engine (issue 5, seeds 000 and 002).

Two parts:

- The strategy tables (a)-(c), once, folio only, before the allocator runs:
  bench/clear_strategies loads build/libfolio.so and times each strategy of
  the engine (loop, rep stosb, non-temporal, hybrid, page at a time, memset)
  and the engine's own choice, on hot and cold destinations, 4 KiB .. 1 GiB
  (see that program for the method).  Its tables come out under the headline
  table and in REPORT.md; the raw data in DIR/clear_strategies.json.  They are
  skipped when ``--only`` is given and none of its patterns matches
  ``strategies``.
- Table (d), the workloads run under every allocator: bench/clear_calloc,
  calloc of a recycled block then a pass that reads and writes back every
  cache line (a program callocs memory to write into it; a read-only pass
  over a fresh mapping would only map the kernel's zero page and leave the
  zeroing to the untimed writes after it), 64 KiB .. 1 GiB; the primary
  metric is GB/s of calloc + pass (median over the iterations of a run, then
  over runs).
"""

import fnmatch
import json
import os
import subprocess
import sys

from .. import paths
from .base import Metric, Suite, Workload, build_bench_programs

GBPS = Metric("gbps", "calloc + pass", "GB/s", "higher")
FIRST = Metric("first_gbps", "first timed calloc + pass", "GB/s", "higher")
FREE_US = Metric("free_us", "free (median)", "us", "lower")
FAULTS = Metric("faults_per_iter", "minor faults per iteration", "", "lower")

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _label(n):
    return f"{n // GiB}G" if n >= GiB else f"{n // MiB}M" if n >= MiB else f"{n // KiB}K"


def _text(n):
    return f"{n // GiB} GiB" if n >= GiB else f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


# (size, iterations, quick iterations or None when not in --quick)
_CALLOC = [(64 * KiB, 400, 200), (256 * KiB, 200, None), (1 * MiB, 100, 60), (4 * MiB, 40, None),
           (16 * MiB, 40, 24), (64 * MiB, 24, None), (256 * MiB, 8, 3), (1 * GiB, 3, None)]


def _calloc_workload(size, iters, quick_iters):
    return Workload(
        f"calloc-{_label(size)}",
        f"calloc({_text(size)}) of a recycled (freed dirty) block, then read and write back "
        "every cache line",
        GBPS, "clear_calloc", ["--size", str(size), "--iters", str(iters)],
        ["--size", str(size), "--iters", str(quick_iters or iters)],
        [FIRST, FREE_US, FAULTS], full_only=quick_iters is None,
        est_s=0.3 + size * (iters + 1) / (2.0 * GiB))


WORKLOADS = [_calloc_workload(*c) for c in _CALLOC]

# -------------------------------------------------------------- strategy tables

_STATE = {"data": None, "text": None, "error": None, "quick": False}


def _argv_value(flag):
    argv = sys.argv
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _strategies_wanted():
    only = _argv_value("--only")
    if not only:
        return True
    return any(fnmatch.fnmatch("strategies", p.strip()) for p in only.split(",") if p.strip())


def prepare():
    """Build bench/, then run the strategy tables once (folio only)."""
    build_bench_programs()
    if not _strategies_wanted():
        return
    quick = "--quick" in sys.argv
    _STATE["quick"] = quick
    lib = paths.ensure_library()
    argv = [paths.bench_binary("clear_strategies"), "--lib", lib]
    if quick:
        argv += ["--quick", "1", "--hot-max", str(256 * MiB)]
    print(f"folio bench clear: strategy tables (folio only{', quick' if quick else ''}) ...",
          file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=1200)
    except (OSError, subprocess.SubprocessError) as e:
        _STATE["error"] = f"{argv[0]}: {e}"
        return
    data = None
    for line in proc.stdout.splitlines():
        if line.startswith("clear_strategies_json "):
            try:
                data = json.loads(line.split(" ", 1)[1])
            except ValueError as e:
                _STATE["error"] = f"unreadable output: {e}"
    if proc.returncode != 0 or data is None:
        _STATE["error"] = _STATE["error"] or (
            f"exit status {proc.returncode}: " + " / ".join(proc.stdout.strip().splitlines()[-3:]))
        return
    _STATE["data"] = data
    _STATE["text"] = "\n".join(l for l in proc.stdout.splitlines()
                               if not l.startswith("clear_strategies_json "))
    out = os.path.abspath(_argv_value("--out") or os.path.join(paths.REPO, "bench-results",
                                                                "latest"))
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "clear_strategies.json"), "w", encoding="utf-8") as f:
            json.dump({"argv": argv, **data}, f, indent=1)
            f.write("\n")
    except OSError:
        pass
    print(f"folio bench clear: strategy tables done in {data.get('elapsed_s', 0):.1f} s",
          file=sys.stderr, flush=True)


def _rows(data):
    """{(size, state): row} with gbps as {strategy: value or None}."""
    out = {}
    names = data["strategies"]
    for r in data["rows"]:
        g = {n: (v if v is not None and v >= 0 else None) for n, v in zip(names, r["gbps"])}
        out[(r["size"], r["state"])] = {"gbps": g, "choice": r["choice"],
                                        "spread": r.get("engine_spread"),
                                        "paired": r.get("paired")}
    return out


def _f(v):
    return "-" if v is None else f"{v:.2f}"


def _pct(a, b):
    return "-" if a is None or not b else f"{100.0 * (a / b - 1):+.1f}%"


def _calibration_note(data):
    c = data.get("clear") or {}
    if not c:
        return []
    return [f"engine: {c.get('nt')} / {c.get('loop')}, erms {c.get('erms')}, L2 "
            f"{_text(c.get('l2_bytes', 0))}, L3 (prior) {_text(c.get('l3_bytes', 0))}; calibrated "
            f"in {c.get('calibration_us', 0) / 1000:.2f} ms on {_text(c.get('calibration_bytes', 0))} "
            f"of its first clear's destination; non-temporal from {_text(c.get('hot_nt_from') or 0)}"
            f" (hot) and {_text(c.get('cold_nt_from') or 0)} (cold) at the end of this run; "
            f"threads: {c.get('threads')} from {_text(c.get('mt_min_bytes', 0))}."]


def strategy_tables(t, results):
    if _STATE["error"]:
        return [("clear: strategy tables failed", ["error"], [[_STATE["error"]]], [])]
    data = _STATE["data"]
    if not data:
        return []
    rows = _rows(data)
    names = data["strategies"]
    reps = data.get("reps")
    method = (f"GB/s, median of {reps} repetitions (each the median of its timed rounds of >= "
              f"32 MiB in all, at least 3 up to 128 MiB, after untimed rounds of the same "
              f"strategy until its rate stops rising), strategies interleaved; hot: the destination "
              "was just written (dirty lines in the cache); cold: its lines were evicted by "
              "non-temporal stores first. Every strategy runs on the calling thread only, except "
              "engine_mt (the engine allowed to split a clear across threads). 1 GiB cannot be "
              "cached: hot and cold are the same state there.")
    out = []
    # (a) seed 000
    ra = []
    for size in (2 * MiB, GiB):
        for state in ("hot", "cold"):
            r = rows.get((size, state))
            if not r or r["gbps"].get("pages") is None:
                continue
            g = r["gbps"]
            ra.append([_text(size), state, _f(g["pages"]), _f(g["stosb"]), _pct(g["stosb"], g["pages"]),
                       _f(g["engine"]), r["choice"], _pct(g["engine"], g["pages"])])
    out.append(("clear (a), seed 000: page at a time against the whole extent",
                ["extent", "state", "pages (4 KiB rep stosb)", "whole extent (rep stosb)", "change",
                 "engine", "engine's choice", "engine vs pages"], ra, [method]))
    # (b) seed 002
    rb = []
    for size in (16 * MiB, 128 * MiB):
        for state in ("hot", "cold"):
            r = rows.get((size, state))
            if not r or r["gbps"].get("stosb") is None:
                continue
            g = r["gbps"]
            rb.append([_text(size), state, _f(g["stosb"]), _f(g["nt"]), _pct(g["nt"], g["stosb"]),
                       r["choice"], _f(g["engine"])])
    out.append(("clear (b), seed 002: rep stosb against non-temporal stores",
                ["size", "state", "rep stosb", "non-temporal", "change", "engine's choice",
                 "engine"], rb, []))
    # (c) every strategy and the engine
    strat = [n for n in names if n not in ("engine", "engine_mt")]
    worst, worst_p = {}, {}
    for state in ("hot", "cold"):
        rc = []
        for (size, st), r in sorted(rows.items()):
            if st != state or r["gbps"].get("stosb") is None:
                continue
            g = r["gbps"]
            vals = [g[n] for n in strat if g.get(n) is not None]
            best = max(vals) if vals else None
            best_name = max((n for n in strat if g.get(n) is not None), key=lambda n: g[n])
            ratio = g["engine"] / best if best and g.get("engine") else None
            if ratio is not None:
                worst[state] = min(worst.get(state, 9), ratio)
            pr = r.get("paired")
            pr = pr if pr is not None and pr >= 0 else None
            if pr is not None:
                worst_p[state] = min(worst_p.get(state, 9), pr)
            sp = r.get("spread")
            rc.append([_text(size)] + [_f(g.get(n)) for n in strat] +
                      [_f(g.get("engine")), r["choice"], best_name,
                       "-" if ratio is None else f"{ratio:.3f}",
                       "-" if pr is None else f"{pr:.3f}",
                       "-" if sp is None else f"{100 * sp:.0f}%", _f(g.get("engine_mt"))])
        notes = []
        if state in worst:
            notes.append(f"engine/best: the engine's GB/s over the best strategy's of that row "
                         f"(every strategy, including pages and memset); lowest here "
                         f"{worst[state]:.3f}. paired: the median over repetitions of the "
                         f"engine's GB/s over that best strategy's in the same repetition (both "
                         f"measured within a second, so a slow spell of this shared machine hits "
                         f"both); lowest here {worst_p.get(state, 0):.3f}. engine spread: "
                         f"(max-min)/median of the engine's "
                         f"repetitions (the noise of this machine: 'engine' and 'engine_mt' run "
                         f"the same code below the threads' threshold).")
        out.append((f"clear (c): every strategy and the engine's choice, {state} destination",
                    ["size"] + strat + ["engine", "choice", "best", "engine/best",
                                        "paired", "engine spread", "engine_mt"],
                    rc, notes + (_calibration_note(data) if state == "cold" else [])))
    # (d): what folio's calloc did in the runs of this suite
    rd = []
    for r in t.rows:
        runs = [x for x in results["runs"] if x["suite"] == t.suite.name and
                x["workload"] == r.workload.name and x["allocator"] == "folio" and x.get("ok")]
        reps_ = [x["folio_report"] for x in runs if x.get("folio_report")]
        if not reps_:
            continue

        def med(key):
            v = sorted(d.get(key, 0) for d in reps_)
            return v[len(v) // 2] if v else 0
        total = sum(med(k) for k in ("cleared_bytes_loop", "cleared_bytes_stosb", "cleared_bytes_nt",
                                     "cleared_bytes_hybrid", "cleared_bytes_other"))
        kinds = ", ".join(f"{k[len('cleared_bytes_'):]} {100.0 * med(k) / total:.0f}%"
                          for k in ("cleared_bytes_loop", "cleared_bytes_stosb", "cleared_bytes_nt",
                                    "cleared_bytes_hybrid") if total and med(k))
        mt = [((d.get("clear") or {}).get("mt_clears", 0)) for d in reps_]
        rd.append([r.workload.name, f"{total / MiB:.0f} MiB", kinds or "-",
                   f"{med('zero_skipped_bytes') / MiB:.0f} MiB", str(sorted(mt)[len(mt) // 2])])
    if rd:
        out.append(("clear (d): what folio's calloc did (medians over folio's runs)",
                    ["workload", "cleared", "by strategy", "known zero, skipped",
                     "clears split across threads"], rd,
                    ["hybrid: non-temporal bulk, the first L2/8 with rep stosb last (calloc's "
                     "caller reads the start next)."]))
    return out


SUITE = Suite(
    name="clear",
    title="the clearing engine: whole-extent, non-temporal and hybrid clears, seeds 000 and 002",
    description="Strategy tables (a)-(c) from bench/clear_strategies (folio only, once): page at "
                "a time against one rep stosb over the extent (seed 000), rep stosb against "
                "non-temporal stores at 16 and 128 MiB (seed 002), every strategy and the "
                "engine's choice at 4 KiB .. 1 GiB, hot and cold. Table (d), under every "
                "allocator: calloc of a recycled block then a pass that reads and writes back "
                "every cache line, 64 KiB .. 1 GiB (--quick: 64 KiB, 1 MiB, 16 MiB, 256 MiB).",
    workloads=WORKLOADS,
    prepare=prepare,
    tables=strategy_tables,
)
