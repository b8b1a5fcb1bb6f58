/* page: the page heap.  The buddy zone over 2 MiB chunks, per-CPU
 * pagesets (seed 003), large blocks, huge extents, the maintenance tick
 * (purge) and address-space reclaim.  Includes meta and clear. */
#ifndef FOLIO_PAGE_H
#define FOLIO_PAGE_H

#include "clear.h"
#include "meta.h"

/* The one block cutter: [idx, end) of a chunk is cut into maximal aligned
 * blocks (a block of order o starts at a multiple of 2^o pages), by the zone
 * and the pagesets alike; this is the order of the block starting at idx. */
static inline unsigned block_order_at(uint32_t idx, uint32_t end, unsigned max_order) {
    unsigned o = idx ? (unsigned)__builtin_ctz(idx) : max_order;
    if (o > max_order) o = max_order;
    while ((1u << o) > end - idx) o--;
    return o;
}

/* ---------------------------------------------------------------- zone */
struct zone_stats {
    /* what every hold writes first (one cache line in the zone) */
    uint64_t lock_acquired, lock_contended;
    uint64_t pages_from_zone, pages_to_zone;
    /* the depot (zone.c): spans taken from it, put in it, given to it that
     * went on to the buddy lists (no room, or an exact list's size from a
     * pageset whose exact lists miss), and released to the buddy lists by
     * age, trim or reclaim; pages held (in free_pages and dirty_pages too) */
    uint64_t depot_gets, depot_puts, depot_bypassed, depot_released, depot_pages;
    uint64_t purges, purged_bytes;
    uint64_t bound_purged_bytes; /* of purged_bytes: purged before the delay, past the dirty bound */
    uint64_t free_pages, dirty_pages, chunks;
    uint64_t chunks_moved_in; /* whole free chunks a zone took from another (FOLIO_ZONE_HOMES) */
    uint64_t meta_pages; /* pages of the zone's chunks that hold arena metadata */
};
struct span *zone_alloc_pages(size_t npages, size_t align_pages);
struct span *zone_alloc_growable(size_t npages, size_t align_pages); /* room left behind it to grow */
void zone_free_span(struct span *s);
size_t zone_managed_pages(void);
size_t zone_resident_estimate(void);
bool zone_resize(struct span *s, size_t npages);
void zone_free_bulk(struct span *list);
/* unlocked hint: a large span of npages would be carved from a partly used
 * large chunk (false: it would take a whole free chunk or grow the heap) */
bool zone_large_fits_hint(size_t npages);
/* the depot (zone.c): a pageset's refill of npages-page spans, and its
 * overflow, each in one lock hold */
long zone_refill(int cpu, uint32_t npages, long n, struct span **out, struct span **list);
void zone_depot_put(int cpu, struct span *list, long max_pages, bool exact);
void zone_depot_flush(void); /* reclaim active: every depot span to the buddy lists */
#define ZONE_REFILL_MAX 64 /* out[] of zone_refill: at most this many spans */
/* Purge dirty free blocks free for the delay (all: every one now), at most
 * `budget` bytes (0: no bound). */
size_t zone_purge(bool all, size_t budget);
size_t zone_dirty_bytes(void);
/* the zone grew while its dirty free pages were past FOLIO_PURGE_DIRTY_RATIO's
 * bound since the last call (which clears it): a purge is due now */
bool zone_take_over_bound(void);
bool zone_over_bound_pending(void); /* the same flag, read only */
void zone_stats(struct zone_stats *st);
size_t zone_check(void);
size_t pageset_check(void);          /* every pageset's invariants (pageset.c): violations */
#ifdef FOLIO_TEST_HOOKS
void pageset_corrupt_count(int i, long delta); /* tests: make pageset_check fail */
#endif
size_t slab_check_current(void);     /* the calling thread's heap (slab.c): violations */
size_t zone_release_free(void); /* unmap whole free chunks and the reservation's unused tail */
void zone_visit_locks(lock_visit_fn *fn, void *ctx);
void zone_lock_all(void);
void zone_unlock_all(bool child);

/* ---------------------------------------------------------------- pressure */
/* The kernel's ZONE_BELOW_HIGH and ZONE_RECLAIM_ACTIVE, from
 * FOLIO_MEMORY_LIMIT and the memory cgroup's limit (pressure.c). */
enum { PRESSURE_BELOW_HIGH = 1, PRESSURE_RECLAIM = 2 };
struct pressure_stats {
    int state;
    uint64_t below_high_periods, reclaim_periods, limit_reads;
    size_t cgroup_limit; /* bytes, as last read; 0: none */
};
int pressure_state(void); /* re-measured at most every 100 ms */
int pressure_peek(void);  /* the last state measured */
void pressure_stats(struct pressure_stats *st);
#ifdef FOLIO_TEST_HOOKS
void pageset_force_pressure(int state); /* tests: -1 measure, else the PRESSURE_* bits */
void pressure_set_cgroup_files(const char *limit, const char *usage); /* tests: a fake cgroup */
void pressure_measure_now(void); /* tests: the next pressure_state() measures and re-reads */
#endif

/* ---------------------------------------------------------------- pageset */
struct pageset_stats {
    int cpu;
    long count, high, high_min, high_max, high_lowest, high_highest, batch, chunks;
    uint64_t refills, drains, free_high_drains, decays, trylock_failed;
    uint64_t reclaim_caps;   /* drains by the reclaim-active cap */
    uint64_t chunks_drained; /* whole chunks given back to the zone by drains and decay */
    uint64_t exact_hits, exact_misses; /* spans of other sizes: served from the exact lists, or not */
    uint64_t exact_near_hits;          /* of the hits: a span up to a quarter larger (exact_near) */
    long exact_pages, exact_high;      /* what the exact lists hold, and their bound (pages) */
    int in_use;              /* pagesets in use (high_max's split); totals only */
};
void pageset_init(void);
struct span *page_alloc(size_t npages, size_t align_pages);
void page_free(struct span *s);
int pageset_count(void);
void pageset_stats(int i, struct pageset_stats *st);
void pageset_totals(struct pageset_stats *sum); /* count: pages held, chunks included */
void pageset_decay_tick(void);
bool pageset_grown(void);
bool pageset_free_high_batch(void); /* PCPF_FREE_HIGH_BATCH: a free_high drain waits for a batch */
#ifdef FOLIO_TEST_HOOKS /* test builds only (build/libfolio-test.a, the unit tests) */
/* tests: drive pageset i directly */
struct span *pageset_alloc_on(int i, unsigned order);
void pageset_free_on(int i, struct span *s, unsigned order);
void pageset_decay_on(int i);
void pageset_mark_used(int i); /* tests: count a use, so the next decay is not an idle one */
void pageset_hold_decay(void); /* no automatic decay from now on */
/* tests: size limits as if cpus pagesets were in use and the heap were
 * heap_pages (0: measured) */
void pageset_force_sizing(int cpus, long heap_pages);
#endif
void pageset_drain_all(void);
void pageset_visit_locks(lock_visit_fn *fn, void *ctx);
void pageset_lock_all(void);
void pageset_unlock_all(bool child);

/* ---------------------------------------------------------------- large / huge */
/* large blocks (large.c): the caller counts them (heap_count_large) */
/* The pages a large block of n bytes takes: above 16 pages, rounded up to a
 * quarter of the power of two below it (at most 1/4 more address space; the
 * pages past n stay untouched unless the block is reused), so that sizes that
 * never repeat exactly still repeat by class in the caches in front of the
 * zone (the heap's, the pageset's exact lists, the depot). */
static inline size_t large_pages(size_t n) {
    size_t pages = (n + PAGE_SIZE - 1) >> PAGE_SHIFT;
    if (pages <= 16) return pages ? pages : 1;
    size_t step = (size_t)1 << (61 - __builtin_clzll(pages - 1)); /* 2^(floor(log2(pages-1)) - 2) */
    return (pages + step - 1) & ~(step - 1);
}
struct span *large_alloc(size_t n, size_t align, bool zero, bool growable); /* NULL: ENOMEM */
void large_free(struct span *s, void *p); /* p must be s->start, else the process ends */
/* large_free's first half: s is no live block any more (kind SPAN_TAKEN,
 * no page maps to it, so a second free of p is refused) but still the
 * caller's, who keeps it (a thread's cache) or gives it to page_free */
void large_unmap(struct span *s, void *p);
void large_reuse(struct span *s, size_t n, bool zero); /* a kept block (n bytes) live again */
bool large_resize(struct span *s, size_t npages); /* in place: false when it cannot */
void large_free_merged(struct span *s, void *p); /* to the buddy lists (a growing realloc's old block) */
struct huge;
void *huge_alloc(size_t n, size_t align, bool zero);
void huge_free(struct huge *h, void *p);
void *huge_realloc(struct huge *h, void *p, size_t n);
size_t huge_usable(struct huge *h, void *p);
/* What is wrong with a pointer handed back to folio: nothing, not a block's
 * start (invalid), or a block that was freed (double free / freed pointer). */
enum fault { FAULT_NONE, FAULT_INVALID, FAULT_FREED };
enum fault huge_check(const struct huge *h, const void *p);
size_t huge_purge(bool all);  /* memory of cached blocks back; address space kept */
size_t huge_release(void);      /* address space is short: unmap every range not in use */
char *huge_fit_grid(char *r, size_t room, size_t old, size_t map); /* huge_realloc's alignment step */
size_t huge_dirty_bytes(void);
void huge_visit_locks(lock_visit_fn *fn, void *ctx);
void huge_lock_all(void);
void huge_unlock_all(bool child);
struct huge_stats {
    uint64_t mapped, cached, cache_hits, mremaps, purges, purged_bytes;
    uint64_t reserved; /* address space of the regions (mapped: blocks in use and cached) */
    uint64_t placed;   /* regions placed on their shard's NUMA node (more than one node) */
    uint64_t allocs, bytes, frees, live_bytes; /* blocks; live_bytes: net, by mapping size */
};
void huge_stats(struct huge_stats *st);

/* ---------------------------------------------------------------- locks.c */
void page_lock_all(void); /* fork: huge, pagesets, zone, in rank order */
void page_unlock_all(bool child);
void page_visit_locks(lock_visit_fn *fn, void *ctx); /* huge, pagesets, zone */
size_t page_trim(void); /* malloc_trim: bytes given back */

/* ---------------------------------------------------------------- purge */
/* What the object layer above keeps and can give back.  It registers these
 * at start-up (slab_init), so the maintenance tick and address-space reclaim
 * reach it without the page layer calling up. */
struct obj_hooks {
    void (*reclaim)(void);      /* the tick: slabs emptied by other threads, old spare slabs */
    void (*give_back)(void);    /* address space is short: every empty slab it can reach */
    size_t (*held_bytes)(void); /* free memory it keeps that the purger must give back */
};
void purge_register(const struct obj_hooks *hooks);
extern const struct obj_hooks *obj_hooks;
uint64_t purge_tick(void); /* called from slow paths, with no folio lock held: purge what expired; returns the time (ms) */
void purge_maybe_start_thread(void);
void purge_after_fork_child(bool parent_had_threads);
void purge_note_thread_exit(void); /* a thread of the program is exiting */
/* The api's work for the background purger, run once per wake-up with no
 * folio lock held (the live statistics: a program that stopped allocating
 * still has them refreshed while the purger runs). */
void purge_register_bg_work(void (*fn)(uint64_t now_ms));
void purge_register_bg_start(void (*fn)(void)); /* run once, by the thread that starts the purger */
uint64_t purge_bg_interval_ms(void); /* how often the purger wakes; 0: it is not running */

/* ---------------------------------------------------------------- thp */
/* Huge pages for chunks and batched faulting (thp.c).  A chunk's state is
 * arena_head.huge[i], changed under the zone lock. */
enum chunk_huge {
    CHUNK_HUGE_NONE,      /* 4 KiB pages (as far as folio asked) */
    CHUNK_HUGE_ADVISED,   /* MADV_HUGEPAGE before its first touch */
    CHUNK_HUGE_COLLAPSED, /* MADV_COLLAPSE once it was dense */
    CHUNK_HUGE_SPLIT,     /* purged in part: MADV_NOHUGEPAGE until it is whole and untouched again */
    CHUNK_HUGE_REFUSED,   /* the kernel refused a collapse: not tried again */
    CHUNK_HUGE_DENSE,     /* 4 KiB pages, dense at the last collapse pass: collapsed if still dense at the next */
};
#define THP_HEAP_PAGES (16 * CHUNK_PAGES) /* auto: the heap (32 MiB) from which new chunks will be dense */
#define THP_DENSE_WATCH_PAGES (2 * CHUNK_PAGES) /* auto: from 4 MiB, whether chunks fill densely is watched */
#define THP_DENSE_HEAP_PAGES (4 * CHUNK_PAGES)  /* auto: from 8 MiB, a chunk after a dense run is advised, */
/* ... or while the chunks hold resident at least 3/4 of the pages handed out */
#define THP_WRITTEN_NUM 3
#define THP_WRITTEN_DEN 4
size_t zone_chunks_resident(void); /* zone.c: pages of the zone's chunks resident now (arena lock held) */
size_t thp_chunk_resident(char *base); /* pages of a chunk resident now (a huge one: all) */
const struct os_thp *thp_system(void); /* the system's settings, read on first use */
void thp_after_fork_child(void);
/* the zone starts using a whole chunk (untouched: zeroed, never faulted or purged) */
void thp_chunk_used(char *base, uint8_t *state, bool untouched, size_t heap_pages);
void thp_advise_flush(void); /* the advice thp_chunk_used deferred: no lock held */
extern __thread unsigned thp_advise_pending_n;
static inline bool thp_advise_pending(void) { return thp_advise_pending_n != 0; } /* (every zone unlock asks) */
void thp_arena_reserved(void *p, size_t size);
/* the purger may not break a huge chunk for a partial purge (counted) */
bool thp_keep_whole(uint8_t state, uint32_t chunk_free_pages, bool all);
/* a partial purge of a huge chunk comes: true if the caller must advise it
 * MADV_NOHUGEPAGE (outside the lock, before the purge) */
bool thp_split(uint8_t *state);
bool thp_collapse_wanted(uint8_t state, uint32_t chunk_free_pages, size_t heap_pages);
/* a collapse pass finds the chunk so: true if it is to be collapsed now */
bool thp_collapse_pass(uint8_t *state, uint32_t chunk_free_pages, size_t heap_pages);
void thp_collapsed(uint8_t *state, bool ok);
/* fault in what will be written now (chunk_state: its chunk's); true if done */
bool thp_populate(void *p, size_t bytes, uint8_t chunk_state);
struct thp_stats {
    uint64_t advised, collapsed, split, purges_skipped, populated_bytes;
    uint64_t regions_advised; /* regions of huge blocks advised MADV_HUGEPAGE */
};
void thp_huge_region(void *p, size_t size); /* huge.c: a new region of huge blocks */
void thp_stats(struct thp_stats *st);
unsigned zones_in_use(void);          /* zones given to threads so far, zone 0 included (FOLIO_ZONE_HOMES) */
size_t zone_in_use_pages(void);           /* pages of the zone's chunks not free in it */
uint8_t zone_chunk_huge(const struct span *s); /* the huge state of s's chunk */
size_t zone_collapse_dense(unsigned max, uint64_t now_ms); /* the purger: a pass, once a purge delay; collapses up to max chunks */

/* ---------------------------------------------------------------- reclaim */
/* Address space is a resource: when a mapping fails, a tier's entry point
 * calls as_reclaim (holding no folio lock) and retries once. */
void as_reclaim(void);
struct as_stats {
    uint64_t reclaims, released_bytes;
};
void as_stats(struct as_stats *st);


#endif
