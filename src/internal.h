/* folio internal types and the interfaces between its modules.
 *
 * Layers include only downward:
 *   override -> slab, huge -> pageset -> zone -> pagemap, meta -> os
 * reclaim is called by the tiers' entry points when a mapping fails and
 * calls into huge, slab, pageset and zone in turn.
 * Every syscall goes through os.c. */
#ifndef FOLIO_INTERNAL_H
#define FOLIO_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "folio.h"

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define INTERNAL __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default"))) /* folio's public symbols */
#define CACHELINE 64

#define PAGE_SHIFT 12
#define PAGE_SIZE ((size_t)1 << PAGE_SHIFT)
#define CHUNK_SHIFT 21
#define CHUNK_SIZE ((size_t)1 << CHUNK_SHIFT)
#define CHUNK_PAGES (CHUNK_SIZE >> PAGE_SHIFT) /* 512 */
#define MAX_ORDER 9                            /* a whole chunk */
#define PCP_MAX_ORDER 6                        /* pagesets cache orders 0..6 (every slab) and chunks */

#define MIN_ALIGN 16
#define SMALL_MAX 32768        /* largest size served from slabs */
#define NCLASSES 72            /* size classes 16 .. 32768 */
#define LARGE_MAX CHUNK_SIZE   /* largest size served by the page heap; above: huge */

/* ---------------------------------------------------------------- os */
/* The only module that makes syscalls.  Memory returned by os_reserve is
 * zero-filled; os_purge leaves the range zero-filled and not resident. */
void *os_reserve(size_t size, size_t align); /* NULL: refused (counted in os_map_failures) */
void *os_reserve_at(void *addr, size_t size); /* exactly at addr, replacing nothing; else NULL */
bool os_release(void *p, size_t size);       /* false: munmap refused, still mapped */
void os_purge(void *p, size_t size);
void *os_remap(void *old, size_t old_size, size_t new_size, void *fixed_at);
void *os_move(void *old, size_t old_size, size_t new_size); /* mremap anywhere; NULL: refused */
int os_cpu(void);
int os_cpu_count(void);
uint64_t os_now_ms(void);
void os_futex_wait(_Atomic int *addr, int val);
void os_futex_wake(_Atomic int *addr, int n);
void os_write_err(const char *s);
void os_write_fd(int fd, const char *s);
_Noreturn void os_fatal_ptr(const char *what, const void *p);
uint64_t os_random_seed(void);
size_t os_rss_bytes(void);
void os_rusage(uint64_t *minflt, uint64_t *majflt, uint64_t *maxrss_bytes);
int os_write_file(const char *path, const char *buf, size_t len);
int os_getpid(void);
void os_sleep_ms(unsigned ms);
uint64_t os_now_ns(void);          /* CLOCK_MONOTONIC */
size_t os_cache_size(int level);   /* data/unified cache of that level (1..3) of CPU 0, 0 if unknown */
int os_cpu_allowance(void);        /* CPUs this process may run on (affinity mask), at least 1 */
size_t os_read_file(const char *path, char *buf, size_t len); /* NUL-terminated; 0 on error */
size_t os_llc_bytes(void);                                    /* last-level cache size, 0 if unknown */
uint64_t os_parse_size(const char *s, const char **end); /* "48K", "2M", "1G", "123" */
int os_gettid(void);
/* 1 if some thread of this process that is not in tids[0..n) is alive (not
 * exited), 0 if none is, -1 if /proc cannot tell */
int os_other_threads_alive(const _Atomic int *tids, int n);
/* like os_futex_wait, but gives up after ms milliseconds */
void os_futex_wait_ms(_Atomic int *addr, int val, unsigned ms);
extern _Atomic size_t os_mapped_bytes, os_peak_mapped_bytes;
extern _Atomic uint64_t os_map_failures;

/* ---------------------------------------------------------------- lock */
/* A small futex mutex: 0 unlocked, 1 locked, 2 locked with waiters.
 * lock_acquire reports whether the lock was contended so that callers can
 * count contention where it matters (the zone lock).
 *
 * Every lock has a rank.  A thread that holds a lock only ever waits for a
 * lock of a higher rank (locks of one rank: at higher addresses, as
 * pageset_lock_all takes the pagesets), and the fork handler takes every
 * lock in rank order, so no cycle of waiters can form.  A trylock never
 * waits and may be taken in any order.  Debug builds (FOLIO_DEBUG) check
 * this at every acquisition and end the process on a violation. */
enum lock_rank {
    LOCK_RANK_NONE = 0, /* a lock nobody ranked: debug builds refuse it */
    LOCK_RANK_INIT,       /* folio_init */
    LOCK_RANK_CLEAR_INIT, /* the clearing engine's start-up */
    LOCK_RANK_CLEAR_MT,   /* one threaded clear at a time (trylock only) */
    LOCK_RANK_HEAPS,      /* the registry of thread heaps */
    LOCK_RANK_ABANDONED,  /* slabs of exited threads */
    LOCK_RANK_HUGE,       /* huge extents and their cache */
    LOCK_RANK_PAGESET,    /* each per-CPU pageset */
    LOCK_RANK_ZONE,       /* the zone's buddy lists */
    LOCK_RANK_META,       /* the metadata reserve */
    LOCK_RANK_COUNT
};
typedef struct {
    _Atomic int v;
    int rank; /* enum lock_rank */
} lock_t;
#define LOCK_INIT(r) {0, (r)}
static inline void lock_set_rank(lock_t *l, enum lock_rank r) { l->rank = (int)r; }

#ifdef FOLIO_DEBUG
void lockdep_acquire(lock_t *l, bool trylock); /* checks the order, records l as held */
void lockdep_release(lock_t *l);
void lockdep_forget(lock_t *l); /* fork child: l is reset, not released */
#else
static inline void lockdep_acquire(lock_t *l, bool trylock) { (void)l, (void)trylock; }
static inline void lockdep_release(lock_t *l) { (void)l; }
static inline void lockdep_forget(lock_t *l) { (void)l; }
#endif

static inline bool lock_try_raw(lock_t *l) {
    int e = 0;
    return atomic_compare_exchange_strong_explicit(&l->v, &e, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}
static inline bool lock_try(lock_t *l) {
    if (!lock_try_raw(l)) return false;
    lockdep_acquire(l, true);
    return true;
}
void lock_slow(lock_t *l);
/* Returns true when the lock was taken without waiting. */
static inline bool lock_acquire(lock_t *l) {
    lockdep_acquire(l, false);
    if (likely(lock_try_raw(l))) return true;
    lock_slow(l);
    return false;
}
static inline void lock_release(lock_t *l) {
    lockdep_release(l);
    if (unlikely(atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2))
        os_futex_wake(&l->v, 1);
}
/* fork child: the lock was taken by the prepare handler (or by a thread
 * that does not exist here) */
static inline void lock_reset(lock_t *l) {
    lockdep_forget(l);
    atomic_store_explicit(&l->v, 0, memory_order_relaxed);
}

/* ---------------------------------------------------------------- options */
#define FOLIO_OPTIONS(X)                                                                       \
    X(purge_delay_ms, "FOLIO_PURGE_DELAY_MS", 1000,                                            \
      "milliseconds freed memory stays resident before it is purged (MADV_DONTNEED)")          \
    X(purge_thread, "FOLIO_PURGE_THREAD", 1,                                                   \
      "1: a background thread purges expired free memory when enough is waiting; 0: purge "  \
      "only from allocation slow paths")                                                       \
    X(purge_min_order, "FOLIO_PURGE_MIN_ORDER", 3,                                             \
      "smallest free block purged, as a page order (3 = 32 KiB); whole 2 MiB chunks first")   \
    X(pcp_batch, "FOLIO_PCP_BATCH", 31, "pages moved between a per-CPU pageset and the zone per refill/drain") \
    X(pcp_high, "FOLIO_PCP_HIGH", 0,                                                           \
      "pages a per-CPU pageset may hold before it drains to the zone; 0 = 4 x batch")          \
    X(pcp_zone_min_mib, "FOLIO_PCP_ZONE_MIN_MIB", 64,                                          \
      "smallest zone size (MiB) pagesets are sized from: high_max = max(heap, this) / 8 / CPUs allowed") \
    X(pcp_chunks, "FOLIO_PCP_CHUNKS", 2, "whole 2 MiB chunks a per-CPU pageset may hold")     \
    X(pcp_autotune, "FOLIO_PCP_AUTOTUNE", 1,                                                   \
      "1: pageset high auto-tuned between high_min and high_max (seed 003); 0: high fixed")    \
    X(memory_limit, "FOLIO_MEMORY_LIMIT", 0,                                                   \
      "soft limit in bytes (K/M/G suffix): within 1/8 of it pagesets shrink toward high_min")  \
    X(arena_mib, "FOLIO_ARENA_MIB", 256, "size of each address range reserved for the zone")  \
    X(huge_cache_mib, "FOLIO_HUGE_CACHE_MIB", 1024,                                            \
      "bytes of freed huge extents kept mapped for reuse (purged after the delay)")           \
    X(heap_empty_slabs, "FOLIO_HEAP_EMPTY_SLABS", 4,                                           \
      "empty slabs a thread keeps for reuse before returning them to the page heap")          \
    X(clear, "FOLIO_CLEAR", 0,                                                                 \
      "clearing strategy: auto (0: measured per size and cache state), loop, stosb, nt, "     \
      "hybrid, pages, memset (a name or its folio_clear_strategy number)")                     \
    X(clear_threads, "FOLIO_CLEAR_THREADS", 0,                                                 \
      "threads for one very large clear: 0 = the CPUs this process may use (at most 4), "     \
      "1 = never split, N = at most N")                                                        \
    X(clear_mt_mib, "FOLIO_CLEAR_MT_MIB", 128, "smallest clear split across threads, in MiB")

struct folio_options {
#define X(name, env, def, doc) long name;
    FOLIO_OPTIONS(X)
#undef X
    const char *report_path; /* FOLIO_REPORT */
};
extern struct folio_options opt;
extern const char *const clear_strategy_names[]; /* FOLIO_CLEAR's names, by strategy number */
void options_init(void);

/* ---------------------------------------------------------------- spans */
enum span_kind {
    SPAN_UNUSED = 0, /* descriptor in the pool */
    SPAN_ZONE_FREE,  /* free block on a zone free list */
    SPAN_PCP_FREE,   /* free block held by a per-CPU pageset */
    SPAN_PURGING,    /* free block being purged outside the zone lock */
    SPAN_TAKEN,      /* handed out by the page heap, not yet typed */
    SPAN_SLAB,       /* slab of small objects */
    SPAN_LARGE,      /* one large block */
};

#define SPAN_ZEROED 0x1u /* contents known to be zero */
#define SPAN_FULL 0x2u   /* slab: on its bin's full list */

struct heap;
struct chunk;

/* A span descriptor describes a run of pages of one chunk: a free buddy
 * block, a slab or a large block.  Descriptors are type-stable (never
 * returned to the OS) so that lockless readers never see foreign memory. */
struct span {
    /* first line: everything free() and malloc()'s fast paths read */
    void *free;         /* slab: free objects (owner only) */
    uint32_t used;      /* slab: objects out of the owner's free list and bump area */
    uint32_t slow_used; /* slab: a local free that brings used down to this takes the slow path */
    uint32_t obj_size;
    uint32_t npages;
    uint64_t obj_inv;   /* slab: ceil(2^64 / obj_size) for the offset check */
    uint8_t kind;
    uint8_t order;      /* free block: buddy order */
    uint8_t cls;        /* slab: size class */
    uint8_t flags;
    uint32_t capacity;
    char *start;
    char *bump;         /* slab: first never-used object */
    _Atomic(struct heap *) owner;
    /* second line: remote frees (other threads write it) */
    _Atomic uintptr_t thread_free __attribute__((aligned(CACHELINE)));
    /* third line: slow paths and the zone's bookkeeping */
    char *bump_end __attribute__((aligned(CACHELINE))); /* slab: end of the object area */
    struct span *next, *prev;
    struct chunk *chunk;
    uint32_t page_idx;
    struct span *dnext, *dprev; /* zone: dirty blocks in free order */
    uint64_t freed_at;
};
_Static_assert(__builtin_offsetof(struct span, owner) < CACHELINE, "free()'s fields share one line");

/* kind is read without locks (free's lookup, buddy checks of neighbours);
 * every access goes through these relaxed atomics. */
static inline unsigned span_kind(const struct span *s) { return __atomic_load_n(&s->kind, __ATOMIC_RELAXED); }
static inline void span_set_kind(struct span *s, unsigned k) {
    __atomic_store_n(&s->kind, (uint8_t)k, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- arenas: metadata by address */
/* The zone's memory comes in arenas: ranges of at most ARENA_ALIGN bytes at
 * ARENA_ALIGN-aligned addresses (a reservation of FOLIO_ARENA_MIB above that
 * is several arenas).  An arena's first ARENA_META_PAGES pages hold its
 * metadata: the span of every page of the arena (ARENA_ALIGN / 512 bytes),
 * then struct arena_head.  The metadata of any arena address is therefore at
 * an address computed from it, not loaded.  arena_map says which aligned
 * ranges are arenas: set before any pointer into the arena is handed out,
 * never cleared, and the metadata pages are never unmapped (the first chunk
 * of an arena never leaves the zone), so the lookup needs no lock.
 * ARENA_ALIGN is fixed at compile time (the default FOLIO_ARENA_MIB): the
 * masks and shifts of free()'s lookup are then immediates. */
#define ARENA_SHIFT 28
#define ARENA_ALIGN ((size_t)1 << ARENA_SHIFT)       /* 256 MiB */
#define ARENA_CHUNKS (ARENA_ALIGN >> CHUNK_SHIFT)    /* 128 */
#define ARENA_PAGES (ARENA_ALIGN >> PAGE_SHIFT)      /* 65536 */
#define ARENA_TABLE_PAGES (ARENA_PAGES * sizeof(void *) / PAGE_SIZE) /* 128 */
#define ARENA_META_PAGES (ARENA_TABLE_PAGES + 1)     /* the table, then the head */
#define ARENA_MAP_BITS 48                            /* addresses folio can own */

/* A chunk is 2 MiB of arena memory; its meta is its part of the arena's
 * table: per page, the span that covers it (slab pages: every page; large
 * blocks and free zone blocks: the head page only; everything else NULL). */
struct chunk {
    _Atomic(struct span *) span_of[CHUNK_PAGES];
};
_Static_assert(sizeof(struct chunk) == PAGE_SIZE, "chunk i's meta is page i of the table");

enum chunk_state {
    CHUNK_NONE = 0, /* never mapped by the zone (past a small reservation's end) */
    CHUNK_IN_ZONE,  /* its pages are the zone's */
    CHUNK_RELEASED, /* unmapped by zone_release_free */
    CHUNK_OCCUPIED, /* not the zone's, and something else was mapped there */
};
/* after the table; written by the zone under its lock */
struct arena_head {
    uint8_t type[ARENA_CHUNKS];  /* zone: which sizes each chunk was split for (zone.c) */
    uint8_t state[ARENA_CHUNKS]; /* enum chunk_state */
    struct arena_head *next;     /* zone: every arena */
};

extern _Atomic uint8_t arena_map[(size_t)1 << (ARENA_MAP_BITS - ARENA_SHIFT)];

static inline uintptr_t arena_base(uintptr_t a) { return a & ~(uintptr_t)(ARENA_ALIGN - 1); }
/* The table slot of the page holding a: a must lie in an arena.  Every
 * lookup of a page's span (free, realloc, malloc_usable_size, the zone's
 * buddies, the pagesets) reads this slot. */
static inline _Atomic(struct span *) *arena_slot(uintptr_t a) {
    return (_Atomic(struct span *) *)arena_base(a) + ((a >> PAGE_SHIFT) & (ARENA_PAGES - 1));
}
static inline struct chunk *chunk_of(uintptr_t a) {
    return (struct chunk *)arena_slot(a & ~(uintptr_t)(CHUNK_SIZE - 1));
}
static inline char *chunk_base(const struct chunk *c) {
    uintptr_t i = ((uintptr_t)c >> PAGE_SHIFT) & (ARENA_CHUNKS - 1);
    return (char *)(arena_base((uintptr_t)c) + (i << CHUNK_SHIFT));
}
static inline struct arena_head *arena_head_of(uintptr_t a) {
    return (struct arena_head *)(arena_base(a) + (ARENA_TABLE_PAGES << PAGE_SHIFT));
}
/* a lies in an arena (NULL and addresses beyond 48 bits do not) */
static inline bool arena_owns(uintptr_t a) {
    uintptr_t i = a >> ARENA_SHIFT;
    return likely(i < ((uintptr_t)1 << (ARENA_MAP_BITS - ARENA_SHIFT))) &&
           atomic_load_explicit(&arena_map[i], memory_order_relaxed) != 0;
}
/* The span covering a, or NULL: a is no arena address, or no span covers
 * its page.  The slot's load is atomic, so the compiler cannot move it
 * above the ownership test (for a foreign pointer the slot's address may
 * be unmapped); the two loads do not depend on each other, so the span is
 * two dependent loads away: the slot, then the span's first line. */
static inline struct span *span_lookup(uintptr_t a) {
    if (!arena_owns(a)) return NULL;
    return atomic_load_explicit(arena_slot(a), memory_order_acquire);
}
void span_map_pages(struct span *s, struct span *v, uint32_t first, uint32_t n);

/* ---------------------------------------------------------------- meta, pagemap */
void *meta_alloc(size_t size); /* zeroed, never freed; 64-byte aligned */
void meta_lock_all(void);
void meta_unlock_all(bool child);

/* pagemap: chunk number -> huge extent (tagged with bit 0), for pointers
 * outside arenas.  Readable without locks: leaves are installed once and
 * never removed. */
#define PAGEMAP_HUGE_TAG 1u
#define PAGEMAP_BITS 48
#define PAGEMAP_LEAF_BITS 14
#define PAGEMAP_TOP_BITS (PAGEMAP_BITS - CHUNK_SHIFT - PAGEMAP_LEAF_BITS)
extern _Atomic(_Atomic uintptr_t *) pagemap_top[1u << PAGEMAP_TOP_BITS];
bool pagemap_set(uintptr_t addr, uintptr_t entry); /* false: no leaf to be had (never for entry 0) */
bool pagemap_spare_ensure(void); /* hold leaves for an extent of up to 32 GiB; false: meta exhausted */

static inline uintptr_t pagemap_get(uintptr_t a) {
    if (unlikely(a >> PAGEMAP_BITS)) return 0;
    _Atomic uintptr_t *leaf = atomic_load_explicit(
        &pagemap_top[a >> (CHUNK_SHIFT + PAGEMAP_LEAF_BITS)], memory_order_acquire);
    if (unlikely(!leaf)) return 0;
    return atomic_load_explicit(&leaf[(a >> CHUNK_SHIFT) & ((1u << PAGEMAP_LEAF_BITS) - 1)],
                                memory_order_acquire);
}

/* ---------------------------------------------------------------- zone */
struct zone_stats {
    uint64_t lock_acquired, lock_contended;
    uint64_t pages_from_zone, pages_to_zone;
    uint64_t purges, purged_bytes;
    uint64_t free_pages, dirty_pages, chunks;
    uint64_t meta_pages; /* pages of the zone's chunks that hold arena metadata */
};
struct span *zone_alloc_pages(size_t npages, size_t align_pages);
long zone_alloc_bulk(unsigned order, long n, struct span **list, struct span **stash, long ndescs,
                     long *descs_got);
long zone_take_descs(struct span **stash, long n);
void zone_free_span(struct span *s);
size_t zone_managed_pages(void);
size_t zone_resident_estimate(void);
bool zone_resize(struct span *s, size_t npages);
void zone_free_bulk(struct span *list);
/* Purge dirty free blocks free for the delay (all: every one now), at most
 * `budget` bytes (0: no bound). */
size_t zone_purge(bool all, size_t budget);
size_t zone_dirty_bytes(void);
void zone_stats(struct zone_stats *st);
size_t zone_check(void);
size_t pageset_check(void);          /* every pageset's invariants (pageset.c): violations */
#ifdef FOLIO_TEST_HOOKS
void pageset_corrupt_count(int i, long delta); /* tests: make pageset_check fail */
#endif
size_t slab_check_current(void);     /* the calling thread's heap (slab.c): violations */
size_t zone_release_free(void); /* unmap whole free chunks and the reservation's unused tail */
void zone_lock_all(void);
void zone_unlock_all(bool child);

/* ---------------------------------------------------------------- pageset */
struct pageset_stats {
    int cpu;
    long count, high, high_min, high_max, high_lowest, high_highest, batch, chunks;
    uint64_t refills, drains, free_high_drains, decays, trylock_failed;
};
void pageset_init(void);
struct span *page_alloc(size_t npages, size_t align_pages);
void page_free(struct span *s);
int pageset_count(void);
void pageset_stats(int i, struct pageset_stats *st);
void pageset_totals(struct pageset_stats *sum); /* count: pages held, chunks included */
void pageset_decay_tick(void);
bool pageset_grown(void);
#ifdef FOLIO_TEST_HOOKS /* test builds only (build/libfolio-test.a, the unit tests) */
/* tests: drive pageset i directly, and force the pressure signal (-1: measure) */
struct span *pageset_alloc_on(int i, unsigned order);
void pageset_free_on(int i, struct span *s, unsigned order);
void pageset_decay_on(int i);
void pageset_mark_used(int i); /* tests: count a use, so the next decay is not an idle one */
void pageset_force_pressure(int on);
void pageset_hold_decay(void); /* no automatic decay from now on */
#endif
void pageset_drain_all(void);
void pageset_lock_all(void);
void pageset_unlock_all(bool child);

/* ---------------------------------------------------------------- size classes */
extern uint8_t class_of_small[65]; /* (n + 15) >> 4 -> class, n <= 1024 */
struct class_info {
    uint32_t size;
    uint32_t pages;     /* slab size in pages (a power of two) */
    uint32_t capacity;  /* objects per slab */
    uint64_t inv;       /* ceil(2^64 / size): off is a multiple of size iff off * inv < inv (mod 2^64, off < 2^32) */
};
extern struct class_info classes[NCLASSES];
void classes_init(void);
/* n <= SMALL_MAX; inline: the fast path computes it for n > 1024 */
static inline unsigned size_class(size_t n) {
    if (n <= 128) return n ? (unsigned)((n - 1) >> 4) : 0;
    unsigned k = 63u - (unsigned)__builtin_clzll(n - 1); /* n in (2^k, 2^(k+1)] */
    return 8u + (k - 7u) * 8u + (unsigned)(((n - 1) >> (k - 3)) & 7u);
}

/* ---------------------------------------------------------------- slab (objects) */
struct heap_counts {
    uint64_t small_allocs, small_bytes, frees, large_allocs, large_bytes, large_frees;
    uint64_t small_live_bytes; /* sum over classes of (allocs - frees) x class size */
    uint64_t large_pages;      /* pages of live large blocks (net, modulo 2^64 per heap) */
};
void *small_alloc_slow(size_t n);
void small_free_slow(struct span *s, void *p);
void heap_counts(struct heap_counts *hc);
void heap_lock_all(void);
void heap_unlock_all(bool child);
void slab_reclaim_abandoned(void);
size_t slab_spare_bytes(void); /* empty slabs of exited threads kept for new ones */
void heap_trim_current(void);

/* ---------------------------------------------------------------- large / huge */
void *large_alloc(size_t n, size_t align, bool zero, bool growable);
void large_free(struct span *s, void *p);
struct huge;
void *huge_alloc(size_t n, size_t align, bool zero);
void huge_free(struct huge *h, void *p);
void *huge_realloc(struct huge *h, void *p, size_t n);
size_t huge_usable(struct huge *h, void *p);
/* What is wrong with a pointer handed back to folio: nothing, not a block's
 * start (invalid), or a block that was freed (double free / freed pointer). */
enum fault { FAULT_NONE, FAULT_INVALID, FAULT_FREED };
enum fault huge_check(const struct huge *h, const void *p);
size_t huge_purge(bool all);
char *huge_fit_grid(char *r, size_t room, size_t old, size_t map); /* huge_realloc's alignment step */
size_t huge_dirty_bytes(void);
void huge_lock_all(void);
void huge_unlock_all(bool child);
struct huge_stats {
    uint64_t mapped, cached, cache_hits, mremaps, purges, purged_bytes;
};
void huge_stats(struct huge_stats *st);

/* ---------------------------------------------------------------- bg */
/* folio's own threads (the purger, the clearing helpers).  They block every
 * signal, so a signal meant for the process always reaches a thread of the
 * program, and each leaves once bg_program_gone() says the program's own
 * threads have all exited: then the last of them exits as the program's
 * last thread would have (glibc's exit(0)), so folio never keeps a process
 * alive. */
bool bg_start(void *(*fn)(void *), void *arg); /* detached, 64 KiB stack, all signals blocked */
void bg_enter(void);        /* first thing a background thread does */
void bg_leave(void);        /* last thing it does */
bool bg_program_gone(void); /* no thread of the program is alive, only folio's */
void bg_after_fork_child(void);

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
void purge_tick(void); /* called from slow paths, with no folio lock held: purge what expired */
void purge_maybe_start_thread(void);
void purge_after_fork_child(void);
void purge_note_thread_exit(void); /* a thread of the program is exiting */

/* ---------------------------------------------------------------- reclaim */
/* Address space is a resource: when a mapping fails, a tier's entry point
 * calls as_reclaim (holding no folio lock) and retries once. */
void as_reclaim(void);
struct as_stats {
    uint64_t reclaims, released_bytes;
};
void as_stats(struct as_stats *st);

/* ---------------------------------------------------------------- stats */
/* Counts of threads without a heap (large blocks) and of huge blocks.
 * large_pages and huge_live_bytes are net: what is handed out now. */
struct global_counts {
    _Atomic uint64_t large_allocs, large_bytes, large_frees, large_pages;
    _Atomic uint64_t huge_allocs, huge_bytes, huge_frees, huge_live_bytes;
};
extern struct global_counts gcount;

/* ---------------------------------------------------------------- clear */
/* x86-64 kernels (rep stosb, AVX stores, non-temporal stores); elsewhere,
 * or built with FOLIO_CLEAR_PORTABLE to test the fallback, memset only */
#if defined(__x86_64__) && !defined(FOLIO_CLEAR_PORTABLE)
#define CLEAR_X86 1
#else
#define CLEAR_X86 0
#endif
/* The clearing engine (clear.c): folio_clear_hint is the one path every
 * zeroing of recycled memory takes; memory known to be zero is skipped by the
 * caller and counted with clear_zero_skipped. */
struct clear_stats {
    uint64_t loop, stosb, nt, hybrid, other; /* bytes cleared by each kind of strategy */
    uint64_t zero_skipped;                   /* bytes known zero, not cleared */
    uint64_t mt_clears, mt_bytes;            /* clears split across threads */
    uint64_t hot_nt_from, cold_nt_from;      /* sizes from which non-temporal stores are used */
    uint64_t calibration_us;                 /* 0: not calibrated (yet) */
};
void clear_stats(struct clear_stats *st);
void clear_lock_all(void); /* fork: the engine's start-up lock */
void clear_unlock_all(bool child);
void clear_json(void (*put)(void *ctx, const char *s), void *ctx); /* the "clear" object */
void clear_zero_skipped(size_t n);
unsigned clear_age_hint(uint64_t freed_at_ms); /* FOLIO_CLEAR_HOT or _COLD from the free time */
/* clear_kernels.c: CPU detection and the kernels (each clears exactly [p, p+n)) */
typedef void (*clear_kernel_fn)(char *p, size_t n);
struct clear_cpu {
    bool erms, avx2, avx512;
    int loop_impl, nt_impl;  /* the widest FOLIO_CLEAR_LOOP_* / FOLIO_CLEAR_NT_* */
    size_t l1, l2, l3, head; /* cache sizes; head: what a TOUCH clear leaves cached (L2/8) */
};
extern struct clear_cpu clear_cpu;
enum { CLEAR_K_LOOP, CLEAR_K_STOSB, CLEAR_K_NT, CLEAR_K_HYBRID, CLEAR_K_OTHER, CLEAR_NKINDS };
void clear_detect_cpu(void);
clear_kernel_fn clear_kernel(int strategy); /* NULL: not on this CPU, or AUTO/HYBRID */
void clear_small(char *p, size_t n);        /* n < 128 */
int clear_kind(int strategy);               /* CLEAR_K_*: which counter its bytes go to */

void folio_init(void);
extern _Atomic int folio_ready;
extern uint64_t folio_secret;

#endif
