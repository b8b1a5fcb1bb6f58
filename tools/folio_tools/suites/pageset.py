"""Suite ``pageset``: per-CPU pageset auto-tuning against a fixed ``high`` (issue 4, seed 003).

folio runs as two allocators: ``folio-fixed`` (``FOLIO_PCP_AUTOTUNE=0``: every
pageset's high fixed at high_min = 4 x batch) and ``folio-auto``
(``FOLIO_PCP_AUTOTUNE=1``, the default: high tuned between high_min and
high_max).  glibc, jemalloc, TCMalloc and mimalloc run the same workloads for
the time and RSS columns.  Workloads:

- ``kbuild``: the kernel build of the kbuild suite (the same workload; when
  both suites run, this one borrows kbuild's runs of the other allocators and
  of folio as folio-auto, and folio-fixed runs interleaved with them: 6
  allocators x 3 builds in all).  Full run only.
- ``prodcons``: bench/pageset_prodcons, one producer thread hands 16-32 KiB
  buffers (orders 2-3) to a consumer thread that frees them, as in the seed's
  AF_UNIX / netperf cases.
- ``pool``: bench/pageset_pool, a pool of 4 threads whose tasks allocate and
  free bursts of 16-256 blocks of 4-16 KiB, in 20 waves with idle gaps.

The micro workloads do a fixed amount of work, cut short after a few seconds
for an allocator that is far slower (glibc), so their time is reported per
operation.  Their final RSS is measured by the program after 3.5 idle seconds
(0.25 with --quick): long enough for an idle pageset to decay (one busy and one
idle decay tick, 1 s apart) and for the zone to purge what it drained (the
1 s purge delay).  The suite's own table is the seed's: time,
zone-lock contention, pages taken from the zone and free_high drains relative
to folio-fixed, the highest pageset high seen, peak and final RSS.
"""

from .. import report as folio_report
from . import kbuild
from .base import Metric, Suite, Workload

TIME_PER_OP = Metric("ns_per_op", "time per operation", "ns", "lower")
OPS = Metric("ops_per_sec", "throughput", "ops/s", "higher")
RSS_END = Metric("rss_end_mib", "RSS right after the frees", "MiB", "lower")
RSS_FINAL = Metric("rss_final_mib", "final RSS (after idle)", "MiB", "lower")

FIXED, AUTO = "folio-fixed", "folio-auto"


def _allocators(names):
    """folio is compared as its two variants; the others run as they are."""
    out = []
    for n in names:
        out += [FIXED, AUTO] if n == "folio" else [n]
    return list(dict.fromkeys(out))


def _kbuild():
    w = kbuild.workload()
    w.same_as = ("kbuild", "kbuild")
    # folio-auto is folio's default (FOLIO_PCP_AUTOTUNE=1): kbuild's folio runs are its runs
    w.same_as_allocators = {AUTO: "folio"}
    return w


WORKLOADS = [
    _kbuild(),
    Workload(
        "prodcons", "1 producer thread mallocs 16-32 KiB buffers, writes a line per page, "
                    "hands them to 1 consumer thread that frees them (up to 256 in flight)",
        TIME_PER_OP, "pageset_prodcons",
        ["--buffers", "1000000", "--max-seconds", "3", "--settle", "3.5"],
        ["--buffers", "200000", "--max-seconds", "0.5", "--settle", "0.25"],
        [OPS, RSS_END, RSS_FINAL], est_s=4.0),
    Workload(
        "pool", "4 threads run tasks that malloc a burst of 16-256 blocks of 4-16 KiB, touch "
                "each page, free the burst; 20 waves with 20 ms idle between them",
        TIME_PER_OP, "pageset_pool",
        ["--threads", "4", "--tasks", "60000", "--waves", "20", "--idle-ms", "20",
         "--max-seconds", "3", "--settle", "3.5"],
        ["--threads", "4", "--tasks", "12000", "--waves", "6", "--idle-ms", "20",
         "--max-seconds", "0.5", "--settle", "0.25"],
        [OPS, RSS_END, RSS_FINAL], est_s=4.0),
]


def _busy(results, suite, row, alloc):
    """Median share of the machine other processes used during this row's runs of alloc."""
    from ..render import runner_share
    from ..summary import median, workload_runs
    runs, _ = workload_runs(results, suite, row.workload.name)
    xs = [runner_share(r) for r in runs if r["allocator"] == alloc and r.get("ok")]
    xs = [x for x in xs if x is not None]
    return "-" if not xs else f"{100 * median(xs):.0f}%"


def _rel(x, base):
    if x is None or base is None or base == 0:
        return "-"
    return f"{100.0 * x / base:.0f}%"


def _mib(v):
    return "-" if v is None else f"{v:.1f}"


def seed_table(t, results):
    """Seed 003's table, one block of rows per workload."""
    header = ["workload", "allocator", "time", "vs fixed", "zone lock taken", "vs fixed",
              "zone lock contended", "pages from zone", "vs fixed", "free_high drains", "vs fixed", "highest high",
              "peak RSS [MiB]", "final RSS [MiB]", "others' CPU"]
    rows, verdicts = [], []
    for r in t.rows:
        m = r.workload.metric
        unit = m.unit
        kb = r.workload.name == "kbuild"
        fixed_t = r.primary(FIXED).median
        fc_fixed = r.counters.get(FIXED, {})
        for a in t.allocators:
            cell = r.primary(a)
            if cell.n == 0 and not cell.failed:
                continue
            tm = cell.median
            time_txt = "FAIL" if cell.n == 0 else f"{m.format(tm)} {unit}"
            fc = r.counters.get(a)
            peak = final = None
            if fc is not None:
                if fc.get("peak_rss_bytes") is not None:
                    peak = fc["peak_rss_bytes"] / 2**20
                key = "rss_bytes_max" if kb else "rss_bytes"
                if fc.get(key) is not None:
                    final = fc[key] / 2**20
            if peak is None:
                c = r.cells.get("maxrss_mib", {}).get(a)
                peak = c.median if c else None
            if final is None and not kb:
                c = r.cells.get("rss_final_mib", {}).get(a)
                final = c.median if c else None
            if fc:
                cont = fc.get("contention_pct")
                pfz, fh = fc.get("pages_from_zone"), fc.get("free_high_drains")
                hh = fc.get("pcp_high_highest")
                zl = fc.get("zone_lock_acquired")
                rows.append([r.workload.name, a, time_txt, _rel(tm, fixed_t),
                             folio_report.fmt_count(zl), _rel(zl, fc_fixed.get("zone_lock_acquired")),
                             "-" if cont is None else f"{cont:.2f}%",
                             folio_report.fmt_count(pfz), _rel(pfz, fc_fixed.get("pages_from_zone")),
                             folio_report.fmt_count(fh), _rel(fh, fc_fixed.get("free_high_drains")),
                             "-" if hh is None else f"{hh:.0f}", _mib(peak), _mib(final),
                             _busy(results, t.suite.name, r, a)])
            else:
                rows.append([r.workload.name, a, time_txt, _rel(tm, fixed_t), "", "", "", "", "",
                             "", "", "", _mib(peak), _mib(final), _busy(results, t.suite.name, r, a)])
        if AUTO in r.borrowed:
            v = (r.options.get(AUTO) or {}).get("FOLIO_PCP_AUTOTUNE", "?")
            verdicts.append(f"{r.workload.name}: the folio-auto rows are the kbuild suite's folio "
                            f"runs (folio's default; their reports say FOLIO_PCP_AUTOTUNE={v}), "
                            "run interleaved with folio-fixed and the other allocators.")
        fa = r.counters.get(AUTO, {})
        auto_t = r.primary(AUTO).median
        if fixed_t and auto_t and fc_fixed and fa:
            bits = [f"time {100 * (auto_t / fixed_t - 1):+.1f}%"]
            if fc_fixed.get("pages_from_zone") and fa.get("pages_from_zone") is not None:
                bits.append(f"pages from zone {100 * fa['pages_from_zone'] / fc_fixed['pages_from_zone']:.0f}% of fixed")
            if fc_fixed.get("zone_lock_acquired") and fa.get("zone_lock_acquired") is not None:
                bits.append(f"zone lock taken {100 * fa['zone_lock_acquired'] / fc_fixed['zone_lock_acquired']:.0f}% of fixed")
            if fc_fixed.get("contention_pct") is not None and fa.get("contention_pct") is not None:
                bits.append(f"contention {fc_fixed['contention_pct']:.2f}% -> {fa['contention_pct']:.2f}%")
            sp = max([x for x in (r.primary(AUTO).spread, r.primary(FIXED).spread) if x is not None],
                     default=None)
            if sp is not None:
                bits.append(f"time spread {100 * sp:.0f}%")
            verdicts.append(f"{r.workload.name}: folio-auto against folio-fixed: " + ", ".join(bits))
    notes = [
        "time: kbuild real time; prodcons and pool time per buffer/block (medians). "
        "'vs fixed': the value relative to folio-fixed (100% = the same).",
        "zone lock taken: zone_lock_acquired (lock holds); "
        "zone lock contended: zone_lock_contended / zone_lock_acquired from folio's report; "
        "pages from zone, free_high drains: folio's counters (kbuild: summed over every process "
        "of the build); highest high: the largest pageset high any CPU reached (kbuild: any "
        "process).",
        "peak RSS: folio's peak_rss_bytes for the folio rows, wait4's ru_maxrss for the others "
        "(both the VmHWM of the process; kbuild: the largest single process, not a sum). "
        "final RSS: folio's rss_bytes at exit for the folio rows (kbuild: the largest over the "
        "build's processes), the program's own measure after its idle seconds for the others "
        "(the same moment); '-' where no such figure exists (kbuild under another allocator). "
        "others' CPU: the share of the machine other processes used during the runs (median): "
        "times measured while it is high are slower for reasons outside the allocator.",
    ] + verdicts
    return [("seed 003's table: fixed high against auto-tuned, and the other allocators",
             header, rows, notes)]


SUITE = Suite(
    name="pageset",
    title="pageset auto-tuning, fixed high against auto-tuned, seed 003",
    description="folio with FOLIO_PCP_AUTOTUNE=0 (folio-fixed: high = high_min = 4 x batch) "
                "against FOLIO_PCP_AUTOTUNE=1 (folio-auto, the default), and glibc, jemalloc, "
                "TCMalloc, mimalloc for time and RSS, on the kernel build (full run only; when "
                "both suites run, the kbuild suite's runs are reused, folio's as folio-auto, "
                "and folio-fixed is interleaved with them), a "
                "producer/consumer pair handing 16-32 KiB buffers across threads, and a thread "
                "pool with bursts of 4-16 KiB blocks. The micro workloads stop after 3 s "
                "(0.5 s with --quick) if not done, and report time per operation.",
    workloads=WORKLOADS,
    allocators=_allocators,
    focus=AUTO,
    tables=seed_table,
)
