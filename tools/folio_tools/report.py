"""folio's FOLIO_REPORT JSON: reading the files a command left, aggregating and printing them.

The library writes one JSON object per process at exit (``FOLIO_REPORT=PATH``,
``%p`` replaced by the pid).  Everything here is tolerant: keys may be missing
(they are not printed) or extra (numeric extras are listed under "other
counters"), and a file that does not parse is reported, not fatal.
"""

import glob
import json
import os
import re

from .tables import text_table

# Rows of the summary: (label, [(key, kind), ...]); the values of one row are shown
# as "a / b".  kind: "count", "bytes", or "peak" (bytes, aggregated with max
# instead of sum over processes).
ROWS = [
    ("allocations / frees", [("allocs", "count"), ("frees", "count")]),
    ("  small: count / bytes", [("small_allocs", "count"), ("small_bytes", "bytes")]),
    ("  large: count / bytes", [("large_allocs", "count"), ("large_bytes", "bytes")]),
    ("  huge: count / bytes", [("huge_allocs", "count"), ("huge_bytes", "bytes")]),
    ("mapped: final / peak", [("mapped_bytes", "bytes"), ("peak_mapped_bytes", "peak")]),
    ("resident: final / peak", [("rss_bytes", "bytes"), ("peak_rss_bytes", "peak")]),
    ("zone lock: taken / contended", [("zone_lock_acquired", "count"),
                                      ("zone_lock_contended", "count")]),
    ("pages from / to zone", [("pages_from_zone", "count"), ("pages_to_zone", "count")]),
    ("pageset refills / drains", [("pcp_refills", "count"), ("pcp_drains", "count")]),
    ("purges: count / bytes", [("purges", "count"), ("purged_bytes", "bytes")]),
    ("minor page faults", [("minor_faults", "count")]),
    ("huge pages: chunks advised / collapsed", [("thp_chunks_advised", "count"),
                                                ("thp_chunks_collapsed", "count")]),
    ("  purges skipped (kept whole) / split", [("thp_purges_skipped", "count"),
                                               ("thp_chunks_split", "count")]),
    ("  AnonHugePages / Rss at exit", [("anon_huge_bytes", "bytes"), ("smaps_rss_bytes", "bytes")]),
    ("populated (MADV_POPULATE_WRITE)", [("populated_bytes", "bytes")]),
]
KNOWN_KEYS = {key for _, keys in ROWS for key, _ in keys} | {"pagesets", "options", "pid",
                                                             "faults_per_peak_mib_milli"}
PEAK_KEYS = {key for _, keys in ROWS for key, kind in keys if kind == "peak"}

_PID_RE = re.compile(r"(\d+)")


class Report(dict):
    """One process's report (the parsed JSON object) plus where it came from."""

    def __init__(self, data, path=None, pid=None):
        super().__init__(data)
        self.path = path
        self.pid = pid if pid is not None else _int_or_none(data.get("pid"))


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def report_pattern(directory, stem="folio"):
    """The FOLIO_REPORT value that makes every process write its own file in directory."""
    return os.path.join(directory, f"{stem}.%p.json")


def collect(directory, stem="folio"):
    """Read every report written with report_pattern(directory, stem).

    Returns (reports sorted by pid, problems) where problems lists files that
    could not be read as a JSON object."""
    reports, problems = [], []
    for path in glob.glob(os.path.join(glob.escape(directory), f"{stem}.*.json")):
        m = _PID_RE.search(os.path.basename(path)[len(stem):])
        pid = int(m.group(1)) if m else None
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{os.path.basename(path)}: unreadable report ({e})")
            continue
        if not isinstance(data, dict):
            problems.append(f"{os.path.basename(path)}: report is not a JSON object")
            continue
        reports.append(Report(data, path, pid))
    reports.sort(key=lambda r: (r.pid is None, r.pid or 0))
    return reports, problems


def load_file(path):
    """Reports from a file written by ``folio run --report`` (object or list) or by the library."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    items = data if isinstance(data, list) else [data]
    return [Report(d, path) for d in items if isinstance(d, dict)]


def aggregate(reports):
    """Sum the numeric top-level keys over reports (peak keys: max)."""
    total = {}
    for r in reports:
        for k, v in r.items():
            if not _is_number(v) or k == "pid":
                continue
            if k in PEAK_KEYS:
                total[k] = max(total.get(k, v), v)
            else:
                total[k] = total.get(k, 0) + v
    return total


def derived(reports):
    """Figures over several processes that a plain sum would hide:

    processes, processes_allocating (allocs > 0), rss_bytes_max (the largest
    final RSS of one process), and from the ``pagesets`` arrays the largest
    ``high`` seen on any CPU of any process (pcp_high_highest), the largest at
    exit (pcp_high_final_max), the bounds (pcp_high_min, pcp_high_max), and the
    ``options`` of the first process that reported them."""
    out = {"processes": len(reports),
           "processes_allocating": sum(1 for r in reports
                                       if _is_number(r.get("allocs")) and r["allocs"] > 0)}
    rss = [r["rss_bytes"] for r in reports if _is_number(r.get("rss_bytes"))]
    if rss:
        out["rss_bytes_max"] = max(rss)
    sets = [p for r in reports if isinstance(r.get("pagesets"), list)
            for p in r["pagesets"] if isinstance(p, dict)]
    for key, src, pick in (("pcp_high_highest", "high_highest", max),
                           ("pcp_high_final_max", "high", max),
                           ("pcp_high_min", "high_min", min), ("pcp_high_max", "high_max", max)):
        vals = [p[src] for p in sets if _is_number(p.get(src))]
        if vals:
            out[key] = pick(vals)
    if "pcp_high_highest" not in out and "pcp_high_final_max" in out:
        out["pcp_high_highest"] = out["pcp_high_final_max"]
    opts = next((r["options"] for r in reports if isinstance(r.get("options"), dict)), None)
    if opts is not None:
        out["options"] = dict(opts)
    return out


# ---- formatting ------------------------------------------------------------

def fmt_count(v):
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.2f}"
    return f"{int(v):,}"


def fmt_bytes(v):
    if v is None:
        return "-"
    v = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(v)


def fmt_value(v, kind):
    return fmt_bytes(v) if kind in ("bytes", "peak") else fmt_count(v)


def contention_pct(d):
    acq, cont = d.get("zone_lock_acquired"), d.get("zone_lock_contended")
    if not _is_number(acq) or not _is_number(cont) or acq <= 0:
        return None
    return 100.0 * cont / acq


def faults_per_mib(d):
    """Minor faults per MiB of peak RSS (of a summed column: over the largest peak)."""
    flt, peak = d.get("minor_faults"), d.get("peak_rss_bytes")
    if not _is_number(flt) or not _is_number(peak) or peak <= 0:
        return None
    return flt / (peak / (1 << 20))


def hugepage_coverage(d):
    """AnonHugePages / Rss at exit, in percent."""
    huge, rss = d.get("anon_huge_bytes"), d.get("smaps_rss_bytes")
    if not _is_number(huge) or not _is_number(rss) or rss <= 0:
        return None
    return 100.0 * huge / rss


def format_thp(report):
    """FOLIO_THP and the system's THP settings, as the library read them."""
    t = report.get("thp")
    if not isinstance(t, dict):
        return None
    sizes = t.get("sizes") if isinstance(t.get("sizes"), dict) else {}
    by_mode = {}
    for size, mode in sizes.items():
        by_mode.setdefault(mode, []).append(size)
    size_text = "; ".join(f"{m}: {', '.join(s)}" for m, s in by_mode.items())
    return (f"huge pages: FOLIO_THP={t.get('option', '?')}; system enabled={t.get('enabled', '?')} "
            f"defrag={t.get('defrag', '?')}, 2 MiB pages {t.get('pmd', '?')}"
            + (f" (sizes {size_text})" if size_text else ""))


def _rows_for(columns):
    """Table rows [label, value per column] for the keys present in any column."""
    rows = []
    for label, keys in ROWS:
        keys = [(k, kind) for k, kind in keys if any(k in c for c in columns)]
        if not keys:
            continue
        cells = []
        for c in columns:
            cell = " / ".join(fmt_value(c.get(k), kind) for k, kind in keys)
            if keys[0][0] == "zone_lock_acquired":
                pct = contention_pct(c)
                cell += "" if pct is None else f" ({pct:.2f} %)"
            if keys[0][0] == "minor_faults":
                per = faults_per_mib(c)
                cell += "" if per is None else f" ({per:.1f} per MiB of peak RSS)"
            if keys[0][0] == "anon_huge_bytes":
                cov = hugepage_coverage(c)
                cell += "" if cov is None else f" ({cov:.0f} % coverage)"
            cells.append(cell)
        rows.append([label] + cells)
    return rows


def _extras(columns):
    """Numeric keys the summary does not know, as (nonzero rows, names of all-zero keys)."""
    names = sorted({k for c in columns for k, v in c.items() if _is_number(v) and k not in KNOWN_KEYS})
    rows, zero = [], []
    for k in names:
        vals = [c.get(k) for c in columns]
        if all(not v for v in vals):
            zero.append(k)
            continue
        kind = "bytes" if k.endswith("_bytes") else "count"
        rows.append([k] + [fmt_value(v, kind) for v in vals])
    return rows, zero


def _table_with_extras(header, columns):
    rows, zero = _extras(columns)
    lines = [text_table(header, _rows_for(columns))]
    if rows:
        lines.append("other counters:")
        lines.append(text_table([""] + header[1:], rows))
    if zero:
        lines.append("zero: " + ", ".join(zero))
    return "\n".join(lines)


def format_pagesets(report):
    ps = report.get("pagesets")
    if not isinstance(ps, list) or not ps:
        return None
    parts = []
    for p in ps:
        if not isinstance(p, dict):
            continue
        cpu = p.get("cpu", "?")
        bits = [f"count={p['count']}" if "count" in p else None,
                f"high={p['high']}" if "high" in p else None,
                f"[{p.get('high_min', '?')}..{p.get('high_max', '?')}]"
                if "high_min" in p or "high_max" in p else None,
                f"batch={p['batch']}" if "batch" in p else None]
        extra = [f"{k}={v}" for k, v in p.items()
                 if k not in ("cpu", "count", "high", "high_min", "high_max", "batch")]
        parts.append(f"cpu{cpu}: " + " ".join(b for b in bits + extra if b))
    return parts


# Options whose 0 means "the library decides" or "none" (base.h's table says so in their text)
ZERO_MEANS = {"FOLIO_PCP_HIGH": "auto", "FOLIO_CLEAR_THREADS": "auto", "FOLIO_MEMORY_LIMIT": "none",
              "FOLIO_CLEAR": "auto"}
THP_NAMES = ["auto", "never", "always"]  # FOLIO_THP's values (base.h)


def _exact_size(v):
    """Bytes with the largest unit that divides them: 3145728 -> "3MiB"."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if v and v % (1 << shift) == 0:
            return f"{v >> shift}{unit}"
    return f"{v}B"


def option_text(name, value, report=None):
    """An option's value as it is set: `auto`/`none` where 0 means that, the clearing strategy
    by name, sizes and times with their units; anything else as the number."""
    if not isinstance(value, int) or isinstance(value, bool):
        return str(value)
    if name == "FOLIO_CLEAR":
        mode = ((report or {}).get("clear") or {}).get("mode")
        return mode if isinstance(mode, str) else ZERO_MEANS[name] if value == 0 else str(value)
    if name == "FOLIO_THP" and 0 <= value < len(THP_NAMES):
        return THP_NAMES[value]
    if value == 0 and name in ZERO_MEANS:
        return ZERO_MEANS[name]
    if name.endswith("_MS"):
        return f"{value}ms"
    if name.endswith("_MIB"):
        return f"{value}MiB"
    if name == "FOLIO_MEMORY_LIMIT":
        return _exact_size(value)
    if name == "FOLIO_PURGE_MIN_ORDER":
        return f"{value}({_exact_size(4096 << value)})"
    return str(value)


def format_options(report):
    opts = report.get("options")
    if not isinstance(opts, dict) or not opts:
        return None
    return " ".join(f"{k}={option_text(k, v, report)}" for k, v in opts.items())


def describe(report):
    """A short name for a process: its pid and any name-like key the library wrote."""
    name = ""
    for k in ("comm", "exe", "argv0", "name", "cmd"):
        if isinstance(report.get(k), str):
            name = " " + os.path.basename(report[k])
            break
    return f"pid {report.pid if report.pid is not None else '?'}{name}"


def summary(reports, main_pid=None, top=8):
    """A readable multi-line summary of one or more process reports."""
    if not reports:
        return "no folio reports were written"
    main = next((r for r in reports if main_pid is not None and r.pid == main_pid), None)
    children = [r for r in reports if r is not main]
    lines = []
    if len(reports) == 1:
        lines.append(_table_with_extras(["", describe(reports[0])], reports))
    else:
        columns, header = [], [""]
        if main is not None:
            columns.append(main)
            header.append(f"main ({describe(main)})")
        agg_label = "children" if main is not None else "processes"
        columns.append(aggregate(children))
        header.append(f"{agg_label} ({len(children)}, summed)")
        if main is not None:
            columns.append(aggregate(reports))
            header.append("all")
        lines.append(_table_with_extras(header, columns))
        lines.append("(summed over processes, except the peaks: the largest single process)")
        if len(children) > 1:
            def peak(r):
                v = r.get("peak_rss_bytes")
                return v if _is_number(v) else 0
            ranked = sorted(children, key=peak, reverse=True)[:top]
            rows = [[describe(r), fmt_count(r.get("allocs")), fmt_bytes(r.get("peak_rss_bytes")),
                     fmt_bytes(r.get("peak_mapped_bytes")), fmt_count(r.get("minor_faults"))]
                    for r in ranked]
            lines.append("")
            lines.append(f"largest {len(rows)} of {len(children)} {agg_label} by peak resident memory:")
            lines.append(text_table(["process", "allocations", "peak resident", "peak mapped",
                                     "minor faults"], rows))
    shown = main if main is not None else (reports[0] if len(reports) == 1 else None)
    if shown is not None:
        children = [r for r in reports if r is not shown]
        ps = format_pagesets(shown)
        if ps:
            lines.append("")
            lines.append("pagesets" + (" (main process)" if children else "") + ":")
            lines.extend("  " + p for p in ps)
        thp = format_thp(shown)
        if thp:
            lines.append(thp)
        opts = format_options(shown)
        if opts:
            lines.append("options: " + opts)
    return "\n".join(lines)
