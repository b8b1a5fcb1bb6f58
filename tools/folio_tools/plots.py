"""PNG bar charts of ``folio bench`` ratios (matplotlib; installed with pip by ``--install``).

One chart per suite: for each workload, each allocator's cost relative to
glibc (log scale, 1.0 marked), so bars below the line beat glibc.  And one
overview (``overview.png``): for every workload of every suite, folio's cost
relative to glibc and to the best other allocator, as horizontal bars.
"""

import importlib
import os
import subprocess
import sys

COLORS = {"folio": "#d62728", "glibc": "#7f7f7f", "jemalloc": "#1f77b4", "tcmalloc": "#2ca02c",
          "mimalloc": "#9467bd", "folio-auto": "#d62728", "folio-fixed": "#ff9896"}


def _matplotlib(install=False):
    """Import matplotlib (Agg backend), installing it with pip if needed and asked to;
    (module, note)."""
    try:
        import matplotlib
    except ImportError:
        if not install:
            return None, ("matplotlib is missing: charts skipped (`python3 -m pip install "
                          "matplotlib` or `apt-get install python3-matplotlib` installs it; "
                          "`folio bench --install` does it with pip)")
        print("installing matplotlib with pip for the charts ...", file=sys.stderr, flush=True)
        try:
            res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                                  "--disable-pip-version-check", "matplotlib"],
                                 capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            return None, f"matplotlib is missing and pip could not run ({e}); charts skipped"
        if res.returncode != 0:
            tail = (res.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"matplotlib is missing and `pip install matplotlib` failed ({tail}); charts skipped"
        importlib.invalidate_caches()
        try:
            import matplotlib
        except ImportError as e:
            return None, f"matplotlib still not importable after pip install ({e}); charts skipped"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt, None


def draw(tables, out, install=False):
    """Draw the charts into out; returns {"files": {suite: filename}, "note": str or None}."""
    result = {"files": {}, "note": None}
    todo = [t for t in tables if any(r.ratio_to_glibc for r in t.rows)]
    if not todo:
        result["note"] = "no ratios to glibc to chart"
        return result
    plt, note = _matplotlib(install)
    if plt is None:
        result["note"] = note
        print(f"note: {note}", file=sys.stderr)
        return result
    for t in todo:
        rows = [r for r in t.rows if r.ratio_to_glibc]
        allocs = t.allocators
        n = len(allocs)
        width = 0.8 / n
        fig, ax = plt.subplots(figsize=(max(7.0, min(14.0, 1.2 * len(rows) + 2)), 5.0))
        for i, a in enumerate(allocs):
            xs = [k + (i - (n - 1) / 2) * width for k in range(len(rows))]
            ys = [r.ratio_to_glibc.get(a) or 0 for r in rows]
            ax.bar(xs, ys, width, label=a, color=COLORS.get(a), zorder=2)
        ax.axhline(1.0, color="black", linewidth=0.8, zorder=3)
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r.workload.name for r in rows], rotation=20, ha="right")
        ax.set_ylabel("cost relative to glibc (lower is better)")
        ax.set_title(f"{t.suite.name}: {t.suite.title}")
        ax.grid(axis="y", which="major", alpha=0.4, zorder=0)
        ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        fig.tight_layout()
        name = f"{t.suite.name}.png"
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        result["files"][t.suite.name] = name
    name = overview(plt, tables, out)
    if name:
        result["files"]["overview"] = name
    return result


def overview(plt, tables, out, name="overview.png"):
    """folio (each suite's focus allocator) against glibc and the best other, every workload."""
    items = [(f"{t.suite.name}/{r.workload.name}"
              + (f" [{t.focus}]" if getattr(t, "focus", "folio") != "folio" else ""),
              r.folio_vs_glibc, r.folio_vs_best, r.best_other)
             for t in tables for r in t.rows
             if r.folio_vs_glibc is not None or r.folio_vs_best is not None]
    if not items:
        return None
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    fig, ax = plt.subplots(figsize=(9.0, 0.32 * len(items) + 1.6))
    ys = list(range(len(items)))[::-1]
    h = 0.38
    ax.barh([y + h / 2 for y in ys], [i[1] or 0 for i in items], h, color="#7f7f7f",
            label="folio / glibc", zorder=2)
    ax.barh([y - h / 2 for y in ys], [i[2] or 0 for i in items], h, color="#d62728",
            label="folio / best other allocator", zorder=2)
    ax.axvline(1.0, color="black", linewidth=0.8, zorder=3)
    ax.set_xscale("log")
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{i[0]}  (best: {i[3]})" if i[3] else i[0] for i in items],
                       fontsize="small")
    ax.set_xlabel("folio's cost relative to the other (time, time per operation or memory; "
                  "below 1 folio is better)", fontsize="small")
    ax.set_title("folio against glibc and the best other allocator, per workload (medians)")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(axis="x", which="major", alpha=0.4, zorder=0)
    ax.legend(fontsize="small", loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name
