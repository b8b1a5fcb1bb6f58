/* huge: blocks above LARGE_MAX, carved from address space reserved once.
 *
 * The kernel's mmap lock is taken for writing by every mmap, munmap and
 * mremap; a block that is mapped when allocated and unmapped when freed
 * makes every thread's page faults wait.  So huge blocks are ranges of a
 * few large reservations (regions), which stay mapped: a freed block's
 * memory goes back with MADV_DONTNEED (the read side of the lock), its
 * address space stays for the next block of any size.
 *
 * Invariants, under huge_lock:
 *  - the ranges of a region tile it, linked by address (aprev/anext; a
 *    neighbour at another address, or NULL, is not adjacent: a range given
 *    back to the kernel or moved away by mremap leaves a hole there); each
 *    is USED (a live block), CACHED (freed, memory still resident: on the
 *    cache list, newest first) or FREE (known zero: never touched, or
 *    purged; on the free list);
 *  - every chunk of every range has a pagemap entry pointing to its
 *    descriptor (tagged PAGEMAP_HUGE_TAG), so free() finds a block without
 *    a lock, and a free of a block that is CACHED is seen as a double free;
 *  - CACHED ranges are never merged (a cached block is reused whole, hot,
 *    by a block of about its size); a range becomes FREE when purged, and
 *    FREE neighbours merge at once;
 *  - cached bytes stay within FOLIO_HUGE_CACHE_MIB: past it the oldest are
 *    purged; the purger purges those free for longer than the delay;
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

enum { HUGE_USED = 1, HUGE_CACHED = 2, HUGE_FREE = 3 };

/* The first reservation's size; each next one doubles what is reserved,
 * up to REGION_MAX, and is at least the block that needs it. */
#define REGION_MIN ((size_t)64 << 20)
#define REGION_MAX ((size_t)4 << 30)

struct huge {
    char *base;
    size_t map_size;
    size_t size; /* USED: bytes asked for (page rounded) */
    uint8_t state;
    uint64_t freed_at;           /* CACHED: when it was freed */
    struct huge *next, *prev;    /* the cache list or the free list */
    struct huge *anext, *aprev;  /* address neighbours in its region */
};

static lock_t huge_lock = LOCK_INIT(LOCK_RANK_HUGE);
static struct huge *cache_head, *cache_tail, *free_head, *desc_pool;
static size_t cached_bytes;
static _Atomic size_t dirty_cached_bytes; /* cached_bytes, for readers without the lock */
static struct huge_stats hst;             /* mapped: USED + CACHED bytes */

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
static struct huge *desc_get(void) {
    struct huge *h = desc_pool;
    if (h) desc_pool = h->next;
    else h = meta_alloc(sizeof *h);
    if (h) memset(h, 0, sizeof *h);
    return h;
}
static void desc_put(struct huge *h) {
    h->state = 0;
    h->next = desc_pool;
    desc_pool = h;
}

/* ---- the cache and free lists (lock held) ---- */
static void list_unlink(struct huge *h) {
    struct huge **head = h->state == HUGE_CACHED ? &cache_head : &free_head;
    if (h->prev) h->prev->next = h->next;
    else *head = h->next;
    if (h->next) h->next->prev = h->prev;
    else if (h->state == HUGE_CACHED) cache_tail = h->prev;
    if (h->state == HUGE_CACHED) {
        cached_bytes -= h->map_size;
        hst.mapped -= h->map_size;
        atomic_store_explicit(&dirty_cached_bytes, cached_bytes, memory_order_relaxed);
    }
    h->next = h->prev = NULL;
}
static void list_push(struct huge *h, uint8_t state) {
    h->state = state;
    h->prev = NULL;
    if (state == HUGE_CACHED) {
        h->next = cache_head;
        if (cache_head) cache_head->prev = h;
        else cache_tail = h;
        cache_head = h;
        cached_bytes += h->map_size;
        hst.mapped += h->map_size;
        atomic_store_explicit(&dirty_cached_bytes, cached_bytes, memory_order_relaxed);
    } else {
        h->next = free_head;
        if (free_head) free_head->prev = h;
        free_head = h;
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
    desc_put(b);
}

/* h, off every list, becomes FREE and merges with FREE neighbours;
 * returns the merged range. */
static struct huge *make_free(struct huge *h) {
    struct huge *p = h->aprev, *n = h->anext;
    if (adjacent(h, n) && n->state == HUGE_FREE) {
        list_unlink(n);
        absorb_next(h, n);
    }
    if (adjacent(p, h) && p->state == HUGE_FREE) {
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
    hst.purges++;
    hst.purged_bytes += h->map_size;
    return make_free(h);
}

/* Cut [h->base + off, + map) out of the free range h (off its list): the
 * head and tail left over keep h's state; returns the cut range, off every
 * list.  NULL when a descriptor cannot be had (h is back on its list). */
static struct huge *cut(struct huge *h, size_t off, size_t map) {
    uint8_t state = h->state;
    size_t tail = h->map_size - off - map;
    struct huge *hd = NULL, *tl = NULL;
    if ((off && !(hd = desc_get())) || (tail && !(tl = desc_get()))) {
        if (hd) desc_put(hd);
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

/* The smallest range of the list that fits, no larger than map + slack. */
static struct huge *best_fit(struct huge *list, size_t map, size_t align, size_t slack, size_t *off) {
    struct huge *best = NULL;
    for (struct huge *c = list; c; c = c->next) {
        size_t o = fit(c, map, align);
        if (o != (size_t)-1 && c->map_size - map <= slack && (!best || c->map_size < best->map_size)) {
            best = c;
            *off = o;
        }
    }
    return best;
}

/* A new region of at least map bytes, all FREE. */
static bool region_add(size_t map, size_t align) {
    size_t want = hst.reserved > REGION_MIN ? hst.reserved : REGION_MIN;
    if (want > REGION_MAX) want = REGION_MAX;
    want = round_up(want, CHUNK_SIZE);
    if (align < CHUNK_SIZE) align = CHUNK_SIZE;
    char *base = NULL;
    size_t size = want;
    if (want >= map + align) base = os_reserve(size, CHUNK_SIZE); /* room to align inside */
    if (!base) base = os_reserve(size = map, align);                /* address space is short */
    if (!base) return false;
    struct huge *h = desc_get();
    if (!h || !pagemap_spare_ensure() || !register_range(h, base, size)) {
        register_range(NULL, base, size);
        os_release(base, size);
        if (h) desc_put(h);
        return false;
    }
    h->base = base;
    h->map_size = size;
    hst.reserved += size;
    list_push(h, HUGE_FREE);
    return true;
}

/* A range of map bytes at an align boundary, USED, with its pagemap
 * entries; *zeroed says whether its memory is known zero, *freed_at when a
 * reused range was freed.  NULL when the kernel or the metadata refuses
 * (lock held). */
static struct huge *take(size_t map, size_t align, bool *zeroed, uint64_t *freed_at) {
    size_t off = 0;
    struct huge *h = NULL;
    if (align <= CHUNK_SIZE) h = best_fit(cache_head, map, align, map / 4, &off); /* hot, whole */
    if (!h) h = best_fit(free_head, map, align, SIZE_MAX, &off);
    if (!h) h = best_fit(cache_head, map, align, SIZE_MAX, &off);
    while (!h && cache_tail) { /* purge the oldest until free neighbours merge into a fit */
        struct huge *m = purge_one(cache_tail);
        if ((off = fit(m, map, align)) != (size_t)-1) h = m;
    }
    if (!h) {
        if (!region_add(map, align)) return NULL;
        h = best_fit(free_head, map, align, SIZE_MAX, &off);
        if (!h) return NULL;
    }
    *zeroed = h->state == HUGE_FREE;
    *freed_at = h->freed_at;
    if (h->state == HUGE_CACHED) hst.cache_hits++;
    list_unlink(h);
    if (!(h = cut(h, off, map))) return NULL;
    h->state = HUGE_USED;
    hst.mapped += map;
    return h;
}

void *huge_alloc(size_t n, size_t align, bool zero) {
    if (n > PTRDIFF_MAX - 2 * CHUNK_SIZE || align > ((size_t)1 << 40)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t size = round_up(n, PAGE_SIZE);
    size_t map = round_up(size, CHUNK_SIZE);
    bool zeroed = false;
    uint64_t freed_at = 0;
    lock_acquire(&huge_lock);
    struct huge *h = take(map, align, &zeroed, &freed_at);
    lock_release(&huge_lock);
    if (!h) { /* a mapping failed: give address space back, retry once */
        as_reclaim();
        lock_acquire(&huge_lock);
        h = take(map, align, &zeroed, &freed_at);
        lock_release(&huge_lock);
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

void huge_free(struct huge *h, void *p) {
    if (p != h->base) os_fatal_ptr("free(): invalid pointer", p);
    lock_acquire(&huge_lock);
    if (h->state != HUGE_USED) {
        lock_release(&huge_lock);
        os_fatal_ptr("free(): double free", p);
    }
    atomic_fetch_sub_explicit(&counts.live_bytes, h->map_size, memory_order_relaxed);
    hst.mapped -= h->map_size;
    h->freed_at = os_now_ms();
    list_push(h, HUGE_CACHED);
    while (cached_bytes > ((size_t)opt.huge_cache_mib << 20) && cache_tail) purge_one(cache_tail);
    lock_release(&huge_lock);
    atomic_fetch_add_explicit(&counts.frees, 1, memory_order_relaxed);
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

/* h's range left its region (moved away by mremap): its neighbours are no
 * longer adjacent to it. */
static void addr_unlink(struct huge *h) {
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
    hst.reserved += map - old;
    addr_unlink(h);
    return a;
}

/* Grow the live block h's range to map bytes in place: the free ranges
 * that follow it (adjacent) give their front.  False when they are too
 * few.  h->map_size stays the old size for the caller's counts. */
static bool grow_in_place(struct huge *h, size_t map) {
    size_t have = h->map_size, old = h->map_size;
    for (struct huge *n = h->anext, *p = h; have < map && adjacent(p, n) && n->state != HUGE_USED;
         p = n, n = n->anext)
        have += n->map_size;
    struct huge *spare = have >= map ? desc_get() : NULL; /* the one cut below cannot fail */
    if (!spare) return false;
    desc_put(spare);
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
 * move onto a free range (mremap; its old range leaves the region), else
 * anywhere.  Lock held. */
static char *grow(struct huge *h, size_t map) {
    if (grow_in_place(h, map)) return h->base;
    bool zeroed;
    uint64_t freed_at;
    struct huge *d = take(map, CHUNK_SIZE, &zeroed, &freed_at);
    if (d) {
        register_range(NULL, h->base, h->map_size);
        if (os_remap(h->base, h->map_size, h->map_size, d->base)) {
            hst.mremaps++;
            hst.reserved -= h->map_size; /* the old range is the kernel's again */
            addr_unlink(h);
            /* h takes d's place in its region */
            h->aprev = d->aprev;
            h->anext = d->anext;
            if (d->aprev) d->aprev->anext = h;
            if (d->anext) d->anext->aprev = h;
            h->base = d->base;
            hst.mapped -= map; /* h is counted at its old size; the caller adds the growth */
            desc_put(d);
            register_range(h, h->base, map);
            return h->base;
        }
        register_range(h, h->base, h->map_size);
        hst.mapped -= d->map_size;
        d->freed_at = os_now_ms();
        list_push(d, HUGE_CACHED);
    }
    char *r = move_anywhere(h, map);
    if (r) hst.mremaps++;
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
    hst.mapped += map - h->map_size;
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
    if (map == h->map_size) {
        h->size = size;
        return p;
    }
    lock_acquire(&huge_lock);
    if (map < h->map_size) {
        size_t old = h->map_size;
        h->state = HUGE_CACHED; /* cut keeps the state for the tail */
        if (cut(h, 0, map)) {
            h->anext->freed_at = os_now_ms();
            atomic_fetch_sub_explicit(&counts.live_bytes, old - map, memory_order_relaxed);
            hst.mapped -= old - map; /* the tail was counted again as cached */
        } else {
            list_unlink(h); /* no descriptor: the block keeps its size */
        }
        h->state = HUGE_USED;
        h->size = size;
        lock_release(&huge_lock);
        return p;
    }
    char *r = grow(h, map);
    if (!r) { /* give address space back (not under the lock), retry once */
        lock_release(&huge_lock);
        as_reclaim();
        lock_acquire(&huge_lock);
        r = grow(h, map);
    }
    if (r) {
        h->base = r;
        resize_map(h, map);
        h->size = size;
    }
    lock_release(&huge_lock);
    return r;
}

/* Purge cached ranges free for longer than the delay (all: every one);
 * their address space stays.  Returns the bytes purged. */
size_t huge_purge(bool all) {
    uint64_t now = os_now_ms();
    size_t done = 0;
    lock_acquire(&huge_lock);
    while (cache_tail && (all || cache_tail->freed_at + (uint64_t)opt.purge_delay_ms <= now)) {
        done += cache_tail->map_size;
        purge_one(cache_tail);
    }
    lock_release(&huge_lock);
    return done;
}

/* Address space is short (as_reclaim): every range not in use goes back to
 * the kernel.  Returns the bytes unmapped. */
size_t huge_release(void) {
    size_t done = 0;
    lock_acquire(&huge_lock);
    while (cache_tail) purge_one(cache_tail);
    for (struct huge *h = free_head, *next; h; h = next) {
        next = h->next;
        register_range(NULL, h->base, h->map_size);
        if (!os_release(h->base, h->map_size)) {
            register_range(h, h->base, h->map_size);
            continue;
        }
        list_unlink(h);
        addr_unlink(h);
        hst.reserved -= h->map_size;
        done += h->map_size;
        desc_put(h);
    }
    lock_release(&huge_lock);
    return done;
}

size_t huge_dirty_bytes(void) { return atomic_load_explicit(&dirty_cached_bytes, memory_order_relaxed); }

void huge_stats(struct huge_stats *st) {
    lock_acquire(&huge_lock);
    *st = hst;
    st->cached = cached_bytes;
    lock_release(&huge_lock);
    st->allocs = atomic_load_explicit(&counts.allocs, memory_order_relaxed);
    st->bytes = atomic_load_explicit(&counts.bytes, memory_order_relaxed);
    st->frees = atomic_load_explicit(&counts.frees, memory_order_relaxed);
    st->live_bytes = atomic_load_explicit(&counts.live_bytes, memory_order_relaxed);
}

void huge_visit_locks(lock_visit_fn *fn, void *ctx) { fn(ctx, "huge", -1, &huge_lock); }

void huge_lock_all(void) { lock_acquire(&huge_lock); }
void huge_unlock_all(bool child) {
    if (child) lock_reset(&huge_lock);
    else lock_release(&huge_lock);
}
