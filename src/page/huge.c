/* huge: blocks above LARGE_MAX, each its own 2 MiB-aligned mapping.
 *
 * Invariants, under huge_lock:
 *  - every chunk of an extent's mapping has a pagemap entry pointing to its
 *    descriptor (tagged PAGEMAP_HUGE_TAG), from mapping to unmapping, so
 *    free() finds it without a lock and a free of a cached extent is seen as
 *    a double free;
 *  - freed extents stay mapped on the cache list (newest first) while
 *    cached_bytes <= huge_cache_mib; the purger madvises those free for
 *    longer than the delay, and a reuse of a purged extent needs no clearing;
 *  - realloc moves or resizes an extent with mremap, never by copying, but
 *    for a kernel that places a moved extent off the 2 MiB grid under
 *    address space pressure (move_anywhere);
 *  - a mapping that fails gives address space back (as_reclaim, outside the
 *    lock) and is retried once before the caller sees NULL. */
#include <errno.h>
#include <string.h>

#include "page.h"

/* huge blocks handed out and freed; live_bytes is net (what is handed out
 * now, by mapping size) */
static struct {
    _Atomic uint64_t allocs, bytes, frees, live_bytes;
} counts;

enum { HUGE_USED = 1, HUGE_CACHED = 2 };

struct huge {
    char *base;
    size_t map_size;
    size_t size; /* bytes asked for (page rounded) */
    uint8_t state;
    bool zeroed;
    uint64_t freed_at;
    struct huge *next, *prev;
};

static lock_t huge_lock = LOCK_INIT(LOCK_RANK_HUGE);
static struct huge *cache_head, *cache_tail, *desc_pool;
static size_t cached_bytes;
static _Atomic size_t dirty_cached_bytes; /* cached and not yet purged */
static struct huge_stats hst;

/* Enter (on) or clear the pagemap entries of [base, base+size).  Clearing
 * cannot fail; entering fails (false) only when a pagemap leaf cannot be
 * had, and then leaves some entries unset. */
static bool register_range(struct huge *h, char *base, size_t size, bool on) {
    bool ok = true;
    for (size_t off = 0; off < size; off += CHUNK_SIZE)
        ok &= pagemap_set((uintptr_t)(base + off), on ? (uintptr_t)h | PAGEMAP_HUGE_TAG : 0);
    return ok;
}

static void cache_unlink(struct huge *h) {
    if (h->prev) h->prev->next = h->next;
    else cache_head = h->next;
    if (h->next) h->next->prev = h->prev;
    else cache_tail = h->prev;
    cached_bytes -= h->map_size;
}


static void desc_free(struct huge *h) {
    h->state = 0;
    h->next = desc_pool;
    desc_pool = h;
}

/* Unmap an extent (lock held). */
static void extent_release(struct huge *h) {
    register_range(h, h->base, h->map_size, false);
    os_release(h->base, h->map_size);
    hst.mapped -= h->map_size;
    desc_free(h);
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* A cached extent of map bytes, or a new mapping with its descriptor and
 * pagemap entries; NULL when the kernel or the metadata refuses. */
static struct huge *extent_get(size_t map, size_t align) {
    struct huge *h = NULL;
    lock_acquire(&huge_lock);
    if (align <= CHUNK_SIZE) {
        for (struct huge *c = cache_head; c; c = c->next)
            if (c->map_size >= map && c->map_size - map <= map / 4 && (!h || c->map_size < h->map_size))
                h = c;
    }
    if (h) {
        cache_unlink(h);
        hst.cache_hits++;
        if (!h->zeroed) atomic_fetch_sub(&dirty_cached_bytes, h->map_size);
    }
    lock_release(&huge_lock);
    if (h) return h;
    char *base = os_reserve(map, align > CHUNK_SIZE ? align : CHUNK_SIZE);
    if (!base) return NULL;
    lock_acquire(&huge_lock);
    h = desc_pool;
    if (h) desc_pool = h->next;
    lock_release(&huge_lock);
    if (!h && !(h = meta_alloc(sizeof *h))) {
        os_release(base, map);
        return NULL;
    }
    h->base = base;
    h->map_size = map;
    h->zeroed = true;
    if (!register_range(h, base, map, true)) {
        register_range(h, base, map, false);
        os_release(base, map);
        lock_acquire(&huge_lock);
        desc_free(h);
        lock_release(&huge_lock);
        return NULL;
    }
    lock_acquire(&huge_lock);
    hst.mapped += map;
    lock_release(&huge_lock);
    return h;
}

void *huge_alloc(size_t n, size_t align, bool zero) {
    if (n > PTRDIFF_MAX - 2 * CHUNK_SIZE || align > ((size_t)1 << 40)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t size = round_up(n, PAGE_SIZE);
    size_t map = round_up(size, CHUNK_SIZE);
    struct huge *h = extent_get(map, align);
    if (!h) { /* a mapping failed: give address space back, retry once */
        as_reclaim();
        h = extent_get(map, align);
    }
    if (!h) {
        errno = ENOMEM;
        return NULL;
    }
    h->size = size;
    h->state = HUGE_USED;
    h->next = h->prev = NULL;
    if (zero) { /* hot or cold from how long ago the cached extent was freed */
        if (h->zeroed) clear_zero_skipped(size);
        else clear_hint(h->base, size, FOLIO_CLEAR_TOUCH | clear_age_hint(h->freed_at));
    }
    h->zeroed = false;
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
    h->state = HUGE_CACHED;
    atomic_fetch_sub_explicit(&counts.live_bytes, h->map_size, memory_order_relaxed);
    h->zeroed = false;
    h->freed_at = os_now_ms();
    h->prev = NULL;
    h->next = cache_head;
    if (cache_head) cache_head->prev = h;
    else cache_tail = h;
    cache_head = h;
    cached_bytes += h->map_size;
    atomic_fetch_add(&dirty_cached_bytes, h->map_size);
    while (cached_bytes > ((size_t)opt.huge_cache_mib << 20) && cache_tail) {
        struct huge *old = cache_tail;
        cache_unlink(old);
        if (!old->zeroed) atomic_fetch_sub(&dirty_cached_bytes, old->map_size);
        extent_release(old);
    }
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

/* Move the extent to wherever the kernel finds room for map + one chunk:
 * mremap without a destination counts only the growth against RLIMIT_AS,
 * where a reserved destination needs the old and the new size at once.
 * The spare chunk makes room to align: the kernel aligns anonymous
 * mappings of 2 MiB multiples (then the spare is cut off the tail); else the
 * contents are moved down to the next 2 MiB boundary with memmove, the one
 * copy a huge realloc makes, and only under address space pressure.  Lock
 * held; the pagemap leaves the new range needs are held in advance. */
static char *move_anywhere(struct huge *h, size_t map) {
    size_t room = map + CHUNK_SIZE, old = h->map_size;
    if (map > ((size_t)1 << (CHUNK_SHIFT + PAGEMAP_LEAF_BITS)) || !pagemap_spare_ensure()) return NULL;
    register_range(h, h->base, old, false); /* before the old range can be anyone's */
    char *r = os_move(h->base, old, room);
    if (!r) {
        register_range(h, h->base, old, true); /* its leaves exist */
        return NULL;
    }
    char *a = huge_fit_grid(r, room, old, map);
    register_range(h, a, map, true); /* the spare leaves cover it */
    return a;
}

/* Grow the extent to map bytes without copying when the kernel allows:
 * in place, else moved onto a reserved aligned range, else anywhere. */
static char *grow(struct huge *h, size_t map) {
    char *r = os_remap(h->base, h->map_size, map, NULL);
    if (r) {
        register_range(h, r, map, true); /* an unset entry only hides an interior pointer */
        return r;
    }
    char *dst = pagemap_spare_ensure() ? os_reserve(map, CHUNK_SIZE) : NULL;
    if (dst) {
        register_range(h, h->base, h->map_size, false);
        r = os_remap(h->base, h->map_size, map, dst);
        if (r) {
            register_range(h, r, map, true);
            return r;
        }
        register_range(h, h->base, h->map_size, true);
        os_release(dst, map);
    }
    return move_anywhere(h, map);
}

/* Unlocked: only a call racing with a free of the same block (a program
 * bug) can see the state change. */
enum fault huge_check(const struct huge *h, const void *p) {
    if (p != h->base) return FAULT_INVALID;
    return __atomic_load_n(&h->state, __ATOMIC_RELAXED) == HUGE_USED ? FAULT_NONE : FAULT_FREED;
}

/* A live extent's mapping becomes map bytes (resized or moved): its usable
 * size, the live bytes it is counted for. */
static void resize_map(struct huge *h, size_t map) {
    atomic_fetch_add_explicit(&counts.live_bytes, map - h->map_size, memory_order_relaxed);
    h->map_size = map;
}

/* Resize without copying: shrink or grow in place, else move the pages to a
 * new aligned range with mremap.  NULL when the kernel refuses even after
 * address space was given back (the caller then copies). */
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
        register_range(h, h->base + map, h->map_size - map, false);
        if (os_remap(h->base, h->map_size, map, NULL)) {
            hst.mapped -= h->map_size - map;
            resize_map(h, map);
        } else {
            register_range(h, h->base + map, h->map_size - map, true);
        }
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
        hst.mremaps++;
        hst.mapped += map - h->map_size;
        h->base = r;
        resize_map(h, map);
        h->size = size;
    }
    lock_release(&huge_lock);
    return r;
}

/* Purge cached extents free for longer than the delay (all: every cached
 * extent, and unmap them). */
size_t huge_purge(bool all) {
    uint64_t now = os_now_ms();
    size_t done = 0;
    lock_acquire(&huge_lock);
    struct huge *h = cache_tail;
    while (h) {
        struct huge *prev = h->prev;
        if (all) {
            done += h->map_size;
            if (!h->zeroed) atomic_fetch_sub(&dirty_cached_bytes, h->map_size);
            cache_unlink(h);
            extent_release(h);
        } else if (!h->zeroed && h->freed_at + (uint64_t)opt.purge_delay_ms <= now) {
            os_purge(h->base, h->map_size);
            h->zeroed = true;
            atomic_fetch_sub(&dirty_cached_bytes, h->map_size);
            hst.purges++;
            hst.purged_bytes += h->map_size;
            done += h->map_size;
        }
        h = prev;
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
