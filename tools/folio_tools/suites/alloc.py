"""Suite ``alloc``: small-object and general allocation workloads (issues 2 and 3).

Every program is in bench/alloc_*.c; each takes a fixed amount of work and
reports the time it took (``elapsed_s``, the primary metric), except
``purge``, whose primary metric is the resident memory after the frees and a
1.5 s purge delay.
"""

from .base import Metric, Suite, Workload

TIME = Metric("elapsed_s", "time", "s", "lower")
OPS = Metric("ops_per_sec", "throughput", "ops/s", "higher")

SUITE = Suite(
    name="alloc",
    title="small-object and general allocation workloads",
    description="Single-thread churn, producer/consumer cross-thread frees (xmalloc-like), a "
                "larson-like server pattern, false sharing (cache-scratch), mixed sizes with "
                "random lifetimes, realloc growth, and memory returned after freeing most of "
                "a large heap.",
    workloads=[
        Workload(
            "churn", "1 thread: free a random slot of 10,000 live objects, malloc 8..512 B into it",
            TIME, "alloc_churn", ["--ops", "40000000"], ["--ops", "12000000"], [OPS]),
        Workload(
            "xmalloc", "2 threads: producer mallocs 8..512 B, consumer frees (all frees remote)",
            TIME, "alloc_xmalloc", ["--objects", "6144000"], ["--objects", "4096000"], [OPS]),
        Workload(
            "larson", "2 threads replace random slots (16..1024 B, 1000 each); slots migrate",
            TIME, "alloc_larson", ["--ops", "12000000"], ["--ops", "4000000"], [OPS]),
        Workload(
            "cache-scratch", "2 threads malloc/write/free 8 B objects (false sharing)",
            TIME, "alloc_cache_scratch", ["--iterations", "1000000"],
            ["--iterations", "300000"], [OPS]),
        Workload(
            "mixed", "2 threads, sizes 8 B..1 MiB (90/9/1 %), random lifetimes up to 4000 steps",
            TIME, "alloc_mixed", ["--threads", "2", "--ops", "5000000"],
            ["--threads", "2", "--ops", "1500000"], [OPS]),
        Workload(
            "realloc", "32 buffers grown by realloc in 1/8 steps up to 1 MiB",
            TIME, "alloc_realloc", ["--ops", "400000"], ["--ops", "120000"], [OPS]),
        Workload(
            "rptest", "2 threads x 100 rounds (new threads each), 16 B..16 KiB log-uniform, "
            "25% of frees sent to the other thread in batches",
            TIME, "alloc_rptest", ["--ops", "8000000", "--rounds", "100"],
            ["--ops", "2000000", "--rounds", "25"], [OPS]),
        Workload(
            "server", "larson-like, 8..1000 B: each thread hands its 2000 objects to its successor "
            "after 20,000 steps (800 generations)",
            TIME, "alloc_server", ["--ops", "8000000"], ["--ops", "2000000"], [OPS]),
        Workload(
            "glibc-loop", "1 thread, glibc-bench-like: random replacement among 1024 blocks of "
            "16 B..32 KiB (density 1/size)",
            TIME, "alloc_glibc", ["--ops", "20000000"], ["--ops", "5000000"], [OPS]),
        Workload(
            "mstress", "2 threads x 50 iterations: retain, free and exchange (atomic transfer "
            "array) 8 B..512 KiB objects",
            TIME, "alloc_mstress", ["--steps", "20000000"], ["--steps", "5000000"], [OPS]),
        Workload(
            "purge", "free 90% of a 512 MiB heap (128 MiB quick), RSS after 1.5 s",
            Metric("rss_after_delay_mib", "RSS after delay", "MiB", "lower"),
            "alloc_purge", ["--heap", "512M", "--delay", "1.5"],
            ["--heap", "128M", "--delay", "1.5"],
            [Metric("rss_full_mib", "RSS full heap", "MiB", "lower"),
             Metric("rss_after_free_mib", "RSS right after free", "MiB", "lower"),
             Metric("build_s", "heap build time", "s", "lower"),
             Metric("free_s", "free time", "s", "lower")]),
    ],
)
