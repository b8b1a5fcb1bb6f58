/* huge: blocks above LARGE_MAX, carved from address space reserved once.
 *
 * The kernel's mmap lock is taken for writing by every mmap, munmap and
 * mremap; a block that is mapped when allocated and unmapped when freed
 * makes every thread's page faults wait.  So huge blocks are ranges of a
 * few large reservations (regions), which stay mapped: a freed block's
 * memory goes back with MADV_DONTNEED (the read side of the lock), its
 * address space stays for the next block of any size.
 *
 * The ranges are split among HUGE_SHARDS shards, each with its own lock,
 * lists and regions; a thread allocates from its CPU's shard, and from the
 * others when its own has no fit before it reserves more (as the kernel
 * falls back between zones); a block goes back to the shard that owns its
 * range (h->shard), so threads on different CPUs rarely meet.  A cached
 * block in another shard (of the same NUMA node; the smallest that fits,
 * cut) comes before this shard's free ranges: it is resident, a free range
 * faults on its first touch.
 *
 * Invariants, under the lock of the shard that owns the range:
 *  - the ranges of a region tile it, linked by address (aprev/anext; a
 *    neighbour at another address, or NULL, is not adjacent: a range given
 *    back to the kernel or moved away by mremap leaves a hole there); a
 *    shard's regions that touch are one region: its next reservation is
 *    placed against its current run of address space (run_lo, run_hi: the
 *    ends of the region reserved or grown last, while both are still the
 *    shard's) and linked to it, so free ranges merge across the seam and a
 *    mix of sizes does not strand free space in pieces no block fits; each
 *    is USED (a live block), CACHED (freed, memory still resident: on the
 *    cache list, newest first) or FREE (known zero: never touched, or
 *    purged; on the free list);
 *  - every chunk of every range has a pagemap entry pointing to its
 *    descriptor (tagged PAGEMAP_HUGE_TAG), so free() finds a block without
 *    a lock, and a free of a block that is CACHED is seen as a double free;
 *  - CACHED ranges are never merged (a block takes the smallest cached
 *    one that fits, hot, cut from its front, before any free range); a
 *    range becomes FREE when purged, and
 *    FREE neighbours merge at once;
 *  - the process's cached bytes (all shards') stay within
 *    FOLIO_HUGE_CACHE_MIB: past it the shard that cached last purges its
 *    oldest; the purger purges those free for longer than the delay;
 *  - each shard has one slot, outside its lock: the block freed last on
 *    the shard's CPU (state SLOT: resident, on no list, never merged or
 *    cut), whichever shard owns its range, waits there for the next
 *    allocation of exactly its size on that CPU, so a thread that frees and
 *    allocates one huge block in a loop takes no lock (also when the block
 *    came from another shard: a block freed to its owner's slot was found
 *    there only by the owner's CPU, and threads that reuse each other's
 *    blocks across CPUs took two locks per block).  A
 *    block enters and leaves the slot by compare-and-swap on its state
 *    (USED <-> SLOT: a second free fails it, as a double free) and an
 *    exchange of the slot; whoever takes a block out of the slot owns it.
 *    The purger, address-space reclaim and a miss put a slot's block on the
 *    cache list.  States are read atomically wherever a block may be in
 *    the slot (its neighbours' merges, huge_check);
 *  - address space goes back to the kernel only when a mapping failed
 *    (huge_release, from as_reclaim: every range not in use is unmapped);
 *  - realloc grows a block into the free ranges after it, else moves its
 *    pages onto a free range with mremap (counted), never by copying but
 *    for a kernel that places a moved extent off the 2 MiB grid under
 *    address space pressure (move_anywhere). */
#include <errno.h>
#include <string.h>

#include "page.h"

/* huge blocks handed out and freed; live_bytes is net (what is handed out
 * now, by range size) */
static struct {
    _Atomic uint64_t allocs, bytes, frees, live_bytes;
} counts;

enum { HUGE_USED = 1, HUGE_CACHED = 2, HUGE_FREE = 3, HUGE_SLOT = 4 };

/* The first reservation's size; each next one doubles what the process
 * has reserved (all shards'), up to REGION_MAX, and is at least the block
 * that needs it. */
#define REGION_MIN ((size_t)256 << 20)
#define REGION_MAX ((size_t)4 << 30)

struct huge {
    char *base;
    size_t map_size;
    size_t size; /* USED: bytes asked for (page rounded) */
    uint8_t state;
    uint8_t shard;               /* the shard that owns the range */
    uint64_t freed_at;           /* CACHED: when it was freed */
    struct huge *next, *prev;    /* the cache list or the free list */
    struct huge *anext, *aprev;  /* address neighbours in its region */
};

#define HUGE_SHARDS 64 /* a power of two; a CPU's shard: its number modulo this */

struct shard {
    lock_t lock;
    struct huge *cache_head, *cache_tail, *free_head, *desc_pool;
    size_t cached_bytes;  /* written with relaxed stores: huge_dirty_bytes reads it unlocked */
    _Atomic(struct huge *) slot;  /* the block freed last, or NULL (lock-free) */
    _Atomic size_t slot_bytes;    /* the slot's block's bytes (for huge_dirty_bytes) */
    _Atomic uint64_t slot_hits;
    char *run_lo, *run_hi; /* the run new regions join (NULL: an end that left the shard) */
    struct huge_stats st; /* mapped: USED + CACHED bytes */
} __attribute__((aligned(CACHELINE)));

static struct shard shards[HUGE_SHARDS] = {[0 ... HUGE_SHARDS - 1] = {.lock = LOCK_INIT(LOCK_RANK_HUGE)}};

/* st.reserved is read without the lock (which shards are in use) */
static void reserved_add(struct shard *s, size_t delta) {
    __atomic_store_n(&s->st.reserved, s->st.reserved + delta, __ATOMIC_RELAXED);
}
/* shards that reserved a region: they share the cache bound.  Never falls:
 * while it is 0 no shard holds a block, so the scans of all shards (purge,
 * release, dirty bytes) return at once, and a process that makes no huge
 * block never reads the table (16 KiB of .bss: 4 faults, in every process) */
static _Atomic int shards_in_use;

static size_t round_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* Point the pagemap entries of [base, base+size) at h (NULL: clear them).
 * Entering fails (false) only when a pagemap leaf cannot be had; a range
 * that was entered once has its leaves for good. */
static bool register_range(struct huge *h, char *base, size_t size) {
    bool ok = true;
    for (size_t off = 0; off < size; off += CHUNK_SIZE)
        ok &= pagemap_set((uintptr_t)(base + off), h ? (uintptr_t)h | PAGEMAP_HUGE_TAG : 0);
    return ok;
}

/* ---- descriptors (lock held) ---- */
static struct huge *desc_get(struct shard *s) {
    struct huge *h = s->desc_pool;
    if (h) s->desc_pool = h->next;
    else h = meta_alloc(sizeof *h);
    if (h) {
        memset(h, 0, sizeof *h);
        h->shard = (uint8_t)(s - shards);
    }
    return h;
}
static void desc_put(struct shard *s, struct huge *h) {
    h->state = 0;
    h->next = s->desc_pool;
    s->desc_pool = h;
}
static struct shard *shard_of(const struct huge *h) { return &shards[h->shard]; }
/* a neighbour's state: it may be moving in or out of a slot without the lock */
static uint8_t state_of(const struct huge *h) { return __atomic_load_n(&h->state, __ATOMIC_RELAXED); }

/* ---- the cache and free lists (lock held) ---- */
static void list_unlink(struct huge *h) {
    struct shard *s = shard_of(h);
    struct huge **head = h->state == HUGE_CACHED ? &s->cache_head : &s->free_head;
    if (h->prev) h->prev->next = h->next;
    else *head = h->next;
    if (h->next) h->next->prev = h->prev;
    else if (h->state == HUGE_CACHED) s->cache_tail = h->prev;
    if (h->state == HUGE_CACHED) {
        __atomic_store_n(&s->cached_bytes, s->cached_bytes - h->map_size, __ATOMIC_RELAXED);
        s->st.mapped -= h->map_size;
    }
    h->next = h->prev = NULL;
}
static void list_push(struct huge *h, uint8_t state) {
    struct shard *s = shard_of(h);
    h->state = state;
    h->prev = NULL;
    if (state == HUGE_CACHED) {
        h->next = s->cache_head;
        if (s->cache_head) s->cache_head->prev = h;
        else s->cache_tail = h;
        s->cache_head = h;
        __atomic_store_n(&s->cached_bytes, s->cached_bytes + h->map_size, __ATOMIC_RELAXED);
        s->st.mapped += h->map_size;
    } else {
        h->next = s->free_head;
        if (s->free_head) s->free_head->prev = h;
        s->free_head = h;
    }
}

static bool adjacent(const struct huge *a, const struct huge *b) {
    return a && b && a->base + a->map_size == b->base;
}

/* b (after a, adjacent) joins a; b's descriptor is dropped. */
static void absorb_next(struct huge *a, struct huge *b) {
    a->map_size += b->map_size;
    a->anext = b->anext;
    if (b->anext) b->anext->aprev = a;
    register_range(a, b->base, b->map_size);
    desc_put(shard_of(b), b);
}

/* h, off every list, becomes FREE and merges with FREE neighbours;
 * returns the merged range. */
static struct huge *make_free(struct huge *h) {
    struct huge *p = h->aprev, *n = h->anext;
    if (adjacent(h, n) && state_of(n) == HUGE_FREE) {
        list_unlink(n);
        absorb_next(h, n);
    }
    if (adjacent(p, h) && state_of(p) == HUGE_FREE) {
        list_unlink(p);
        absorb_next(p, h);
        h = p;
    }
    list_push(h, HUGE_FREE);
    return h;
}

/* A cached range's memory goes back to the kernel; the range stays. */
static struct huge *purge_one(struct huge *h) {
    list_unlink(h);
    os_purge(h->base, h->map_size);
    shard_of(h)->st.purges++;
    shard_of(h)->st.purged_bytes += h->map_size;
    return make_free(h);
}

/* Cut [h->base + off, + map) out of the free range h (off its list): the
 * head and tail left over keep h's state; returns the cut range, off every
 * list.  NULL when a descriptor cannot be had (h is back on its list). */
static struct huge *cut(struct huge *h, size_t off, size_t map) {
    uint8_t state = h->state;
    size_t tail = h->map_size - off - map;
    struct huge *hd = NULL, *tl = NULL;
    if ((off && !(hd = desc_get(shard_of(h)))) || (tail && !(tl = desc_get(shard_of(h))))) {
        if (hd) desc_put(shard_of(h), hd);
        list_push(h, state);
        return NULL;
    }
    if (hd) { /* h keeps the middle; the head gets a descriptor of its own */
        hd->base = h->base;
        hd->map_size = off;
        hd->freed_at = h->freed_at;
        hd->aprev = h->aprev;
        hd->anext = h;
        if (h->aprev) h->aprev->anext = hd;
        h->aprev = hd;
        h->base += off;
        register_range(hd, hd->base, off);
        list_push(hd, state);
    }
    if (tl) {
        tl->base = h->base + map;
        tl->map_size = tail;
        tl->freed_at = h->freed_at;
        tl->anext = h->anext;
        tl->aprev = h;
        if (h->anext) h->anext->aprev = tl;
        h->anext = tl;
        register_range(tl, tl->base, tail);
        list_push(tl, state);
    }
    h->map_size = map;
    h->state = state; /* the caller decides what it becomes */
    return h;
}

/* The offset of the first align-aligned address in h that leaves map bytes,
 * or (size_t)-1. */
static size_t fit(const struct huge *h, size_t map, size_t align) {
    size_t off = (size_t)(round_up((uintptr_t)h->base, align) - (uintptr_t)h->base);
    return off <= h->map_size && h->map_size - off >= map ? off : (size_t)-1;
}

/* The smallest range of the list that fits. */
static struct huge *best_fit(struct huge *list, size_t map, size_t align, size_t *off) {
    struct huge *best = NULL;
    for (struct huge *c = list; c; c = c->next) {
        size_t o = fit(c, map, align);
        if (o != (size_t)-1 && (!best || c->map_size < best->map_size)) {
            best = c;
            *off = o;
        }
    }
    return best;
}

/* The range of s that starts at a (or ends at a, end), from the pagemap:
 * a is an end of s's run, so the entry there is s's (lock held). */
static struct huge *range_at(char *a, bool end) {
    uintptr_t e = pagemap_get((uintptr_t)(end ? a - CHUNK_SIZE : a));
    struct huge *h = (struct huge *)(e & ~(uintptr_t)PAGEMAP_HUGE_TAG);
    if (!(e & PAGEMAP_HUGE_TAG) || (end ? h->base + h->map_size != a : h->base != a)) return NULL;
    return h;
}

/* size bytes of address space for s (2 MiB aligned): right below its run
 * when the kernel has them free there (it hands out addresses downward, so
 * they often are), else wherever it finds room: one call either way where
 * the kernel aligns it (os_reserve_near). */
static char *region_reserve(struct shard *s, size_t size) {
    char *hint = s->run_lo && (uintptr_t)s->run_lo > size ? s->run_lo - size : NULL;
    return os_reserve_near(hint, size, CHUNK_SIZE);
}

/* The new FREE region n joins s's run when it touches either end (placed
 * there, or put there by the kernel), and merges with a FREE range at the
 * seam; else it starts a new run (lock held). */
static void region_join(struct shard *s, struct huge *n) {
    char *end = n->base + n->map_size;
    struct huge *up = end == s->run_lo ? range_at(end, false) : NULL;
    struct huge *down = n->base == s->run_hi ? range_at(n->base, true) : NULL;
    if (up) {
        n->anext = up;
        up->aprev = n;
        s->run_lo = n->base;
    }
    if (down) {
        n->aprev = down;
        down->anext = n;
        s->run_hi = end;
    }
    if (!up && !down) {
        s->run_lo = n->base;
        s->run_hi = end;
    }
    make_free(n);
}

/* A new region of at least map bytes, all FREE, as large as all shards'
 * regions together: a shard reserves only once no shard has a fit (take_any),
 * so the process has run out, and doubling the process's reservation keeps
 * the mappings few and early while the heap grows (sized from the shard's
 * own, a second CPU's shard reserved again and again, small, after the
 * first had reserved gigabytes: mappings in a steady state;
 * test_huge_regions). */
static bool region_add(struct shard *s, size_t map, size_t align) {
    size_t total = 0;
    for (struct shard *o = shards; o < shards + HUGE_SHARDS; o++) total += __atomic_load_n(&o->st.reserved, __ATOMIC_RELAXED);
    size_t want = total > REGION_MIN ? total : REGION_MIN;
    if (want > REGION_MAX) want = REGION_MAX;
    want = round_up(want, CHUNK_SIZE);
    if (align < CHUNK_SIZE) align = CHUNK_SIZE;
    char *base = NULL;
    size_t size = want;
    if (align == CHUNK_SIZE && size < map) size = map; /* any 2 MiB boundary fits */
    if (size >= map + (align > CHUNK_SIZE ? align : 0)) base = region_reserve(s, size); /* room to align inside */
    if (!base && (size != map || align > CHUNK_SIZE)) base = os_reserve(size = map, align); /* address space is short */
    if (!base) return false;
    struct huge *h = desc_get(s);
    if (!h || !pagemap_spare_ensure() || !register_range(h, base, size)) {
        register_range(NULL, base, size);
        os_release(base, size);
        if (h) desc_put(s, h);
        return false;
    }
    h->base = base;
    h->map_size = size;
    int node = numa_place_node((int)(s - shards)); /* the node of the shard's first CPU */
    if (node >= 0 && os_place_on_node(base, size, node)) s->st.placed++;
    thp_huge_region(base, size);
    if (!s->st.reserved) atomic_fetch_add_explicit(&shards_in_use, 1, memory_order_relaxed);
    reserved_add(s, size);
    region_join(s, h);
    return true;
}

/* The range h (a free one that fits at off) becomes a USED range of map
 * bytes; *zeroed, *freed_at: what its memory was (lock held). */
static struct huge *take_at(struct huge *h, size_t off, size_t map, bool *zeroed, uint64_t *freed_at) {
    struct shard *s = shard_of(h);
    *zeroed = h->state == HUGE_FREE;
    *freed_at = h->freed_at;
    if (h->state == HUGE_CACHED) s->st.cache_hits++;
    list_unlink(h);
    if (!(h = cut(h, off, map))) return NULL;
    h->state = HUGE_USED;
    s->st.mapped += map;
    return h;
}

/* The smallest range of list that fits map bytes at align, cut from its
 * front (lock held). */
static struct huge *take_best(struct huge *list, size_t map, size_t align, bool *zeroed, uint64_t *freed_at) {
    size_t off = 0;
    struct huge *h = best_fit(list, map, align, &off);
    return h ? take_at(h, off, map, zeroed, freed_at) : NULL;
}

/* The smallest cached range of the shard that fits (one of about the size
 * when there is one), cut from its front (lock held).  Any cached block
 * that fits comes before a free range: its pages are resident, and a free
 * range taken instead would fault in pages of its own while the cached
 * ones stay resident for the purge delay (sort frees its sort buffer
 * before it takes its smaller merge buffers: docs/notes/programs.md). */
static struct huge *take_resident(struct shard *s, size_t map, size_t align, bool *zeroed, uint64_t *freed_at) {
    return take_best(s->cache_head, map, align, zeroed, freed_at);
}

/* A range of the shard's lists that fits, without purging or reserving:
 * a cached one (take_resident), else the best-fitting free range (cut). */
static struct huge *take_listed(struct shard *s, size_t map, size_t align, bool *zeroed, uint64_t *freed_at) {
    struct huge *h = take_resident(s, map, align, zeroed, freed_at);
    return h ? h : take_best(s->free_head, map, align, zeroed, freed_at);
}

/* A range of map bytes at an align boundary, USED, with its pagemap
 * entries: from the shard's lists, else from its cached ranges purged
 * (oldest first) until free neighbours merge into a fit, else (reserve)
 * from a new region.  NULL when there is none, or the kernel or the
 * metadata refuses (lock held). */
static struct huge *take(struct shard *s, size_t map, size_t align, bool reserve, bool *zeroed,
                         uint64_t *freed_at) {
    struct huge *h = take_listed(s, map, align, zeroed, freed_at);
    if (h) return h;
    size_t off = 0;
    while (s->cache_tail) {
        struct huge *m = purge_one(s->cache_tail);
        if ((off = fit(m, map, align)) != (size_t)-1) return take_at(m, off, map, zeroed, freed_at);
    }
    if (!reserve || !region_add(s, map, align)) return NULL;
    return take_listed(s, map, align, zeroed, freed_at);
}

/* This CPU's shard's smallest cached range that fits (take_resident);
 * then the others' (a block goes back to the shard
 * that owns its range, wherever it was freed: a thread's next block is
 * often in another shard's cache, resident, where its own shard's free
 * range would fault on every page); then what
 * every shard has listed; then their cached ranges purged until they merge
 * into a fit (each lock in turn, never two at once); only then does this
 * shard reserve more, so a steady state that fits in what is reserved maps
 * nothing. */
static struct huge *slot_take(struct shard *s);
static void slot_to_cache(struct huge *h);
static struct huge *slot_alloc(struct shard *s, size_t map, size_t align, uint64_t *freed_at);
/* A block taken out of a slot goes on its owner's cache list (under the
 * owner's lock, taken here unless the caller holds it: held is that shard
 * or NULL). */
static void slot_to_owner(struct huge *y, struct shard *held) {
    struct shard *o = shard_of(y);
    if (o != held) lock_acquire(&o->lock);
    slot_to_cache(y);
    if (o != held) lock_release(&o->lock);
}

/* s's lock, with its slot's block (if any) moved to its owner's cache
 * list, where a request of another size (or another CPU's) can find it */
static void lock_shard_listed(struct shard *s) {
    struct huge *y = slot_take(s);
    if (y && shard_of(y) != s) {
        slot_to_owner(y, NULL); /* never two locks at once */
        y = NULL;
    }
    lock_acquire(&s->lock);
    if (y) slot_to_cache(y);
}

/* s may hold a resident block of map bytes that the shard me may take
 * before its own free ranges: s's cache list or slot holds that much (read
 * without its lock: a hint), and its regions are on me's NUMA node (a
 * block of another node's is taken only once me has no free range, as
 * before). */
static bool resident_in(unsigned me, struct shard *s, size_t map) {
    size_t slot = atomic_load_explicit(&s->slot_bytes, memory_order_relaxed);
    size_t cached = __atomic_load_n(&s->cached_bytes, __ATOMIC_RELAXED);
    if (cached < map && ((ptrdiff_t)slot <= 0 || slot < map)) return false;
    return numa_place_node((int)(s - shards)) == numa_place_node((int)me);
}

static struct huge *take_any(size_t map, size_t align, bool *zeroed, uint64_t *freed_at) {
    unsigned me = (unsigned)os_cpu() & (HUGE_SHARDS - 1);
    struct shard *s = &shards[me];
    lock_shard_listed(s);
    struct huge *h = take_resident(s, map, align, zeroed, freed_at);
    bool elsewhere = false; /* another shard may hold a resident fit: this one's free ranges wait */
    for (unsigned i = 1; !h && align <= CHUNK_SIZE && !elsewhere && i < HUGE_SHARDS; i++) {
        struct shard *o = &shards[(me + i) & (HUGE_SHARDS - 1)];
        elsewhere = resident_in(me, o, map);
    }
    if (!h && !elsewhere) h = take_best(s->free_head, map, align, zeroed, freed_at); /* its cache: tried above */
    lock_release(&s->lock);
    /* pass 0: the others' cached ranges; 1: what each has
     * listed; 2: cached ranges purged into a fit; 3: this shard reserves */
    for (int pass = elsewhere ? 0 : 1; pass < 4 && !h; pass++)
        for (unsigned i = 0; !h && i < HUGE_SHARDS; i++) {
            struct shard *o = &shards[(me + i) & (HUGE_SHARDS - 1)];
            if ((pass == 0 && i == 0) || (pass == 1 && i == 0 && !elsewhere) || (pass == 3 && i > 0)) continue;
            if (i > 0 && pass > 0 && !__atomic_load_n(&o->st.reserved, __ATOMIC_RELAXED)) continue;
            if (pass == 0 && !resident_in(me, o, map)) continue;
            if (pass == 0 && (h = slot_alloc(o, map, align ? align : 1, freed_at))) break;
            lock_shard_listed(o);
            h = pass == 0 ? take_resident(o, map, align, zeroed, freed_at)
                : pass == 1 ? take_listed(o, map, align, zeroed, freed_at)
                            : take(o, map, align, pass == 3, zeroed, freed_at);
            lock_release(&o->lock);
        }
    return h;
}

/* ---- the slot (lock-free) ---- */

/* The cache bound's even share of one shard: the largest block its slot
 * takes (a slot's block is not counted in cached_bytes; the slots together
 * hold about the bound). */
static size_t shard_cache_limit(void) {
    int n = atomic_load_explicit(&shards_in_use, memory_order_relaxed);
    return ((size_t)opt.huge_cache_mib << 20) / (size_t)(n > 1 ? n : 1);
}

/* The block out of s's slot (the caller owns it), or NULL. */
static struct huge *slot_take(struct shard *s) {
    if (!atomic_load_explicit(&s->slot, memory_order_relaxed)) return NULL;
    struct huge *h = atomic_exchange_explicit(&s->slot, NULL, memory_order_acquire);
    if (h) atomic_fetch_sub_explicit(&s->slot_bytes, h->map_size, memory_order_relaxed);
    return h;
}

static void cache_bound(struct shard *s);
/* A block taken out of a slot that is not wanted now goes on its shard's
 * cache list (lock held; list_push counts it in st.mapped again). */
static void slot_to_cache(struct huge *h) {
    shard_of(h)->st.mapped -= h->map_size;
    list_push(h, HUGE_CACHED);
    cache_bound(shard_of(h));
}

/* A live block (h->freed_at set) into its shard's slot; false when the
 * slot is taken (h is SLOT: the caller lists it). */
static bool slot_put(struct shard *s, struct huge *h) {
    size_t bytes = h->map_size; /* once h is in the slot, it is the taker's */
    struct huge *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&s->slot, &none, h, memory_order_release, memory_order_relaxed))
        return false;
    atomic_fetch_add_explicit(&s->slot_bytes, bytes, memory_order_relaxed);
    return true;
}

/* s's slot, if it holds a block of exactly map bytes at an align
 * boundary: that block, USED again.  Any other block found there goes on
 * its owner's cache list, where the locked path can cut it.  No lock held. */
static struct huge *slot_alloc(struct shard *s, size_t map, size_t align, uint64_t *freed_at) {
    struct huge *h = slot_take(s);
    if (!h) return NULL;
    if (h->map_size == map && ((uintptr_t)h->base & (align - 1)) == 0) {
        *freed_at = h->freed_at;
        __atomic_store_n(&h->state, HUGE_USED, __ATOMIC_RELAXED);
        atomic_fetch_add_explicit(&s->slot_hits, 1, memory_order_relaxed);
        return h;
    }
    slot_to_owner(h, NULL);
    return NULL;
}

/* A block the kernel would not map for glibc either (os_overcommit_refuses):
 * NULL and ENOMEM, not a block whose pages the OOM killer ends the process
 * for when they are touched; below 32 MiB, no system call to ask, and a
 * block of a size reused from a slot passed when it was first made. */
static bool too_large(size_t n) { return n >= ((size_t)32 << 20) && os_overcommit_refuses(n); }

void *huge_alloc(size_t n, size_t align, bool zero) {
    if (n > PTRDIFF_MAX - 2 * CHUNK_SIZE || align > ((size_t)1 << 40)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t size = round_up(n, PAGE_SIZE);
    size_t map = round_up(size, CHUNK_SIZE);
    bool zeroed = false;
    uint64_t freed_at = 0;
    struct huge *h = slot_alloc(&shards[(unsigned)os_cpu() & (HUGE_SHARDS - 1)], map, align ? align : 1, &freed_at);
    if (!h && too_large(n)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!h) h = take_any(map, align, &zeroed, &freed_at);
    if (!h) { /* a mapping failed: give address space back, retry once */
        as_reclaim();
        h = take_any(map, align, &zeroed, &freed_at);
    }
    if (!h) {
        errno = ENOMEM;
        return NULL;
    }
    h->size = size;
    if (zero) { /* hot or cold from how long ago the cached range was freed */
        if (zeroed) clear_zero_skipped(size);
        else clear_hint(h->base, size, FOLIO_CLEAR_TOUCH | clear_age_hint(freed_at));
    }
    atomic_fetch_add_explicit(&counts.allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&counts.bytes, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&counts.live_bytes, h->map_size, memory_order_relaxed);
    return h->base;
}

/* The cache bound is the process's: while the shards' cached bytes together
 * pass it, the shard that cached last purges its oldest (lock held).  The
 * others' counts are read without their locks (no count written by every
 * CPU on the free path).  A bound split evenly among the shards purged
 * blocks while the process cached less than the bound whenever a block went
 * back to a shard that owned more than its share (a block goes back to the
 * shard it was carved from, whichever CPU frees it), and the range faulted
 * again when it was next used. */
static void cache_bound(struct shard *s) {
    if (!s->cache_tail) return;
    size_t limit = (size_t)opt.huge_cache_mib << 20, total = 0;
    for (struct shard *o = shards; o < shards + HUGE_SHARDS; o++)
        if (__atomic_load_n(&o->st.reserved, __ATOMIC_RELAXED)) total += __atomic_load_n(&o->cached_bytes, __ATOMIC_RELAXED);
    while (s->cache_tail && total > limit) {
        total -= s->cache_tail->map_size;
        purge_one(s->cache_tail);
    }
}

/* A block goes to the slot of this CPU's shard when the slot is free and
 * the block fits a shard's share of the cache bound; else on its owner's
 * cache list.  Either way it is
 * still counted in st.mapped (USED and SLOT and CACHED alike). */
void huge_free(struct huge *h, void *p) {
    if (p != h->base) os_fatal_ptr("free(): invalid pointer", p);
    struct shard *s = shard_of(h);
    struct shard *here = &shards[(unsigned)os_cpu() & (HUGE_SHARDS - 1)];
    uint8_t used = HUGE_USED;
    if (!__atomic_compare_exchange_n(&h->state, &used, HUGE_SLOT, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        os_fatal_ptr("free(): double free", p);
    atomic_fetch_sub_explicit(&counts.live_bytes, h->map_size, memory_order_relaxed);
    atomic_fetch_add_explicit(&counts.frees, 1, memory_order_relaxed);
    h->freed_at = os_now_ms();
    if (h->map_size <= shard_cache_limit() && slot_put(here, h)) return;
    lock_acquire(&s->lock);
    slot_to_cache(h);
    lock_release(&s->lock);
}

size_t huge_usable(struct huge *h, void *p) { return h->map_size - (size_t)((char *)p - h->base); }

/* The kernel moved an extent of `old` bytes to r, in a mapping of room >=
 * map + CHUNK_SIZE bytes: keep map bytes from the first 2 MiB boundary at
 * or after r (moving the contents there when r is off the grid) and unmap
 * the rest. */
char *huge_fit_grid(char *r, size_t room, size_t old, size_t map) {
    char *a = (char *)round_up((uintptr_t)r, CHUNK_SIZE);
    if (a != r) {
        memmove(a, r, old);
        os_release(r, (size_t)(a - r));
    }
    if (r + room > a + map) os_release(a + map, (size_t)(r + room - (a + map)));
    return a;
}

/* h's range left its region (moved away by mremap, or given back): its
 * neighbours are no longer adjacent to it; an end of the run that it was
 * moves to its neighbour, or is forgotten (its address is the kernel's
 * again, and may become another's). */
static void addr_unlink(struct huge *h) {
    struct shard *s = shard_of(h);
    if (h->base == s->run_lo) s->run_lo = adjacent(h, h->anext) ? h->anext->base : NULL;
    if (h->base + h->map_size == s->run_hi) s->run_hi = adjacent(h->aprev, h) ? h->base : NULL;
    if (h->aprev) h->aprev->anext = h->anext;
    if (h->anext) h->anext->aprev = h->aprev;
    h->aprev = h->anext = NULL;
}

/* Move the extent to wherever the kernel finds room for map + one chunk:
 * mremap without a destination counts only the growth against RLIMIT_AS,
 * where a reserved destination needs the old and the new size at once.
 * The spare chunk makes room to align: the kernel aligns anonymous
 * mappings of 2 MiB multiples (then the spare is cut off the tail); else the
 * contents are moved down to the next 2 MiB boundary with memmove, the one
 * copy a huge realloc makes, and only under address space pressure.  The
 * moved extent is a region of its own.  Lock held. */
static char *move_anywhere(struct huge *h, size_t map) {
    size_t room = map + CHUNK_SIZE, old = h->map_size;
    if (map > ((size_t)1 << (CHUNK_SHIFT + PAGEMAP_LEAF_BITS)) || !pagemap_spare_ensure()) return NULL;
    register_range(NULL, h->base, old); /* before the old range can be anyone's */
    char *r = os_move(h->base, old, room);
    if (!r) {
        register_range(h, h->base, old); /* its leaves exist */
        return NULL;
    }
    char *a = huge_fit_grid(r, room, old, map);
    register_range(h, a, map); /* the spare leaves cover it */
    reserved_add(shard_of(h), map - old);
    addr_unlink(h);
    return a;
}

/* Grow the live block h's range to map bytes in place: the free ranges
 * that follow it (adjacent) give their front.  False when they are too
 * few.  h->map_size stays the old size for the caller's counts. */
static bool grow_in_place(struct huge *h, size_t map) {
    size_t have = h->map_size, old = h->map_size;
    for (struct huge *n = h->anext, *p = h;
         have < map && adjacent(p, n) && (state_of(n) == HUGE_FREE || state_of(n) == HUGE_CACHED);
         p = n, n = n->anext)
        have += n->map_size;
    struct huge *spare = have >= map ? desc_get(shard_of(h)) : NULL; /* the one cut below cannot fail */
    if (!spare) return false;
    desc_put(shard_of(h), spare);
    while (h->map_size < map) {
        struct huge *n = h->anext;
        size_t need = map - h->map_size;
        list_unlink(n);
        if (n->map_size > need) n = cut(n, 0, need);
        absorb_next(h, n);
    }
    h->map_size = old;
    return true;
}

/* Grow the block to map bytes without copying: in place, else its pages
 * move onto a free range of its shard (mremap; its old range leaves the
 * region), else anywhere.  Lock held. */
static char *grow(struct huge *h, size_t map) {
    struct shard *s = shard_of(h);
    if (grow_in_place(h, map)) return h->base;
    bool zeroed;
    uint64_t freed_at;
    struct huge *d = take(s, map, CHUNK_SIZE, true, &zeroed, &freed_at);
    if (d) {
        register_range(NULL, h->base, h->map_size);
        if (os_remap(h->base, h->map_size, h->map_size, d->base)) {
            s->st.mremaps++;
            reserved_add(s, -h->map_size); /* the old range is the kernel's again */
            addr_unlink(h);
            /* h takes d's place in its region */
            h->aprev = d->aprev;
            h->anext = d->anext;
            if (d->aprev) d->aprev->anext = h;
            if (d->anext) d->anext->aprev = h;
            h->base = d->base;
            s->st.mapped -= map; /* h is counted at its old size; the caller adds the growth */
            desc_put(s, d);
            register_range(h, h->base, map);
            return h->base;
        }
        register_range(h, h->base, h->map_size);
        s->st.mapped -= d->map_size;
        d->freed_at = os_now_ms();
        list_push(d, HUGE_CACHED);
    }
    char *r = move_anywhere(h, map);
    if (r) s->st.mremaps++;
    return r;
}

/* Unlocked: only a call racing with a free of the same block (a program
 * bug) can see the state change. */
enum fault huge_check(const struct huge *h, const void *p) {
    if (p != h->base) return FAULT_INVALID;
    return __atomic_load_n(&h->state, __ATOMIC_RELAXED) == HUGE_USED ? FAULT_NONE : FAULT_FREED;
}

/* A live extent's range becomes map bytes (resized or moved): its usable
 * size, the live bytes it is counted for. */
static void resize_map(struct huge *h, size_t map) {
    atomic_fetch_add_explicit(&counts.live_bytes, map - h->map_size, memory_order_relaxed);
    shard_of(h)->st.mapped += map - h->map_size;
    h->map_size = map;
}

/* Resize without copying: shrink in place (the tail is cached like a freed
 * block), grow into the free ranges that follow, else move the pages with
 * mremap.  NULL when the kernel refuses even after address space was given
 * back (the caller then copies). */
void *huge_realloc(struct huge *h, void *p, size_t n) {
    if (p != h->base) os_fatal_ptr("realloc(): invalid pointer", p);
    if (h->state != HUGE_USED) os_fatal_ptr("realloc(): freed pointer", p);
    if (n > PTRDIFF_MAX - 2 * CHUNK_SIZE) return NULL;
    size_t size = round_up(n, PAGE_SIZE), map = round_up(size, CHUNK_SIZE);
    if (map > h->map_size && too_large(n)) return NULL; /* the caller's huge_alloc sets ENOMEM */
    if (map == h->map_size) {
        h->size = size;
        return p;
    }
    struct shard *s = shard_of(h);
    lock_acquire(&s->lock);
    if (map < h->map_size) {
        size_t old = h->map_size;
        h->state = HUGE_CACHED; /* cut keeps the state for the tail */
        if (cut(h, 0, map)) {
            h->anext->freed_at = os_now_ms();
            atomic_fetch_sub_explicit(&counts.live_bytes, old - map, memory_order_relaxed);
            s->st.mapped -= old - map; /* the tail was counted again as cached */
        } else {
            list_unlink(h); /* no descriptor: the block keeps its size */
        }
        h->state = HUGE_USED;
        h->size = size;
        cache_bound(s); /* the tail joined the cache */
        lock_release(&s->lock);
        return p;
    }
    char *r = grow(h, map);
    if (!r) { /* give address space back (not under the lock), retry once */
        lock_release(&s->lock);
        as_reclaim();
        lock_acquire(&s->lock);
        r = grow(h, map);
    }
    if (r) {
        h->base = r;
        resize_map(h, map);
        h->size = size;
    }
    cache_bound(s); /* a move leaves the old range cached */
    lock_release(&s->lock);
    return r;
}

/* Purge cached ranges free for longer than the delay (all: every one);
 * their address space stays.  Returns the bytes purged. */
static __attribute__((noinline)) size_t huge_purge_shards(bool all);
size_t huge_purge(bool all) {
    /* (the test every tick makes, apart: a process without huge blocks
     * runs none of the rest) */
    if (!atomic_load_explicit(&shards_in_use, memory_order_relaxed)) return 0; /* no shard's pages read */
    return huge_purge_shards(all);
}
static size_t huge_purge_shards(bool all) {
    uint64_t now = os_now_ms();
    size_t done = 0;
    /* every slot's block first (it may be any shard's): back if still
     * young, else on its owner's list, purged below */
    for (struct shard *s = shards; s < shards + HUGE_SHARDS; s++) {
        struct huge *y = slot_take(s);
        if (y && !all && y->freed_at + (uint64_t)opt.purge_delay_ms > now && slot_put(s, y)) y = NULL;
        if (y) slot_to_owner(y, NULL);
    }
    for (struct shard *s = shards; s < shards + HUGE_SHARDS; s++) {
        if (!__atomic_load_n(&s->st.reserved, __ATOMIC_RELAXED)) continue;
        lock_acquire(&s->lock);
        while (s->cache_tail && (all || s->cache_tail->freed_at + (uint64_t)opt.purge_delay_ms <= now)) {
            done += s->cache_tail->map_size;
            purge_one(s->cache_tail);
        }
        lock_release(&s->lock);
    }
    return done;
}

/* Address space is short (as_reclaim): every range not in use goes back to
 * the kernel.  Returns the bytes unmapped. */
size_t huge_release(void) {
    if (!atomic_load_explicit(&shards_in_use, memory_order_relaxed)) return 0;
    size_t done = 0;
    struct huge *y;
    for (struct shard *s = shards; s < shards + HUGE_SHARDS; s++) /* every slot first: its block may be another shard's */
        if ((y = slot_take(s))) slot_to_owner(y, NULL);
    for (struct shard *s = shards; s < shards + HUGE_SHARDS; s++) {
        if (!__atomic_load_n(&s->st.reserved, __ATOMIC_RELAXED)) continue;
        lock_acquire(&s->lock);
        while (s->cache_tail) purge_one(s->cache_tail);
        for (struct huge *h = s->free_head, *next; h; h = next) {
            next = h->next;
            register_range(NULL, h->base, h->map_size);
            if (!os_release(h->base, h->map_size)) {
                register_range(h, h->base, h->map_size);
                continue;
            }
            list_unlink(h);
            addr_unlink(h);
            reserved_add(s, -h->map_size);
            done += h->map_size;
            desc_put(s, h);
        }
        lock_release(&s->lock);
    }
    return done;
}

size_t huge_dirty_bytes(void) {
    if (!atomic_load_explicit(&shards_in_use, memory_order_relaxed)) return 0;
    size_t sum = 0;
    for (struct shard *s = shards; s < shards + HUGE_SHARDS; s++) {
        /* a taker's subtraction may land before the filler's addition */
        size_t slot = atomic_load_explicit(&s->slot_bytes, memory_order_relaxed);
        sum += __atomic_load_n(&s->cached_bytes, __ATOMIC_RELAXED) + ((ptrdiff_t)slot < 0 ? 0 : slot);
    }
    return sum;
}

void huge_stats(struct huge_stats *st) {
    memset(st, 0, sizeof *st);
    /* no shard reserved yet: every shard's figures are zero (a slot is hit
     * only after a huge block was freed), and their pages are left unread */
    bool any = atomic_load_explicit(&shards_in_use, memory_order_relaxed) != 0;
    for (struct shard *s = shards; any && s < shards + HUGE_SHARDS; s++) {
        st->cache_hits += atomic_load_explicit(&s->slot_hits, memory_order_relaxed); /* any shard's CPU */
        if (!__atomic_load_n(&s->st.reserved, __ATOMIC_RELAXED)) continue;
        lock_acquire(&s->lock);
        st->mapped += s->st.mapped;
        st->cached += s->cached_bytes;
        st->cache_hits += s->st.cache_hits;
        st->mremaps += s->st.mremaps;
        st->purges += s->st.purges;
        st->purged_bytes += s->st.purged_bytes;
        st->reserved += s->st.reserved;
        st->placed += s->st.placed;
        lock_release(&s->lock);
    }
    st->allocs = atomic_load_explicit(&counts.allocs, memory_order_relaxed);
    st->bytes = atomic_load_explicit(&counts.bytes, memory_order_relaxed);
    st->frees = atomic_load_explicit(&counts.frees, memory_order_relaxed);
    st->live_bytes = atomic_load_explicit(&counts.live_bytes, memory_order_relaxed);
}

/* the shards that were ever used (and the first, always); none reserved
 * yet: the others' pages are left unread (a report every second from
 * folio top would fault them in) */
void huge_visit_locks(lock_visit_fn *fn, void *ctx) {
    bool any = atomic_load_explicit(&shards_in_use, memory_order_relaxed) != 0;
    for (struct shard *s = shards; s < shards + (any ? HUGE_SHARDS : 1); s++) {
        struct lock_stat ls;
        lock_stat_read(&s->lock, &ls);
        if (s == shards || ls.acquired || ls.contended) fn(ctx, "huge", s - shards, &s->lock);
    }
}

/* fork: every shard's lock, in address order (one rank) */
void huge_lock_all(void) {
    for (struct shard *s = shards; s < shards + HUGE_SHARDS; s++) lock_acquire(&s->lock);
}
void huge_unlock_all(bool child) {
    for (struct shard *s = shards + HUGE_SHARDS; s-- > shards;) {
        if (child) lock_reset(&s->lock);
        else lock_release(&s->lock);
    }
}

