/* override: the exported malloc family, C++ operators, initialisation,
 * fork handlers and the exit report.
 *
 * Invariants:
 *  - every exported call works before folio's constructor has run (first
 *    call initialises; initialisation never allocates) and inside dlsym;
 *  - sizes above PTRDIFF_MAX and overflowing products fail with ENOMEM;
 *  - a pointer that is no live block's start ends the process with a
 *    message naming the call, the fault and the pointer: "double free" (free)
 *    or "freed pointer" (realloc, malloc_usable_size) where a freed block
 *    was, else "invalid pointer";
 *  - fork: the prepare handler takes every folio lock in rank order, so
 *    the child starts with consistent state and can allocate. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "slab.h"

#ifdef FOLIO_PREFIX
#define API(name) folio_##name
#else
#define API(name) name
#endif

_Atomic int folio_ready;
uint64_t folio_secret;
static lock_t init_lock = LOCK_INIT(LOCK_RANK_INIT);

void folio_init(void) {
    if (likely(atomic_load_explicit(&folio_ready, memory_order_acquire))) return;
    lock_acquire(&init_lock);
    if (!atomic_load_explicit(&folio_ready, memory_order_relaxed)) {
        options_init();
        classes_init();
        folio_secret = os_random_seed();
        pageset_init();
        slab_init();
        atomic_store_explicit(&folio_ready, 1, memory_order_release);
    }
    lock_release(&init_lock);
}

/* ---- the tiers ---- */

/* growable: the block is being moved by a growing realloc, which will
 * likely grow it again; it comes from the zone, where the pages after it
 * stay free for zone_resize, not from a pageset (whose carved tail would
 * sit on the pageset's lists and force a copy on every growth). */
void *large_alloc(size_t n, size_t align, bool zero, bool growable) {
    folio_init();
    size_t npages = (n + PAGE_SIZE - 1) >> PAGE_SHIFT;
    size_t align_pages = align > PAGE_SIZE ? align >> PAGE_SHIFT : 1;
    struct span *s = growable ? zone_alloc_pages(npages ? npages : 1, align_pages)
                              : page_alloc(npages ? npages : 1, align_pages);
    if (unlikely(!s)) { /* a mapping failed: give address space back, retry once */
        as_reclaim();
        s = zone_alloc_pages(npages ? npages : 1, align_pages);
        if (!s) {
            errno = ENOMEM;
            return NULL;
        }
    }
    if (zero) { /* calloc: the caller uses the block next; a recycled block is taken as hot */
        if (s->flags & SPAN_ZEROED) clear_zero_skipped(n);
        else folio_clear_hint(s->start, n, FOLIO_CLEAR_TOUCH);
    }
    s->flags = 0;
    span_set_kind(s, SPAN_LARGE);
    span_map_pages(s, s, s->page_idx, 1);
    struct heap *h = heap_current();
    if (likely(h)) {
        h->large_allocs++;
        h->large_bytes += n;
        h->large_pages += s->npages;
    } else {
        atomic_fetch_add_explicit(&gcount.large_allocs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&gcount.large_bytes, n, memory_order_relaxed);
        atomic_fetch_add_explicit(&gcount.large_pages, s->npages, memory_order_relaxed);
    }
    purge_maybe_start_thread();
    return s->start;
}

/* Count pages of a live large block that grew (or shrank: negative, modulo
 * 2^64) in place. */
static void large_count_pages(uint64_t pages) {
    struct heap *h = heap_current();
    if (likely(h)) h->large_pages += pages;
    else atomic_fetch_add_explicit(&gcount.large_pages, pages, memory_order_relaxed);
}

void large_free(struct span *s, void *p) {
    if (unlikely(p != s->start)) os_fatal_ptr("free(): invalid pointer", p);
    span_map_pages(s, NULL, s->page_idx, 1);
    span_set_kind(s, SPAN_TAKEN);
    s->flags = 0;
    struct heap *h = heap_current();
    if (likely(h)) h->large_frees++;
    else atomic_fetch_add_explicit(&gcount.large_frees, 1, memory_order_relaxed);
    large_count_pages(-(uint64_t)s->npages);
    page_free(s);
    purge_tick();
    purge_maybe_start_thread();
}

static void *big_alloc(size_t n, size_t align, bool zero) {
    if (unlikely(n > PTRDIFF_MAX)) {
        errno = ENOMEM;
        return NULL;
    }
    if (n <= LARGE_MAX && align <= CHUNK_SIZE) return large_alloc(n, align, zero, false);
    return huge_alloc(n, align, zero);
}

/* What p is: a slab object, a large block or a huge extent.  Arena
 * pointers are found by span_lookup; only the others (huge extents, NULL,
 * foreign pointers) read the pagemap. */
enum kind { NOT_OURS, SMALL, LARGE, HUGE };
static inline enum kind classify(void *p, struct span **sp, struct huge **hp) {
    uintptr_t a = (uintptr_t)p;
    struct span *s = span_lookup(a);
    if (likely(s != NULL)) {
        *sp = s;
        if (likely(span_kind(s) == SPAN_SLAB)) return SMALL;
        return span_kind(s) == SPAN_LARGE ? LARGE : NOT_OURS;
    }
    uintptr_t e = pagemap_get(a);
    if (e & PAGEMAP_HUGE_TAG) {
        *hp = (struct huge *)(e & ~(uintptr_t)PAGEMAP_HUGE_TAG);
        return HUGE;
    }
    return NOT_OURS;
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
    if (likely(n <= 1024)) return small_alloc(n);
    if (likely(n <= SMALL_MAX)) return small_alloc(n);
    return big_alloc(n, MIN_ALIGN, false);
}

/* Everything but a slab object: NULL, large and huge blocks, bad pointers.
 * Not inlined into free, and not marked noreturn, so that free calls it
 * with a jump and needs no stack frame of its own. */
__attribute__((noinline)) static void free_other(void *p) {
    if (!p) return;
    struct span *s = NULL;
    struct huge *h = NULL;
    switch (classify(p, &s, &h)) {
    case SMALL: small_free(s, p); return;
    case LARGE: large_free(s, p); return;
    case HUGE:
        huge_free(h, p);
        purge_tick(); /* the maintenance tick runs from the API, after every lock */
        purge_maybe_start_thread();
        return;
    default: not_a_block(CALL_FREE, p);
    }
}

/* The fast path: a slab object of the calling thread's (only slabs have an
 * owner, and tl_heap is never NULL). */
EXPORT void API(free)(void *p) {
    struct span *s = span_lookup((uintptr_t)p); /* NULL for p == NULL: no arena at 0 */
    struct heap *h = tl_heap;
    if (likely(s != NULL && atomic_load_explicit(&s->owner, memory_order_relaxed) == h)) {
        small_free_local(h, s, p);
        return;
    }
    free_other(p);
}

EXPORT void *API(calloc)(size_t a, size_t b) {
    size_t n;
    if (unlikely(__builtin_mul_overflow(a, b, &n))) {
        errno = ENOMEM;
        return NULL;
    }
    if (likely(n <= SMALL_MAX)) {
        void *p = small_alloc(n);
        if (likely(p)) memset(p, 0, n);
        return p;
    }
    return big_alloc(n, MIN_ALIGN, true);
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
    struct span *s = NULL;
    struct huge *h = NULL;
    size_t usable;
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
        usable = (size_t)s->npages << PAGE_SHIFT;
        if (n > SMALL_MAX && n <= LARGE_MAX) {
            /* in place: give back the tail, or take the free pages after it */
            size_t want = (n + PAGE_SIZE - 1) >> PAGE_SHIFT, had = s->npages;
            if (want == had) return p;
            if (zone_resize(s, want)) {
                large_count_pages((uint64_t)want - had);
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
    default: not_a_block(CALL_REALLOC, p);
    }
    void *q = n > usable && n > SMALL_MAX && n <= LARGE_MAX ? large_alloc(n, 0, false, true) : API(malloc)(n);
    if (!q) return NULL;
    memcpy(q, p, n < usable ? n : usable);
    API(free)(p);
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
static void *aligned(size_t align, size_t n) {
    if (align <= MIN_ALIGN) return API(malloc)(n);
    if (n <= SMALL_MAX && align <= PAGE_SIZE) {
        /* a class whose size is a multiple of align has aligned objects:
         * slabs start on page boundaries */
        for (unsigned c = size_class(n ? n : 1); c < NCLASSES; c++)
            if (classes[c].size % align == 0) return small_alloc(classes[c].size);
    }
    return big_alloc(n ? n : 1, align, false);
}

EXPORT void *API(aligned_alloc)(size_t align, size_t n) {
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    folio_init();
    return aligned(align, n);
}

EXPORT int API(posix_memalign)(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    folio_init();
    int saved = errno;
    void *p = aligned(align, n);
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
    return aligned(align, n);
}

EXPORT void *API(valloc)(size_t n) {
    folio_init();
    return aligned(PAGE_SIZE, n);
}

EXPORT void *API(pvalloc)(size_t n) {
    folio_init();
    if (n > PTRDIFF_MAX) {
        errno = ENOMEM;
        return NULL;
    }
    n = n ? (n + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1) : PAGE_SIZE;
    return aligned(PAGE_SIZE, n);
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
    pageset_drain_all();
    size_t released = zone_purge(true, 0) + huge_purge(true);
    return released > 0;
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
    *hblks = (size_t)atomic_load(&gcount.huge_allocs) - atomic_load(&gcount.huge_frees);
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

/* ---- C++ operators (Itanium ABI names), without a libstdc++ dependency:
 * failure calls the program's new_handler, else throws std::bad_alloc
 * through libstdc++ when it is loaded (it is, in any C++ program). */
extern void (*_ZSt15get_new_handlerv(void))(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static void *cxx_new(size_t n, size_t align, bool nothrow) {
    for (;;) {
        void *p = align <= MIN_ALIGN ? API(malloc)(n) : aligned(align, n);
        if (likely(p)) return p;
        void (*handler)(void) = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
        if (handler) {
            handler();
            continue;
        }
        if (nothrow) return NULL;
        if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
        os_write_err("folio: operator new: out of memory\n");
        abort();
    }
}

#define NEW(name, ...) EXPORT void *name
NEW(_Znwm)(size_t n) { return cxx_new(n, 0, false); }
NEW(_Znam)(size_t n) { return cxx_new(n, 0, false); }
NEW(_ZnwmRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return cxx_new(n, 0, true); }
NEW(_ZnamRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return cxx_new(n, 0, true); }
NEW(_ZnwmSt11align_val_t)(size_t n, size_t al) { folio_init(); return cxx_new(n, al, false); }
NEW(_ZnamSt11align_val_t)(size_t n, size_t al) { folio_init(); return cxx_new(n, al, false); }
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t)(size_t n, size_t al, const void *nt) {
    (void)nt;
    folio_init();
    return cxx_new(n, al, true);
}
NEW(_ZnamSt11align_val_tRKSt9nothrow_t)(size_t n, size_t al, const void *nt) {
    (void)nt;
    folio_init();
    return cxx_new(n, al, true);
}
EXPORT void _ZdlPv(void *p) { free(p); }
EXPORT void _ZdaPv(void *p) { free(p); }
EXPORT void _ZdlPvm(void *p, size_t n) { (void)n; free(p); }
EXPORT void _ZdaPvm(void *p, size_t n) { (void)n; free(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; free(p); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; free(p); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n; (void)al; free(p); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n; (void)al; free(p); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
    (void)al;
    (void)nt;
    free(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
    (void)al;
    (void)nt;
    free(p);
}
#endif

/* ---- folio's own API ---- */

EXPORT void *folio_alloc_pages(size_t npages, unsigned flags) {
    if (npages == 0 || npages > (PTRDIFF_MAX >> PAGE_SHIFT)) {
        errno = ENOMEM;
        return NULL;
    }
    return big_alloc(npages << PAGE_SHIFT, PAGE_SIZE, flags & FOLIO_ZERO);
}

EXPORT void folio_free_pages(void *p, size_t npages) {
    (void)npages;
    API(free)(p);
}

/* ---- process hooks ---- */

/* Every folio lock, in rank order (internal.h): a thread in the middle of
 * any folio operation finishes it before the fork, and no path holds a
 * lock while waiting for a lower-ranked one, so this cannot deadlock.  The
 * clearing engine's threaded-clear lock is not taken: its helpers do not
 * exist in the child, which resets it (clear.c). */
static void fork_prepare(void) {
    lock_acquire(&init_lock);
    clear_lock_all();
    heap_lock_all();
    huge_lock_all();
    pageset_lock_all();
    zone_lock_all();
    meta_lock_all();
}
static void fork_parent(void) {
    meta_unlock_all(false);
    zone_unlock_all(false);
    pageset_unlock_all(false);
    huge_unlock_all(false);
    heap_unlock_all(false);
    clear_unlock_all(false);
    lock_release(&init_lock);
}
static void fork_child(void) {
    meta_unlock_all(true);
    zone_unlock_all(true);
    pageset_unlock_all(true);
    huge_unlock_all(true);
    heap_unlock_all(true);
    clear_unlock_all(true);
    lock_reset(&init_lock);
    purge_after_fork_child();
}

__attribute__((constructor)) static void folio_ctor(void) {
    folio_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

__attribute__((destructor)) static void folio_dtor(void) {
    if (opt.report_path && *opt.report_path) folio_report_write(opt.report_path);
}
