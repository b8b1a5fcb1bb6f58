/* meta: folio's descriptors.  Spans (runs of pages), chunk metas (2 MiB
 * of arena memory, per page the span that covers it), type-stable
 * descriptor memory and the pagemap from an address to its metadata.
 * Includes base only. */
#ifndef FOLIO_META_H
#define FOLIO_META_H

#include "base.h"

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
    uint64_t obj_inv;   /* slab: ceil(2^40 / obj_size) for the offset check */
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

/* The one intrusive list of spans (bins, zone free lists): doubly linked
 * through next/prev, NULL-terminated; a span is on at most one at a time. */
static inline void span_list_push(struct span **head, struct span *s) {
    s->prev = NULL;
    s->next = *head;
    if (*head) (*head)->prev = s;
    *head = s;
}
static inline void span_list_remove(struct span **head, struct span *s) {
    if (s->prev) s->prev->next = s->next;
    else *head = s->next;
    if (s->next) s->next->prev = s->prev;
    s->next = s->prev = NULL;
}

/* kind is read without locks (free's lookup, buddy checks of neighbours);
 * every access goes through these relaxed atomics. */
static inline unsigned span_kind(const struct span *s) { return __atomic_load_n(&s->kind, __ATOMIC_RELAXED); }
static inline void span_set_kind(struct span *s, unsigned k) {
    __atomic_store_n(&s->kind, (uint8_t)k, __ATOMIC_RELAXED);
}

/* A chunk is 2 MiB of arena memory; its meta records, per page, the span
 * that covers it (slab pages: every page; large blocks and free zone blocks:
 * the head page only; everything else NULL). */
struct chunk {
    char *base;
    uint8_t type; /* zone: which sizes it was split for (zone.c) */
    struct chunk *pool_next; /* zone: on the pool of metas of released chunks */
    _Atomic(struct span *) span_of[CHUNK_PAGES];
};

/* ---------------------------------------------------------------- meta, pagemap */
void *meta_alloc(size_t size); /* zeroed, never freed; 64-byte aligned */
void meta_lock_all(void);
void meta_unlock_all(bool child);

/* pagemap: chunk number -> chunk meta, or a huge extent (tagged with bit 0).
 * Readable without locks: leaves are installed once and never removed. */
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

/* The span covering address a (arena memory only), or NULL. */
static inline struct span *span_of_addr(uintptr_t a, uintptr_t entry) {
    struct chunk *c = (struct chunk *)entry;
    return atomic_load_explicit(&c->span_of[(a >> PAGE_SHIFT) & (CHUNK_PAGES - 1)],
                                memory_order_acquire);
}
void span_map_pages(struct span *s, struct span *v, uint32_t first, uint32_t n);


#endif
