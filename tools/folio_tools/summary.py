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
    folio_counters: dict = field(default_factory=dict)  # key -> median over folio's runs

    def primary(self, alloc):
        return self.cells[self.workload.metric.key].get(alloc, Cell())


@dataclass
class SuiteTable:
    suite: object
    allocators: list
    rows: list
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
                  "pcp_drains", "purges", "purged_bytes", "peak_mapped_bytes", "mapped_bytes",
                  "peak_rss_bytes", "rss_bytes", "minor_faults"]


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


def summarize(results, plan_suites, allocs):
    """One SuiteTable per suite of the plan."""
    tables = []
    for suite, workloads in plan_suites:
        rows = []
        failures = []
        for w in workloads:
            runs = [r for r in results["runs"] if r["suite"] == suite.name and r["workload"] == w.name]
            row = Row(w)
            for m in [w.metric] + list(w.extra_metrics) + COMMON_METRICS:
                row.cells[m.key] = {a: _cell([r for r in runs if r["allocator"] == a], m.key)
                                    for a in allocs}
            costs = {a: w.metric.cost(row.primary(a).median) for a in allocs}
            if costs.get("glibc"):
                row.ratio_to_glibc = {a: c / costs["glibc"] for a, c in costs.items() if c}
            others = {a: c for a, c in costs.items() if a != "folio" and c}
            if costs.get("folio"):
                if costs.get("glibc"):
                    row.folio_vs_glibc = costs["folio"] / costs["glibc"]
                if others:
                    row.best_other = min(others, key=others.get)
                    row.folio_vs_best = costs["folio"] / others[row.best_other]
            elif others:
                row.best_other = min(others, key=others.get)
            # the noise of the comparison the row headlines: folio's and the best other's
            # spread (all allocators' when folio is absent), the larger
            pair = [a for a in ("folio", row.best_other) if a in allocs] if "folio" in allocs \
                else allocs
            spreads = [row.primary(a).spread for a in pair if row.primary(a).spread is not None]
            row.spread = max(spreads) if spreads else None
            row.folio_counters = _folio_counters([r for r in runs if r["allocator"] == "folio"])
            rows.append(row)
            failures += [r for r in runs if not r["ok"]]
        t = SuiteTable(suite, allocs, rows, failures=failures)
        for a in allocs:
            t.geo_to_glibc[a] = geomean([r.ratio_to_glibc.get(a) for r in rows])
        t.geo_folio_vs_glibc = geomean([r.folio_vs_glibc for r in rows])
        t.geo_folio_vs_best = geomean([r.folio_vs_best for r in rows])
        tables.append(t)
    return tables
