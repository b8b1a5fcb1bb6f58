"""``folio bench``: run suites of workloads under several allocators and compare them.

Order of runs: for each suite, for each workload, for each repetition, every
allocator once (A B C A B C ...), the allocators' order rotated by one each
repetition so no allocator always runs first.  Each run is a fresh process;
the runner measures its wall time (spawn to exit) and, with wait4, its
user/system time, peak RSS and minor faults; the workload prints its own
throughput or time.  A run counts only if it exited 0, printed its primary
metric, and its ``malloc_lib`` (printed by every bench/ program) is the
allocator that was meant to be loaded.  folio runs also keep folio's JSON
report.  Results: DIR/results.json (every run), DIR/REPORT.md (tables of
medians and ratios, charts), and the headline table on stdout.  Exit status:
0, or 1 if any run failed (the report lists them), 130 if interrupted.

A suite may run its own list of allocators (``pageset`` runs folio as two
variants, ``folio-fixed`` and ``folio-auto``), its own number of repetitions
(``kbuild``: fewer, longer runs), workloads only in the full run, and a
workload that is the same as another suite's (``pageset``'s kbuild is
``kbuild``'s): when both are planned, the allocators the other already runs
are borrowed from it instead of being run twice.
"""

import argparse
import datetime
import fnmatch
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time

from . import allocators, paths, proc, render, report, summary
from .suites import SUITES

QUICK_REPS = 3
FULL_REPS = 5
DEFAULT_TIMEOUT = 300


def add_parser(sub):
    p = sub.add_parser(
        "bench", help="compare folio with glibc, jemalloc, TCMalloc and mimalloc",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="suites: " + "; ".join(f"{s.name}: {s.title}" for s in SUITES.values())
               + ".  Examples: `folio bench alloc --quick`, `folio bench faults --only "
                 "'page_fault1-*' --reps 7`.")
    p.add_argument("suites", nargs="*", metavar="SUITE",
                   help=f"suites to run (default: all of {', '.join(SUITES)})")
    p.add_argument("--quick", action="store_true",
                   help=f"smaller workloads and {QUICK_REPS} repetitions (under 3 minutes for "
                        "all suites on 2 cores)")
    p.add_argument("--allocators", default=",".join(allocators.DEFAULT), metavar="LIST",
                   help="comma-separated allocators (default: %(default)s); also the folio "
                        "variants folio-fixed, folio-auto, or any variant defined as "
                        "NAME=BASE:VAR=VALUE[:VAR=VALUE...], e.g. "
                        "'folio,nopurge=folio:FOLIO_PURGE_THREAD=0'; any allocator library "
                        "as NAME=/path/to/lib.so (preloaded; its runs count only if malloc came "
                        "from that file), e.g. 'folio,old=/tmp/old/build/libfolio.so'; and "
                        "mimalloc-3.4.3, built from source in ../shared/anchors/ (skipped with a "
                        "note when absent)")
    p.add_argument("--reps", type=int, metavar="N",
                   help=f"repetitions per workload and allocator (default {FULL_REPS} or the "
                        f"suite's own, {QUICK_REPS} with --quick)")
    p.add_argument("--out", metavar="DIR",
                   default=os.path.join(paths.REPO, "bench-results", "latest"),
                   help="output directory (default: <repo>/bench-results/latest)")
    p.add_argument("--only", metavar="PATTERNS",
                   help="comma-separated shell patterns of workload names to run (e.g. 'churn,larson')")
    p.add_argument("--threads", metavar="LIST",
                   help="comma-separated thread counts: of the workloads named NAME-<N>t (the "
                        "scaling and faults suites), run only those with N in LIST (e.g. '1,2,64')")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                   help="seconds before a run is killed and counted as failed (default %(default)s)")
    p.add_argument("--install", action="store_true",
                   help="install what is missing: allocators with apt-get (as root), matplotlib "
                        "with pip; without it a missing one is skipped with a note naming the "
                        "command that installs it")
    p.add_argument("--no-install", action="store_true",
                   help=argparse.SUPPRESS)  # the old opt-out, now the default: accepted, no effect
    p.add_argument("--no-plots", action="store_true", help="do not draw PNG charts")
    p.add_argument("--list", action="store_true", help="list suites and workloads and exit")
    p.set_defaults(func=cmd_bench)


def _say(msg):
    print(msg, file=sys.stderr, flush=True)


def _fmt_eta(seconds):
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}"


def list_suites(quick):
    for s in SUITES.values():
        print(f"{s.name}: {s.title}\n  {s.description}")
        for w in s.workloads:
            if quick and w.full_only:
                print(f"  {w.name:<16} (full run only) {w.description}")
                continue
            reps = QUICK_REPS if quick else (w.reps or s.reps or FULL_REPS)
            print(f"  {w.name:<16} {w.description} ({reps} repetitions)\n"
                  f"  {'':<16} $ {w.shell(quick)}")
        print()


def _threads_ok(name, threads):
    """A workload named NAME-<N>t runs when N is in threads (None: all)."""
    m = re.search(r"-(\d+)t$", name)
    return threads is None or m is None or int(m.group(1)) in threads


def select_workloads(suite, only, quick=False, threads=None):
    ws = [w for w in suite.workloads if not (quick and w.full_only and threads is None)
          and _threads_ok(w.name, threads)]
    if not only:
        return ws
    pats = [p.strip() for p in only.split(",") if p.strip()]
    return [w for w in ws if any(fnmatch.fnmatch(w.name, p) for p in pats)]


def machine_info():
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    thp = None
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    return {"host": platform.node(), "kernel": platform.release(), "cpu": cpu,
            "cpus": os.cpu_count(), "thp": thp, "python": platform.python_version()}


_HZ = os.sysconf("SC_CLK_TCK")


def cpu_busy_s():
    """Seconds of CPU time the whole machine has spent busy (and stolen by the hypervisor)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None, None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    steal = v[7] if len(v) > 7 else 0
    return (sum(v[:8]) - idle - steal) / _HZ, steal / _HZ


def measure_run(workload, alloc, quick, timeout, scratch, report_wanted=True):
    """Run one workload under one allocator; returns the run's record (without ids).
    report_wanted: a folio build writes its report (FOLIO_REPORT) in this run.  Writing one
    costs each process a few dozen files read at exit (its /proc status and smaps_rollup, the
    THP settings, the cache topology) and about 15 page faults, which a program run the way
    users run it does not pay: the runner asks for reports in each workload's first
    repetition only, so the medians of time, faults and RSS are of runs without them."""
    argv = workload.argv(quick)
    env = alloc.environment(os.environ)
    env.update(workload.env)
    rec = {"argv": argv, "ok": False, "error": None}
    if alloc.env:
        rec["env"] = dict(alloc.env)
    if workload.before_run:
        try:
            workload.before_run(quick)
        except (OSError, paths.BuildError) as e:
            rec["error"] = f"preparing the run failed: {e}"
            return rec
    rdir = None
    if alloc.family == "folio" and report_wanted:
        rdir = tempfile.mkdtemp(prefix="report.", dir=scratch)
        env["FOLIO_REPORT"] = report.report_pattern(rdir)
    with tempfile.TemporaryFile(dir=scratch) as out, tempfile.TemporaryFile(dir=scratch) as err:
        busy0, steal0 = cpu_busy_s()
        try:
            ex = proc.run(argv, env, out.fileno(), err.fileno(),
                          timeout=workload.timeout or timeout)
        except OSError as e:
            rec["error"] = f"cannot run {argv[0]}: {e}"
            return rec
        busy1, steal1 = cpu_busy_s()
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    rec.update({
        "exit_status": ex.exit_code, "signal": ex.signal_name, "timed_out": ex.timed_out,
        "measures": {"wall_s": ex.wall_s, "user_s": ex.user_s, "sys_s": ex.sys_s,
                     "cpu_s": ex.user_s + ex.sys_s, "maxrss_mib": ex.maxrss_kib / 1024.0,
                     "minflt": ex.minflt, "majflt": ex.majflt, "nvcsw": ex.nvcsw,
                     "nivcsw": ex.nivcsw},
        "metrics": workload.parse(stdout),
        # CPU time that other processes (and the hypervisor) took from the machine meanwhile
        "interference": None if busy0 is None else {
            "other_cpu_s": max(0.0, busy1 - busy0 - ex.user_s - ex.sys_s),
            "steal_s": steal1 - steal0,
            "capacity_s": ex.wall_s * (os.cpu_count() or 1)},
        "stdout_tail": stdout.strip().splitlines()[-3:],
        "stderr_tail": stderr.strip().splitlines()[-10:],
    })
    if rdir:
        reps, problems = report.collect(rdir)
        if len(reps) == 1:
            rec["folio_report"] = dict(reps[0])
            rec["folio_report"].update(report.derived(reps))
        elif reps:
            agg = report.aggregate(reps)
            agg.update(report.derived(reps))
            rec["folio_report"] = agg
        if problems:
            rec["folio_report_problems"] = problems
        shutil.rmtree(rdir, ignore_errors=True)

    lib = rec["metrics"].get("malloc_lib")
    if ex.timed_out:
        rec["error"] = f"timed out after {workload.timeout or timeout:g} s"
    elif ex.signal_name:
        rec["error"] = f"killed by {ex.signal_name}"
    elif ex.exit_code != 0:
        rec["error"] = f"exit status {ex.exit_code}"
    elif workload.metric.key not in rec["metrics"] and workload.metric.key not in rec["measures"]:
        rec["error"] = f"no {workload.metric.key} in the output"
    elif isinstance(lib, str) and not alloc.loaded(lib):
        rec["error"] = f"malloc came from {lib}, not {alloc.name}: preload failed?"
    elif "from LD_PRELOAD cannot be preloaded" in stderr:
        # ld.so's word that a process (one preload_exec started, which
        # reports the library it hands on, not one it loaded) ran without it
        rec["error"] = f"{alloc.name} could not be preloaded: {stderr.strip().splitlines()[0]}"
    else:
        rec["ok"] = True
    return rec


def _value(run, key):
    v = run.get("metrics", {}).get(key)
    if v is None:
        v = run.get("measures", {}).get(key)
    return v if isinstance(v, (int, float)) else None


def _snapshot_folio(allocs):
    """Load folio from a copy of build/libfolio.so taken now, so that a rebuild during a long
    run (others may be working in the tree) cannot mix two versions in one report.  Returns
    the directory of the copy (removed at the end), or None."""
    import hashlib
    folios = [a for a in allocs if a.family == "folio" and a.preload and not a.exact]
    if not folios:
        return None
    src = folios[0].preload
    d = tempfile.mkdtemp(prefix="folio-bench-lib.")
    dst = os.path.join(d, os.path.basename(src))
    shutil.copy2(src, dst)
    with open(dst, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    for a in folios:
        a.preload = dst
        a.version += f", {os.path.basename(src)} sha256 {digest} (copied at the start)"
    return d


def _write_json(path, data, final=True):
    """Write atomically.  Checkpoints during the run are compact (json.dumps without indent
    uses the C encoder: rewriting a growing file after every run must stay cheap)."""
    tmp = path + ".tmp"
    text = json.dumps(data, indent=1) if final else json.dumps(data, separators=(",", ":"))
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.write("\n")
    os.replace(tmp, path)


def cmd_bench(args):
    t_start = time.time()
    quick = args.quick
    if args.list:
        list_suites(quick)
        return 0
    names = args.suites or list(SUITES)
    bad = [n for n in names if n not in SUITES]
    if bad:
        _say(f"folio bench: unknown suite(s) {', '.join(bad)} (known: {', '.join(SUITES)})")
        return 2
    if args.reps is not None and args.reps < 1:
        _say("folio bench: --reps must be at least 1")
        return 2
    skipped_workloads = []
    if quick:
        for n in names:
            skipped_workloads += [f"{n}/{w.name}" for w in SUITES[n].workloads if w.full_only]
    try:
        threads = None if not args.threads else {int(x) for x in args.threads.split(",") if x.strip()}
    except ValueError:
        _say(f"folio bench: --threads: not a list of numbers: {args.threads}")
        return 2
    plan_suites = [(SUITES[n], select_workloads(SUITES[n], args.only, quick, threads)) for n in names]
    plan_suites = [(s, ws) for s, ws in plan_suites if ws]
    if skipped_workloads:
        _say(f"note: full run only, not run with --quick: {', '.join(skipped_workloads)}")
    if not plan_suites:
        _say(f"folio bench: no workload to run (--only {args.only}, --quick {quick})")
        return 2

    try:
        wanted = allocators.parse_names(args.allocators)
    except ValueError as e:
        _say(f"folio bench: --allocators: {e}")
        return 2
    # each suite's own allocator list (e.g. pageset: folio as folio-fixed and folio-auto)
    suite_names = {s.name: (s.allocators(list(wanted)) if s.allocators else list(wanted))
                   for s, _ in plan_suites}
    every = list(dict.fromkeys(n for s, _ in plan_suites for n in suite_names[s.name]))
    allocs, skipped = allocators.resolve(every, install=args.install)
    for name, why in skipped:
        _say(f"note: {name} skipped: {why}")
    if not allocs:
        _say("folio bench: no allocator available")
        return 1
    if "glibc" not in [a.name for a in allocs]:
        _say("note: glibc is not among the allocators: no ratios to glibc")
    snapshot = _snapshot_folio(allocs)
    by_name = {a.name: a for a in allocs}
    suite_allocs = {s.name: [by_name[n] for n in suite_names[s.name] if n in by_name]
                    for s, _ in plan_suites}
    def reps_of(s, w):
        return args.reps or (QUICK_REPS if quick else (w.reps or s.reps or FULL_REPS))
    workload_reps = {f"{s.name}/{w.name}": reps_of(s, w) for s, ws in plan_suites for w in ws}
    suite_reps = {}
    for s, ws in plan_suites:
        r = sorted({reps_of(s, w) for w in ws})
        suite_reps[s.name] = r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}"

    # A workload the same as another planned suite's ("guest" of that "host" workload) borrows
    # the runs of the allocators the host runs (directly, or through an alias such as
    # folio-auto -> folio when the variant's environment is folio's default), and its other
    # allocators run inside the host's rotation, so that every allocator of the comparison
    # is interleaved with every other.
    planned = {(s.name, w.name) for s, ws in plan_suites for w in ws}
    shared = {}         # "suite/workload" -> {"from", "allocators", "aliases"}
    run_allocs = {}     # (suite, workload) -> allocators run for it in its own rotation
    guests = {}         # host (suite, workload) -> [(suite, workload, [allocators])]
    for s, ws in plan_suites:
        for w in ws:
            mine = suite_allocs[s.name]
            host = tuple(w.same_as) if w.same_as else None
            if host and host in planned and host[0] != s.name:
                theirs = {a.name for a in suite_allocs[host[0]]}
                aliases = {k: v for k, v in (w.same_as_allocators or {}).items()
                           if k not in theirs and v in theirs}
                borrowed = [a.name for a in mine if a.name in theirs or a.name in aliases]
                if borrowed:
                    shared[f"{s.name}/{w.name}"] = {
                        "from": "/".join(host), "allocators": borrowed,
                        "aliases": {a: aliases[a] for a in borrowed if a in aliases}}
                own = [a for a in mine if a.name not in borrowed]
                if own:
                    guests.setdefault(host, []).append((s, w, own))
                mine = []
            run_allocs[(s.name, w.name)] = mine

    for suite, workloads in plan_suites:
        try:
            suite.prepare()
            done = set()
            for w in workloads:
                if w.prepare and w.prepare not in done:
                    done.add(w.prepare)
                    w.prepare()
        except paths.BuildError as e:
            _say(f"folio bench: suite {suite.name}: {e}")
            if snapshot:
                shutil.rmtree(snapshot, ignore_errors=True)
            return 1

    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):      # a previous run's files must not be mistaken for this one's
        if f in ("results.json", "REPORT.md") or f.endswith(".png"):
            os.remove(os.path.join(out, f))
    all_reps = sorted(set(workload_reps.values()))
    results = {
        "meta": {
            "loadavg_before": os.getloadavg(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": sys.argv, "quick": quick,
            "reps": all_reps[0] if len(all_reps) == 1 else suite_reps,
            "suite_reps": suite_reps, "workload_reps": workload_reps,
            "folio_commit": paths.git_describe(),
            "machine": machine_info(), "order": "suite > workload > rep > allocators (rotated)",
            "allocators": [{"name": a.name, "preload": a.preload, "version": a.version,
                            "env": a.env, "base": a.family} for a in allocs],
            "suite_allocators": {k: [a.name for a in v] for k, v in suite_allocs.items()},
            "skipped": [{"name": n, "reason": why} for n, why in skipped],
            "skipped_workloads": skipped_workloads,
            "shared": shared,
            "suites": {s.name: [w.name for w in ws] for s, ws in plan_suites},
        },
        "runs": [],
    }
    results_path = os.path.join(out, "results.json")

    plan = []
    for suite, workloads in plan_suites:
        for w in workloads:
            group = [(suite, w, a) for a in run_allocs[(suite.name, w.name)]]
            for gs, gw, own in guests.get((suite.name, w.name), []):
                group += [(gs, gw, a) for a in own]
            if not group:
                continue
            for rep in range(workload_reps[f"{suite.name}/{w.name}"]):
                k = rep % len(group)
                for s2, w2, alloc in group[k:] + group[:k]:
                    plan.append((s2, w2, rep, alloc))
    nw = sum(len(ws) for _, ws in plan_suites)
    reps_text = " or ".join(str(r) for r in all_reps)
    _say(f"folio bench: {len(plan)} runs ({nw} workloads x up to {len(allocs)} allocators x "
         f"{reps_text} reps){' --quick' if quick else ''}; results in {out}")
    for k, v in shared.items():
        names = [f"{a} (= {v['aliases'][a]})" if a in v["aliases"] else a
                 for a in v["allocators"]]
        _say(f"note: {k} borrows the runs of {v['from']} under {', '.join(names)}; "
             f"its other allocators run interleaved with {v['from']}'s")

    walls = {}      # (suite, workload) -> list of wall seconds so far
    last_save = 0.0
    interrupted = False
    scratch = tempfile.mkdtemp(prefix="folio-bench.")
    try:
        for i, (suite, w, rep, alloc) in enumerate(plan):
            print(f"[{i + 1:>3}/{len(plan)}] {suite.name}/{w.name:<16} {alloc.name:<11} "
                  f"rep {rep + 1}/{workload_reps[f'{suite.name}/{w.name}']} ", end="", file=sys.stderr,
                  flush=True)
            rec = measure_run(w, alloc, quick, args.timeout, scratch, report_wanted=rep == 0)
            rec = {"suite": suite.name, "workload": w.name, "allocator": alloc.name,
                   "rep": rep, **rec}
            results["runs"].append(rec)
            if time.time() - last_save > 5.0 or i + 1 == len(plan):
                _write_json(results_path, results, final=False)
                last_save = time.time()
            wall = rec.get("measures", {}).get("wall_s", 0.0)
            walls.setdefault((suite.name, w.name), []).append(wall)
            everything = [x for ws in walls.values() for x in ws]
            overall = sum(everything) / len(everything)
            eta = 0.0
            for s2, w2, _, _ in plan[i + 1:]:
                seen = walls.get((s2.name, w2.name))
                eta += (sum(seen) / len(seen)) if seen else (w2.est_s or overall)
            if rec["ok"]:
                v = _value(rec, w.metric.key)
                what = f"{w.metric.label} {w.metric.format(v)} {w.metric.unit}".rstrip()
            else:
                what = f"FAILED: {rec['error']}"
            busy = render.runner_share(rec)
            noisy = f"  busy {100 * busy:.0f}%" if busy is not None and busy > 0.1 else ""
            print(f"{what:<34} wall {wall:6.2f} s  ETA {_fmt_eta(eta)}{noisy}", file=sys.stderr,
                  flush=True)
    except KeyboardInterrupt:
        interrupted = True
        _say("\ninterrupted: reporting the runs done so far")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if snapshot:
            shutil.rmtree(snapshot, ignore_errors=True)

    results["meta"]["elapsed_s"] = round(time.time() - t_start, 1)
    results["meta"]["interrupted"] = interrupted
    _write_json(results_path, results)
    tables = summary.summarize(results, [(s, ws) for s, ws in plan_suites],
                               {k: [a.name for a in v] for k, v in suite_allocs.items()})
    plot_note = None
    if not args.no_plots:
        from . import plots
        plot_note = plots.draw(tables, out, install=args.install)
    else:
        plot_note = {"note": "charts not drawn (--no-plots)", "files": {}}
    report_path = os.path.join(out, "REPORT.md")
    with open(report_path, "w", encoding="utf-8") as f:
        f.write(render.markdown_report(results, tables, plot_note))
    print(render.headline_text(results, tables))
    _say(f"folio bench: {len(results['runs'])} runs in {results['meta']['elapsed_s']:.0f} s; "
         f"wrote {results_path} and {report_path}")
    failed = sum(1 for r in results["runs"] if not r["ok"])
    if failed:
        _say(f"folio bench: {failed} run(s) failed; see REPORT.md")
    return 130 if interrupted else 1 if failed else 0
