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
 *  - realloc moves or resizes an extent with mremap, never by copying. */
#include <errno.h>
#include <string.h>

#include "internal.h"

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

static lock_t huge_lock;
static struct huge *cache_head, *cache_tail, *desc_pool;
static size_t cached_bytes;
static _Atomic size_t dirty_cached_bytes; /* cached and not yet purged */
static struct huge_stats hst;

static void register_range(struct huge *h, char *base, size_t size, bool on) {
    for (size_t off = 0; off < size; off += CHUNK_SIZE)
        pagemap_set((uintptr_t)(base + off), on ? (uintptr_t)h | PAGEMAP_HUGE_TAG : 0);
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

void *huge_alloc(size_t n, size_t align, bool zero) {
    if (n > PTRDIFF_MAX - 2 * CHUNK_SIZE || align > ((size_t)1 << 40)) {
        errno = ENOMEM;
        return NULL;
    }
    folio_init();
    size_t size = round_up(n, PAGE_SIZE);
    size_t map = round_up(size, CHUNK_SIZE);
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
    if (!h) {
        char *base = os_reserve(map, align > CHUNK_SIZE ? align : CHUNK_SIZE);
        if (!base) {
            huge_purge(true); /* give back the cache and retry once */
            base = os_reserve(map, align > CHUNK_SIZE ? align : CHUNK_SIZE);
        }
        if (!base) {
            errno = ENOMEM;
            return NULL;
        }
        lock_acquire(&huge_lock);
        h = desc_pool;
        if (h) desc_pool = h->next;
        lock_release(&huge_lock);
        if (!h && !(h = meta_alloc(sizeof *h))) {
            os_release(base, map);
            errno = ENOMEM;
            return NULL;
        }
        h->base = base;
        h->map_size = map;
        h->zeroed = true;
        lock_acquire(&huge_lock);
        hst.mapped += map;
        lock_release(&huge_lock);
        register_range(h, base, map, true);
    }
    h->size = size;
    h->state = HUGE_USED;
    h->next = h->prev = NULL;
    if (zero) { /* hot or cold from how long ago the cached extent was freed */
        if (h->zeroed) clear_zero_skipped(size);
        else folio_clear_hint(h->base, size, FOLIO_CLEAR_TOUCH | clear_age_hint(h->freed_at));
    }
    h->zeroed = false;
    atomic_fetch_add_explicit(&gcount.huge_allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&gcount.huge_bytes, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&gcount.huge_live_bytes, h->map_size, memory_order_relaxed);
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
    atomic_fetch_sub_explicit(&gcount.huge_live_bytes, h->map_size, memory_order_relaxed);
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
    atomic_fetch_add_explicit(&gcount.huge_frees, 1, memory_order_relaxed);
    purge_tick();
    purge_maybe_start_thread();
}

size_t huge_usable(struct huge *h, void *p) { return h->map_size - (size_t)((char *)p - h->base); }

/* Unlocked: only a call racing with a free of the same block (a program
 * bug) can see the state change. */
enum fault huge_check(const struct huge *h, const void *p) {
    if (p != h->base) return FAULT_INVALID;
    return __atomic_load_n(&h->state, __ATOMIC_RELAXED) == HUGE_USED ? FAULT_NONE : FAULT_FREED;
}

/* A live extent's mapping becomes map bytes (resized or moved): its usable
 * size, the live bytes it is counted for. */
static void resize_map(struct huge *h, size_t map) {
    atomic_fetch_add_explicit(&gcount.huge_live_bytes, map - h->map_size, memory_order_relaxed);
    h->map_size = map;
}

/* Resize without copying: shrink or grow in place, else move the pages to a
 * new aligned range with mremap.  NULL when the kernel refuses (the caller
 * then copies). */
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
    char *r = os_remap(h->base, h->map_size, map, NULL);
    if (!r) {
        char *dst = os_reserve(map, CHUNK_SIZE);
        if (dst) {
            register_range(h, h->base, h->map_size, false);
            r = os_remap(h->base, h->map_size, map, dst);
            if (!r) {
                register_range(h, h->base, h->map_size, true);
                os_release(dst, map);
            }
        }
    }
    if (r) {
        hst.mremaps++;
        hst.mapped += map - h->map_size;
        h->base = r;
        resize_map(h, map);
        h->size = size;
        register_range(h, r, map, true);
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
}

void huge_lock_all(void) { lock_acquire(&huge_lock); }
void huge_unlock_all(bool child) {
    if (child) lock_reset(&huge_lock);
    else lock_release(&huge_lock);
}
