/* malloc: the exported malloc family and mallinfo.
 *
 * Invariants:
 *  - every exported call works before folio's constructor has run (first
 *    call initialises; initialisation never allocates) and inside dlsym;
 *  - sizes above PTRDIFF_MAX and overflowing products fail with ENOMEM;
 *  - a pointer that is no live block's start ends the process with a
 *    message naming the call, the fault and the pointer: "double free" (free)
 *    or "freed pointer" (realloc, malloc_usable_size) where a freed block
 *    was, else "invalid pointer";
 *  - the maintenance tick (api_tick) runs after a slow path took or gave
 *    back pages, with no folio lock held. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api_layer.h"

/* ---- the tiers ---- */

/* growable: see large_alloc */
static void *large_block(size_t n, size_t align, bool zero, bool growable) {
    struct span *s = NULL;
    if (!growable && align <= PAGE_SIZE && (s = heap_big_get(large_pages(n))))
        large_reuse(s, n, zero);
    else
        s = large_alloc(n, align, zero, growable);
    if (unlikely(!s)) return NULL;
    heap_count_large(1, n, 0, s->npages);
    /* it grew the heap past the dirty bound (an option, off by default: no
     * shared line read then) */
    if (unlikely(opt.purge_dirty_ratio) && zone_over_bound_pending()) api_tick();
    else purge_maybe_start_thread();
    return s->start;
}

void *api_big_alloc(size_t n, size_t align, bool zero) {
    if (unlikely(n > PTRDIFF_MAX)) {
        errno = ENOMEM;
        return NULL;
    }
    folio_init();
    if (align <= MIN_ALIGN && dense_wants(n)) {
        void *p = dense_alloc(n);
        if (p) {
            if (zero) memset(p, 0, n);
            return p;
        }
    }
    if (n <= LARGE_MAX && align <= CHUNK_SIZE) return large_block(n, align, zero, false);
    return huge_alloc(n, align, zero);
}

/* The small tier's miss from slabs only (an aligned object: a slab of a
 * class that is a multiple of the alignment has it; the dense heap's
 * blocks are aligned to 16 bytes only). */
__attribute__((noinline)) static void *api_small_alloc_slab(size_t n) {
    folio_init();
    bool need_pages = false;
    void *p = small_alloc_slow(n, false, &need_pages);
    if (likely(!need_pages)) return p;
    api_tick(); /* before the page heap is asked for a new slab */
    return small_alloc_slow(n, true, &need_pages);
}

/* The small tier's miss: a thread's first call (initialisation), an empty
 * free list, a new slab; and every malloc of a size the dense heap still
 * serves (its list stays empty). */
__attribute__((noinline)) void *api_small_alloc_slow(size_t n) {
    folio_init();
    if (dense_wants(n)) {
        void *p = dense_alloc(n);
        if (p) return p;
    }
    return api_small_alloc_slab(n);
}

/* What p is: a slab object, a large block or a huge extent.  Arena
 * pointers are found by span_lookup; only the others (huge extents, NULL,
 * foreign pointers) read the pagemap. */
enum kind { NOT_OURS, SMALL, LARGE, HUGE, DENSE };
static inline enum kind classify_span(void *p, struct span *s, struct span **sp, struct huge **hp) {
    uintptr_t a = (uintptr_t)p;
    if (likely(s != NULL)) {
        *sp = s;
        if (likely(span_kind(s) == SPAN_SLAB)) return SMALL;
        unsigned k = span_kind(s);
        return k == SPAN_LARGE ? LARGE : k == SPAN_DENSE ? DENSE : NOT_OURS;
    }
    uintptr_t e = pagemap_get(a);
    if (e & PAGEMAP_HUGE_TAG) {
        *hp = (struct huge *)(e & ~(uintptr_t)PAGEMAP_HUGE_TAG);
        return HUGE;
    }
    return NOT_OURS;
}
static inline enum kind classify(void *p, struct span **sp, struct huge **hp) {
    return classify_span(p, span_lookup((uintptr_t)p), sp, hp);
}

/* ---- pointers that are no live block ---- */

/* p, which is no live block's start, points where a block folio handed out
 * was: an object boundary of an empty slab kept in its heap's cache (kind
 * SPAN_TAKEN, pages still mapped to it), or a page-aligned address whose
 * page is free (a zone block's head, or a page that no live large block
 * covers: pageset-held pages and the rest of zone blocks map to nothing).
 * Only for choosing the message: reads without locks. */
static bool was_freed(const void *p) {
    uintptr_t a = (uintptr_t)p;
    if (!arena_owns(a)) return false;
    struct chunk *c = chunk_of(a);
    /* a chunk given back to the kernel: as foreign as any address */
    if (arena_head_of(a)->state[(a >> CHUNK_SHIFT) & (ARENA_CHUNKS - 1)] != CHUNK_IN_ZONE) return false;
    struct span *s = span_lookup(a);
    if (s) {
        if (span_kind(s) == SPAN_TAKEN)
            return s->obj_size && (a - (uintptr_t)s->start) % s->obj_size == 0;
        return span_kind(s) == SPAN_ZONE_FREE && (a & (PAGE_SIZE - 1)) == 0;
    }
    if (a & (PAGE_SIZE - 1)) return false;
    uint32_t page = (uint32_t)((a >> PAGE_SHIFT) & (CHUNK_PAGES - 1));
    for (uint32_t i = page; i-- > 0;) { /* the nearest mapped page before: does its span cover p? */
        struct span *b = atomic_load_explicit(&c->span_of[i], memory_order_acquire);
        if (b) return span_kind(b) != SPAN_LARGE || b->page_idx + b->npages <= page;
    }
    return true;
}

enum call { CALL_FREE, CALL_REALLOC, CALL_USABLE };

/* End the process naming the call and the fault (f: FAULT_INVALID or
 * FAULT_FREED) as glibc does. */
static _Noreturn void bad_pointer(enum call call, enum fault f, const void *p) {
    static const char *const msg[3][2] = {
        {"free(): invalid pointer", "free(): double free"},
        {"realloc(): invalid pointer", "realloc(): freed pointer"},
        {"malloc_usable_size(): invalid pointer", "malloc_usable_size(): freed pointer"},
    };
    os_fatal_ptr(msg[call][f == FAULT_FREED], p);
}

/* p is in no live block. */
static _Noreturn void not_a_block(enum call call, const void *p) {
    bad_pointer(call, was_freed(p) ? FAULT_FREED : FAULT_INVALID, p);
}

/* What is wrong with p, a pointer into a live slab. */
static enum fault small_check(const struct span *s, const void *p) {
    if (unlikely(!small_is_object_start(s, p))) return FAULT_INVALID;
    return unlikely(small_is_freed(p)) ? FAULT_FREED : FAULT_NONE;
}

/* ---- the standard API ---- */

EXPORT void *API(malloc)(size_t n) {
    if (likely(n <= SMALL_MAX)) return api_small_alloc(n);
    return api_big_alloc(n, MIN_ALIGN, false);
}

/* A free's push found its bin's list past its bound: the object layer
 * flushes half of it, and the tick runs when that retired a slab. */
__attribute__((noinline)) static void api_small_free_slow(const struct span *s) {
    if (small_free_slow(s)) api_tick();
}

/* small_free_mapped's other results: a fault (-1), or a push that asks for
 * the slow path (1); the span is looked up only now. */
__attribute__((noinline)) static void free_mapped_slow(void *p, int r) {
    struct span *s = span_lookup((uintptr_t)p);
    if (r < 0) slab_free_fault(s, p);
    else api_small_free_slow(s);
}

/* The large block s (at p) is freed: kept by this thread, else to the page
 * heap; merged: straight to the buddy lists (large_free_merged). */
static void large_block_free(struct span *s, void *p, bool merged) {
    heap_count_large(0, 0, 1, -(uint64_t)s->npages); /* s belongs to the page heap once freed */
    if (merged) {
        large_free_merged(s, p);
    } else {
        large_unmap(s, p);
        if (heap_big_put(s)) return; /* kept by this thread: no page heap, no tick */
        page_free(s);
    }
    api_tick();
}

/* Everything but a slab object (p not NULL: free returned first): large
 * and huge blocks, dense blocks, bad pointers.  Not inlined into free, and
 * not marked noreturn, so that free calls it with a jump and needs no stack
 * frame of its own. */
__attribute__((noinline)) static void free_other(void *p, struct span *looked_up) {
    struct span *s = NULL;
    struct huge *h = NULL;
    switch (classify_span(p, looked_up, &s, &h)) {
    case SMALL: /* free() found that another heap (or none) owns the slab */
        slab_remote_free(s, p);
        return;
    case LARGE:
        large_block_free(s, p, false);
        return;
    case HUGE:
        huge_free(h, p);
        api_tick();
        return;
    case DENSE: {
        enum fault f = dense_free(s, p);
        if (unlikely(f)) bad_pointer(CALL_FREE, f, p);
        return;
    }
    default: not_a_block(CALL_FREE, p);
    }
}

/* The fast path: a slab object of the calling thread's (only slabs have an
 * owner, and tl_heap is never NULL). */
EXPORT void API(free)(void *p) {
    uintptr_t a = (uintptr_t)p;
    struct heap *h = tl_heap;
    /* p lies in the arena of the heap's last new slab (not for p == NULL:
     * no arena at 0), so its word is mapped (for a heap with no slab, no
     * canonical address is near the hint: obj.h, ARENA_HINT_NONE).  Elsewhere (another thread's object or
     * arena) the span says whose it is, with no word read first.  One
     * subtraction tests the arena and gives the word's index. */
    uintptr_t base = h->arena_hint, off = a - base;
    if (likely(off < ARENA_ALIGN)) {
        uint32_t word = atomic_load_explicit(arena_objmap_at(base, off), memory_order_relaxed);
        if (likely((uint16_t)word == h->objmap_id)) {
            int r = small_free_mapped(h, word, p);
            if (unlikely(r)) free_mapped_slow(p, r);
            return;
        }
    }
    /* free(NULL), before span_lookup: its entry for the first 256 MiB of the
     * address space (never an arena's) is a page no other lookup reads, and
     * its first read was a fault in every process */
    if (unlikely(!p)) return;
    struct span *s = span_lookup(a);
    if (likely(s != NULL && atomic_load_explicit(&s->owner, memory_order_relaxed) == h)) {
        int r = small_free_local(h, s, p);
        if (unlikely(r)) api_small_free_slow(s); /* a jump */
        return;
    }
    free_other(p, s);
}

EXPORT void *API(calloc)(size_t a, size_t b) {
    size_t n;
    if (unlikely(__builtin_mul_overflow(a, b, &n))) {
        errno = ENOMEM;
        return NULL;
    }
    if (likely(n <= SMALL_MAX)) {
        void *p = api_small_alloc(n);
        if (likely(p)) memset(p, 0, n);
        return p;
    }
    return api_big_alloc(n, MIN_ALIGN, true);
}

EXPORT size_t API(malloc_usable_size)(void *p) {
    if (!p) return 0;
    struct span *s = NULL;
    struct huge *h = NULL;
    enum fault f = FAULT_NONE;
    switch (classify(p, &s, &h)) {
    case SMALL:
        if (!(f = small_check(s, p))) return s->obj_size;
        break;
    case LARGE:
        if (p == s->start) return (size_t)s->npages << PAGE_SHIFT;
        f = FAULT_INVALID;
        break;
    case HUGE:
        if (!(f = huge_check(h, p))) return huge_usable(h, p);
        break;
    case DENSE: {
        size_t usable = dense_usable(s, p, &f);
        if (!f) return usable;
        break;
    }
    default: not_a_block(CALL_USABLE, p);
    }
    bad_pointer(CALL_USABLE, f, p);
}

EXPORT void *API(realloc)(void *p, size_t n) {
    if (!p) return API(malloc)(n);
    if (n == 0) {
        API(free)(p);
        return NULL;
    }
    struct span *s = NULL, *large = NULL;
    struct huge *h = NULL;
    size_t usable, n_room = n; /* n_room: what a block that moves is asked for */
    switch (classify(p, &s, &h)) {
    case SMALL: {
        enum fault f = small_check(s, p);
        if (unlikely(f)) bad_pointer(CALL_REALLOC, f, p);
        usable = s->obj_size;
        if (n <= usable && n > usable / 2) return p;
        break;
    }
    case LARGE:
        if (p != s->start) bad_pointer(CALL_REALLOC, FAULT_INVALID, p);
        large = s;
        usable = (size_t)s->npages << PAGE_SHIFT;
        if (n > SMALL_MAX && n <= LARGE_MAX) {
            /* in place: give back the tail, or take the free pages after it */
            size_t want = (n + PAGE_SIZE - 1) >> PAGE_SHIFT, had = s->npages;
            if (want == had || (want < had && large_pages(n) == had)) return p; /* n's class is the block's */
            if (large_resize(s, want)) {
                heap_count_large(0, 0, 0, (uint64_t)want - had);
                return p;
            }
        }
        break;
    case HUGE: {
        enum fault f = huge_check(h, p);
        if (unlikely(f)) bad_pointer(CALL_REALLOC, f, p);
        usable = huge_usable(h, p);
        if (n > LARGE_MAX) {
            void *r = huge_realloc(h, p, n);
            if (r) return r;
        }
        break;
    }
    case DENSE: {
        /* a block that grows takes the room its size class would have (a
         * slab object grows within its class), so that a buffer grown step
         * by step moves as seldom as it would from slabs; one lock hold */
        size_t grow_to = n <= SMALL_MAX ? classes[size_class(n)].size : n;
        bool in_place;
        enum fault f = dense_realloc(s, p, n, grow_to, &usable, &in_place);
        if (unlikely(f)) bad_pointer(CALL_REALLOC, f, p);
        if (in_place) return p;
        if (n > usable) n_room = grow_to;
        break;
    }
    default: not_a_block(CALL_REALLOC, p);
    }
    /* a block that grows past the slabs' sizes may grow again: the page
     * heap's growable placement (in place, into the pages after it) */
    bool grow = n > usable && n > SMALL_MAX && n <= LARGE_MAX;
    void *q = grow ? large_block(n, 0, false, true) : API(malloc)(n_room);
    if (!q) return NULL;
    memcpy(q, p, n < usable ? n : usable);
    if (grow && large) large_block_free(large, p, true); /* the block a growing realloc leaves */
    else API(free)(p);
    return q;
}

EXPORT void *API(reallocarray)(void *p, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return API(realloc)(p, n);
}

/* align: a power of two. */
void *api_aligned(size_t align, size_t n) {
    if (align <= MIN_ALIGN) return API(malloc)(n);
    if (n <= SMALL_MAX && align <= PAGE_SIZE) {
        /* a class whose size is a multiple of align has aligned objects:
         * slabs start on page boundaries */
        for (unsigned c = size_class(n ? n : 1); c < NCLASSES; c++)
            if (classes[c].size % align == 0) return small_alloc_fast(classes[c].size, api_small_alloc_slab);
    }
    return api_big_alloc(n ? n : 1, align, false);
}

EXPORT void *API(aligned_alloc)(size_t align, size_t n) {
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    folio_init();
    return api_aligned(align, n);
}

EXPORT int API(posix_memalign)(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    folio_init();
    int saved = errno;
    void *p = api_aligned(align, n);
    if (!p) {
        errno = saved;
        return ENOMEM;
    }
    *out = p;
    return 0;
}

EXPORT void *API(memalign)(size_t align, size_t n) {
    if (align > ((size_t)1 << 62)) {
        errno = EINVAL;
        return NULL;
    }
    if (align & (align - 1)) align = (size_t)1 << (64 - __builtin_clzll(align));
    folio_init();
    return api_aligned(align, n);
}

EXPORT void *API(valloc)(size_t n) {
    folio_init();
    return api_aligned(PAGE_SIZE, n);
}

EXPORT void *API(pvalloc)(size_t n) {
    folio_init();
    if (n > PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    n = n ? (n + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1) : PAGE_SIZE;
    return api_aligned(PAGE_SIZE, n);
}

EXPORT void API(free_sized)(void *p, size_t n) {
    (void)n;
    API(free)(p);
}

EXPORT void API(free_aligned_sized)(void *p, size_t align, size_t n) {
    (void)align;
    (void)n;
    API(free)(p);
}

EXPORT int API(malloc_trim)(size_t pad) {
    (void)pad;
    folio_init();
    heap_trim_current();
    slab_reclaim_abandoned();
    return page_trim() > 0;
}

static void fill_info(size_t *arena, size_t *ordblks, size_t *hblks, size_t *hblkhd,
                      size_t *uord, size_t *ford) {
    folio_init();
    struct zone_stats zs;
    struct huge_stats hs;
    struct pageset_stats pcp;
    zone_stats(&zs);
    huge_stats(&hs);
    pageset_totals(&pcp);
    size_t held = (size_t)pcp.count;
    size_t zone_bytes = (size_t)zs.chunks * CHUNK_SIZE;
    size_t free_bytes = ((size_t)zs.free_pages + held) << PAGE_SHIFT;
    *arena = zone_bytes;
    *ordblks = (size_t)zs.free_pages;
    *hblks = (size_t)(hs.allocs - hs.frees);
    *hblkhd = hs.mapped - hs.cached;
    *uord = zone_bytes - free_bytes - ((size_t)zs.meta_pages << PAGE_SHIFT) + *hblkhd;
    *ford = free_bytes + hs.cached;
}

EXPORT struct mallinfo2 API(mallinfo2)(void) {
    struct mallinfo2 m;
    memset(&m, 0, sizeof m);
    fill_info(&m.arena, &m.ordblks, &m.hblks, &m.hblkhd, &m.uordblks, &m.fordblks);
    return m;
}

#ifndef FOLIO_PREFIX
EXPORT struct mallinfo mallinfo(void) {
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo m;
    memset(&m, 0, sizeof m);
    m.arena = (int)m2.arena;
    m.ordblks = (int)m2.ordblks;
    m.hblks = (int)m2.hblks;
    m.hblkhd = (int)m2.hblkhd;
    m.uordblks = (int)m2.uordblks;
    m.fordblks = (int)m2.fordblks;
    return m;
}

/* glibc's own names of the family: code that calls __libc_malloc to reach
 * "the real malloc" (a hook, a library that wraps malloc) gets folio's,
 * so a block it frees with free (or one it frees with __libc_free) is
 * folio's: glibc's heap would hand out blocks folio's free refuses. */
#define LIBC_NAME(name, target) EXPORT __typeof__(target) name __attribute__((alias(#target), copy(target)))
LIBC_NAME(__libc_malloc, malloc);
LIBC_NAME(__libc_calloc, calloc);
LIBC_NAME(__libc_realloc, realloc);
LIBC_NAME(__libc_free, free);
LIBC_NAME(__libc_memalign, memalign);
LIBC_NAME(__libc_valloc, valloc);
LIBC_NAME(__libc_pvalloc, pvalloc);
#endif

