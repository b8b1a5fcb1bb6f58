"""Suite ``faults``: page faults and the kernel's mmap lock under the allocator (issue 3).

will-it-scale's malloc1 and page_fault1 run over malloc/free instead of
mmap/munmap, at 1, 2 and 4 threads; ebizzy-like copies into a fresh 512 KiB
buffer.  Each program measures a window of fixed length that opens once every
thread has completed one iteration (so first-touch faults of an allocator that
keeps its memory do not hide its steady state) and reports throughput (the
primary metric, per thread for malloc1 and page_fault1) and the minor faults
per MiB allocated (malloc1) or written (page_fault1, ebizzy) in that window.

folio also runs as ``folio-nokeep`` (``FOLIO_PURGE_DELAY_MS=0``,
``FOLIO_HUGE_CACHE_MIB=0``): by default folio keeps a freed 128 MiB extent
mapped and populated for the purge delay and hands it back, so malloc1 and
page_fault1 see no faults at all; folio-nokeep returns every free to the
kernel at once, as glibc does above its mmap threshold, and so measures the
fault path and the mmap lock like for like.
"""

from .base import Metric, Suite, Workload

PER_THREAD = Metric("ops_per_sec_per_thread", "per thread", "ops/s", "higher")
RECORDS = Metric("records_per_sec", "throughput", "records/s", "higher")
FAULTS_PER_MIB = Metric("faults_per_mib", "minor faults per MiB", "", "lower")


def _timed(name, binary, what, threads, metric, extra=""):
    return Workload(
        f"{name}-{threads}t", f"{threads} thread{'s' if threads > 1 else ''}: {what}{extra}",
        metric, binary, ["--threads", threads, "--seconds", "1"],
        ["--threads", threads, "--seconds", "0.3"], [FAULTS_PER_MIB])


def _allocators(names):
    """folio runs as itself and as folio-nokeep; the others run as they are."""
    out = []
    for n in names:
        out += ["folio", "folio-nokeep"] if n == "folio" else [n]
    return list(dict.fromkeys(out))


SUITE = Suite(
    name="faults",
    title="page faults and mmap-lock scalability",
    description="will-it-scale malloc1 (malloc+free 128 MiB untouched) and page_fault1 (malloc "
                "128 MiB, write a byte per page, free; one op per page) per thread at 1, 2 and "
                "4 threads, and ebizzy-like (malloc a 512 KiB buffer, copy records, search, free) "
                "at 1 and 4 threads. Measured in a window that opens once every thread has done "
                "one iteration. folio-nokeep: folio with every free returned to the kernel at "
                "once (no purge delay, no extent cache), the fault path like for like.",
    allocators=_allocators,
    workloads=(
        [_timed("malloc1", "faults_malloc1", "malloc + free 128 MiB, untouched", t, PER_THREAD)
         for t in (1, 2, 4)]
        + [_timed("page_fault1", "faults_page_fault1", "malloc 128 MiB, write each page, free",
                  t, PER_THREAD) for t in (1, 2, 4)]
        + [_timed("ebizzy", "faults_ebizzy", "malloc 512 KiB, copy records, search, free",
                  t, RECORDS) for t in (1, 4)]
    ),
)
