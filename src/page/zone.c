/* zone: the page heap behind the per-CPU pagesets.
 *
 * 2 MiB chunks carved from large reserved arenas, behind one lock
 * (zone.lock) whose acquisitions and contended acquisitions are counted.
 * A SMALL chunk's free pages are buddy blocks of orders 0..MAX_ORDER - 1
 * (4 KiB .. 1 MiB), a MEDIUM or LARGE chunk's are free runs of any length;
 * a whole free chunk is one block of order MAX_ORDER, whichever its type
 * was.
 *
 * Invariants, all under zone.lock:
 *  - a free buddy block of order k (SMALL chunks, and whole free chunks)
 *    starts at a page index that is a multiple of 2^k in its chunk; it is on
 *    buddy_head[k] and chunk->span_of[head] points to its
 *    descriptor (kind SPAN_ZONE_FREE); its other span_of entries are NULL;
 *  - two free buddies of the same order are never both on the lists: they
 *    are merged when the second one is freed;
 *  - a free run (MEDIUM and LARGE chunks, "free runs" below) of n pages is
 *    on run_head[its chunk's type - 1][run_list(n)] (4 lists per power of
 *    two), its order is floor(log2(n)), its first and last pages map
 *    to it and no other does, and the pages on either side of it are not
 *    free: runs are merged as they are freed;
 *  - a free block or run without SPAN_ZEROED (dirty) of order >=
 *    purge_min_order is on the dirty list, in roughly the order it was
 *    freed; the purger madvises it once it has been free for purge_delay_ms.
 *  - grouping by size (the kernel's pageblock mobility grouping, at chunk
 *    granularity): a chunk split for the powers of two up to PCP_MAX_ORDER
 *    (slabs, the pagesets' order lists) is a SMALL chunk, one split for the
 *    other page counts up to PCP_MAX_ORDER's a MEDIUM chunk, one for larger
 *    spans a LARGE chunk (span_type); spans are taken from chunks of their
 *    own type first, a whole free chunk next, and from another type only
 *    when the arena cannot grow (or, for a span of up to 64 pages, while
 *    the heap is small).  Small blocks held by pagesets and slabs then pin
 *    few chunks, and large spans still find room.  Whole free chunks are on
 *    buddy_head[MAX_ORDER]; a chunk's type is set when it is taken whole.
 *  - head->free_pages[i] counts the free pages of chunk i on the lists;
 *    a buddy block is taken from the fullest chunk among the first few of
 *    its list, a span from the smallest run that holds it, so partly used
 *    chunks fill up and sparse ones drain into whole
 *    free chunks (which purge whole and keep a huge page whole, thp.c);
 *  - the depot (its own locks, see "the depot" below) holds whole spans
 *    the pagesets gave back for want of room, out of the free lists: a
 *    span put more than purge_delay_ms ago comes back to them, with that
 *    time, at the next purge, to the head of the dirty list;
 *  - arenas (internal.h): the first chunk of each holds the arena's metadata
 *    in its first ARENA_META_PAGES pages, which no block covers, so it is
 *    never a whole free chunk and never unmapped; head->state says which
 *    chunks are in the zone (CHUNK_IN_ZONE), and the span_of entries of the
 *    others are all NULL.
 * Arena memory is unmapped only by zone_release_free, when a mapping failed
 * (as_reclaim): the hot paths make no mmap/munmap.
 *
 * Zones (FOLIO_ZONE_HOMES): a process has up to ZONE_HOMES_MAX of them, each
 * with everything above (lock, lists, dirty list, descriptors, counters) of
 * its own; a thread allocates from zone 0 until it has waited
 * FOLIO_ZONE_MOVE_WAITS times for its lock, then from a zone of its own
 * (zones 1.. in turn), and a span goes back to the zone of its chunk (the
 * chunk's type byte holds its zone, set when the chunk enters a zone and
 * while it is whole).  A zone
 * with no whole free chunk takes one from another zone (trylock: two zones
 * are held at once only so, or in index order at fork) before the heap
 * grows.  What they share is the address space: the reservations, every
 * arena, and each chunk's state, under the arena lock, which ranks after
 * every zone's; a chunk's free count and huge-page state, which thp.c reads
 * across zones, are written and read with atomic accesses.  zone_held is the zone whose lock the calling thread holds:
 * the functions marked "lock held" work on it. */
#include <string.h>

#include "page.h"

#define SPAN_DIRTY_LISTED 0x4u
#define RUN_LISTS (4 * MAX_ORDER) /* run lists per chunk type: 4 per power of two, lengths 1 .. CHUNK_PAGES - 1 */
#define SPAN_RUN_ROOM 0x8u /* a free run: room behind a block that realloc grows (run_fit) */

/* The address space the zones share (the arena lock): the reservation
 * being carved, every arena, and each arena head's state[] (which chunks
 * are in a zone); also thp.c's record of the chunks started. */
static FORK_STATE struct {
    lock_t lock;
    char *cur, *end;          /* the current reservation's chunks not yet in a zone */
    unsigned fork_zones;      /* zones whose locks zone_lock_all took */
} arenas = {.lock = LOCK_INIT(LOCK_RANK_ARENA)};
/* The lock and the counters every hold writes lead; the published copies
 * are stored only when they changed (their line stays shared). */
static FORK_STATE struct zone {
    lock_t lock;
    struct zone_stats st;
    struct span *buddy_head[MAX_ORDER + 1]; /* [order]: SMALL chunks' buddy blocks, whole free chunks */
    struct span *run_head[2][RUN_LISTS];      /* [chunk type - 1][run_list(length)]: free runs */
    uint64_t run_lists[2];                    /* bit i: run_head[t][i] is not empty */
    struct span *dirty_head, *dirty_tail;
#ifdef FOLIO_DEBUG
    uint64_t checks; /* releases: each 64th checks */
#endif
    struct span *desc_pool, *desc_fresh; /* freed descriptors; the batch's untouched tail */
    uint32_t desc_pool_n, desc_fresh_n;
    struct span *purging; /* the block being madvised outside the lock, if any */
    /* copies of counters for readers that do not take the lock */
    _Atomic uint64_t dirty_pages_pub, free_pages_pub;
    _Atomic uint64_t large_lists; /* run_lists[CHUNK_LARGE - 1], for readers without the lock */
    _Atomic uint64_t chunks_pub; /* (the process's count, which small_heap reads, is zone_chunks_total) */
    /* a batch reserved while the fresh one still had descriptors: taken
     * whole when that one is used up (desc_reserve) */
    struct span *desc_next;
    uint32_t desc_next_n;
    _Atomic bool whole_pub; /* a whole free chunk is listed (whole_move_in's hint) */
} zone_first __attribute__((aligned(CACHELINE))) = {.lock = LOCK_INIT(LOCK_RANK_ZONE)};
typedef struct zone zone_t;
/* zones 1 .. ZONE_HOMES_MAX - 1: pages only a process whose threads use
 * them touches (all zero until then: a lock's rank is for debug builds) */
#ifdef FOLIO_DEBUG
static struct zone zones_more[ZONE_HOMES_MAX - 1] = {[0 ... ZONE_HOMES_MAX - 2] = {.lock = LOCK_INIT(LOCK_RANK_ZONE)}};
#else
static struct zone zones_more[ZONE_HOMES_MAX - 1];
#endif
static zone_t *zone_at(unsigned i) { return i ? &zones_more[i - 1] : &zone_first; }
static __thread zone_t *zone_held __attribute__((tls_model("initial-exec")));
#define zone (*zone_held)

/* not fork state (the fork state's page has no room): the chunks in all
 * zones, and zone_take_over_bound's flag */
static _Atomic uint64_t zone_chunks_total;
static _Atomic bool zone_over_bound;
static struct arena_head *arena_heads; /* every arena (the arena lock; read once set by arena_list) */
static void arena_lock(void) { lock_acquire(&arenas.lock); }
static void arena_unlock(void) { lock_release(&arenas.lock); }

/* Every thread starts in zone 0; one that has waited FOLIO_ZONE_MOVE_WAITS
 * times for its zone's lock moves to a zone of its own (zones 1.. in turn), so
 * that only threads that contend pay for zones of their own (each starts
 * its own chunks).  zones_used() is the zones given so far, zone 0
 * included: the ones to visit (a zone never given is all zero, and stays
 * untouched). */
static _Atomic unsigned homes_given; /* zones 1.. given */
static unsigned homes_count; /* FOLIO_ZONE_HOMES, resolved (0: one per CPU) by the first home given */
static __thread uint8_t tl_home __attribute__((tls_model("initial-exec"))); /* the thread's zone */
static __thread uint32_t tl_zone_waits __attribute__((tls_model("initial-exec"))); /* in zone 0 */
static unsigned zones_count(void) {
    unsigned n = __atomic_load_n(&homes_count, __ATOMIC_RELAXED);
    if (unlikely(!n)) {
        long want = opt.zone_homes ? opt.zone_homes : pageset_count();
        n = want < 1 ? 1u : want > ZONE_HOMES_MAX ? ZONE_HOMES_MAX : (unsigned)want;
        __atomic_store_n(&homes_count, n, __ATOMIC_RELAXED); /* every thread computes the same */
    }
    return n;
}
static unsigned zones_used(void) {
    unsigned given = atomic_load_explicit(&homes_given, memory_order_relaxed) + 1;
    if (given == 1) return 1; /* no thread has moved */
    unsigned n = zones_count();
    return given < n ? given : n;
}
/* the calling thread's zone's index */
static unsigned zone_home(void) { return tl_home; }
/* the calling thread waited for the lock of zone z */
static __attribute__((noinline)) void zone_waited(const zone_t *z) {
    if (tl_home || z != &zone_first || ++tl_zone_waits < (uint32_t)opt.zone_move_waits) return;
    unsigned n = zones_count();
    if (n > 1) tl_home = (uint8_t)(1 + atomic_fetch_add_explicit(&homes_given, 1, memory_order_relaxed) % (n - 1));
}

static void zone_lock_at(zone_t *z) {
    bool uncontended = lock_acquire(&z->lock);
    zone_held = z;
    if (!uncontended) {
        zone.st.lock_contended++;
        zone_waited(z);
    }
    zone.st.lock_acquired++;
}
/* the calling thread's zone: where its pages come from */
static void zone_lock(void) {
    if (unlikely(!opt.zone_move_waits) && !tl_home) zone_waited(&zone_first); /* moves at once */
    zone_lock_at(zone_at(zone_home()));
}
#ifdef FOLIO_DEBUG
static size_t check_locked(void);
/* debug builds: every 64th release of a zone checks every invariant above */
static void debug_check(void) {
    if (++zone.checks % 64 == 0 && check_locked() != 0) {
        os_write_err("folio: zone invariant violated\n");
        os_fatal_ptr("zone:", zone_held);
    }
}
#else
static inline void debug_check(void) {}
#endif

/* lock held: a published copy is written only when it changed (a line
 * nobody else writes stays shared) */
static void publish(_Atomic uint64_t *pub, uint64_t v) {
    if (atomic_load_explicit(pub, memory_order_relaxed) != v) atomic_store_explicit(pub, v, memory_order_relaxed);
}

static void zone_unlock(void) {
    debug_check();
    publish(&zone.dirty_pages_pub, zone.st.dirty_pages);
    publish(&zone.free_pages_pub, zone.st.free_pages);
    publish(&zone.chunks_pub, zone.st.chunks);
    if (atomic_load_explicit(&zone.whole_pub, memory_order_relaxed) != !!zone.buddy_head[MAX_ORDER])
        atomic_store_explicit(&zone.whole_pub, !!zone.buddy_head[MAX_ORDER], memory_order_relaxed);
    lock_release(&zone.lock);
    zone_held = NULL;
    if (unlikely(thp_advise_pending())) thp_advise_flush();
}

/* ---- descriptors: a pool owned by the zone (lock held) ----
 * Descriptors freed (desc_put) are a list; new ones come from the current
 * batch's untouched tail (desc_fresh), in order, so a reserve touches no
 * page: a small program writes the few descriptors it uses (its first
 * chunk's), not the 30 its first reserve asks for (two pages, where it now
 * writes one).  A reserve that the pool and the fresh tail cannot cover
 * sets a new batch aside (desc_next), taken when the tail is used up: the
 * tail is not linked into the pool, which wrote every one of its
 * descriptors (the batch's second page in git status, which then used the
 * pool's last-linked ones first).  Fresh memory is zero: kind SPAN_UNUSED. */
#define DESC_BATCH 32 /* one batch holds the heap's first reserve (chunk_grow's 30) */
/* No reserve asks for more than a batch (chunk_grow's is the largest,
 * asserted there), so when the pool and the fresh tail fall short nothing
 * is set aside yet, and one batch covers the reserve. */
static bool desc_reserve(uint32_t n) {
    if (zone.desc_pool_n + zone.desc_fresh_n + zone.desc_next_n >= n) return true;
    struct span *batch = meta_alloc(sizeof(struct span) * DESC_BATCH);
    if (!batch) return false;
    if (!zone.desc_fresh_n) {
        zone.desc_fresh = batch;
        zone.desc_fresh_n = DESC_BATCH;
    } else {
        zone.desc_next = batch;
        zone.desc_next_n = DESC_BATCH;
    }
    return true;
}
static struct span *desc_get(void) {
    struct span *d = zone.desc_pool; /* desc_reserve guaranteed one: here, fresh or set aside */
    if (d) {
        zone.desc_pool = d->next;
        zone.desc_pool_n--;
        return d;
    }
    if (!zone.desc_fresh_n) {
        zone.desc_fresh = zone.desc_next;
        zone.desc_fresh_n = zone.desc_next_n;
        zone.desc_next_n = 0;
    }
    zone.desc_fresh_n--;
    return zone.desc_fresh++;
}
static void desc_put(struct span *d) {
    span_set_kind(d, SPAN_UNUSED);
    d->next = zone.desc_pool;
    zone.desc_pool = d;
    zone.desc_pool_n++;
}

/* ---- lists ---- */
enum { CHUNK_SMALL = 0, CHUNK_LARGE = 1, CHUNK_MEDIUM = 2 };

static uint32_t chunk_index(const struct chunk *c) {
    return (uint32_t)(((uintptr_t)c >> PAGE_SHIFT) & (ARENA_CHUNKS - 1));
}
/* A chunk's type byte: its type (bits 0-1) and its zone (bits 2-4),
 * written by that zone while the chunk is whole (chunk_set_type), read
 * without a lock by a free of a span in it (zone_of_chunk), which the
 * chunk's type byte cannot change under: it is not whole. */
static uint8_t *chunk_type_byte(const struct chunk *c) {
    return &arena_head_of((uintptr_t)c)->type[chunk_index(c)];
}
static unsigned chunk_type_zone(const struct chunk *c) { return __atomic_load_n(chunk_type_byte(c), __ATOMIC_RELAXED); }
static unsigned chunk_type(const struct chunk *c) { return chunk_type_zone(c) & 3u; }
static unsigned chunk_zone(const struct chunk *c) { return chunk_type_zone(c) >> 2; }
static void chunk_set_type(const struct chunk *c, unsigned type, const zone_t *z) {
    unsigned index = z == &zone_first ? 0 : (unsigned)(z - zones_more) + 1;
    __atomic_store_n(chunk_type_byte(c), (uint8_t)(type | index << 2), __ATOMIC_RELAXED);
}
static zone_t *zone_of_chunk(const struct chunk *c) { return zone_at(chunk_zone(c)); }
static void zone_lock_chunk(const struct chunk *c) { zone_lock_at(zone_of_chunk(c)); }

/* A run of n pages is on list 4k + the two bits below its top one (k =
 * floor(log2(n))): a list holds runs within a quarter of each other, and
 * every run of a higher list holds n pages. */
static unsigned run_list(uint32_t n) {
    unsigned k = 31u - (unsigned)__builtin_clz(n);
    return k < 2 ? 4 * k + (n - (1u << k)) : 4 * k + ((n >> (k - 2)) & 3);
}
/* a free block's list: its order's (buddy blocks, whole chunks), or its
 * length's in its chunk type's run lists */
static struct span **list_head(struct span *d) {
    unsigned t = d->order == MAX_ORDER ? CHUNK_SMALL : chunk_type(d->chunk);
    return t == CHUNK_SMALL ? &zone.buddy_head[d->order] : &zone.run_head[t - 1][run_list(d->npages)];
}

static uint16_t *chunk_free(const struct chunk *c) {
    return &arena_head_of((uintptr_t)c)->free_pages[chunk_index(c)];
}
static uint8_t *chunk_huge(const struct chunk *c) { return &arena_head_of((uintptr_t)c)->huge[chunk_index(c)]; }
static void free_add(struct chunk *c, long n) {
    zone.st.free_pages += (uint64_t)n;
    /* an atomic store: thp.c reads another zone's chunk's count unlocked */
    __atomic_store_n(chunk_free(c), (uint16_t)(*chunk_free(c) + n), __ATOMIC_RELAXED);
}

/* run_lists: which run lists are not empty, updated under the lock when a
 * list empties or fills, so that a best fit skips empty lists; the large
 * chunks' copy is published (large_lists) so that an allocation can ask
 * without the lock whether a large span would fit in a partly used chunk
 * (zone_large_fits_hint) */
static void lists_note(struct span **head) {
    uintptr_t off = (uintptr_t)head - (uintptr_t)&zone.run_head[0][0];
    if (off >= sizeof zone.run_head) return; /* a buddy list */
    size_t i = off / sizeof *head;
    unsigned t = (unsigned)(i / RUN_LISTS);
    uint64_t bit = 1ull << (i % RUN_LISTS);
    zone.run_lists[t] = *head ? zone.run_lists[t] | bit : zone.run_lists[t] & ~bit;
    if (t == CHUNK_LARGE - 1) atomic_store_explicit(&zone.large_lists, zone.run_lists[t], memory_order_relaxed);
}
static void list_add(struct span *d) {
    struct span **head = list_head(d);
    span_list_push(head, d);
    if (!d->next) lists_note(head);
}
static void list_del(struct span *d) {
    struct span **head = list_head(d);
    span_list_remove(head, d);
    if (!*head) lists_note(head);
}
/* Set while the depot's expired spans go to the free lists (lock held):
 * a block freed before this (expired: the span did not merge with a
 * buddy freed since) goes to the head of the dirty list, where this pass
 * of the purge finds it; at the tail it would wait behind blocks freed
 * since it was put. */
static __thread uint64_t dirty_head_before __attribute__((tls_model("initial-exec")));
static void dirty_add(struct span *d) {
    d->flags |= SPAN_DIRTY_LISTED;
    if (d->freed_at < dirty_head_before) {
        d->dprev = NULL;
        d->dnext = zone.dirty_head;
        if (zone.dirty_head) zone.dirty_head->dprev = d;
        else zone.dirty_tail = d;
        zone.dirty_head = d;
    } else {
        d->dnext = NULL;
        d->dprev = zone.dirty_tail;
        if (zone.dirty_tail) zone.dirty_tail->dnext = d;
        else zone.dirty_head = d;
        zone.dirty_tail = d;
    }
    zone.st.dirty_pages += d->npages;
}
static void dirty_del(struct span *d) {
    if (!(d->flags & SPAN_DIRTY_LISTED)) return;
    d->flags &= ~SPAN_DIRTY_LISTED;
    if (d->dprev) d->dprev->dnext = d->dnext;
    else zone.dirty_head = d->dnext;
    if (d->dnext) d->dnext->dprev = d->dprev;
    else zone.dirty_tail = d->dprev;
    zone.st.dirty_pages -= d->npages;
}

static void set_head(struct chunk *c, uint32_t idx, struct span *d) {
    atomic_store_explicit(&c->span_of[idx], d, memory_order_release);
}

/* Put the free block (c, idx, order) on the lists, merging with free
 * buddies.  zeroed: its contents are known zero; freed_at: when it became
 * dirty (ignored when zeroed).  d: a descriptor to reuse, or NULL. */
static void block_insert(struct chunk *c, uint32_t idx, unsigned order, bool zeroed,
                         uint64_t freed_at, struct span *d) {
    free_add(c, 1l << order);
    while (order < MAX_ORDER) {
        uint32_t b = idx ^ (1u << order);
        struct span *bd = atomic_load_explicit(&c->span_of[b], memory_order_relaxed);
        if (!bd || span_kind(bd) != SPAN_ZONE_FREE || bd->order != order || bd->chunk != c ||
            bd->page_idx != b)
            break;
        list_del(bd);
        dirty_del(bd);
        set_head(c, b, NULL);
        if (!(bd->flags & SPAN_ZEROED)) {
            if (zeroed || bd->freed_at > freed_at) freed_at = bd->freed_at;
            zeroed = false;
        }
        desc_put(bd);
        idx &= ~(1u << order);
        order++;
    }
    if (!d) d = desc_get();
    span_set_kind(d, SPAN_ZONE_FREE);
    d->chunk = c;
    d->page_idx = idx;
    d->order = (uint8_t)order;
    d->npages = 1u << order;
    d->start = chunk_base(c) + ((size_t)idx << PAGE_SHIFT);
    d->flags = zeroed ? SPAN_ZEROED : 0;
    d->freed_at = freed_at;
    set_head(c, idx, d);
    list_add(d);
    if (!zeroed && order >= (unsigned)opt.purge_min_order) dirty_add(d);
}

/* ---- free runs (MEDIUM and LARGE chunks) ----
 * In a MEDIUM or LARGE chunk free pages are runs of any length, merged with both
 * neighbours as they are freed: run d covers [page_idx, page_idx + npages),
 * is on its length's run list (run_list), and its first and its
 * last page map to it, so that a block freed next to it finds it from
 * either side (a boundary tag); its other span_of entries are NULL.  A run
 * of the whole chunk is a whole free chunk (order MAX_ORDER, its head page
 * only).  A span is cut from the smallest run that holds it among the
 * first RUN_FIT_LOOK of each list: no page count is rounded up to a power
 * of two, and a freed block rejoins the free pages around it at once, so
 * that no hole is left that only an aligned buddy could fill (the buddy
 * lists' fragmentation under random large sizes, docs/notes/zone-runs.md). */
#define RUN_FIT_LOOK 8
/* n's own list also holds runs shorter than n (up to a quarter): more of
 * it is looked at, so that a run that fits is not missed (and a chunk
 * taken instead) while short ones lead the list */
#define RUN_FIT_LOOK_OWN 32

static bool chunk_runs(const struct chunk *c) { return chunk_type(c) != CHUNK_SMALL; }
/* the order of the smallest power of two that holds pages */
static unsigned order_for(size_t pages) {
    return pages <= 1 ? 0 : (unsigned)(64 - __builtin_clzll(pages - 1));
}
static unsigned run_order(uint32_t n) { return n >= CHUNK_PAGES ? MAX_ORDER : 31u - (unsigned)__builtin_clz(n); }

/* a free block's head and tail entries to NULL: it is taken, merged or
 * purged (a buddy block's tail entry is NULL already) */
static void tags_clear(struct span *d) {
    set_head(d->chunk, d->page_idx, NULL);
    if (d->npages > 1) set_head(d->chunk, d->page_idx + d->npages - 1, NULL);
}
/* d off the lists and out of the counts: its pages are the caller's */
static void free_unlink(struct span *d) {
    list_del(d);
    dirty_del(d);
    tags_clear(d);
    free_add(d->chunk, -(long)d->npages);
}

/* The free run [idx, idx + n) of c, as d (or a new descriptor), merged with
 * nothing: its neighbours are not free.  fl: SPAN_ZEROED, SPAN_RUN_ROOM. */
static void run_place(struct chunk *c, uint32_t idx, uint32_t n, unsigned fl, uint64_t freed_at,
                      struct span *d) {
    if (!d) d = desc_get();
    span_set_kind(d, SPAN_ZONE_FREE);
    d->chunk = c;
    d->page_idx = idx;
    d->npages = n;
    d->order = (uint8_t)run_order(n);
    d->start = chunk_base(c) + ((size_t)idx << PAGE_SHIFT);
    d->flags = (uint8_t)(fl & (n < CHUNK_PAGES ? SPAN_ZEROED | SPAN_RUN_ROOM : SPAN_ZEROED));
    d->freed_at = freed_at;
    free_add(c, n);
    set_head(c, idx, d);
    if (n > 1 && n < CHUNK_PAGES) set_head(c, idx + n - 1, d);
    list_add(d);
    if (!(fl & SPAN_ZEROED) && d->order >= (unsigned)opt.purge_min_order) dirty_add(d);
}

/* the free run that ends right before page idx / starts at page end, or NULL */
static struct span *run_before(struct chunk *c, uint32_t idx) {
    struct span *p = idx ? atomic_load_explicit(&c->span_of[idx - 1], memory_order_relaxed) : NULL;
    return p && span_kind(p) == SPAN_ZONE_FREE && p->chunk == c && p->page_idx + p->npages == idx ? p : NULL;
}
static struct span *run_after(struct chunk *c, uint32_t end) {
    struct span *q = end < CHUNK_PAGES ? atomic_load_explicit(&c->span_of[end], memory_order_relaxed) : NULL;
    return q && span_kind(q) == SPAN_ZONE_FREE && q->chunk == c && q->page_idx == end ? q : NULL;
}

/* Free [idx, idx + n) of a MEDIUM or LARGE chunk, merged with the free runs on both
 * sides (dirty if any part is, freed when the latest dirty part was).  The
 * merged run is a room (SPAN_RUN_ROOM) if its first part is: a run merged
 * with the one before it is that run's room or not, one merged with the
 * one after it stops being that run's room (its block is the range freed). */
static void run_insert(struct chunk *c, uint32_t idx, uint32_t n, unsigned fl, uint64_t freed_at,
                       struct span *d) {
    struct span *side[2] = {run_before(c, idx), run_after(c, idx + n)};
    for (int i = 0; i < 2; i++) {
        struct span *b = side[i];
        if (!b) continue;
        free_unlink(b);
        if (!(b->flags & SPAN_ZEROED)) {
            if ((fl & SPAN_ZEROED) || b->freed_at > freed_at) freed_at = b->freed_at;
            fl &= ~SPAN_ZEROED;
        }
        if (i == 0) {
            idx = b->page_idx;
            fl = (fl & ~SPAN_RUN_ROOM) | (b->flags & SPAN_RUN_ROOM);
        }
        n += b->npages;
        desc_put(b);
    }
    run_place(c, idx, n, fl, freed_at, d);
}

/* Where n pages aligned to align fit in the free run d: their first page,
 * or UINT32_MAX.  As far to the run's end as they fit: the run's front
 * stays free right behind the block before it, which a growing realloc
 * can take in place (zone_resize); cut from the front, the run would be
 * gone the first time any block fits there.  A block that will grow
 * itself (grows), cut from a whole free chunk of a small heap
 * (GROW_ROOM_HEAP_CHUNKS), is cut from its front: the whole chunk is then
 * behind it, for the growing buffer that is most of a small program's
 * heap (ls -l's listing).  From a run, cut so, it would take the room of a
 * block before it: 27 % more bytes copied by alloc_realloc. */
static uint32_t run_fits(const struct span *d, uint32_t n, uint32_t align, bool grows) {
    uint32_t end = d->page_idx + d->npages;
    if (n > d->npages) return UINT32_MAX;
    uint32_t at = grows ? (d->page_idx + align - 1) & ~(align - 1) : (end - n) & ~(align - 1);
    return at >= d->page_idx && at + n <= end ? at : UINT32_MAX;
}
/* The smallest run among the first RUN_FIT_LOOK of each non-empty list (of
 * n's own, RUN_FIT_LOOK_OWN), from n's own list up, that holds n pages
 * aligned to align (*at: where), or NULL.
 * Rooms (the pages a block that realloc grows was given past its end, and
 * what it left there) are taken only when no other run fits: the smallest
 * free runs are often rooms, and a best fit would take them first, so that
 * the next growth of their block would copy it instead (a room is given
 * up, merged, when its block is freed). */
static struct span *run_fit(unsigned type, uint32_t n, uint32_t align, uint32_t *at) {
    unsigned own = run_list(n);
    for (unsigned rooms = 0; rooms < 2; rooms++)
        for (uint64_t lists = zone.run_lists[type - 1] >> own << own; lists; lists &= lists - 1) {
            unsigned i = (unsigned)__builtin_ctzll(lists);
            struct span *best = NULL;
            int look = i == own ? RUN_FIT_LOOK_OWN : RUN_FIT_LOOK;
            for (struct span *d = zone.run_head[type - 1][i]; d && look-- > 0; d = d->next) {
                if (!rooms && (d->flags & SPAN_RUN_ROOM)) continue;
                uint32_t a = run_fits(d, n, align, false);
                if (a == UINT32_MAX || (best && d->npages >= best->npages)) continue;
                best = d;
                *at = a;
                if (d->npages == n) break;
            }
            if (best) return best;
        }
    return NULL;
}

/* [at, at + n) out of the free run (or whole free chunk) d, as d (kind
 * SPAN_TAKEN); what is left on either side stays free, the part before it
 * a room if d was (lock held, two descriptors reserved). */
static struct span *run_cut(struct span *d, uint32_t at, uint32_t n) {
    struct chunk *c = d->chunk;
    uint32_t idx = d->page_idx, end = idx + d->npages;
    unsigned fl = d->flags & (SPAN_ZEROED | SPAN_RUN_ROOM);
    uint64_t freed_at = d->freed_at;
    free_unlink(d);
    if (at > idx) run_place(c, idx, at - idx, fl, freed_at, NULL);
    if (at + n < end) run_place(c, at + n, end - at - n, fl & SPAN_ZEROED, freed_at, NULL);
    span_set_kind(d, SPAN_TAKEN);
    d->page_idx = at;
    d->npages = n;
    d->order = (uint8_t)order_for(n);
    d->start = chunk_base(c) + ((size_t)at << PAGE_SHIFT);
    d->flags = fl & SPAN_ZEROED;
    return d;
}

/* Free the pages [idx, idx+n) of c: in a MEDIUM or LARGE chunk as a run merged with
 * its neighbours, in a SMALL one as maximal aligned buddy blocks.  fl:
 * SPAN_ZEROED, and SPAN_RUN_ROOM for the pages behind a block that realloc
 * grows (a buddy block needs none: no smaller request takes its pages
 * before a block of its own order would). */
static void range_insert(struct chunk *c, uint32_t idx, uint32_t n, unsigned fl, uint64_t now,
                         struct span *d) {
    if (chunk_runs(c)) return run_insert(c, idx, n, fl, now, d);
    uint32_t end = idx + n;
    while (idx < end) {
        unsigned o = block_order_at(idx, end, MAX_ORDER);
        block_insert(c, idx, o, fl & SPAN_ZEROED, now, d);
        d = NULL;
        idx += 1u << o;
    }
}

static struct span *depot_collect(uint64_t before);
static void depot_release_list(struct span *list, uint64_t before);
static void depot_release_routed(struct span *list, uint64_t before);

/* ---- chunks ---- */

/* Descriptors chunk_add may use: the blocks of a metadata chunk's free part
 * (pages ARENA_META_PAGES..511: one per set bit of 512 - ARENA_META_PAGES, at most 9). */
#define CHUNK_ADD_DESCS 10
_Static_assert(CHUNK_ADD_DESCS + 2 * MAX_ORDER + 2 <= DESC_BATCH, "a batch covers any reserve (desc_reserve)");

/* The mapped 2 MiB at base goes into the zone whose lock is held (and the
 * arena lock): an
 * arena's first chunk is entered (arena_enter) here, after its head is
 * written and before any of its pages is handed out. */
static void arena_chunk_enter(char *base) {
    uintptr_t a = (uintptr_t)base;
    struct arena_head *head = arena_head_of(a);
    if (a == arena_base(a)) {
        head->next = arena_heads;
        __atomic_store_n(&arena_heads, head, __ATOMIC_RELEASE);
        arena_enter(a);
    }
    /* its zone first (the caller's, whose lock is held): a pass over the
     * chunks in a zone (collapse_pass, check_locked) reads the state and
     * then the zone, both under the arena lock */
    chunk_set_type(chunk_of(a), CHUNK_SMALL, zone_held);
    head->state[chunk_index(chunk_of(a))] = CHUNK_IN_ZONE;
}
static struct arena_head *arena_list(void) { return __atomic_load_n(&arena_heads, __ATOMIC_ACQUIRE); }

/* Put the mapped 2 MiB at base, entered (arena_chunk_enter), in the zone
 * (lock held, CHUNK_ADD_DESCS descriptors reserved); an arena's metadata
 * pages stay out of it. */
static void chunk_add(char *base, bool zeroed, uint64_t freed_at) {
    uintptr_t a = (uintptr_t)base;
    struct chunk *c = chunk_of(a);
    uint32_t first = 0;
    if (a == arena_base(a)) {
        first = ARENA_META_PAGES;
        zone.st.meta_pages += ARENA_META_PAGES;
    }
    chunk_set_type(c, CHUNK_SMALL, zone_held);
    zone.st.chunks++;
    atomic_fetch_add_explicit(&zone_chunks_total, 1, memory_order_relaxed);
    /* the chunk's table page is written before block_insert reads a
     * buddy's slot on it: one fault for it, not a read of the zero page and
     * then its copy (the slot is NULL: no block of the chunk exists yet,
     * and range_insert sets it) */
    set_head(c, first, NULL);
    range_insert(c, first, CHUNK_PAGES - first, zeroed ? SPAN_ZEROED : 0, freed_at, NULL);
}

/* A chunk of an existing arena that is not in the zone (released, or past
 * the end of a reservation smaller than the arena), mapped again at its own
 * address: growth in place needs no new metadata.  A chunk whose address
 * something else now holds is not tried again until the next release. */
static char *chunk_remap(void) {
    for (struct arena_head *head = arena_heads; head; head = head->next)
        for (uint32_t i = 1; i < ARENA_CHUNKS; i++) {
            if (head->state[i] != CHUNK_NONE && head->state[i] != CHUNK_RELEASED) continue;
            char *b = (char *)(arena_base((uintptr_t)head) + ((uintptr_t)i << CHUNK_SHIFT));
            if (os_reserve_at(b, CHUNK_SIZE)) return b;
            head->state[i] = CHUNK_OCCUPIED;
        }
    return NULL;
}

/* Where the first reservation is tried: an aligned range a little below
 * this library's code, where the kernel has put the shared libraries and
 * puts new mappings next (downward), so that it is likely free and one
 * system call maps it, where an over-reservation takes three (mmap and two
 * munmaps) in every process.  0 (none) when the code lies low (a program
 * linked statically, not position-independent). */
static uintptr_t first_arena_hint(void) {
    uintptr_t code = (uintptr_t)&first_arena_hint & ~(uintptr_t)(ARENA_ALIGN - 1);
    return code > ((uintptr_t)1 << 32) ? code - ARENA_ALIGN : 0;
}

/* A new reservation at an ARENA_ALIGN boundary: first right below the lowest
 * one (the kernel hands out addresses downward, so the range is likely free;
 * MAP_FIXED_NOREPLACE, no over-reservation; for the first, below
 * first_arena_hint), then wherever the kernel
 * finds room (os_reserve: size + align, trimmed; under an address space
 * limit an exact size at an aligned address); smaller and smaller while the
 * kernel refuses.  A reservation smaller than an arena is an arena all the
 * same, its table sized for a whole one. */
static bool arena_reserve(void) {
    size_t size = ((size_t)opt.arena_mib << 20) & ~(CHUNK_SIZE - 1);
    if (size < CHUNK_SIZE) size = CHUNK_SIZE;
    uintptr_t lowest = 0; /* the lowest reservation's start (each is an arena: its head is listed) */
    for (struct arena_head *head = arena_heads; head; head = head->next)
        if (!lowest || arena_base((uintptr_t)head) < lowest) lowest = arena_base((uintptr_t)head);
    for (;;) {
        size_t room = (size + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
        char *p = NULL;
        uintptr_t below = lowest ? lowest : first_arena_hint();
        if (below > room) p = os_reserve_at((char *)(below - room), size);
        if (!p) p = os_reserve(size, ARENA_ALIGN);
        if (p && ((uintptr_t)p + size) >> ARENA_MAP_BITS) { /* beyond arena_map */
            os_release(p, size);
            p = NULL;
        }
        if (p) {
            thp_arena_reserved(p, size);
            arenas.cur = p;
            arenas.end = p + size;
            return true;
        }
        if (size == CHUNK_SIZE) return false;
        size = (size / 2) & ~(CHUNK_SIZE - 1);
        if (size < CHUNK_SIZE) size = CHUNK_SIZE;
    }
}

/* ---- the dirty bound (FOLIO_PURGE_DIRTY_RATIO, off by default) ----
 * Dirty free pages (resident, free) are at most 1/ratio of the pages in use,
 * or DIRTY_FLOOR_PAGES: a heap whose freed pieces do not fit its next
 * requests grows into untouched pages while the pieces stay resident until
 * the purge delay, which a program that runs for a second or less never
 * reaches.  Past the bound, zone_purge takes the oldest pieces before their
 * delay; the heap's growth asks for that purge at once (through the
 * maintenance tick, with no lock held).  Off by default: where the pieces
 * are reused later (growing buffers), each purge comes back as page faults
 * (docs/notes/server-patterns.md, session 13).  Lock held. */
#define DIRTY_FLOOR_PAGES 256 /* 1 MiB: a small program's free pages stay */
static uint64_t dirty_excess_pages(void) {
    if (!opt.purge_dirty_ratio) return 0;
    uint64_t total = zone.st.chunks * CHUNK_PAGES;
    uint64_t in_use = total > zone.st.free_pages ? total - zone.st.free_pages : 0;
    uint64_t keep = in_use / (uint64_t)opt.purge_dirty_ratio;
    if (keep < DIRTY_FLOOR_PAGES) keep = DIRTY_FLOOR_PAGES;
    return zone.st.dirty_pages > keep ? zone.st.dirty_pages - keep : 0;
}
bool zone_over_bound_pending(void) { return atomic_load_explicit(&zone_over_bound, memory_order_relaxed); }
bool zone_take_over_bound(void) {
    return atomic_load_explicit(&zone_over_bound, memory_order_relaxed) &&
           atomic_exchange_explicit(&zone_over_bound, false, memory_order_relaxed);
}

/* The next chunk of address space, entered (arena lock held), or NULL. */
static char *arena_take(void) {
    for (;;) {
        char *base;
        if (arenas.cur != arenas.end) {
            base = arenas.cur;
            arenas.cur += CHUNK_SIZE;
        } else if (!(base = chunk_remap())) {
            if (!arena_reserve()) return NULL;
            continue;
        }
        arena_chunk_enter(base);
        return base;
    }
}
/* Put a new chunk in the zone as one zeroed whole free block; an arena's
 * first chunk, which holds metadata, counts only when !whole (the caller
 * can use part of a chunk): otherwise growth goes on. */
static bool chunk_grow(bool whole) {
    for (;;) {
        /* what chunk_add takes, and what the caller had reserved for after */
        if (!desc_reserve(CHUNK_ADD_DESCS + 2 * MAX_ORDER + 2)) return false;
        arena_lock();
        char *base = arena_take();
        arena_unlock();
        if (!base) return false;
        chunk_add(base, true, 0);
        if (dirty_excess_pages()) atomic_store_explicit(&zone_over_bound, true, memory_order_relaxed);
        if (!whole || (uintptr_t)base != arena_base((uintptr_t)base)) return true;
    }
}

/* Give address space back (as_reclaim): every whole free chunk leaves the
 * zone and is unmapped, and so is the current reservation's never-carved
 * tail.  A released chunk's span_of entries are all NULL before its range
 * is unmapped, so that when the kernel hands the range out again (to
 * folio's huge tier, or to anyone) a lookup of a pointer there finds no
 * span and goes on to the pagemap.  Its arena's metadata stays mapped (the
 * first chunk never leaves the zone), and the chunk can be mapped again at
 * its own address by chunk_remap.  The munmaps run outside the lock, a
 * batch at a time. */
size_t zone_release_free(void) {
    size_t released = 0;
    /* the depot's spans first: their chunks may then be whole */
    depot_release_routed(depot_collect(UINT64_MAX), UINT64_MAX);
    char *tail = NULL;
    size_t tail_size = 0;
    arena_lock();
    for (struct arena_head *head = arena_heads; head; head = head->next) /* worth a retry now */
        for (uint32_t i = 1; i < ARENA_CHUNKS; i++)
            if (head->state[i] == CHUNK_OCCUPIED) head->state[i] = CHUNK_NONE;
    if (arenas.cur != arenas.end) {
        tail = arenas.cur;
        tail_size = (size_t)(arenas.end - arenas.cur);
        arenas.cur = arenas.end = NULL;
    }
    arena_unlock();
    if (tail && os_release(tail, tail_size)) released += tail_size;
    for (unsigned z = 0, n = zones_used(); z < n; z++)
        for (bool more = true; more;) {
            char *bases[64];
            size_t k = 0;
            zone_lock_at(zone_at(z));
            struct span *d;
            while (k < 64 && (d = zone.buddy_head[MAX_ORDER])) {
                struct chunk *c = d->chunk;
                free_unlink(d);
                desc_put(d);
                zone.st.chunks--;
                atomic_fetch_sub_explicit(&zone_chunks_total, 1, memory_order_relaxed);
                arena_lock();
                arena_head_of((uintptr_t)c)->state[chunk_index(c)] = CHUNK_RELEASED;
                arena_unlock();
                __atomic_store_n(chunk_huge(c), (uint8_t)CHUNK_HUGE_NONE, __ATOMIC_RELAXED); /* a new mapping carries no advice */
                bases[k++] = chunk_base(c);
            }
            more = k == 64;
            zone_unlock();
            for (size_t i = 0; i < k; i++) {
                if (os_release(bases[i], CHUNK_SIZE)) {
                    released += CHUNK_SIZE;
                    continue;
                }
                zone_lock_at(zone_at(z)); /* munmap refused (too many mappings): keep the chunk, stop */
                bool keep = desc_reserve(CHUNK_ADD_DESCS);
                arena_lock();
                if (keep) arena_chunk_enter(bases[i]);
                else arena_head_of((uintptr_t)bases[i])->state[chunk_index(chunk_of((uintptr_t)bases[i]))] = CHUNK_OCCUPIED;
                arena_unlock();
                if (keep) chunk_add(bases[i], false, os_now_ms());
                zone_unlock();
                more = false;
            }
        }
    return released;
}

/* The block of the fullest chunk among the first few of a list. */
static struct span *fullest(struct span *d) {
    struct span *best = d;
    unsigned best_free = *chunk_free(d->chunk);
    for (int i = 0; i < 3 && (d = d->next); i++)
        if (*chunk_free(d->chunk) < best_free) {
            best = d;
            best_free = *chunk_free(d->chunk);
        }
    return best;
}

/* the process's pages in use (lock held): this zone's as they are, the
 * others' as last published (with one zone: exactly this zone's) */
static size_t in_use_locked(void) {
    uint64_t in_use = zone.st.chunks * CHUNK_PAGES - zone.st.free_pages;
    for (unsigned i = 0, n = zones_used(); i < n; i++) {
        const zone_t *z = zone_at(i);
        if (z == zone_held) continue;
        uint64_t pages = atomic_load_explicit(&z->chunks_pub, memory_order_relaxed) * CHUNK_PAGES;
        uint64_t free_pages = atomic_load_explicit(&z->free_pages_pub, memory_order_relaxed);
        in_use += pages > free_pages ? pages - free_pages : 0;
    }
    return (size_t)in_use;
}

/* A buddy block of order or more in the SMALL chunks (the fullest among the
 * first few of the lowest list that has one), or NULL.  The first growth of
 * the heap adds only the first arena's metadata chunk (a small chunk), so
 * that a small program touches one chunk's table page, not two. */
static struct span *buddy_find(unsigned order, unsigned *k) {
    for (int pass = 0; pass < 2; pass++) {
        for (*k = order; *k < MAX_ORDER; (*k)++)
            if (zone.buddy_head[*k]) return fullest(zone.buddy_head[*k]);
        if (pass || zone.buddy_head[MAX_ORDER] || arena_list() || !chunk_grow(false)) break;
    }
    return NULL;
}

/* The free block d of order k, split down to order: the block at its
 * start (SPAN_TAKEN), its buddies back on the lists. */
static struct span *buddy_split(struct span *d, unsigned k, unsigned order) {
    free_unlink(d);
    while (k > order) {
        k--;
        struct span *b = desc_get();
        span_set_kind(b, SPAN_ZONE_FREE);
        b->chunk = d->chunk;
        b->page_idx = d->page_idx + (1u << k);
        b->order = (uint8_t)k;
        b->npages = 1u << k;
        b->start = chunk_base(d->chunk) + ((size_t)b->page_idx << PAGE_SHIFT);
        b->flags = d->flags & SPAN_ZEROED;
        b->freed_at = d->freed_at;
        set_head(b->chunk, b->page_idx, b);
        list_add(b);
        free_add(b->chunk, 1l << k);
        if (!(b->flags & SPAN_ZEROED) && k >= (unsigned)opt.purge_min_order) dirty_add(b);
    }
    span_set_kind(d, SPAN_TAKEN);
    d->order = (uint8_t)order;
    d->npages = 1u << order;
    d->flags &= SPAN_ZEROED;
    return d;
}

/* A whole free chunk of another zone's, moved into this one (lock held,
 * a descriptor reserved): the heap grows only when no zone has one.  The
 * other zone's lock is tried, never waited for (zones are held two at a
 * time only so, or in index order at fork). */
__attribute__((noinline)) static bool whole_move_in(void) {
    zone_t *self = zone_held;
    for (unsigned i = 0, n = zones_used(); i < n; i++) {
        zone_t *other = zone_at(i);
        if (other == self || !atomic_load_explicit(&other->whole_pub, memory_order_relaxed) || !lock_try(&other->lock))
            continue;
        zone_held = other;
        struct span *d = zone.buddy_head[MAX_ORDER];
        struct chunk *c = d ? d->chunk : NULL;
        unsigned zeroed = d ? d->flags & SPAN_ZEROED : 0;
        uint64_t freed_at = d ? d->freed_at : 0;
        if (d) {
            free_unlink(d);
            desc_put(d);
            zone.st.chunks--;
        }
        zone_unlock();
        zone_held = self;
        if (!c) continue;
        chunk_set_type(c, CHUNK_SMALL, self);
        zone.st.chunks++;
        zone.st.chunks_moved_in++;
        range_insert(c, 0, CHUNK_PAGES, zeroed, freed_at, NULL);
        return true;
    }
    return false;
}

/* A whole free chunk, growing the heap if none is free, given the type of
 * its first use (lock held), or NULL. */
static struct span *whole_take(unsigned type) {
    struct span *d = zone.buddy_head[MAX_ORDER];
    if (!d && ((zones_used() > 1 && whole_move_in()) || chunk_grow(true))) d = zone.buddy_head[MAX_ORDER];
    if (d) {
        chunk_set_type(d->chunk, type, zone_held);
        size_t in_use = in_use_locked();
        arena_lock(); /* thp.c's record of the chunks started */
        thp_chunk_used(chunk_base(d->chunk), chunk_huge(d->chunk), d->flags & SPAN_ZEROED, in_use);
        arena_unlock();
    }
    return d;
}

/* Pages of the zone's chunks (every zone's) resident now, for thp.c's
 * written rule (the arena lock held: the arena list). */
size_t zone_chunks_resident(void) {
    size_t pages = 0;
    for (struct arena_head *head = arena_heads; head; head = head->next)
        for (uint32_t i = 1; i < ARENA_CHUNKS; i++)
            if (head->state[i] == CHUNK_IN_ZONE)
                pages += thp_chunk_resident((char *)(arena_base((uintptr_t)head) + ((uintptr_t)i << CHUNK_SHIFT)));
    return pages;
}

/* Take a block of exactly `order` (a power of two, aligned) for the SMALL
 * chunks: a buddy block, else a whole free chunk, else (the arena cannot
 * grow) an aligned piece of a run; lock held and MAX_ORDER
 * descriptors reserved. */
static struct span *block_take(unsigned order) {
    unsigned k;
    struct span *d = buddy_find(order, &k);
    if (!d && (d = whole_take(CHUNK_SMALL))) k = MAX_ORDER;
    if (d) return buddy_split(d, k, order);
    uint32_t at;
    if (!(d = run_fit(CHUNK_LARGE, 1u << order, 1u << order, &at)))
        d = run_fit(CHUNK_MEDIUM, 1u << order, 1u << order, &at);
    return d ? run_cut(d, at, 1u << order) : NULL;
}

/* A block that realloc will grow, in a heap of at most GROW_ROOM_HEAP_CHUNKS
 * chunks, takes a free block GROW_ROOM times its size: a small program's
 * growing buffer (a directory listing, a file read whole) is most of its
 * heap, and one placed where the next block or the chunk's end stops it
 * moves again and again, each move leaving its old pages resident.  The
 * room costs address space only: the pages stay untouched, and chunks of a
 * heap this small are not backed by huge pages (thp.c).  In a larger heap
 * the freed blocks around a buffer are what it should grow into, and the
 * room would spread growing buffers over more chunks (docs/notes/
 * startup.md, session 11).  Either way a growing block is carved from a
 * power of two's pages, whose rest stays free behind it for zone_resize. */
#define GROW_ROOM 4
#define GROW_ROOM_HEAP_CHUNKS 4

/* unlocked, a hint: whether a LARGE chunk of the calling thread's zone has a free run that holds npages
 * (one on a list above npages' own, or on its own when npages is the
 * shortest length there) */
bool zone_large_fits_hint(size_t npages) {
    if (npages <= (1u << PCP_MAX_ORDER)) return true;
    if (npages >= CHUNK_PAGES) return false;
    unsigned own = run_list((uint32_t)npages), first = own + (run_list((uint32_t)npages - 1) == own);
    return atomic_load_explicit(&zone_at(zone_home())->large_lists, memory_order_relaxed) >> first;
}

/* Which chunks serve a span of npages: the powers of two up to
 * PCP_MAX_ORDER's (slabs, the pagesets' order lists, which need their
 * alignment) the SMALL chunks' buddy blocks, other page counts up to
 * PCP_MAX_ORDER's the MEDIUM chunks' runs, larger ones the LARGE chunks'.
 * Spans of up to 64 pages and larger ones are kept apart as slabs and
 * large spans are: a long-lived small span in a chunk of large ones keeps
 * it from ever being whole again, which a 2 MiB block (or one that will
 * grow to it) needs. */
static unsigned span_type(size_t npages) {
    if (npages > (1u << PCP_MAX_ORDER)) return CHUNK_LARGE;
    return (npages & (npages - 1)) ? CHUNK_MEDIUM : CHUNK_SMALL;
}

/* A span of take pages (npages and the room behind them, for a block that
 * realloc will grow) from the runs: the best fit in a chunk of its type, else
 * (take > npages) one of npages alone, without room, since room is not
 * worth a new chunk; while the heap is small (GROW_ROOM_HEAP_CHUNKS), a
 * buddy block of a small chunk before a whole chunk, so that a small
 * program's first large blocks share the chunk its slabs use; else a whole
 * free chunk; else (the arena cannot grow) a run of the other type, or a
 * buddy block (lock held, descriptors reserved). */
static struct span *run_take(unsigned type, uint32_t npages, uint32_t take, uint32_t align) {
    uint32_t at = 0;
    bool grows = take > npages;
    struct span *d = run_fit(type, take, align, &at);
    if (!d && grows && (d = run_fit(type, npages, align, &at))) take = npages;
    if (d) return run_cut(d, at, take);
    unsigned order = order_for(take > align ? take : align), k;
    if (order <= PCP_MAX_ORDER && zone.st.chunks <= GROW_ROOM_HEAP_CHUNKS && (d = buddy_find(order, &k)))
        return buddy_split(d, k, order);
    if ((d = whole_take(type)))
        return run_cut(d, run_fits(d, take, align, grows && zone.st.chunks <= GROW_ROOM_HEAP_CHUNKS), take);
    if ((d = run_fit(type == CHUNK_LARGE ? CHUNK_MEDIUM : CHUNK_LARGE, npages, align, &at)))
        return run_cut(d, at, npages);
    return (d = buddy_find(order, &k)) ? buddy_split(d, k, order) : NULL;
}

/* packed: the span takes the best fit; a block that realloc will grow
 * (!packed) takes its power of two, and gives back what lies past npages
 * (lock held) */
static struct span *zone_alloc_locked(size_t npages, size_t align_pages, bool packed) {
    size_t want = npages > align_pages ? npages : align_pages;
    if (npages == 0 || want > CHUNK_PAGES) return NULL;
    unsigned order = order_for(!packed && zone.st.chunks <= GROW_ROOM_HEAP_CHUNKS && want * GROW_ROOM <= CHUNK_PAGES
                                   ? want * GROW_ROOM
                                   : want);
    struct span *d = NULL;
    if (desc_reserve(2 * MAX_ORDER + 2)) {
        size_t take = packed ? npages : (size_t)1 << order;
        unsigned type = span_type(take > (1u << PCP_MAX_ORDER) ? take : npages);
        if (type != CHUNK_SMALL) d = run_take(type, (uint32_t)npages, (uint32_t)take, (uint32_t)align_pages);
        else d = block_take(order);
    }
    if (d) {
        if (npages < d->npages) {
            range_insert(d->chunk, d->page_idx + (uint32_t)npages, d->npages - (uint32_t)npages,
                         (d->flags & SPAN_ZEROED) | (packed ? 0 : SPAN_RUN_ROOM), os_now_ms(), NULL);
            d->npages = (uint32_t)npages;
        }
        zone.st.pages_from_zone += npages;
    }
    return d;
}
static struct span *zone_alloc(size_t npages, size_t align_pages, bool packed) {
    zone_lock();
    struct span *d = zone_alloc_locked(npages, align_pages, packed);
    zone_unlock();
    return d;
}
struct span *zone_alloc_pages(size_t npages, size_t align_pages) { return zone_alloc(npages, align_pages, true); }
struct span *zone_alloc_growable(size_t npages, size_t align_pages) { return zone_alloc(npages, align_pages, false); }

static void span_release_locked(struct span *s, uint64_t now) {
    zone.st.pages_to_zone += s->npages;
    range_insert(s->chunk, s->page_idx, s->npages, s->flags & SPAN_ZEROED, now, s);
}

void zone_free_span(struct span *s) {
    uint64_t now = os_now_ms();
    zone_lock_chunk(s->chunk);
    if (desc_reserve(2 * MAX_ORDER + 2)) span_release_locked(s, now);
    zone_unlock();
}

/* The spans of *list (through ->next) in the zone of its first one's
 * chunk, out of it, in their order; the rest stay in *list, in theirs. */
static struct span *zone_group_take(struct span **list) {
    zone_t *z = zone_of_chunk((*list)->chunk);
    struct span *group = NULL, **tail = &group, **at = list;
    while (*at) {
        struct span *s = *at;
        if (zone_of_chunk(s->chunk) != z) {
            at = &s->next;
            continue;
        }
        *at = s->next;
        s->next = NULL;
        *tail = s;
        tail = &s->next;
    }
    return group;
}

/* The spans of list (through ->next) to their zones' free lists, freed
 * now, in one hold of each zone they are in; bypassed: a pageset's overflow
 * the depot did not keep (zone_depot_bypassed). */
static void spans_release(struct span *list, bool bypassed) {
    uint64_t now = os_now_ms();
    while (list) {
        struct span *group = zone_group_take(&list);
        zone_lock_chunk(group->chunk);
        while (group) {
            struct span *s = group;
            group = s->next;
            if (bypassed) zone.st.depot_bypassed++;
            if (desc_reserve(2 * MAX_ORDER + 2)) span_release_locked(s, now);
        }
        zone_unlock();
    }
}
void zone_free_bulk(struct span *list) { spans_release(list, false); }

/* ---- the depot ----
 *
 * A block allocated on one CPU and freed on another leaves the first CPU's
 * pageset short of its size and the second one's over its high: without
 * more, each such block costs one span carved from the free lists and one
 * merged back, under the zone lock, per CPU (the pool's 4-64 KiB bursts:
 * ~40 k a second at 2 threads, 400 ns held each, mostly cache misses on
 * descriptors and span_of entries the other CPU wrote last).  The depot is
 * where the second CPU's overflow waits for the first CPU's miss: spans of
 * one page count in an array (TCMalloc's transfer cache; the kernel has
 * none, its batches alone serve it), put and taken in batches, a pointer
 * move each, without reading a descriptor under a lock.  It is not behind
 * the zone lock but split in DEPOT_SHARDS shards by page count, each with
 * its own lock (rank between the pagesets and the zone): only the CPUs
 * that exchange blocks of one size meet there.
 *
 * Invariants, under the shard's lock (the sizes n with n % DEPOT_SHARDS ==
 * its index):
 *  - depot_sizes[n] holds its spans oldest first: whole free spans that no
 *    buddy list holds (kind SPAN_PCP_FREE, span_of entries NULL: nothing
 *    merges with them), npages == n, freed_at == when it was put; an order
 *    list's size (a power of two up to PCP_MAX_ORDER) only aligned to
 *    itself;
 *  - bit n / DEPOT_SHARDS of nonempty is set iff it holds a span, pages
 *    counts their pages, and depot_pages_total every shard's.
 * Bounds: at most DEPOT_SLOTS spans of a size, and the pages the putter
 * allows (the pagesets pass a share of the zone, 0 under memory pressure);
 * what does not fit goes to the free lists (one zone-lock hold).  Memory
 * is kept no longer than the free lists would have kept it resident: a
 * span put more than purge_delay_ms ago goes to them at the next
 * zone_purge, which purges it in the same pass, and every span at
 * malloc_trim and address-space reclaim.  The shards are collected with
 * their own locks, one at a time, before the zone lock is taken. */
#define DEPOT_SLOTS ZONE_REFILL_MAX
#define DEPOT_SHARDS 16
struct depot_size {
    uint32_t n;                     /* spans held */
    uint64_t got, put;              /* spans taken and put, ever (the report's gets, puts and
                                     * its share of pages_from_zone, pages_to_zone) */
    struct span *slot[DEPOT_SLOTS]; /* oldest first */
};
struct depot_shard {
    lock_t lock;
    _Atomic uint32_t nonempty; /* a hint without the lock: whether to take it */
    uint32_t pages;
};
_Static_assert(sizeof(struct depot_shard) <= CACHELINE, "a depot shard is one cache line");
static FORK_STATE struct depot_shard depot_shards[DEPOT_SHARDS] __attribute__((aligned(CACHELINE))) = {
    [0 ... DEPOT_SHARDS - 1] = {.lock = LOCK_INIT(LOCK_RANK_DEPOT)}};
static struct depot_size *depot_sizes[CHUNK_PAGES]; /* each made under its shard's lock */
static _Atomic uint64_t depot_pages_total;
/* What the pagesets asked the depot for lately: spans of each size (its
 * refills, held or not; at most DEPOT_SLOTS, halved at each purge pass)
 * and which pagesets asked (a bit per pageset index % 8, cleared at each
 * purge pass: pagesets 8 apart share a bit, which only ever refuses a put
 * that another of them asked for; a byte each per size keeps the array (1
 * KiB) among the variables every process writes, where 8 bytes made it a
 * page of its own that the first refill faulted in).  A put of a span takes one of its size's credits and needs
 * another pageset than the putter's to have asked: without both it goes
 * to the free lists.  The depot then holds what other CPUs ask for: a
 * single thread whose overflow is of sizes it does not ask for again
 * (growing buffers: alloc/realloc kept 4 MiB of slab blocks there, its
 * peak RSS +12%) gives it to the free lists as before. */
_Static_assert(DEPOT_SLOTS <= UINT8_MAX, "a credit is a byte");
/* a size's askers and credit side by side: the sizes a small program asks
 * for lie in one run of the array, on the page of its other variables */
static struct {
    _Atomic uint8_t askers, credit;
} depot_asks[CHUNK_PAGES];
/* true while a credit or an asker may be nonzero: until then asks_decay
 * reads no entry (the zero page of .bss, then its copy at the first ask:
 * two faults for one page) */
static _Atomic bool depot_asked;
/* above the largest page count ever asked for: asks_decay reads no entry
 * past it (a small program's asks are of small counts, and the array's
 * other entries lie on a page it would map for the reading only) */
static _Atomic uint32_t depot_ask_top;

static uint8_t asker_bit(int cpu) { return (uint8_t)(1u << ((unsigned)cpu % 8)); }
static void note_ask(int cpu, uint32_t npages, long n) {
    bool first = !atomic_load_explicit(&depot_asked, memory_order_relaxed);
    if (first) atomic_store_explicit(&depot_asked, true, memory_order_relaxed);
    uint32_t top = atomic_load_explicit(&depot_ask_top, memory_order_relaxed);
    while (npages >= top && !atomic_compare_exchange_weak_explicit(&depot_ask_top, &top, npages + 1,
                                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    uint8_t c = atomic_load_explicit(&depot_asks[npages].credit, memory_order_relaxed);
    long v = c + n < DEPOT_SLOTS ? c + n : DEPOT_SLOTS;
    if (v != c) atomic_store_explicit(&depot_asks[npages].credit, (uint8_t)v, memory_order_relaxed);
    /* the first ask since the last decay writes without reading first
     * (the same zero-page reason as depot_asked's) */
    if (first || !(atomic_load_explicit(&depot_asks[npages].askers, memory_order_relaxed) & asker_bit(cpu)))
        atomic_fetch_or_explicit(&depot_asks[npages].askers, asker_bit(cpu), memory_order_relaxed);
}
/* wanted's test without the lock and without taking a credit (false:
 * wanted would refuse); no read of the arrays before the first ask (their
 * zero page) */
static bool may_be_wanted(int cpu, uint32_t npages) {
    return atomic_load_explicit(&depot_asked, memory_order_relaxed) &&
           (atomic_load_explicit(&depot_asks[npages].askers, memory_order_relaxed) & (uint8_t)~asker_bit(cpu)) &&
           atomic_load_explicit(&depot_asks[npages].credit, memory_order_relaxed);
}
/* a put of a span of npages from pageset cpu may wait in the depot: take
 * a credit (its shard's lock held: the only taker) */
static bool wanted(int cpu, uint32_t npages) {
    if (!(atomic_load_explicit(&depot_asks[npages].askers, memory_order_relaxed) & (uint8_t)~asker_bit(cpu))) return false;
    if (!atomic_load_explicit(&depot_asks[npages].credit, memory_order_relaxed)) return false;
    atomic_fetch_sub_explicit(&depot_asks[npages].credit, 1, memory_order_relaxed);
    return true;
}
static void asks_decay(void) {
    if (!atomic_load_explicit(&depot_asked, memory_order_relaxed)) return;
    /* cleared first: an ask from now on sets it again */
    atomic_store_explicit(&depot_asked, false, memory_order_relaxed);
    bool left = false;
    uint32_t top = atomic_load_explicit(&depot_ask_top, memory_order_relaxed);
    for (uint32_t n = 0; n < top; n++) {
        uint8_t c = atomic_load_explicit(&depot_asks[n].credit, memory_order_relaxed);
        if (c) atomic_store_explicit(&depot_asks[n].credit, (uint8_t)(c / 2), memory_order_relaxed);
        left |= c / 2 != 0;
        if (atomic_load_explicit(&depot_asks[n].askers, memory_order_relaxed))
            atomic_store_explicit(&depot_asks[n].askers, 0, memory_order_relaxed);
    }
    if (left) atomic_store_explicit(&depot_asked, true, memory_order_relaxed); /* credits to halve */
}

static struct depot_shard *shard_of(uint32_t npages) { return &depot_shards[npages % DEPOT_SHARDS]; }
static uint32_t shard_bit(uint32_t npages) { return 1u << (npages / DEPOT_SHARDS); }

static size_t check_shard(struct depot_shard *h);
static void shard_lock(struct depot_shard *h) { lock_acquire(&h->lock); }
static void shard_unlock(struct depot_shard *h) {
#ifdef FOLIO_DEBUG
    static _Atomic uint64_t releases; /* every 64th release checks the shard */
    if ((atomic_fetch_add_explicit(&releases, 1, memory_order_relaxed) + 1) % 64 == 0 && check_shard(h) != 0) {
        os_write_err("folio: depot invariant violated\n");
        os_fatal_ptr("depot:", h);
    }
#endif
    lock_release(&h->lock);
}

/* What the depot takes: an order list's block (a power of two up to
 * PCP_MAX_ORDER pages, aligned to itself: an order list's refill takes it
 * back), and, when exact, an exact list's span of another size below a
 * chunk (never a power of two up to PCP_MAX_ORDER that is not aligned: an
 * order list's refill would take it). */
static bool depot_fits(const struct span *s, bool exact) {
    uint32_t n = s->npages;
    if ((n & (n - 1)) == 0 && n <= (1u << PCP_MAX_ORDER)) return (s->page_idx & (n - 1)) == 0;
    return exact && n < CHUNK_PAGES;
}

/* A depot span to the free lists, freed when it was put (zone lock held). */
static void depot_release(struct span *s) {
    range_insert(s->chunk, s->page_idx, s->npages, s->flags & SPAN_ZEROED, s->freed_at, s);
}

/* Take the depot's spans put before `before` (UINT64_MAX: all) out of
 * every shard, each under its lock in turn (no zone lock held): a list
 * through ->next for depot_release_list. */
static struct span *depot_collect(uint64_t before) {
    struct span *list = NULL;
    for (int i = 0; i < DEPOT_SHARDS; i++) {
        struct depot_shard *h = &depot_shards[i];
        if (!atomic_load_explicit(&h->nonempty, memory_order_relaxed)) continue;
        shard_lock(h);
        for (uint32_t bits = atomic_load_explicit(&h->nonempty, memory_order_relaxed); bits; bits &= bits - 1) {
            uint32_t npages = (uint32_t)__builtin_ctz(bits) * DEPOT_SHARDS + (uint32_t)i;
            struct depot_size *d = depot_sizes[npages];
            uint32_t k = 0;
            while (k < d->n && (before == UINT64_MAX || d->slot[k]->freed_at < before)) {
                d->slot[k]->next = list;
                list = d->slot[k++];
            }
            if (!k) continue;
            memmove(d->slot, d->slot + k, sizeof d->slot[0] * (d->n - k));
            d->n -= k;
            h->pages -= k * npages;
            atomic_fetch_sub_explicit(&depot_pages_total, (uint64_t)k * npages, memory_order_relaxed);
            if (!d->n)
                atomic_store_explicit(&h->nonempty, atomic_load_explicit(&h->nonempty, memory_order_relaxed) & ~shard_bit(npages),
                                      memory_order_relaxed);
        }
        shard_unlock(h);
    }
    return list;
}

/* depot_collect's spans to the free lists (zone lock held); those put
 * before `before` to the head of the dirty list, where this purge finds
 * them. */
static void depot_release_list(struct span *list, uint64_t before) {
    dirty_head_before = before;
    while (list) {
        struct span *s = list;
        list = s->next;
        zone.st.depot_released++;
        if (desc_reserve(2 * MAX_ORDER + 2)) depot_release(s);
    }
    dirty_head_before = 0;
}
/* depot_release_list for spans of any zones (no zone lock held): one hold
 * of each zone they are in */
static void depot_release_routed(struct span *list, uint64_t before) {
    while (list) {
        struct span *group = zone_group_take(&list);
        zone_lock_chunk(group->chunk);
        depot_release_list(group, before);
        zone_unlock();
    }
}

/* Up to n spans of npages from the depot into out[] (its shard's lock,
 * taken only when the shard's hint says the size may be held). */
static long depot_take(uint32_t npages, long n, struct span **out) {
    struct depot_shard *h = shard_of(npages);
    if (!(atomic_load_explicit(&h->nonempty, memory_order_relaxed) & shard_bit(npages))) return 0;
    long got = 0;
    shard_lock(h);
    struct depot_size *d = depot_sizes[npages];
    if (d && d->n) {
        got = n < (long)d->n ? n : (long)d->n;
        if (got > DEPOT_SLOTS) got = DEPOT_SLOTS;
        for (long i = 0; i < got; i++) out[i] = d->slot[--d->n];
        if (!d->n)
            atomic_store_explicit(&h->nonempty, atomic_load_explicit(&h->nonempty, memory_order_relaxed) & ~shard_bit(npages),
                                  memory_order_relaxed);
        h->pages -= (uint32_t)got * npages;
        d->got += (uint64_t)got;
        atomic_fetch_sub_explicit(&depot_pages_total, (uint64_t)got * npages, memory_order_relaxed);
    }
    shard_unlock(h);
    return got;
}

/* A pageset's refill (pageset index cpu): up to n (at most DEPOT_SLOTS) spans of npages pages
 * from the depot, the most recently put first, into out[] (kind
 * SPAN_PCP_FREE, as put; one hold of their shard's lock); then, for an
 * order list's refill (list non-NULL: a power of two up to PCP_MAX_ORDER
 * pages, aligned), the rest of the n from the free lists into *list
 * (linked through ->next, kind SPAN_TAKEN); for an exact list's, when the
 * depot has none, one span from the free lists (out[0], SPAN_TAKEN): one
 * zone-lock hold, only when the depot did not have them all.  Returns the
 * spans in out[]. */
long zone_refill(int cpu, uint32_t npages, long n, struct span **out, struct span **list) {
    if (list) *list = NULL;
    long got = 0;
    if (npages < CHUNK_PAGES) {
        note_ask(cpu, npages, n);
        got = depot_take(npages, n, out);
    }
    bool order = list && (npages & (npages - 1)) == 0 && npages <= (1u << PCP_MAX_ORDER);
    if (order ? got >= n : got > 0) return got;
    zone_lock();
    if (order) { /* an order list: the rest of the refill from the free lists */
        unsigned o = (unsigned)__builtin_ctz(npages);
        long taken = 0;
        while (got + taken < n && desc_reserve(MAX_ORDER + 1)) {
            struct span *b = block_take(o);
            if (!b) break;
            b->next = *list;
            *list = b;
            taken++;
        }
        zone.st.pages_from_zone += (uint64_t)taken << o;
    } else {
        struct span *s = zone_alloc_locked(npages, 1, true);
        if (s) out[got++] = s;
    }
    zone_unlock();
    return got;
}

/* A pageset's overflow (pageset index cpu; a list through ->next): into
 * the depot while it holds fewer than max_pages pages, its size has a free
 * slot and is wanted by another pageset (see depot_asks), one hold of
 * each shard's lock its sizes fall in; the rest to the free lists (one
 * zone-lock hold); exact: spans of the exact lists' sizes too (the
 * pageset's exact lists hit: its sizes repeat; spans of sizes that do not
 * would only pin their chunks), else those to the free lists. */
void zone_depot_put(int cpu, struct span *list, long max_pages, bool exact) {
    /* the free lists get what the depot does not keep in list order (the
     * order of the drain: their LIFO placement depends on it) */
    struct span *bucket[DEPOT_SHARDS], **tail[DEPOT_SHARDS], *rest = NULL, **rest_tail = &rest;
    uint32_t used = 0; /* bit i: bucket[i] and tail[i] are set */
    while (list) { /* sorted by shard outside any lock (the caller's lines), in list order */
        struct span *s = list;
        list = s->next;
        s->next = NULL;
        /* a size no other pageset asked for cannot stay (wanted, below):
         * it skips its shard's lock */
        if (depot_fits(s, exact) && max_pages > 0 && may_be_wanted(cpu, s->npages)) {
            uint32_t i = s->npages % DEPOT_SHARDS;
            if (!(used & 1u << i)) {
                used |= 1u << i;
                tail[i] = &bucket[i];
            }
            *tail[i] = s;
            tail[i] = &s->next;
        } else {
            *rest_tail = s;
            rest_tail = &s->next;
        }
    }
    for (uint32_t m = used; m; m &= m - 1) {
        int i = __builtin_ctz(m);
        struct depot_shard *h = &depot_shards[i];
        shard_lock(h);
        uint64_t now = os_now_ms(); /* under the lock: each size's slots stay in put order */
        for (struct span *s = bucket[i], *next; s; s = next) {
            next = s->next;
            uint32_t npages = s->npages;
            struct depot_size *d = depot_sizes[npages];
            if (!d && (d = meta_alloc(sizeof *d))) depot_sizes[npages] = d;
            s->freed_at = now; /* the caller's line: it just took s off its lists */
            if (d && d->n < DEPOT_SLOTS &&
                atomic_load_explicit(&depot_pages_total, memory_order_relaxed) + npages <= (uint64_t)max_pages &&
                wanted(cpu, npages)) {
                d->slot[d->n++] = s;
                if (d->n == 1)
                    atomic_store_explicit(&h->nonempty, atomic_load_explicit(&h->nonempty, memory_order_relaxed) | shard_bit(npages),
                                          memory_order_relaxed);
                h->pages += npages;
                d->put++;
                atomic_fetch_add_explicit(&depot_pages_total, npages, memory_order_relaxed);
                continue;
            }
            s->next = NULL;
            *rest_tail = s;
            rest_tail = &s->next;
        }
        shard_unlock(h);
    }
    spans_release(rest, true);
}

/* Memory pressure (reclaim active): every depot span to the free lists
 * now, where reclaim and the purge reach it. */
void zone_depot_flush(void) {
    uint64_t now = os_now_ms(), delay = (uint64_t)opt.purge_delay_ms;
    struct span *list = depot_collect(UINT64_MAX);
    depot_release_routed(list, now + 1 > delay ? now + 1 - delay : 0);
}

/* A shard's invariants (its lock held): violations. */
static size_t check_shard(struct depot_shard *h) {
    size_t bad = 0;
    uint64_t pages = 0;
    uint32_t i = (uint32_t)(h - depot_shards);
    for (uint32_t npages = i; npages < CHUNK_PAGES; npages += DEPOT_SHARDS) {
        struct depot_size *d = npages ? depot_sizes[npages] : NULL;
        bool listed = !!(atomic_load_explicit(&h->nonempty, memory_order_relaxed) & shard_bit(npages));
        bad += listed != (d && d->n);
        if (!d) continue;
        bad += d->n > DEPOT_SLOTS;
        for (uint32_t k = 0; k < d->n && k < DEPOT_SLOTS; k++) {
            struct span *s = d->slot[k];
            bad += span_kind(s) != SPAN_PCP_FREE || s->npages != npages || s->page_idx + npages > CHUNK_PAGES ||
                   !depot_fits(s, true);
            bad += s->start != chunk_base(s->chunk) + ((size_t)s->page_idx << PAGE_SHIFT);
            bad += atomic_load(&s->chunk->span_of[s->page_idx]) != NULL;
            bad += k > 0 && d->slot[k - 1]->freed_at > s->freed_at;
            pages += npages;
        }
    }
    bad += pages != h->pages;
    return bad;
}

/* The kernel sizes pagesets from the zone's managed pages.  folio's zone
 * is the chunks it has put in use so far, so the caches scale with the
 * heap (a small program keeps small caches), with no cap: the pagesets
 * together hold at most 1/8 of it (high_max is 1/8 split among the
 * pagesets in use), so the growth this could feed (caches pin chunks, the
 * zone adds chunks, the caches grow) converges, at most 8/7 of the heap. */
size_t zone_managed_pages(void) {
    return (size_t)atomic_load_explicit(&zone_chunks_total, memory_order_relaxed) * CHUNK_PAGES;
}
/* the zones' published free and dirty pages, summed */
static void zones_pub(uint64_t *free_pages, uint64_t *dirty) {
    *free_pages = *dirty = 0;
    for (unsigned i = 0, n = zones_used(); i < n; i++) {
        *free_pages += atomic_load_explicit(&zone_at(i)->free_pages_pub, memory_order_relaxed);
        *dirty += atomic_load_explicit(&zone_at(i)->dirty_pages_pub, memory_order_relaxed);
    }
}

/* Resident memory folio holds, estimated without a syscall: the zone's
 * chunks minus free pages known to be zero (never touched or purged). */
size_t zone_resident_estimate(void) {
    uint64_t chunks = atomic_load_explicit(&zone_chunks_total, memory_order_relaxed), free_pages, dirty;
    zones_pub(&free_pages, &dirty);
    uint64_t clean = free_pages > dirty ? free_pages - dirty : 0;
    uint64_t total = chunks * CHUNK_PAGES;
    return (size_t)(total > clean ? total - clean : 0) << PAGE_SHIFT;
}

/* Resize the allocated span s in place to npages: shrinking gives the tail
 * back; growing takes the free zone blocks that follow it in its chunk
 * (they start exactly at its end: buddy blocks are maximal and aligned,
 * runs merged), and what is left of them stays its room.  False when the
 * pages are not free in the zone (the caller moves). */
bool zone_resize(struct span *s, size_t npages) {
    if (npages == 0 || s->page_idx + npages > CHUNK_PAGES) return false;
    struct chunk *c = s->chunk;
    uint32_t end = s->page_idx + s->npages, new_end = s->page_idx + (uint32_t)npages;
    uint64_t now = os_now_ms();
    zone_lock_chunk(c);
    bool ok = desc_reserve(2 * MAX_ORDER + 2);
    if (ok && new_end < end) {
        range_insert(c, new_end, end - new_end, 0, now, NULL);
        zone.st.pages_to_zone += end - new_end;
    } else if (ok && new_end > end) {
        uint32_t idx = end;
        while (ok && idx < new_end) { /* check first: take nothing unless all is free */
            struct span *d = atomic_load_explicit(&c->span_of[idx], memory_order_relaxed);
            ok = d && span_kind(d) == SPAN_ZONE_FREE && d->page_idx == idx;
            if (ok) idx += d->npages;
        }
        if (ok) {
            uint32_t got = idx; /* the blocks cover [end, got) */
            unsigned last_zeroed = 0; /* the rest is the last block's: its state stays */
            uint64_t last_freed = now;
            for (idx = end; idx < got;) {
                struct span *d = atomic_load_explicit(&c->span_of[idx], memory_order_relaxed);
                last_zeroed = d->flags & SPAN_ZEROED;
                last_freed = d->freed_at;
                free_unlink(d);
                idx += d->npages;
                desc_put(d);
            }
            if (got > new_end) range_insert(c, new_end, got - new_end, last_zeroed | SPAN_RUN_ROOM, last_freed, NULL);
            zone.st.pages_from_zone += new_end - end;
        }
    }
    if (ok) s->npages = (uint32_t)npages;
    zone_unlock();
    return ok;
}

/* Purge dirty free blocks that have been free for the delay (all: every
 * dirty block now).  The madvise runs outside the zone lock: the block is
 * marked SPAN_PURGING (off the lists, not mergeable) meanwhile.  Callers on
 * allocation paths pass a budget so that they do not stall long; the
 * background purger passes none. */
static size_t zone_purge_held(bool all, size_t budget, uint64_t now);
size_t zone_purge(bool all, size_t budget) {
    uint64_t now = os_now_ms();
    size_t done = 0;
    /* the depot's spans that would have been purged by now had they gone
     * to the free lists go there now, and are purged below */
    uint64_t delay = (uint64_t)opt.purge_delay_ms, before = all ? UINT64_MAX : now + 1 > delay ? now + 1 - delay : 0;
    depot_release_routed(depot_collect(before), before);
    asks_decay();
    for (unsigned i = 0, n = zones_used(); i < n && (!budget || done < budget); i++) {
        zone_lock_at(zone_at(i));
        done += zone_purge_held(all, budget ? budget - done : 0, now);
        zone_unlock();
    }
    return done;
}
/* zone_purge in the zone whose lock is held (dropped and taken again
 * around each madvise) */
static size_t zone_purge_held(bool all, size_t budget, uint64_t now) {
    zone_t *self = zone_held;
    size_t done = 0;
    /* a block left whole goes back to the tail, freed now: once one has,
     * the walk ends at the first block freed now (with a delay of 0 the
     * delay test alone would cycle through the kept ones forever; a
     * pointer to the first kept one goes stale while the lock is dropped
     * for a madvise, when another thread may take that block) */
    bool requeued = false;
    /* past the dirty bound, the oldest blocks go before their delay */
    size_t excess = all ? 0 : (size_t)dirty_excess_pages() << PAGE_SHIFT;
    for (;;) {
        struct span *d = zone.dirty_head;
        bool expired_d = d && (all || d->freed_at + (uint64_t)opt.purge_delay_ms <= now);
        if (!d || (requeued && d->freed_at >= now) || (!expired_d && done >= excess) || (budget && done >= budget))
            break;
        uint8_t *huge = chunk_huge(d->chunk);
        bool part = d->order < MAX_ORDER;
        if (part && thp_keep_whole(__atomic_load_n(huge, __ATOMIC_RELAXED), *chunk_free(d->chunk), all)) {
            dirty_del(d); /* a huge page stays whole: the block waits another delay */
            d->freed_at = now;
            dirty_add(d);
            requeued = true;
            continue;
        }
        list_del(d);
        dirty_del(d);
        free_add(d->chunk, -(long)d->npages);
        span_set_kind(d, SPAN_PURGING);
        zone.purging = d;
        size_t bytes = (size_t)d->npages << PAGE_SHIFT;
        char *base = chunk_base(d->chunk);
        bool split = part && thp_split(huge);
        zone_unlock();
        if (split) os_advise_huge(base, CHUNK_SIZE, false); /* before the purge splits its page */
        os_purge(d->start, bytes);
        zone_lock_at(self);
        zone.purging = NULL;
        zone.st.purges++;
        zone.st.purged_bytes += bytes;
        if (!expired_d) zone.st.bound_purged_bytes += bytes;
        done += bytes;
        tags_clear(d);
        if (!desc_reserve(2 * MAX_ORDER + 2)) break; /* leaves the block out: only on meta OOM */
        range_insert(d->chunk, d->page_idx, d->npages, SPAN_ZEROED | (d->flags & SPAN_RUN_ROOM), 0, d);
    }
    return done;
}

unsigned zones_in_use(void) { return zones_used(); }
size_t zone_in_use_pages(void) {
    uint64_t chunks = atomic_load_explicit(&zone_chunks_total, memory_order_relaxed), free_pages, dirty;
    zones_pub(&free_pages, &dirty);
    return chunks * CHUNK_PAGES > free_pages ? (size_t)(chunks * CHUNK_PAGES - free_pages) : 0;
}

/* unlocked: a hint for the caller (whether to populate); the writers, under
 * the zone lock, store it atomically */
uint8_t zone_chunk_huge(const struct span *s) { return __atomic_load_n(chunk_huge(s->chunk), __ATOMIC_RELAXED); }

/* Collapse (MADV_COLLAPSE) chunks that stayed dense as 4 KiB pages: one
 * pass over the chunks at most once a purge delay (thp_collapse_pass marks
 * and picks), up to max picked; each is marked COLLAPSED under the lock, so
 * no other pass picks it, and collapsed after the lock is dropped (a
 * collapse copies 2 MiB); their outcomes are recorded in one hold. */
static uint64_t collapse_pass_ms; /* the last pass; the purger thread only */
static size_t collapse_pass(unsigned max);
size_t zone_collapse_dense(unsigned max, uint64_t now_ms) {
    if (collapse_pass_ms && now_ms - collapse_pass_ms < (uint64_t)opt.purge_delay_ms) return 0;
    collapse_pass_ms = now_ms;
    return collapse_pass(max);
}
__attribute__((noinline)) static size_t collapse_pass(unsigned max) {
    enum { PASS_MAX = 8 };
    char *base[PASS_MAX];
    uint8_t *huge[PASS_MAX];
    unsigned n = 0, in_zone[PASS_MAX];
    if (max > PASS_MAX) max = PASS_MAX;
    for (unsigned z = 0, zones = zones_used(); z < zones && n < max; z++) { /* each zone's chunks under its lock */
        zone_lock_at(zone_at(z));
        size_t heap = in_use_locked();
        arena_lock(); /* the chunks' states */
        for (struct arena_head *head = arena_heads; head; head = head->next)
            for (uint32_t i = 1; i < ARENA_CHUNKS; i++) {
                char *b = (char *)(arena_base((uintptr_t)head) + ((uintptr_t)i << CHUNK_SHIFT));
                if (head->state[i] == CHUNK_IN_ZONE && n < max &&
                    chunk_zone(chunk_of((uintptr_t)b)) == z && thp_collapse_pass(&head->huge[i], head->free_pages[i], heap)) {
                    base[n] = b;
                    huge[n] = &head->huge[i];
                    in_zone[n] = z;
                    __atomic_store_n(huge[n], (uint8_t)CHUNK_HUGE_COLLAPSED, __ATOMIC_RELAXED);
                    n++;
                }
            }
        arena_unlock();
        zone_unlock();
    }
    bool ok[PASS_MAX];
    for (unsigned k = 0; k < n; k++) ok[k] = os_collapse(base[k], CHUNK_SIZE);
    for (unsigned k = 0; k < n; k++) {
        zone_lock_at(zone_at(in_zone[k]));
        thp_collapsed(huge[k], ok[k]);
        zone_unlock();
    }
    return n;
}

/* dirty free memory, the depot's included (the purger's backlog) */
size_t zone_dirty_bytes(void) {
    uint64_t free_pages, dirty;
    zones_pub(&free_pages, &dirty);
    return (size_t)(dirty + atomic_load_explicit(&depot_pages_total, memory_order_relaxed)) << PAGE_SHIFT;
}

/* free_pages and dirty_pages count the depot's spans (free, dirty) */
void zone_stats(struct zone_stats *st) {
    uint64_t gets = 0, puts = 0, pages = 0, got = 0, put = 0;
    for (uint32_t i = 0; i < DEPOT_SHARDS; i++) { /* each shard's lock in turn, then the zone's */
        shard_lock(&depot_shards[i]);
        pages += depot_shards[i].pages;
        for (uint32_t n = i; n < CHUNK_PAGES; n += DEPOT_SHARDS) {
            const struct depot_size *d = depot_sizes[n];
            if (!d) continue;
            gets += d->got;
            puts += d->put;
            got += d->got * n;
            put += d->put * n;
        }
        shard_unlock(&depot_shards[i]);
    }
    _Static_assert(sizeof(struct zone_stats) % sizeof(uint64_t) == 0, "zone_stats is counters only");
    uint64_t *sum = (uint64_t *)st;
    memset(st, 0, sizeof *st);
    for (unsigned z = 0, n = zones_used(); z < n; z++) { /* each zone's lock in turn */
        zone_lock_at(zone_at(z));
        const uint64_t *own = (const uint64_t *)&zone.st;
        for (size_t k = 0; k < sizeof(struct zone_stats) / sizeof(uint64_t); k++) sum[k] += own[k];
        zone_unlock();
    }
    st->pages_from_zone += got; /* the depot is the page heap's too */
    st->pages_to_zone += put;
    st->depot_gets = gets;
    st->depot_puts = puts;
    st->depot_pages = pages;
    st->free_pages += pages;
    st->dirty_pages += pages;
}

void zone_visit_locks(lock_visit_fn *fn, void *ctx) {
    for (int i = 0; i < DEPOT_SHARDS; i++) fn(ctx, "depot", i, &depot_shards[i].lock);
    for (unsigned z = 0, n = zones_used(); z < n; z++) fn(ctx, "zone", n > 1 ? (long)z : -1, &zone_at(z)->lock);
    fn(ctx, "arena", -1, &arenas.lock);
}

/* fork: the depot's shards (in index order), then the zones in use (in
 * index order; as many as were in use when they were taken), then the
 * arena lock */
void zone_lock_all(void) {
    for (int i = 0; i < DEPOT_SHARDS; i++) lock_acquire(&depot_shards[i].lock);
    arenas.fork_zones = zones_used();
    for (unsigned z = 0; z < arenas.fork_zones; z++) lock_acquire(&zone_at(z)->lock);
    lock_acquire(&arenas.lock);
}
/* In a fork child the purger that was madvising a block outside the lock
 * does not exist: its block goes back on the lists, as dirty (it may be
 * partly purged), instead of being lost. */
void zone_unlock_all(bool child) {
    if (!child) {
        lock_release(&arenas.lock);
        for (unsigned z = arenas.fork_zones; z-- > 0;) lock_release(&zone_at(z)->lock);
        for (int i = DEPOT_SHARDS - 1; i >= 0; i--) lock_release(&depot_shards[i].lock);
        return;
    }
    for (int i = 0; i < DEPOT_SHARDS; i++) lock_reset(&depot_shards[i].lock);
    lock_reset(&arenas.lock);
    thp_after_fork_child();
    for (unsigned z = 0; z < arenas.fork_zones; z++) {
        zone_held = zone_at(z);
        struct span *d = zone.purging;
        zone.purging = NULL;
        if (d && desc_reserve(2 * MAX_ORDER + 2)) {
            tags_clear(d);
            range_insert(d->chunk, d->page_idx, d->npages, d->flags & SPAN_RUN_ROOM, os_now_ms(), d);
        }
        lock_reset(&zone.lock);
        zone_held = NULL;
    }
}

/* Check every zone invariant stated at the top of this file; returns the
 * number of violations (0 = consistent).  For tests and debugging. */
static size_t check_locked(void) {
    size_t bad = 0, pages = 0, dirty = 0;
    bad += atomic_load_explicit(&zone.large_lists, memory_order_relaxed) != zone.run_lists[CHUNK_LARGE - 1];
    for (unsigned t = 0; t < 2; t++)
        for (unsigned i = 0; i < RUN_LISTS; i++) {
            bad += !(zone.run_lists[t] >> i & 1) != !zone.run_head[t][i];
            for (struct span *d = zone.run_head[t][i]; d; d = d->next) {
                /* a run: on its length's list, tagged, its neighbours not free */
                pages += d->npages;
                if (span_kind(d) != SPAN_ZONE_FREE || d->npages == 0 || d->npages >= CHUNK_PAGES) {
                    bad++;
                    break;
                }
                bad += d->order != run_order(d->npages) || run_list(d->npages) != i || chunk_type(d->chunk) != t + 1;
                bad += d->page_idx + d->npages > CHUNK_PAGES;
                bad += atomic_load(&d->chunk->span_of[d->page_idx]) != d;
                bad += d->npages > 1 && atomic_load(&d->chunk->span_of[d->page_idx + d->npages - 1]) != d;
                bad += d->start != chunk_base(d->chunk) + ((size_t)d->page_idx << PAGE_SHIFT);
                bad += run_before(d->chunk, d->page_idx) != NULL || run_after(d->chunk, d->page_idx + d->npages) != NULL;
                bool should_list = !(d->flags & SPAN_ZEROED) && d->order >= (unsigned)opt.purge_min_order;
                bad += should_list != !!(d->flags & SPAN_DIRTY_LISTED);
            }
        }
    for (unsigned k = 0; k <= MAX_ORDER; k++) {
        for (struct span *d = zone.buddy_head[k]; d; d = d->next) {
            pages += d->npages;
            bad += span_kind(d) != SPAN_ZONE_FREE || d->order != k;
            bad += atomic_load(&d->chunk->span_of[d->page_idx]) != d;
            bad += d->start != chunk_base(d->chunk) + ((size_t)d->page_idx << PAGE_SHIFT);
            bad += d->npages != (1u << k) || (d->page_idx & ((1u << k) - 1)) != 0;
            bad += k < MAX_ORDER && chunk_runs(d->chunk);
            if (k < MAX_ORDER) {
                struct span *b = atomic_load(&d->chunk->span_of[d->page_idx ^ (1u << k)]);
                bad += b && span_kind(b) == SPAN_ZONE_FREE && b->order == k &&
                       b->page_idx == (d->page_idx ^ (1u << k));
            }
            bool should_list = !(d->flags & SPAN_ZEROED) && k >= (unsigned)opt.purge_min_order;
            bad += should_list != !!(d->flags & SPAN_DIRTY_LISTED);
        }
    }
    for (struct span *d = zone.dirty_head; d; d = d->dnext) dirty += d->npages;
    unsigned self = zone_held == &zone_first ? 0 : (unsigned)(zone_held - zones_more) + 1;
    arena_lock(); /* the chunks' states; only this zone's chunks are checked */
    for (struct arena_head *head = arena_heads; head; head = head->next) {
        uintptr_t base = arena_base((uintptr_t)head);
        bad += !arena_owns(base);
        bad += head->state[0] != CHUNK_IN_ZONE;
        for (unsigned m = 0; m < ARENA_META_PAGES; m++) /* no span covers the metadata */
            bad += atomic_load(arena_slot(base + ((uintptr_t)m << PAGE_SHIFT))) != NULL;
        for (uint32_t i = 0; i < ARENA_CHUNKS; i++) { /* each chunk's free count */
            if (head->state[i] != CHUNK_IN_ZONE) continue;
            struct chunk *c = chunk_of(base + ((uintptr_t)i << CHUNK_SHIFT));
            if (chunk_zone(c) != self) continue;
            uint32_t n = 0;
            for (uint32_t k = 0; k < CHUNK_PAGES;) {
                struct span *d = atomic_load(&c->span_of[k]);
                bool free_head = d && span_kind(d) == SPAN_ZONE_FREE && d->page_idx == k && d->chunk == c;
                n += free_head ? d->npages : 0;
                k += free_head ? d->npages : 1;
            }
            bad += n != head->free_pages[i];
        }
        for (uint32_t i = 1; i < ARENA_CHUNKS; i++) {
            if (head->state[i] != CHUNK_RELEASED) continue;
            struct chunk *c = chunk_of(base + ((uintptr_t)i << CHUNK_SHIFT));
            for (unsigned k = 0; k < CHUNK_PAGES; k++) bad += atomic_load(&c->span_of[k]) != NULL;
        }
    }
    arena_unlock();
    bad += pages != zone.st.free_pages;
    bad += dirty != zone.st.dirty_pages;
    return bad;
}

size_t zone_check(void) {
    size_t bad = 0;
    for (int i = 0; i < DEPOT_SHARDS; i++) {
        lock_acquire(&depot_shards[i].lock);
        bad += check_shard(&depot_shards[i]);
        lock_release(&depot_shards[i].lock);
    }
    for (unsigned z = 0, n = zones_used(); z < n; z++) {
        zone_lock_at(zone_at(z));
        bad += check_locked();
        zone_unlock();
    }
    return bad;
}
