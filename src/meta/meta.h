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
    SPAN_DENSE,      /* a region of the dense heap (obj/dense.c) */
};

#define SPAN_ZEROED 0x1u /* contents known to be zero */

struct heap;
struct chunk;

/* A span descriptor describes a run of pages of one chunk: a free buddy
 * block, a slab or a large block.  Descriptors are type-stable (never
 * returned to the OS) so that lockless readers never see foreign memory. */
struct span {
    /* first line: everything free() and malloc()'s fast paths read */
    void *free;         /* slab: free objects (owner only) */
    int32_t room;       /* slab: used - slow_used - 1 (obj.h: slab_used), so that a local free
                         * takes the slow path when its decrement goes negative */
    int32_t slow_used;  /* slab: a local free that brings used down to this takes the slow path */
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
    uint32_t touched;   /* slab: pages from start that its objects may have been written on,
                         * over every class it served since it came from the page heap */
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

/* ---------------------------------------------------------------- arenas: metadata by address */
/* The zone's memory comes in arenas: ranges of at most ARENA_ALIGN bytes at
 * ARENA_ALIGN-aligned addresses (a reservation of FOLIO_ARENA_MIB above that
 * is several arenas).  An arena's first ARENA_META_PAGES pages hold its
 * metadata: the span of every page of the arena (ARENA_ALIGN / 512 bytes),
 * then the objmap, whose first words (those of the metadata pages, which no
 * slab covers) hold struct arena_head.  The metadata of any arena address is therefore at
 * an address computed from it, not loaded.  arena_first (the first arena)
 * and arena_map (the others) say which aligned ranges are arenas: set
 * before any pointer into the arena is handed out, never cleared, and the
 * metadata pages are never unmapped (the first chunk of an arena never
 * leaves the zone), so the lookup needs no lock.
 * ARENA_ALIGN is fixed at compile time (the default FOLIO_ARENA_MIB): the
 * masks and shifts of free()'s lookup are then immediates. */
#define ARENA_SHIFT 28
#define ARENA_ALIGN ((size_t)1 << ARENA_SHIFT)       /* 256 MiB */
#define ARENA_CHUNKS (ARENA_ALIGN >> CHUNK_SHIFT)    /* 128 */
#define ARENA_PAGES (ARENA_ALIGN >> PAGE_SHIFT)      /* 65536 */
#define ARENA_TABLE_PAGES (ARENA_PAGES * sizeof(void *) / PAGE_SIZE) /* 128 */
#define ARENA_OBJMAP_PAGES (ARENA_PAGES * sizeof(uint32_t) / PAGE_SIZE) /* 64 */
#define ARENA_META_PAGES (ARENA_TABLE_PAGES + ARENA_OBJMAP_PAGES) /* the table, the objmap (and head) */
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
    uint8_t type[ARENA_CHUNKS];  /* zone: which sizes each chunk was split for, and its home (zone.c) */
    uint8_t state[ARENA_CHUNKS]; /* enum chunk_state */
    struct arena_head *next;     /* zone: every arena */
    uint16_t free_pages[ARENA_CHUNKS]; /* zone: free pages of each chunk in the zone (zone.c) */
    uint8_t huge[ARENA_CHUNKS];        /* zone: each chunk's huge-page state (thp.c) */
};
/* The head is the objmap's first words: those of the arena's metadata pages,
 * which no slab covers, so the object layer never writes them, and the
 * objmap page that covers the first slabs of a small program holds the head
 * too (one page fewer per process).  A free() given a pointer into the
 * metadata still reads one of these words as an objmap word; it never
 * matches a heap (obj.h: a matching word has bit 15 set, OBJMAP_CARVED),
 * because no 16-bit half at a word's start has bit 15 set: every byte of
 * type, state and huge is below 0x80, every free_pages count at most 512,
 * and next points to another arena's head (its low 16 bits are 0, bits 32-47
 * those of a user address, below 2^47). */
_Static_assert(sizeof(struct arena_head) <= ARENA_META_PAGES * sizeof(uint32_t),
               "the head fits in the objmap words of the metadata pages");
_Static_assert(ARENA_TABLE_PAGES % 16 == 0, "a head's address has its low 16 bits 0");

extern INTERNAL _Atomic uint8_t arena_map[(size_t)1 << (ARENA_MAP_BITS - ARENA_SHIFT)];
extern INTERNAL _Atomic uintptr_t arena_first; /* the first arena, apart (pagemap.c) */

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
/* The objmap: one 32-bit word per arena page, after the table, written by the
 * object layer (obj.h says what it holds) and read by free() without a
 * lock: 16 pages per cache line where the span table holds 8 and a span's
 * line 1, so the words of a heap's slabs stay in cache.  Zero (the mapping's
 * own zero) means nothing. */
#define ARENA_OBJMAP_OFFSET ((size_t)ARENA_TABLE_PAGES << PAGE_SHIFT) /* from the arena's base */
/* the word of the page off bytes (below ARENA_ALIGN) past the arena base */
static inline _Atomic uint32_t *arena_objmap_at(uintptr_t base, uintptr_t off) {
    return (_Atomic uint32_t *)(base + ARENA_OBJMAP_OFFSET) + (off >> PAGE_SHIFT);
}
static inline _Atomic uint32_t *arena_objmap_slot(uintptr_t a) {
    return arena_objmap_at(arena_base(a), a & (ARENA_ALIGN - 1));
}
/* a lies in an arena (NULL and addresses beyond 48 bits do not) */
static inline bool arena_owns(uintptr_t a) {
    uintptr_t i = a >> ARENA_SHIFT;
    if (i + 1 == atomic_load_explicit(&arena_first, memory_order_relaxed)) return true;
    return likely(i < ((uintptr_t)1 << (ARENA_MAP_BITS - ARENA_SHIFT))) &&
           atomic_load_explicit(&arena_map[i], memory_order_relaxed) != 0;
}
/* The arena at base is entered (the zone's lock held: one writer), after
 * its head is written and before any of its pages is handed out. */
static inline void arena_enter(uintptr_t base) {
    uintptr_t i = base >> ARENA_SHIFT;
    if (!atomic_load_explicit(&arena_first, memory_order_relaxed))
        atomic_store_explicit(&arena_first, i + 1, memory_order_release);
    else
        atomic_store_explicit(&arena_map[i], 1, memory_order_release);
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
void *meta_alloc_page(size_t size); /* the same, starting on a page */
void meta_visit_locks(lock_visit_fn *fn, void *ctx); /* for the report */
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



#endif
