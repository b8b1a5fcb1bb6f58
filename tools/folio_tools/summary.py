"""Medians, ratios and geometric means over the runs of ``folio bench``.

Ratios are *cost* ratios so that every workload reads the same way: for a
lower-is-better metric (time, memory) it is folio's value over the other's;
for a higher-is-better metric (throughput) it is the other's over folio's
(time per operation).  Below 1.00 folio is better, above 1.00 it is worse.
"""

import math
from dataclasses import dataclass, field

from . import report as folio_report
from .suites.base import COMMON_METRICS


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


@dataclass
class Cell:
    median: float = None
    lo: float = None
    hi: float = None
    n: int = 0            # successful runs
    failed: int = 0

    @property
    def spread(self):
        """(max - min) / median, or None."""
        if self.median in (None, 0) or self.n < 2:
            return None
        return (self.hi - self.lo) / abs(self.median)


@dataclass
class Row:
    workload: object                        # suites.base.Workload
    cells: dict = field(default_factory=dict)      # metric key -> {allocator: Cell}
    ratio_to_glibc: dict = field(default_factory=dict)   # allocator -> cost ratio
    folio_vs_glibc: float = None
    best_other: str = None
    folio_vs_best: float = None
    spread: float = None                    # spread of the primary metric (see summarize)
    counters: dict = field(default_factory=dict)   # folio-family allocator -> {key: median}
    options: dict = field(default_factory=dict)    # folio-family allocator -> options in effect
    focus: str = "folio"                    # the allocator the ratio columns are about
    borrowed: dict = field(default_factory=dict)   # allocator -> "suite/workload" its runs came from

    @property
    def folio_counters(self):
        """Medians of folio's counters for the focus allocator (folio, or the suite's variant)."""
        return self.counters.get(self.focus, {})

    def primary(self, alloc):
        return self.cells[self.workload.metric.key].get(alloc, Cell())


@dataclass
class SuiteTable:
    suite: object
    allocators: list
    rows: list
    focus: str = "folio"
    geo_to_glibc: dict = field(default_factory=dict)
    geo_folio_vs_glibc: float = None
    geo_folio_vs_best: float = None
    failures: list = field(default_factory=list)


def _value(run, key):
    v = run.get("metrics", {}).get(key)
    if v is None:
        v = run.get("measures", {}).get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _cell(runs, key):
    vals = [_value(r, key) for r in runs if r["ok"]]
    vals = [v for v in vals if v is not None]
    c = Cell(n=len(vals), failed=sum(1 for r in runs if not r["ok"]))
    if vals:
        c.median, c.lo, c.hi = median(vals), min(vals), max(vals)
    return c


FOLIO_COUNTERS = ["allocs", "small_allocs", "large_allocs", "huge_allocs", "zone_lock_acquired",
                  "zone_lock_contended", "pages_from_zone", "pages_to_zone", "pcp_refills",
                  "pcp_drains", "free_high_drains", "pcp_decays", "purges", "purged_bytes",
                  "peak_mapped_bytes", "mapped_bytes", "peak_rss_bytes", "rss_bytes",
                  "rss_bytes_max", "minor_faults", "processes", "processes_allocating",
                  "pcp_high_highest", "pcp_high_final_max", "pcp_high_min", "pcp_high_max"]


def _folio_counters(runs):
    reps = [r.get("folio_report") for r in runs if r["ok"] and r.get("folio_report")]
    out = {}
    for key in FOLIO_COUNTERS:
        vals = [d[key] for d in reps if isinstance(d.get(key), (int, float))]
        if vals:
            out[key] = median(vals)
    pcts = [folio_report.contention_pct(d) for d in reps]
    pcts = [p for p in pcts if p is not None]
    if pcts:
        out["contention_pct"] = median(pcts)
    return out


def _family(results):
    """allocator name -> the allocator it is built on (from results.json's meta)."""
    return {a["name"]: a.get("base") or a["name"] for a in results["meta"].get("allocators", [])}


def workload_runs(results, suite_name, workload_name):
    """The runs of one workload: its own, plus those borrowed from the workload it is the same
    as (results.json meta "shared"); returns (runs, {allocator: source})."""
    runs = [r for r in results["runs"]
            if r["suite"] == suite_name and r["workload"] == workload_name]
    borrowed = {}
    share = (results["meta"].get("shared") or {}).get(f"{suite_name}/{workload_name}")
    if share:
        src_suite, src_w = share["from"].split("/", 1)
        aliases = share.get("aliases") or {}
        for a in share["allocators"]:
            src_a = aliases.get(a, a)
            theirs = [dict(r, allocator=a, borrowed_from=f"{share['from']} ({src_a})")
                      for r in results["runs"] if r["suite"] == src_suite
                      and r["workload"] == src_w and r["allocator"] == src_a]
            if theirs:
                runs += theirs
                borrowed[a] = share["from"] + (f" under {src_a}" if src_a != a else "")
    return runs, borrowed


def summarize(results, plan_suites, suite_allocs):
    """One SuiteTable per suite of the plan.  suite_allocs: {suite name: [allocator names]}
    (or one list for every suite)."""
    tables = []
    family = _family(results)
    for suite, workloads in plan_suites:
        allocs = suite_allocs if isinstance(suite_allocs, list) else suite_allocs[suite.name]
        focus = getattr(suite, "focus", "folio")
        if focus not in allocs:
            focus = "folio" if "folio" in allocs else next(
                (a for a in allocs if family.get(a, a) == "folio"), "folio")
        rows = []
        failures = []
        for w in workloads:
            runs, borrowed = workload_runs(results, suite.name, w.name)
            row = Row(w, focus=focus, borrowed=borrowed)
            for m in [w.metric] + list(w.extra_metrics) + COMMON_METRICS:
                row.cells[m.key] = {a: _cell([r for r in runs if r["allocator"] == a], m.key)
                                    for a in allocs}
            costs = {a: w.metric.cost(row.primary(a).median) for a in allocs}
            if costs.get("glibc"):
                row.ratio_to_glibc = {a: c / costs["glibc"] for a, c in costs.items() if c}
            # the best other: not folio, nor any variant of it
            others = {a: c for a, c in costs.items() if family.get(a, a) != "folio" and c}
            if costs.get(focus):
                if costs.get("glibc"):
                    row.folio_vs_glibc = costs[focus] / costs["glibc"]
                if others:
                    row.best_other = min(others, key=others.get)
                    row.folio_vs_best = costs[focus] / others[row.best_other]
            elif others:
                row.best_other = min(others, key=others.get)
            # the noise of the comparison the row headlines: the focus allocator's and the best
            # other's spread (all allocators' when the focus is absent), the larger
            pair = [a for a in (focus, row.best_other) if a in allocs] if focus in allocs \
                else allocs
            spreads = [row.primary(a).spread for a in pair if row.primary(a).spread is not None]
            row.spread = max(spreads) if spreads else None
            for a in allocs:
                if family.get(a, a) == "folio":
                    row.counters[a] = _folio_counters([r for r in runs if r["allocator"] == a])
                    opts = [r["folio_report"]["options"] for r in runs if r["allocator"] == a
                            and isinstance((r.get("folio_report") or {}).get("options"), dict)]
                    if opts:
                        row.options[a] = opts[0]
            rows.append(row)
            failures += [r for r in runs if not r["ok"] and r["suite"] == suite.name]
        t = SuiteTable(suite, allocs, rows, focus=focus, failures=failures)
        for a in allocs:
            t.geo_to_glibc[a] = geomean([r.ratio_to_glibc.get(a) for r in rows])
        t.geo_folio_vs_glibc = geomean([r.folio_vs_glibc for r in rows])
        t.geo_folio_vs_best = geomean([r.folio_vs_best for r in rows])
        tables.append(t)
    return tables
