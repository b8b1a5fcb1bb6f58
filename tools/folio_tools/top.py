"""``folio top``: what the allocator of a running process does now.

Reads the statistics the library publishes (live.py) once a second and shows
totals and rates: allocations, frees, live blocks and bytes, resident and
mapped memory, page faults, zone lock traffic and contention, pages to and
from the zone, pageset refills and drains, purges, clears, and each pageset's
``high`` and count.  Rates are the difference of two writes of the library
over the time between them.
"""

import os
import sys
import time

from . import live
from .report import fmt_bytes, fmt_count
from .tables import text_table

CLEARED = ("cleared_bytes_loop", "cleared_bytes_stosb", "cleared_bytes_nt",
           "cleared_bytes_hybrid", "cleared_bytes_other")

# (label, key or function of a report, kind): kind "count" or "bytes"; a rate is shown for
# counters that only grow (rate=True)
ROWS = [
    ("allocations", "allocs", "count", True),
    ("frees", "frees", "count", True),
    ("live blocks", "live_blocks", "count", False),
    ("live bytes", "live_bytes", "bytes", False),
    ("resident", "rss_bytes", "bytes", False),
    ("resident, peak", "peak_rss_bytes", "bytes", False),
    ("mapped", "mapped_bytes", "bytes", False),
    ("mapped, peak", "peak_mapped_bytes", "bytes", False),
    ("minor page faults", "minor_faults", "count", True),
    ("major page faults", "major_faults", "count", True),
    ("zone lock taken", "zone_lock_acquired", "count", True),
    ("zone lock contended", "zone_lock_contended", "count", True),
    ("pages from zone", "pages_from_zone", "count", True),
    ("pages to zone", "pages_to_zone", "count", True),
    ("pageset refills", "pcp_refills", "count", True),
    ("pageset drains", "pcp_drains", "count", True),
    ("free_high drains", "free_high_drains", "count", True),
    ("purges", "purges", "count", True),
    ("purged", "purged_bytes", "bytes", True),
    ("cleared", lambda r: sum(r.get(k, 0) for k in CLEARED), "bytes", True),
    ("known zero, not cleared", "zero_skipped_bytes", "bytes", True),
]


def _value(report, key):
    v = key(report) if callable(key) else report.get(key)
    return v if isinstance(v, (int, float)) else None


def screen(pid, cur, prev):
    """The text of one screen: cur, and rates against prev (an earlier Sample, or None)."""
    r = cur.report
    dt = cur.updated - prev.updated if prev is not None else 0
    head = (f"folio top: pid {pid} ({live.comm(pid)}), statistics written {cur.age:.1f} s ago")
    if prev is None or dt <= 0:
        head += ("\n(rates: no second write yet; the process writes when it allocates or "
                 "its purger runs, at most once a second)")
    rows = []
    for label, key, kind, rate in ROWS:
        v = _value(r, key)
        if v is None:
            continue
        fmt = fmt_bytes if kind == "bytes" else fmt_count
        per_s = ""
        if rate and dt > 0:
            pv = _value(prev.report, key)
            if pv is not None:
                per_s = fmt(round(max(0, (v - pv) / dt))) + "/s"
        rows.append([label, fmt(v), per_s])
    lock = _value(r, "zone_lock_acquired")
    waited = _value(r, "zone_lock_contended")
    lines = [head, text_table(["", "total", f"per second (over {dt:.1f} s)" if dt > 0 else "per second"],
                              rows)]
    if lock:
        lines.append(f"zone lock contention: {100.0 * (waited or 0) / lock:.2f}% of acquisitions")
    sets = [p for p in r.get("pagesets") or [] if isinstance(p, dict)]
    if sets:
        prev_sets = {p.get("cpu"): p for p in (prev.report.get("pagesets") or [])} if dt > 0 else {}
        prow = []
        for p in sets:
            q = prev_sets.get(p.get("cpu"), {})
            def d(k):
                return fmt_count(p.get(k, 0) - q.get(k, 0)) if q else "-"
            prow.append([p.get("cpu", "?"), fmt_count(p.get("count")), fmt_count(p.get("high")),
                         f"{p.get('high_min', '?')}..{p.get('high_max', '?')}",
                         fmt_count(p.get("high_highest")), d("refills"), d("drains"),
                         d("free_high_drains")])
        lines.append("")
        lines.append("pagesets (pages; refills and drains since the previous write):")
        lines.append(text_table(["cpu", "count", "high", "high_min..max", "highest", "refills",
                                 "drains", "free_high"], prow))
    return "\n".join(lines)


def resolve(pid, wait_s=3.0):
    """The pid to watch: pid itself, or (for a `folio run` or any parent) the descendant
    that publishes and has made the most allocations (in a compiler driver's tree, the
    compiler, not the idle driver).  Returns (pid, note); raises live.NoStatistics."""
    if not live.alive(pid):
        raise live.NoStatistics(f"pid {pid} does not exist")
    deadline = time.monotonic() + wait_s
    while True:
        if live.publishes(pid):
            return pid, None
        found = []
        for d in live.descendants(pid):
            if live.publishes(d):
                try:
                    found.append((live.read(d).report.get("allocs") or 0, d))
                except live.NoStatistics:
                    pass
        if found:
            found.sort(reverse=True)
            d = found[0][1]
            others = ", ".join(f"{o} ({live.comm(o)})" for _, o in found[1:])
            return d, (f"pid {pid} ({live.comm(pid)}) does not run folio itself; watching its "
                       f"descendant {d} ({live.comm(d)}), the one with the most allocations"
                       + (f"; also publishing: {others}" if others else ""))
        if not live.alive(pid):
            raise live.NoStatistics(f"pid {pid} has exited")
        # a process publishes from its first second on: wait for one that runs folio
        # (itself or a descendant) for a moment
        folio_there = live.runs_folio(pid) or any(live.runs_folio(d) for d in live.descendants(pid))
        if time.monotonic() >= deadline or not folio_there:
            why = (f"pid {pid} ({live.comm(pid)}) runs folio but publishes no statistics "
                   "(FOLIO_LIVE=0, /dev/shm unusable, or it has not allocated since its first second)"
                   if folio_there else
                   f"pid {pid} ({live.comm(pid)}) does not run folio (nor does any process it started)")
            raise live.NoStatistics(why)
        time.sleep(0.1)


def _next_sample(pid, after, timeout):
    """The first sample written after `after` (a Sample), or None within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if not live.alive(pid):
            return None
        try:
            s = live.read(pid)
        except live.NoStatistics:
            return None
        if s.seq != after.seq:
            return s
    return None


def cleanup():
    """Remove the files of processes that are gone; returns how many."""
    n = 0
    for _, path in live.stale_files():
        try:
            os.unlink(path)
            n += 1
        except OSError:
            pass
    return n


def list_publishers():
    removed = cleanup()
    pids = live.publishers()
    rows = []
    for p in pids:
        try:
            s = live.read(p)
        except live.NoStatistics:
            continue
        r = s.report
        rows.append([p, live.comm(p), fmt_count(r.get("allocs")), fmt_bytes(r.get("rss_bytes")),
                     fmt_bytes(r.get("mapped_bytes")), f"{s.age:.1f} s"])
    if rows:
        print(text_table(["pid", "command", "allocations", "resident", "mapped", "written"], rows))
    else:
        print("folio top: no process publishes folio statistics now")
    if removed:
        print(f"(removed {removed} statistics file{'s' if removed != 1 else ''} of processes that are gone)")
    return 0


def cmd_top(args):
    if args.pid is None:
        return list_publishers()
    screens = 1 if args.once else args.n
    try:
        pid, note = resolve(args.pid)
        prev = live.read(pid)
    except live.NoStatistics as e:
        print(f"folio top: {e}", file=sys.stderr)
        return 1
    if note:
        print(f"folio top: {note}", file=sys.stderr)
    tty = sys.stdout.isatty() and screens is None
    shown = 0
    try:
        while screens is None or shown < screens:
            cur = _next_sample(pid, prev, timeout=max(2.5, 2.5 * prev.interval_s))
            if cur is None and not live.alive(pid):
                print(f"folio top: pid {pid} has exited")
                return 0
            text = screen(pid, cur or prev, prev if cur else None)
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J")
            elif shown:
                print()
            print(text, flush=True)
            shown += 1
            if cur is not None:
                prev = cur
    except KeyboardInterrupt:
        return 0
    return 0
