"""The headline table (stdout) and REPORT.md of ``folio bench``."""

import shlex

from . import report as folio_report
from .suites.base import COMMON_METRICS
from .tables import md_table, text_table


def runner_share(run):
    """The share of the machine's CPU that other processes used during a run, or None.

    None too for runs shorter than 0.5 s: /proc/stat counts in clock ticks (10 ms), too coarse
    to apportion a few milliseconds."""
    i = run.get("interference")
    if not i or not i.get("capacity_s"):
        return None
    if (run.get("measures") or {}).get("wall_s", 0) < 0.5:
        return None
    return (i["other_cpu_s"] + i["steal_s"]) / i["capacity_s"]

RATIO_NOTE = ("Ratios compare cost: time, time per operation or memory of the first allocator "
              "divided by the second's, so below 1.00 the first is better and above 1.00 it is "
              "worse, whatever the metric.")


SPREAD_NOTE = ("spread: (max-min)/median of the runs of folio and of the best other allocator, "
               "the larger of the two (of all allocators without folio); ratios closer to 1.00 "
               "than that are within the noise.")


def _ratio(x):
    return "-" if x is None else f"{x:.2f}"


def _pct(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def _cell_text(metric, cell):
    if cell.n == 0:
        return "FAIL" if cell.failed else "-"
    return metric.format(cell.median) + ("*" if cell.failed else "")


def _metric_label(m):
    return f"{m.label} [{m.unit}]" if m.unit else m.label


def headline_rows(t):
    allocs = t.allocators
    focus = getattr(t, "focus", "folio")
    has_folio = focus in allocs
    header = ["workload", "metric"] + allocs
    if has_folio:
        header += [f"{focus}/glibc", f"{focus}/best", "best other"]
    else:
        header += ["best"]
    header += ["spread"]
    rows = []
    for r in t.rows:
        m = r.workload.metric
        row = [r.workload.name, _metric_label(m)]
        row += [_cell_text(m, r.primary(a)) for a in allocs]
        row += ([_ratio(r.folio_vs_glibc), _ratio(r.folio_vs_best), r.best_other or "-"]
                if has_folio else [r.best_other or "-"])
        row.append(_pct(r.spread))
        rows.append(row)
    geo = ["geomean", "ratio to glibc"] + [_ratio(t.geo_to_glibc.get(a)) for a in allocs]
    geo += ([_ratio(t.geo_folio_vs_glibc), _ratio(t.geo_folio_vs_best), ""] if has_folio else [""])
    geo.append("")
    rows.append(geo)
    return header, rows


def suite_reps(results, name):
    meta = results["meta"]
    return (meta.get("suite_reps") or {}).get(name) or meta["reps"]


def _title(t, results):
    reps = suite_reps(results, t.suite.name)
    return f"{t.suite.name}: {t.suite.title} (medians of {reps} run{'' if reps == 1 else 's'})"


def _borrow_note(t):
    notes = []
    for r in t.rows:
        if r.borrowed:
            src = "; ".join(f"{a}: {v}" for a, v in r.borrowed.items())
            notes.append(f"{r.workload.name}: some allocators' runs are another suite's runs of "
                         f"the same workload in this invocation, interleaved with this row's "
                         f"other allocators (not run twice): {src}.")
    return notes


def extra_tables(t, results):
    """The suite's own tables (Suite.tables), as (title, header, rows, notes)."""
    fn = getattr(t.suite, "tables", None)
    if not fn:
        return []
    try:
        return fn(t, results) or []
    except Exception as e:     # a broken extra table must not lose the rest of the report
        return [(f"{t.suite.name}: extra table failed", ["error"], [[repr(e)]], [])]


def headline_text(results, tables):
    out = []
    for t in tables:
        out.append(f"\n== {_title(t, results)} ==")
        header, rows = headline_rows(t)
        out.append(text_table(header, rows))
        for note in _borrow_note(t):
            out.append("note: " + note)
        for title, header, rows, notes in extra_tables(t, results):
            out.append(f"\n-- {title} --")
            out.append(text_table(header, rows))
            out.extend(notes)
    out.append("")
    out.append(RATIO_NOTE + " " + SPREAD_NOTE + " *: some runs failed; FAIL: all failed.")
    skipped = results["meta"].get("skipped") or []
    for s in skipped:
        out.append(f"skipped {s['name']}: {s['reason']}")
    return "\n".join(out)


def _ratio_rows(t):
    allocs = [a for a in t.allocators if a != "glibc"]
    header = ["workload"] + [f"{a}/glibc" for a in allocs]
    rows = [[r.workload.name] + [_ratio(r.ratio_to_glibc.get(a)) for a in allocs]
            for r in t.rows]
    rows.append(["geomean"] + [_ratio(t.geo_to_glibc.get(a)) for a in allocs])
    return header, rows


def _metric_tables(t):
    """Extra metrics of the workloads, then the runner's measures: one table per metric."""
    seen, metrics = set(), []
    for r in t.rows:
        for m in r.workload.extra_metrics:
            if m.key not in seen:
                seen.add(m.key)
                metrics.append(m)
    metrics += COMMON_METRICS
    out = []
    for m in metrics:
        rows = []
        for r in t.rows:
            cells = r.cells.get(m.key)
            if not cells or not any(c.n for c in cells.values()):
                continue
            rows.append([r.workload.name] + [_cell_text(m, cells[a]) for a in t.allocators])
        if rows:
            out.append((m, ["workload"] + t.allocators, rows))
    return out


def _counter_table(t):
    cols = [("allocs", "allocs", "count"), ("zone_lock_acquired", "zone lock", "count"),
            ("contention_pct", "contended", "pct"), ("pages_from_zone", "pages from zone", "count"),
            ("pages_to_zone", "pages to zone", "count"), ("pcp_refills", "pcp refills", "count"),
            ("pcp_drains", "pcp drains", "count"), ("free_high_drains", "free_high", "count"),
            ("pcp_decays", "decays", "count"), ("purges", "purges", "count"),
            ("purged_bytes", "purged", "bytes"), ("peak_mapped_bytes", "peak mapped", "bytes"),
            ("peak_rss_bytes", "peak RSS", "bytes"), ("minor_faults", "minor faults", "count"),
            ("processes", "processes", "count")]
    folios = [a for a in t.allocators if any(a in r.counters for r in t.rows)]
    present = [c for c in cols if any(c[0] in fc for r in t.rows for fc in r.counters.values())]
    if not present or not folios:
        return None
    rows = []
    for r, a in [(r, a) for r in t.rows for a in folios]:
        fc = r.counters.get(a, {})
        if not fc:
            continue
        row = [r.workload.name if len(folios) == 1 else f"{r.workload.name} ({a})"]
        for key, _, kind in present:
            v = fc.get(key)
            row.append("-" if v is None else f"{v:.2f} %" if kind == "pct"
                       else folio_report.fmt_bytes(v) if kind == "bytes"
                       else folio_report.fmt_count(v))
        rows.append(row)
    return ["workload"] + [c[1] for c in present], rows


def _reps_text(meta):
    reps = meta["reps"]
    if isinstance(reps, dict):
        return ", ".join(f"{v} ({k})" for k, v in reps.items())
    return str(reps)


def markdown_report(results, tables, plots):
    meta = results["meta"]
    mc = meta["machine"]
    L = ["# folio benchmark report", ""]
    L.append(f"- date: {meta['date']}; folio commit: `{meta['folio_commit']}`; "
             f"mode: {'quick' if meta['quick'] else 'full'}; {_reps_text(meta)} repetitions; "
             f"{len(results['runs'])} runs in {meta.get('elapsed_s', 0):.0f} s"
             + (" (interrupted)" if meta.get("interrupted") else ""))
    L.append(f"- machine: {mc['cpu']}, {mc['cpus']} CPUs, Linux {mc['kernel']}, "
             f"THP `{mc.get('thp')}`")
    L.append(f"- command: `{shlex.join(meta['command'])}`")
    shares = [runner_share(r) for r in results["runs"]]
    shares = sorted(x for x in shares if x is not None)
    if shares:
        la = meta.get("loadavg_before")
        L.append(f"- other processes' CPU use during the runs (share of the machine): median "
                 f"{100 * shares[len(shares) // 2]:.0f}%, max {100 * shares[-1]:.0f}%"
                 + (f"; load average before: {la[0]:.2f}" if la else "")
                 + ("  **(the machine was busy: expect noise)**"
                    if shares[len(shares) // 2] > 0.1 else ""))
    L.append(f"- order: {meta['order']}; each run is a fresh process.")
    L.append("")
    def loaded(a):
        how = f"`LD_PRELOAD={a['preload']}`" if a["preload"] else "(no preload)"
        env = " ".join(f"`{k}={v}`" for k, v in (a.get("env") or {}).items())
        return how + (" " + env if env else "")
    L.append(md_table(["allocator", "loaded with", "version"],
                      [[a["name"], loaded(a), a["version"]] for a in meta["allocators"]]))
    for s in meta.get("skipped") or []:
        L.append(f"\n**{s['name']} skipped**: {s['reason']}")
    if meta.get("skipped_workloads"):
        L.append(f"\nFull run only, not run with --quick: {', '.join(meta['skipped_workloads'])}.")
    L.append("")
    L.append(f"How to read: every number is the median over the successful runs. {RATIO_NOTE} "
             "`folio/best` compares folio with the best of the other allocators on that row. "
             f"{SPREAD_NOTE} `*`: some runs failed (listed at the end); `FAIL`: all "
             "failed. A run counts only if it exited 0 and its malloc came from the allocator "
             "meant to be loaded.")
    ov = (plots or {}).get("files", {}).get("overview")
    if ov:
        L += ["", f"![folio against glibc and the best other allocator]({ov})"]
    for t in tables:
        L += ["", f"## {_title(t, results)}", "", t.suite.description, ""]
        header, rows = headline_rows(t)
        L.append(md_table(header, rows))
        L.append("")
        for note in _borrow_note(t):
            L += [f"Note: {note}", ""]
        for title, eheader, erows, notes in extra_tables(t, results):
            L += [f"### {title}", "", md_table(eheader, erows), ""]
            L += [n + "  " for n in notes] + ([""] if notes else [])
        png = (plots or {}).get("files", {}).get(t.suite.name)
        if png:
            L += [f"![{t.suite.name}: cost relative to glibc]({png})", ""]
        if any(r.ratio_to_glibc for r in t.rows):
            L += ["### Ratio to glibc, every allocator", ""]
            header, rows = _ratio_rows(t)
            L += [md_table(header, rows), ""]
        L += ["### Spread of the primary metric, per allocator: (max-min)/median", ""]
        L += [md_table(["workload"] + t.allocators,
                       [[r.workload.name] + [_pct(r.primary(a).spread) for a in t.allocators]
                        for r in t.rows]), ""]
        for m, header, rows in _metric_tables(t):
            better = "lower" if m.better == "lower" else "higher"
            L += [f"### {_metric_label(m)} ({better} is better)", "", md_table(header, rows), ""]
        ct = _counter_table(t)
        if ct:
            L += ["### folio's counters (medians over folio's runs; several processes: summed, "
                  "peaks: the largest process)", "", md_table(*ct), ""]
        L += ["### Workloads", ""]
        L += [f"- **{r.workload.name}**: {r.workload.description}. "
              f"`{r.workload.shell(meta['quick'])}`" for r in t.rows]
        if t.failures:
            L += ["", "### Failed runs", ""]
            for f in t.failures:
                tail = " / ".join((f.get("stderr_tail") or [])[-3:])
                L.append(f"- {f['workload']} under {f['allocator']}, rep {f['rep'] + 1}: "
                         f"{f['error']}" + (f" — stderr: `{tail}`" if tail else ""))
    if plots and plots.get("note"):
        L += ["", f"Charts: {plots['note']}"]
    L.append("")
    return "\n".join(L)
