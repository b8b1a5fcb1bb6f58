/* api: the exported malloc family, C++ operators, folio's own calls,
 * initialisation, fork handlers and the report.  Includes obj (and so
 * every layer below); nothing includes it but the api's files (and the
 * unit tests). */
#ifndef FOLIO_API_H
#define FOLIO_API_H

#include "obj.h"

#ifdef FOLIO_PREFIX /* sanitizer builds: the malloc family under folio_* names */
#define API(name) folio_##name
void folio_free(void *p);
#else
#define API(name) name
#endif

/* Initialisation (init.c).  Every exported call that can reach a lower
 * layer runs folio_init first (its fast path is one load): no layer below
 * calls up to it. */
void folio_init(void);
void api_visit_locks(lock_visit_fn *fn, void *ctx); /* every folio lock (init.c) */
extern _Atomic int folio_ready;
bool api_single_threaded(void); /* glibc says this process has one thread (else false: unknown) */

/* The live statistics for `folio top` (live.c, FOLIO_LIVE): written from
 * the tick and the purger at most once a second, with no lock held. */
void live_init(void);
void live_tick(uint64_t now_ms); /* publish when due (now_ms: os_now_ms, read by the caller) */
void live_prepare(void);         /* the purger starts: one started after exit began publishes nothing */
void live_exit(void);            /* at exit: the file is removed */
void live_after_fork_child(void);

/* The maintenance tick (decay, purge, the object layer's reclaim) and the
 * purger's start: after a slow path took or gave back pages, with no folio
 * lock held. */
static inline void api_tick(void) {
    uint64_t now = purge_tick();
    heap_decay_current(now);
    purge_maybe_start_thread();
    /* while the purger wakes often enough, it publishes: no program thread
     * pays for a snapshot inside its malloc */
    uint64_t bg = purge_bg_interval_ms();
    if (!bg || bg > 1000) live_tick(now);
}

/* malloc.c's tiers, shared with the C++ operators and folio's own calls */
void *api_small_alloc_slow(size_t n);
static inline void *api_small_alloc(size_t n) { return small_alloc_fast(n, api_small_alloc_slow); }
void *api_big_alloc(size_t n, size_t align, bool zero); /* above SMALL_MAX, or aligned */
void *api_aligned(size_t align, size_t n);             /* align: a power of two */

#endif
