/* obj: size classes, slabs and per-thread heaps (includes page); the inline
 * fast paths of malloc and free.
 *
 * Invariants:
 *  - a slab (span of kind SPAN_SLAB) belongs to one heap (its owner) or to
 *    the abandoned lists (owner == &heap_abandoned); only the owner touches
 *    s->free, s->room, s->bump and the bin lists, with no atomic instruction;
 *  - an empty slab a thread left at exit waits on the spare lists (kind
 *    SPAN_TAKEN, its pages still mapped to it) for a new thread's slab_new,
 *    or for the purger to give it back;
 *  - any other thread frees an object onto s->thread_free, one atomic push
 *    per run of the slab's objects it freed in a row (the first of a run at
 *    once, the rest on its heap's pending run); the owner takes the whole
 *    list and its length with one exchange;
 *  - a slab with no free object and nothing left to carve floats: it is on
 *    none of its owner's lists and its thread_free word carries
 *    SLAB_FLOATING (set by the owner, cleared only by the one thread that
 *    takes it).  Every free onto a floating slab, the owner's list flushes
 *    included, is a push onto thread_free; the push that brings the list to
 *    slab_float_bar objects decides where the slab goes, so exactly one
 *    thread does: the owner takes it back onto its partial list; any other
 *    thread gives it to the spare lists when every object is back (no
 *    round trip through its owner, busy, descheduled or dead), otherwise
 *    to its owner's rescue slots, or, when the owner's thread exited (then
 *    the first free takes it) or its slots are full, to the abandoned
 *    lists, where any thread adopts it.  An object of a
 *    slab handed on may still wait on its old owner's bin list: a flush
 *    pushes it remotely (slab_put reads thread_free and the owner first);
 *  - a heap's bin list (b->list) holds only its own slabs' objects (and
 *    those of its slabs handed on since, above): every
 *    local free pushes onto it, LIFO across slabs, and malloc pops from
 *    there first and touches no slab; an empty list is refilled with the
 *    current slab's free list (whole, or a batch of objects just carved),
 *    and past its high (auto-tuned from a slab's worth up to
 *    opt.heap_list_kib) half of it goes back to the slabs; another thread's
 *    object goes back to its slab (objects of one slab are handed out by
 *    one thread only, so two threads never write one cache line's objects);
 *  - a slab's used (slab_used: s->room + s->slow_used + 1) counts objects
 *    neither on s->free nor in the bump area (so objects waiting on
 *    thread_free or on any heap's bin list are 'used': a slab is never
 *    retired under a cached object); a slab with used == 0 that is not its
 *    bin's current slab is retired;
 *  - a floating slab comes back only once 1/8 of it is free
 *    (slab_float_bar), so a bin does not walk from slab to slab one free
 *    object at a time; a bin's current slab has slow_used == -1 (it stays
 *    current when it empties: its local frees never take the slow path);
 *    otherwise slow_used == 0;
 *  - a free object's second word holds its tag (address ^ slab_secret),
 *    carved ones included; malloc clears it, so free of an object whose word
 *    already holds it is a double free;
 *  - a slab's pages' objmap words (meta.h, below) name its owner while the
 *    owner is a heap with an id, and say which pages lie wholly below the
 *    bump pointer (extend() carves to a page boundary): a free whose word
 *    matches the calling heap is local and reads no span;
 *  - a free object's first word is its free-list link, stored encoded as
 *    next ^ tag (safe-linking) on every list (b->list, s->free,
 *    s->thread_free, the objects extend() carves): only slab_link_encode
 *    writes one and only slab_link_next reads one; a link never leaves its
 *    object's arena (a bin list changes arenas only through a flush). */
#ifndef FOLIO_OBJ_H
#define FOLIO_OBJ_H

#include "page.h"

/* ---------------------------------------------------------------- size classes */
/* The tables below are constants (sizeclass.c), in the library's read-only
 * pages: no page of a process's own is written for them at start. */
/* (n + 15) >> 4 -> class + 1, n <= SMALL_MAX: the line of struct heap
 * that holds the class's bin (bins follow the heap's first line), so
 * malloc's fast path finds its bin with one load and a shift, no branch on
 * the size (2 KiB; a program touches the lines of the sizes it uses) */
extern INTERNAL const uint8_t bin_line_of_small[(SMALL_MAX >> 4) + 1];
static inline unsigned small_class_of(size_t n) { return bin_line_of_small[(n + 15) >> 4] - 1u; }
struct class_info {
    uint32_t size;
    uint32_t pages;     /* slab size in pages (a power of two) */
    uint32_t capacity;  /* objects per slab */
    /* free()'s one test of an offset in a slab (off < 2^32): off * free_mul <
     * free_lim (mod 2^64) iff off is k * size with k < capacity (an object
     * start, not in the slack).  With free_mul = floor(2^64 / size) + 2,
     * k * size maps to k * e, e = size * free_mul - 2^64 in (0, 2 size), so
     * free_lim = capacity * e; any other offset maps to free_mul or more
     * (above 2^48: no k * e gets there).  free_mul - 1 is ceil(2^64 / size)
     * (class_inv). */
    uint32_t free_lim;
    uint64_t free_mul;
    /* the class's young target: the class whose slabs serve a thread's
     * first objects of it (bin.young), the next power of two up to 2 KiB
     * (sizes that are powers of two, and classes from 2 KiB on, their own):
     * a program that uses many classes a little fills a few pages, not one
     * page per class */
    uint16_t young;
    uint8_t list_batch; /* most objects a refill moves from a slab to an empty list (2 KiB, 8..64) */
    uint8_t run_max;    /* most objects a pending remote run holds (8 KiB, 1..64; 1: none held,
                         * each free is pushed: a held object of a large class keeps its slab
                         * from emptying) */
};
extern INTERNAL const struct class_info classes[NCLASSES];
/* a bin list's highest high, per class: FOLIO_HEAP_LIST_KIB of objects
 * (its lowest: capacity); set by classes_init */
extern INTERNAL uint32_t class_list_max[NCLASSES];
/* a new heap's bin.young: FOLIO_HEAP_YOUNG_BYTES of class c, rounded up to
 * whole objects (0: c is its own target).  Inline: heap_create's start-up
 * code shares its text page. */
static inline uint32_t class_young_objects(unsigned c) {
    if (classes[c].young == c || opt.heap_young_bytes <= 0) return 0;
    uint64_t n = ((uint64_t)opt.heap_young_bytes + classes[c].size - 1) / classes[c].size;
    return n > classes[c].capacity ? classes[c].capacity : (uint32_t)n;
}
_Static_assert(sizeof(struct class_info) == 32, "free() finds a class's line with a shift");
/* ceil(2^64 / size): off is a multiple of size iff off * inv < inv (mod 2^64, off < 2^32) */
static inline uint64_t class_inv(const struct class_info *ci) { return ci->free_mul - 1; }
void classes_init(void);
/* n <= SMALL_MAX; inline: the fast path computes it for n > 1024 */
static inline unsigned size_class(size_t n) {
    if (n <= 128) return n ? (unsigned)((n - 1) >> 4) : 0;
    unsigned k = 63u - (unsigned)__builtin_clzll(n - 1); /* n in (2^k, 2^(k+1)] */
    return 8u + (k - 7u) * 8u + (unsigned)(((n - 1) >> (k - 3)) & 7u);
}

/* ---------------------------------------------------------------- slab (objects) */
/* A slab's used count, kept as room = used - slow_used - 1: a local free
 * then decrements one word and takes the slow path on its sign (one
 * instruction and a branch), and malloc increments it. */
static inline uint32_t slab_used(const struct span *s) { return (uint32_t)(s->room + s->slow_used + 1); }
static inline void slab_set_used(struct span *s, uint32_t used) { s->room = (int32_t)used - s->slow_used - 1; }
/* a new threshold, used unchanged */
static inline void slab_set_slow_used(struct span *s, int32_t slow_used) {
    uint32_t used = slab_used(s);
    s->slow_used = slow_used;
    slab_set_used(s, used);
}
struct heap_counts {
    uint64_t small_allocs, small_bytes, frees, large_allocs, large_bytes, large_frees;
    uint64_t small_live_bytes; /* sum over classes of (allocs - frees) x class size */
    uint64_t large_pages;      /* pages of live large blocks (net, modulo 2^64 per heap) */
    uint64_t remote_frees;     /* frees of another thread's objects (pushed in runs: remote_batches) */
    uint64_t remote_collects, remote_collected; /* lists an owner took back, and their objects */
    uint64_t slab_cache_hits;  /* new slabs served from the thread's own cache of empty ones */
    uint64_t slab_cache_raises; /* times a cache's high grew to hold a burst */
    uint64_t slab_cache_high_peak; /* the highest high any thread's cache reached */
    uint64_t big_cache_hits;   /* large blocks served from a thread's own cache */
    uint64_t big_cache_returns; /* caches emptied to the buddy lists before a large block that would start a chunk */
    uint64_t list_refills;     /* bin lists refilled from a slab (its free list, or a batch just carved) */
    uint64_t list_flushes, list_flushed; /* bin lists past their bound, and objects they gave back */
    uint64_t remote_batches;   /* atomic pushes of other threads' objects (a run of one slab each) */
    uint64_t floating_slabs_queued; /* floating slabs other threads' frees took: to their owner's rescue slots */
    uint64_t floating_slabs_handed; /* ... to the abandoned lists (owner exited, or its slots full) */
    uint64_t floating_slabs_spared; /* ... emptied by them: to the spare lists, no owner involved */
};
/* The slow paths.  They run no maintenance; they tell the caller when to
 * run the tick: before a new slab is taken from the page heap (alloc:
 * without may_take_pages it returns NULL and sets *need_pages instead;
 * called again with it, it takes one), and after a slab was retired (free:
 * true). */
void *small_alloc_slow(size_t n, bool may_take_pages, bool *need_pages);
bool small_free_slow(const struct span *s);
void heap_set_exit_hook(void (*fn)(void)); /* runs at the end of every thread's exit */
/* dense.c: a best-fit heap shared by every size, for the sizes a process
 * has used little so far (up to DENSE_MAX_BYTES bytes, 16-byte aligned) */
struct dense_stats {
    uint64_t allocs, frees, live_bytes; /* live_bytes: usable bytes of its live blocks */
    uint64_t region_bytes, regions;     /* what it holds of the page heap */
    uint64_t regions_added;             /* regions taken from the page heap so far */
    bool closed;                        /* a second thread allocated: it serves no more */
    uint64_t graduated;                 /* sizes that left it for slabs or the page heap */
    uint64_t purged_bytes;              /* pages of free blocks of those sizes given back */
};
bool dense_wants(size_t n);          /* n's size is still served dense (no lock: a hint) */
void *dense_alloc(size_t n);         /* NULL: not served (its size left, or no room) */
enum fault dense_free(const struct span *s, void *p); /* s: the region p points into */
size_t dense_usable(const struct span *s, const void *p, enum fault *f);
/* realloc of p in the region s: its fault, else *usable (before) and
 * whether p now holds n (a block that grows is asked for grow_to) */
enum fault dense_realloc(const struct span *s, void *p, size_t n, size_t grow_to, size_t *usable, bool *in_place);
void dense_stats(struct dense_stats *st);
void dense_visit_locks(lock_visit_fn *fn, void *ctx);
void dense_lock_all(void);
void dense_unlock_all(bool child);
size_t dense_check(void); /* broken invariants (0: none) */
void heap_counts(struct heap_counts *hc);
void heap_visit_locks(lock_visit_fn *fn, void *ctx); /* for the report */
void heap_lock_all(void);
void heap_unlock_all(bool child);
void slab_reclaim_abandoned(void);
size_t slab_spare_bytes(void); /* empty slabs of exited threads kept for new ones */
void heap_trim_current(void);
void heap_decay_current(uint64_t now_ms); /* the calling thread's slab cache: see struct heap */
/* bigcache.c: the calling thread's cache of freed large blocks */
struct span *heap_big_get(size_t npages); /* a kept block (kind SPAN_TAKEN) of npages to npages + 1/8, or NULL */
bool heap_big_put(struct span *s);        /* keep s (after large_unmap); false: the caller frees it */
void heap_big_drain(struct heap *h, long keep_pages); /* give blocks back until keep_pages remain */

/* thread_free's low bits (objects are 16-aligned): */
#define SLAB_FLOATING ((uintptr_t)1) /* on none of its owner's lists */
#define SLAB_TAKEN ((uintptr_t)2)    /* floating, and a push took it (slab_float_bar) */
#define SLAB_TF_BITS (SLAB_FLOATING | SLAB_TAKEN)
#define RESCUE_SLOTS 64 /* a heap's rescue slots: one bit each in rescue_mask */
#define BIG_CACHE_PAGES 64 /* the largest block a thread's cache keeps, in pages (256 KiB) */
/* thread_free's word: the remote list's head in the low 48 bits (arenas
 * lie below 2^48) less its two low bits (SLAB_TF_BITS), its length in the high 16 (a
 * slab holds fewer than 2^16 objects: classes_init checks), so the owner
 * takes a list and its length in one exchange; a count of 0 is the empty
 * list. */
#define SLAB_REMOTE_SHIFT 48
static inline void *slab_remote_head(uintptr_t tf) {
    return (void *)(tf & (((uintptr_t)1 << SLAB_REMOTE_SHIFT) - 1) & ~SLAB_TF_BITS);
}
static inline uint32_t slab_remote_count(uintptr_t tf) { return (uint32_t)(tf >> SLAB_REMOTE_SHIFT); }
/* the head word once n objects (first .. ) are pushed onto tf's list (the
 * low bits stay) */
static inline uintptr_t slab_remote_push(uintptr_t tf, const void *first, uint32_t n) {
    return (uintptr_t)first | ((uintptr_t)(slab_remote_count(tf) + n) << SLAB_REMOTE_SHIFT) |
           (tf & SLAB_TF_BITS);
}
/* the remote list's length at which a push takes a floating slab */
static inline uint32_t slab_float_bar(const struct span *s) {
    return s->capacity / 8 ? s->capacity / 8 : 1;
}

/* The high of a thread's cache (empty slabs, large blocks), the pagesets'
 * rule for one owner: a miss that follows what the thread gave the page
 * heap for want of room raises the high by that much (the burst it could
 * not hold); a purge delay without such a miss halves it.  Only the owner
 * writes it; the report reads high. */
struct cache_high {
    int32_t high;  /* at most INT32_MAX: the options' larger limits are clamped */
    int32_t given; /* units refused since the last raise or decay (saturating) */
    bool missed;   /* a raise since the last decay */
};
/* A bin's first 32 bytes are all that malloc's and free's fast paths
 * touch: one cache line (bins are line-aligned). */
struct bin {
    void *list;           /* freed objects of this heap's slabs: malloc pops here first */
    int32_t list_room;    /* the list's high (heap->list_high) less its length: a push that
                           * takes it below 0 flushes half of the list */
    uint32_t lim;         /* classes[c].free_lim (and free_mul below), copied: free() by the
                           * objmap checks an object start in the line it pushes to */
    /* frees: of this class, by this thread (any slab's); listed: the
     * objects its refills moved from slabs to the list, less those its
     * flushes gave back and less the remote frees among those frees.  Its
     * mallocs are listed + frees - the list's length (bin_allocs): each
     * one pops an object that a refill or a local free put there, so
     * malloc's fast path counts nothing. */
    uint64_t listed, frees;
    struct span *cur;     /* slab the list is refilled from (never NULL: &span_empty) */
    struct span *partial; /* other slabs with free objects */
    uint64_t mul;         /* classes[c].free_mul */
} __attribute__((aligned(CACHELINE)));
/* The slow paths' per-class state of a heap, out of the bins' lines. */
struct bin_slow {
    uint16_t refill; /* objects the next refill moves: doubles per refill, from 4 up to the
                      * class's list_batch (a thread that uses a class little holds little of it) */
    uint16_t young;  /* objects of this class the slow path still serves from its young target's
                      * bin (its list stays empty meanwhile, so each such malloc misses); 0 from
                      * then on (at most a slab's capacity) */
    bool filled;     /* a slab of this class floated: the next new one is faulted in whole */
};
/* The per-class state and the highs are kept small so that a thread's heap
 * (and, for the first thread, the descriptors after it) takes two pages. */
_Static_assert(sizeof(struct bin_slow) == 6 && sizeof(struct cache_high) == 12, "small per-class state");
_Static_assert(sizeof(struct bin) == CACHELINE, "a bin is one line");

/* Counts: an object is counted as allocated in its allocating thread's bin
 * (bin_allocs, from what the list took and holds) and as freed, per class,
 * by the thread that frees it (local or remote), so that live bytes are
 * exact at report time (sum over heaps and classes of (allocs - frees) x
 * class size) while a free adds one increment and a malloc none. */
/* other heaps' objects of one slab that a thread freed and holds, to be
 * handed over in one push (slab.c) */
struct remote_run {
    struct span *slab; /* the slab the class's last remote free landed on (NULL: none) */
    void *first, *last;
    uint32_t n;
};
struct heap {
    /* free() reads these two first, in every thread, heap_none's included
     * (a thread's free before its first malloc): heap_none's first page
     * holds them, with the options, not a page of its own */
    uint16_t objmap_id; /* OBJMAP_ID_NONE, or its id | OBJMAP_CARVED (objmap words): free() compares a word's low half with it in one instruction */
    uintptr_t arena_hint; /* the base of its last new slab's arena (free() skips
                           * arena_map for that arena), or ARENA_HINT_NONE */
    struct bin bins[NCLASSES];
    uint64_t large_allocs, large_bytes, large_frees; /* counted here: no shared cache line */
    uint64_t large_pages; /* net: pages allocated minus pages freed by this thread */
    uint64_t remote_frees, remote_collects, remote_collected, slab_cache_hits, slab_cache_raises;
    uint64_t slab_cache_high_peak;
    struct span *empty; /* retired slabs kept for reuse */
    long nr_empty;
    /* the cache's high, in slabs: between opt.heap_empty_slabs and
     * opt.heap_empty_max */
    struct cache_high empty_high;
    uint64_t empty_decay_at; /* the next decay of both caches (heap_decay_current) */
    /* freed large blocks kept by page count (bigcache.c); high in pages,
     * from 0 up to FOLIO_HEAP_BIG_CACHE_KIB */
    struct span *big[BIG_CACHE_PAGES + 1];
    struct cache_high big_high;
    long big_pages;
    uint64_t big_given_sizes; /* bit n - 1: a block of n pages was given since the last raise */
    uint64_t big_cache_hits, big_cache_returns;
    uint64_t list_refills, list_flushes, list_flushed, remote_batches;
    uint64_t runs_pending[(NCLASSES + 63) / 64]; /* bit c: runs[c] holds objects (read by every slow path) */
    /* each bin list's high: a refill that follows a flush of
     * the list past its high raises it by what was flushed, a purge delay
     * without one halves it (down to a slab's worth) */
    struct cache_high list_high[NCLASSES];
    struct bin_slow bin_slow[NCLASSES];
    struct heap *all_next, *free_next;
    bool live;
    /* written by other threads: floating slabs of this heap's that their
     * frees took (slab.c, the rescue slots) */
    _Atomic uint64_t rescue_mask __attribute__((aligned(CACHELINE)));
    _Atomic(struct span *) rescue[RESCUE_SLOTS];
    /* the pending runs, one per class: other heaps' objects of one slab
     * that this thread freed (first -> ... -> last, tagged free), handed to
     * the slab in one push when a free of the class lands on another slab,
     * at the class's run_max objects (a class of run_max 1 holds none), and
     * at this heap's slow paths, decay, trim and exit (runs_pending, above,
     * says which hold some).  Last: heap_create writes none of it, so a
     * thread that frees no other thread's object never touches its pages */
    struct remote_run runs[NCLASSES];
};
/* bin_line_of_small: a class's bin is line class + 1 of its heap */
_Static_assert(offsetof(struct heap, bins) == CACHELINE && sizeof(struct bin) == CACHELINE, "bins from the second line, one each");

/* The calling thread's heap; &heap_none (never NULL) until it has one:
 * every bin of heap_none is empty, so malloc's fast path needs no test, and
 * no slab is heap_none's, so a slab whose owner is tl_heap is the calling
 * thread's (a span that is no slab has no owner). */
extern __thread struct heap *tl_heap __attribute__((tls_model("initial-exec")));
extern const struct heap heap_none;
/* heap_none as tl_heap holds it (never written through: it is read-only) */
#define HEAP_NONE ((struct heap *)&heap_none)
extern INTERNAL uint64_t slab_secret; /* keys the free-list links and free tags (slab_init) */

/* A heap's counters are written by its thread alone and read by others (the
 * report, folio top) with relaxed loads, without a lock.  Under
 * ThreadSanitizer the writes are relaxed atomic stores, so it checks that
 * protocol; elsewhere they are plain increments: one add to memory instead
 * of a load, an add and a store (6 instructions per malloc+free pair), and
 * an aligned 8-byte store is never torn on the machines folio runs on. */
#if defined(__SANITIZE_THREAD__)
#define HEAP_COUNT(field, v) __atomic_store_n(&(field), (field) + (v), __ATOMIC_RELAXED)
#define HEAP_SET(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)
#else
#define HEAP_COUNT(field, v) ((field) += (v))
#define HEAP_SET(field, v) ((field) = (v))
#endif

/* a high or a count of refused units, within what the struct holds */
static inline int32_t cache_high_clamp(long v) { return v > INT32_MAX ? INT32_MAX : v < 0 ? 0 : (int32_t)v; }
/* n units refused for want of room */
static inline void cache_high_give(struct cache_high *c, long n) {
    c->given = cache_high_clamp((long)c->given + n);
}
/* on a miss: true when the high grew (up to max) */
static inline bool cache_high_raise(struct cache_high *c, long max) {
    if (!c->given) return false;
    long high = (long)c->high + c->given > max ? max : (long)c->high + c->given;
    bool grew = high > c->high;
    if (grew) HEAP_SET(c->high, cache_high_clamp(high));
    c->given = 0;
    c->missed = true;
    return grew;
}
/* once per purge delay: the new high (the caller gives back what is above it) */
static inline long cache_high_decay(struct cache_high *c, long min) {
    if (!c->missed) HEAP_SET(c->high, cache_high_clamp(c->high / 2 < min ? min : c->high / 2));
    c->missed = false;
    c->given = 0;
    return c->high;
}
static inline void cache_high_init(struct cache_high *c, long high) {
    HEAP_SET(c->high, cache_high_clamp(high));
    c->given = 0;
    c->missed = false;
}

/* Large blocks are counted by the thread that allocates or frees them, in
 * its heap (no shared cache line); a thread with no heap counts in shared
 * atomics; heap_counts adds both. */
void heap_count_large_shared(uint64_t allocs, uint64_t bytes, uint64_t frees, uint64_t pages);
static inline void heap_count_large(uint64_t allocs, uint64_t bytes, uint64_t frees, uint64_t pages) {
    struct heap *h = tl_heap;
    if (likely(h != HEAP_NONE)) {
        HEAP_COUNT(h->large_allocs, allocs);
        HEAP_COUNT(h->large_bytes, bytes);
        HEAP_COUNT(h->large_frees, frees);
        HEAP_COUNT(h->large_pages, pages);
    } else {
        heap_count_large_shared(allocs, bytes, frees, pages);
    }
}
extern struct heap heap_abandoned;
/* the calling thread's heap, or NULL */
static inline struct heap *heap_current(void) {
    struct heap *h = tl_heap;
    return h == HEAP_NONE ? NULL : h;
}
void slab_init(void);
_Noreturn void slab_bad_free(const void *p);
void slab_remote_free(struct span *s, void *p);
void slab_free_fault(const struct span *s, const void *p);
_Noreturn void slab_bad_link(const void *obj);
void *bin_pop_far(void *p); /* malloc's pop of a link out of p's arena (slab.c), called with a jump */

/* ---- free-list links ----
 * A value written into a freed object's link decodes into the object's own
 * 256 MiB arena only if its top 36 bits are those of the object's tag,
 * which needs the process's secret: a pop follows a link within the arena
 * at once (one compare: next ^ obj is the decoded word before its last
 * xor), and any other only once the object it names is known to be a free
 * one of the list's class (bin_pop_far: a bin's list takes the frees of
 * every arena its slabs lie in, so that free pushes with no test), so
 * malloc never hands out a forged pointer.  A slab's own list and a
 * remote list (collect) lie in one slab: a link out of the arena there
 * ends the process. */
#define SLAB_LINK_SPAN ARENA_ALIGN
/* an object's tag: its second word while it is free, and its link's key */
static inline uintptr_t slab_tag(const void *obj) { return (uintptr_t)obj ^ slab_secret; }
/* the first word of a free object whose tag is tag and whose successor is next */
static inline uintptr_t slab_link_encode(uintptr_t tag, const void *next) {
    return (uintptr_t)next ^ tag;
}
/* d, obj's first word decoded up to its last xor (next ^ obj), is a link
 * within obj's arena, or the end of the list (next == NULL) */
static inline bool slab_link_stays(uintptr_t d, const void *obj) {
    return likely(d < SLAB_LINK_SPAN) || d == (uintptr_t)obj;
}
/* obj's successor (NULL: none); a link out of obj's arena ends the process */
static inline void *slab_link_next(const void *obj) {
    uintptr_t d = *(const uintptr_t *)obj ^ slab_secret; /* next ^ obj */
    if (!slab_link_stays(d, obj)) slab_bad_link(obj);
    return (void *)(d ^ (uintptr_t)obj);
}

/* An object of n's class from its bin's list, or miss(n) when the list is
 * empty: both calls (miss, and a bad link's fault) are in tail position,
 * so malloc keeps nothing across them and needs no stack frame.  No slab
 * is read: the object was counted used when it joined the list. */
/* p, the head of b's list, whose successor is next, leaves it allocated */
static inline void *bin_pop(struct bin *b, void **p, void *next) {
    b->list = next;
    __builtin_prefetch(next, 1); /* the next pop reads its link: start the miss now */
    p[1] = NULL;
    HEAP_COUNT(b->list_room, 1); /* counted: bin_allocs reads it from other threads */
    return p;
}
static inline void *small_alloc_fast(size_t n, void *(*miss)(size_t)) {
    struct heap *h = tl_heap;
    struct bin *b = (struct bin *)((char *)h + bin_line_of_small[(n + 15) >> 4] * sizeof(struct bin));
    __asm__("" : "+r"(b)); /* one register for the bin: gcc would compute its address twice */
    void **p = b->list;
    if (unlikely(p == NULL)) return miss(n);
    uintptr_t d = *(uintptr_t *)p ^ slab_secret; /* slab_link_next; a link to another arena is a jump */
    if (!slab_link_stays(d, p)) return bin_pop_far(p);
    return bin_pop(b, p, (void *)(d ^ (uintptr_t)p));
}

/* off, an offset below 2^32, is a whole number of s's objects: with
 * obj_inv = ceil(2^64 / size), off * obj_inv (mod 2^64) is below obj_inv
 * exactly for the multiples of size (one multiply, no division). */
static inline bool small_offset_ok(const struct span *s, uintptr_t off) {
    return off * s->obj_inv < s->obj_inv;
}
/* p is the start of one of slab s's objects: inside the object area (not in
 * the slack after the last object, not far from the slab: a span given a
 * pointer that is not in its pages, as the unit tests do), at a multiple. */
static inline bool small_is_object_start(const struct span *s, const void *p) {
    uintptr_t off = (uintptr_t)((const char *)p - s->start);
    return off < (uintptr_t)s->capacity * s->obj_size && small_offset_ok(s, off);
}

/* p (an object start) is on a free list: the mark small_free checks. */
static inline bool small_is_freed(const void *p) {
    return ((const uintptr_t *)p)[1] == ((uintptr_t)p ^ slab_secret);
}

/* ---- the objmap (meta.h): per page, what a local free needs ----
 * While a page belongs to a slab whose owner is a heap with an id, its word
 * is id | OBJMAP_CARVED (if the page ends at or below the slab's bump
 * pointer) | class << 16 | the page's index in the slab << 24; otherwise 0.
 * Only the owner writes its slabs' words (a new slab, a bump pointer that
 * moves, a slab that leaves it), each with one atomic store, but for a
 * floating slab handed on, whose words the thread that takes it clears
 * (the owner writes none while its slab floats); heaps past
 * OBJMAP_ID_MAX have no id and free through their spans.  So a free whose
 * word's low half equals the calling heap's objmap_id is a local free of an
 * object that was handed out (below the bump pointer), and it finds the
 * slab's start and class without reading the span. */
#define OBJMAP_CARVED 0x8000u
#define OBJMAP_ID_MAX 0x7ffeu
#define OBJMAP_ID_NONE 0xffffu /* no word holds it: heap_none, heaps past the max (heap_abandoned: 0) */
/* A heap with no slab yet: free() takes an address less than ARENA_ALIGN
 * past arena_hint for one of its arena's and reads its objmap word.  This
 * hint's range is non-canonical (bits 62 up, on 4- and 5-level page
 * tables alike), where no pointer a program holds can be, so every address
 * goes the span's way; and it is a constant, not an address in the library
 * that ld.so must relocate (heap_none then has none, and is read-only
 * data that no process copies). */
#define ARENA_HINT_NONE ((uintptr_t)1 << 62)
static inline uint32_t objmap_word(uint32_t id, unsigned cls, uint32_t page, bool carved) {
    return id ? id | (carved ? OBJMAP_CARVED : 0) | (uint32_t)cls << 16 | page << 24 : 0;
}

/* Push the free object p (its tag already checked) on bin b's list.  0:
 * done; 1: the list is past its bound: the caller calls small_free_slow(s),
 * whose true asks for the tick. */
static inline int small_list_push(struct bin *b, uintptr_t *w, uintptr_t tag) {
    void *head = b->list;
    w[0] = slab_link_encode(tag, head);
    w[1] = tag;
    b->list = w;
    HEAP_COUNT(b->list_room, -1);
    return unlikely(b->list_room < 0);
}

/* p lies in a page of slab s, and h, the calling thread's heap, owns s
 * (so p - start is below the slab's size).  Checks that p is an object
 * start below the bump pointer (the owner hands out nothing else) and not
 * already free, then pushes it on its bin's list (small_list_push's
 * result): a local free touches no slab.  The faults leave through a call
 * that is not noreturn, so free() needs no stack frame. */
static inline int small_free_local(struct heap *h, struct span *s, void *p) {
    uintptr_t *w = p;
    uintptr_t tag = slab_tag(p);
    if (unlikely(!small_offset_ok(s, (uintptr_t)((char *)p - s->start)) || (char *)p >= s->bump ||
                 w[1] == tag)) {
        slab_free_fault(s, p);
        return 0;
    }
    struct bin *b = &h->bins[s->cls];
    HEAP_COUNT(b->frees, 1);
    return small_list_push(b, w, tag);
}

/* small_free_local by the objmap: word is p's page's, and its low half is
 * h's objmap_id (so p's page is carved, in a slab of h's: on the last page,
 * only below the slack, which the one test of the offset excludes too).
 * -1: not an object start, or already free (the caller reports it through
 * the span). */
static inline int small_free_mapped(struct heap *h, uint32_t word, void *p) {
    uintptr_t *w = p;
    uintptr_t tag = slab_tag(p);
    /* the class (bits 16-23) times sizeof(struct bin), 64: one shift and a mask */
    struct bin *b = (struct bin *)((char *)h->bins + ((word >> (16 - 6)) & (0xffu << 6)));
    uintptr_t off = ((uintptr_t)p & (PAGE_SIZE - 1)) + ((uintptr_t)(word >> 24) << PAGE_SHIFT);
    if (unlikely(off * b->mul >= b->lim || w[1] == tag)) return -1;
    HEAP_COUNT(b->frees, 1);
    return small_list_push(b, w, tag);
}

#endif
