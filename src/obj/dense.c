/* dense: a best-fit heap of boundary-tagged blocks for the sizes a process
 * has used little so far.
 *
 * A program that allocates a few objects of many sizes (an interpreter
 * starting, a compiler's vectors growing through the classes, a tool that
 * reads files of every size) touches a page or more per size class in
 * slabs, and a freed block of one size is reused only by that size.  Here
 * blocks of any size up to DENSE_MAX_BYTES share 256 KiB regions: a freed block
 * merges with its free neighbours at once, and the smallest free block that
 * fits serves the next request of any size, so a small program's heap stays
 * about as large as what it holds.  A size (a small class, or a page count
 * up to DENSE_MAX_BYTES) leaves the dense heap for good once it holds
 * FOLIO_HEAP_DENSE_LIVE blocks at once, or that many times 2 KiB of them,
 * or was served 16 times that many:
 * from then on it is a size the program uses much, which its slabs (or the
 * page heap) serve faster and as densely; the whole pages of its blocks
 * freed from then on are purged, so that a program whose sizes all left
 * does not keep its early heap resident.  It serves one thread (below) and
 * its regions come from the page heap; all of them hold at most
 * FOLIO_HEAP_DENSE_KIB.
 *
 * Invariants (all under dense_lock):
 *  - a region is a span of kind SPAN_DENSE, REGION_BYTES-aligned, whose
 *    pages all map to it; it is a sequence of blocks from its FIRST byte,
 *    each whole 16-byte grains and at least MIN_BLOCK (its data 16-byte
 *    aligned), up to its fence: the region's last 16 bytes, where a block
 *    after the last would have its header, never written (is_fence), which
 *    counts as a block in use;
 *  - a block's header is its size with CINUSE (in use) and PINUSE (the
 *    block before it is in use, or it is the region's first), then a tag:
 *    tag_base(b, size) ^ bucket << 56 in use (the bucket it was counted
 *    in), tag_base(b, size) ^ FREE_MARK free; a value written without the
 *    process's secret is no tag, so free() tells a block start from any
 *    other pointer, and a freed block from a live one;
 *  - no two free blocks are neighbours; a free block is on the bin of its
 *    size (bin_of) and its last word holds its size, for the block after
 *    it to merge with it (but the region's last block's: none follows);
 *  - a block's tag is made a free tag before the block merges into
 *    another, so that no in-use tag outlives its block;
 *  - a free block whose pages dense_free purges with the lock released is
 *    marked in use with PURGE_MARK, on no bin: no neighbour merges with it
 *    and nothing allocates it meanwhile.
 * A new region comes from the page heap with the lock held (page_alloc:
 * its locks are above this one in the order, and it calls nothing up); an
 * empty one goes back, purged, after the lock is released. */
#include "obj.h"

#define REGION_PAGES 64
#define REGION_BYTES ((size_t)REGION_PAGES << PAGE_SHIFT)
#define HDR 16                          /* a block's header: size and flags, tag */
#define LINE 64                         /* the first block's data starts the region's second line */
#define GRAIN 16                        /* blocks are whole grains, each block's data grain-aligned */
#define MIN_BLOCK 48                    /* header, two links and the size at its end, in grains */
#define FIRST (LINE - HDR)              /* the first block's offset in its region */
#define REGION_USABLE (REGION_BYTES - LINE) /* the first block's most: the fence follows */
#define CINUSE 1u
#define PINUSE 2u
#define FLAG_BITS 15u
#define NBINS 100
#define FREE_MARK ((uint64_t)0xf2ee)
#define PURGE_MARK ((uint64_t)0x9a6e) /* in use by dense_free while it purges the block's pages */
/* a dense heap this large purges the pages its graduated sizes free; a
 * smaller one keeps them for its other sizes (a purge there is a fault
 * later) */
#define PURGE_FROM_BYTES ((uint64_t)2 << 20)
#define BUCKET_SHIFT 56
#define DENSE_BUCKETS (NCLASSES + DENSE_MAX_BYTES / PAGE_SIZE - SMALL_MAX / PAGE_SIZE)
_Static_assert(DENSE_MAX_BYTES + HDR <= REGION_USABLE, "a region holds the largest block");

struct block {
    uint64_t head; /* size | CINUSE | PINUSE */
    uint64_t tag;
    struct block *next, *prev; /* free blocks only: their bin's list */
};

static FORK_STATE lock_t dense_lock = LOCK_INIT(LOCK_RANK_DENSE);
static struct block *dense_bins[NBINS];
static uint64_t dense_binmap[(NBINS + 63) / 64];
static struct span *dense_regions;  /* every region, through span->next/prev */
static uint32_t dense_empty_regions; /* dense_regions that are one free block (kept: at most one) */
/* per bucket: blocks in use and blocks served; graduated is read without
 * the lock by dense_wants */
static uint32_t dense_live_of[DENSE_BUCKETS], dense_served_of[DENSE_BUCKETS];
static _Atomic uint8_t dense_graduated[DENSE_BUCKETS];
/* The smallest block a request could neither find nor add a region for
 * (the cap reached; SIZE_MAX: none): requests that need as much wait, with
 * no lock taken, until a free leaves a free block that large or a region
 * goes back; smaller ones are still tried. */
static _Atomic size_t dense_full_need = SIZE_MAX;
/* the report's counters: written under the lock, read without it */
static _Atomic uint64_t dense_st_allocs, dense_st_frees, dense_st_live_bytes, dense_st_region_bytes, dense_st_regions, dense_st_graduated,
    dense_st_purged_bytes, dense_st_regions_added;

static inline size_t block_size(const struct block *b) { return b->head & ~(uint64_t)FLAG_BITS; }
static inline struct block *block_at(const void *a, size_t off) { return (struct block *)((char *)a + off); }
static inline struct block *block_of(const void *p) { return (struct block *)((char *)p - HDR); }
static inline uint64_t tag_base(const struct block *b, size_t size) {
    return (uintptr_t)b ^ slab_secret ^ ((uint64_t)size << 4);
}
/* A region's fence, where its last block ends: no block's header is there
 * and nothing writes it (the region's last page, which a small heap would
 * otherwise touch the moment the region is made, for a header and a
 * footer no one reads); a block that ends there has no block after it. */
static inline bool is_fence(const struct block *b) {
    return ((uintptr_t)b & (REGION_BYTES - 1)) == FIRST + REGION_USABLE;
}
/* the block at after (the fence included) is in use */
static inline bool in_use(const struct block *after) { return is_fence(after) || (after->head & CINUSE); }
/* the block at after follows one in use (the fence has no flags) */
static inline void set_pinuse(struct block *after) {
    if (!is_fence(after)) after->head |= PINUSE;
}
static void stat_add(_Atomic uint64_t *c, uint64_t v) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}

/* ---- sizes ---- */
/* The block that holds n bytes: whole grains of 16 bytes, malloc's
 * alignment.  Blocks are packed as glibc's and a slab's objects are (two
 * small blocks may share a line): the dense heap serves one thread, until a
 * second one allocates, and the sizes it holds are few of each. */
static size_t need_of(size_t n) {
    size_t need = (n + HDR + GRAIN - 1) & ~(size_t)(GRAIN - 1);
    return need < MIN_BLOCK ? MIN_BLOCK : need;
}
/* a request's bucket: its small class, else its page count's */
static unsigned bucket_of(size_t n) {
    if (n <= SMALL_MAX) return small_class_of(n);
    return NCLASSES + (unsigned)((n + PAGE_SIZE - 1) >> PAGE_SHIFT) - SMALL_MAX / PAGE_SIZE - 1;
}
/* a bucket's blocks' size (its class's, or its page count's) */
static size_t bucket_bytes(unsigned bucket) {
    if (bucket < NCLASSES) return classes[bucket].size;
    return (size_t)(bucket - NCLASSES + SMALL_MAX / PAGE_SIZE + 1) << PAGE_SHIFT;
}
/* exact bins of 16 bytes below 1 KiB, then four per power of two */
static unsigned bin_of(size_t size) {
    if (size < 1024) return (unsigned)(size >> 4);
    unsigned lg = 63u - (unsigned)__builtin_clzll(size);
    unsigned b = 64 + (lg - 10) * 4 + (unsigned)((size >> (lg - 2)) & 3);
    return b < NBINS ? b : NBINS - 1;
}

/* ---- bins ---- */
static void bins_insert(struct block *b, size_t size) {
    unsigned i = bin_of(size);
    b->prev = NULL;
    b->next = dense_bins[i];
    if (dense_bins[i]) dense_bins[i]->prev = b;
    dense_bins[i] = b;
    dense_binmap[i / 64] |= (uint64_t)1 << (i % 64);
}
static void bins_remove(struct block *b) {
    unsigned i = bin_of(block_size(b));
    if (b->prev) b->prev->next = b->next;
    else dense_bins[i] = b->next;
    if (b->next) b->next->prev = b->prev;
    if (!dense_bins[i]) dense_binmap[i / 64] &= ~((uint64_t)1 << (i % 64));
}
/* the first non-empty bin from i on, or NBINS */
static unsigned bins_next(unsigned i) {
    for (unsigned w = i / 64; w < (NBINS + 63) / 64; w++) {
        uint64_t m = dense_binmap[w] & (w == i / 64 ? ~(uint64_t)0 << (i % 64) : ~(uint64_t)0);
        if (m) return w * 64 + (unsigned)__builtin_ctzll(m);
    }
    return NBINS;
}
/* The smallest free block of at least need bytes among the first few of
 * the bins that may hold one (need's own: a best fit; then the next
 * non-empty one, whose blocks all fit), or NULL. */
static struct block *best_block(size_t need) {
    for (unsigned i = bins_next(bin_of(need)); i < NBINS; i = bins_next(i + 1)) {
        struct block *best = NULL;
        int look = 8;
        for (struct block *b = dense_bins[i]; b && look-- > 0; b = b->next) {
            size_t s = block_size(b);
            if (s < need || (best && s >= block_size(best))) continue;
            best = b;
            if (s == need) break;
        }
        if (best) return best;
    }
    return NULL;
}

/* ---- blocks ---- */
/* b (size bytes, its neighbours not free) becomes a free block on its bin;
 * the block before it is in use */
static void block_make_free(struct block *b, size_t size) {
    b->head = size | PINUSE;
    b->tag = tag_base(b, size) ^ FREE_MARK;
    struct block *after = block_at(b, size);
    if (!is_fence(after)) { /* the block after reads b's last word to merge; the fence reads nothing */
        *(uint64_t *)((char *)after - 8) = size;
        after->head &= ~(uint64_t)PINUSE;
    }
    bins_insert(b, size);
}
/* b (free, off its bin) serves need bytes for bucket: the rest, if a block
 * of its own, stays free behind it */
static void *block_take_for(struct block *b, size_t need, unsigned bucket) {
    size_t size = block_size(b);
    uint64_t pinuse = b->head & PINUSE;
    if (size - need >= MIN_BLOCK) {
        block_make_free(block_at(b, need), size - need);
        size = need;
    } else {
        set_pinuse(block_at(b, size));
    }
    b->head = size | CINUSE | pinuse;
    b->tag = tag_base(b, size) ^ ((uint64_t)bucket << BUCKET_SHIFT);
    stat_add(&dense_st_live_bytes, size - HDR);
    return (char *)b + HDR;
}
static bool block_is_region(const struct block *b) { return block_size(b) == REGION_USABLE; }
/* The whole pages of the free block b (size bytes) past its header and
 * links and before its last word: [*lo, *hi); false: none. */
static bool block_purgeable(const struct block *b, size_t size, uintptr_t *lo, uintptr_t *hi) {
    *lo = ((uintptr_t)b + MIN_BLOCK + PAGE_SIZE - 1) & ~(uintptr_t)(PAGE_SIZE - 1);
    *hi = ((uintptr_t)b + size - 8) & ~(uintptr_t)(PAGE_SIZE - 1);
    return *hi > *lo;
}

/* A new region as one free block (lock held), or false. */
static bool region_grow(void) {
    uint64_t have = atomic_load_explicit(&dense_st_region_bytes, memory_order_relaxed);
    if (have + REGION_BYTES > (uint64_t)opt.heap_dense_kib << 10) return false;
    struct span *s = page_alloc(REGION_PAGES, REGION_PAGES);
    if (!s) return false;
    s->flags = 0;
    s->obj_size = 0;
    atomic_store_explicit(&s->owner, NULL, memory_order_relaxed);
    __atomic_store_n(&s->kind, (uint8_t)SPAN_DENSE, __ATOMIC_RELEASE);
    span_map_pages(s, s, s->page_idx, s->npages);
    span_list_push(&dense_regions, s);
    struct block *b = block_at(s->start, FIRST);
    block_make_free(b, REGION_USABLE);
    dense_empty_regions++;
    stat_add(&dense_st_region_bytes, REGION_BYTES);
    stat_add(&dense_st_regions, 1);
    stat_add(&dense_st_regions_added, 1);
    return true;
}
/* The region whose only block is the free block b leaves the dense heap
 * (lock held); the caller gives it to region_give_back once it released
 * the lock. */
static struct span *region_take_out(struct block *b) {
    struct span *s = span_lookup((uintptr_t)b);
    bins_remove(b);
    span_list_remove(&dense_regions, s);
    span_set_kind(s, SPAN_TAKEN);
    span_map_pages(s, NULL, s->page_idx, s->npages);
    stat_add(&dense_st_region_bytes, -(uint64_t)REGION_BYTES);
    stat_add(&dense_st_regions, (uint64_t)-1);
    atomic_store_explicit(&dense_full_need, SIZE_MAX, memory_order_relaxed);
    return s;
}
/* Its pages purged (zero then: a calloc of them clears nothing), to the
 * page heap (no lock held). */
static void region_give_back(struct span *s) {
    os_purge(s->start, REGION_BYTES);
    s->flags = SPAN_ZEROED;
    page_free(s);
}

static void debug_check(void);

/* ---- the calls ---- */
/* The dense heap serves one thread: the process's first (its pid's), the
 * one a program allocates from before it starts others.  Once another
 * thread allocates, it closes for good: a program with threads has a heap
 * per thread, and their blocks would wait on one lock here.  Its blocks
 * are then given back as they are freed. */
static __thread uint8_t dense_thread_is; /* 0: not asked yet, 1: the first thread, 2: another */
static _Atomic bool dense_closed;
static void close_for_good(void);
static bool open_to_caller(void) {
    if (atomic_load_explicit(&dense_closed, memory_order_relaxed)) return false;
    if (!dense_thread_is) {
        int pid = os_getpid();
        dense_thread_is = os_gettid() == pid ? 1 : 2;
        if (dense_thread_is == 1) bg_watch_main_thread(pid);
    }
    if (dense_thread_is == 1) return true;
    /* another thread's free started folio's purger, whose dtv glibc
     * allocates here: not the program's second thread allocating */
    if (bg_start_in_progress()) return false;
    if (!atomic_exchange_explicit(&dense_closed, true, memory_order_relaxed)) close_for_good();
    return false;
}
/* The region kept empty for the next blocks goes back now (no lock held
 * by the caller: a malloc's slow path). */
static void close_for_good(void) {
    struct span *empty = NULL;
    lock_acquire(&dense_lock);
    for (struct span *s = dense_regions; s; s = s->next) {
        struct block *b = block_at(s->start, FIRST);
        if (!(b->head & CINUSE) && block_is_region(b)) {
            dense_empty_regions--;
            empty = region_take_out(b);
            break; /* (at most one is kept) */
        }
    }
    lock_release(&dense_lock);
    if (empty) region_give_back(empty);
}
bool dense_wants(size_t n) {
    /* closed first: a program with threads reads one line here */
    return opt.heap_dense_kib > 0 && n <= DENSE_MAX_BYTES && open_to_caller() &&
           !atomic_load_explicit(&dense_graduated[bucket_of(n)], memory_order_relaxed) &&
           need_of(n) < atomic_load_explicit(&dense_full_need, memory_order_relaxed);
}

void *dense_alloc(size_t n) {
    size_t need = need_of(n);
    unsigned bucket = bucket_of(n);
    void *p = NULL;
    lock_acquire(&dense_lock);
    if (!atomic_load_explicit(&dense_graduated[bucket], memory_order_relaxed) && !atomic_load_explicit(&dense_closed, memory_order_relaxed)) {
        struct block *b = best_block(need);
        if (!b && region_grow()) b = best_block(need);
        if (b) {
            bins_remove(b);
            if (block_is_region(b)) dense_empty_regions--;
            p = block_take_for(b, need, bucket);
            dense_live_of[bucket]++;
            dense_served_of[bucket]++;
            if (dense_live_of[bucket] >= (uint32_t)opt.heap_dense_live ||
                (uint64_t)dense_live_of[bucket] * bucket_bytes(bucket) >= (uint64_t)opt.heap_dense_live << 11 ||
                dense_served_of[bucket] >= 16 * (uint32_t)opt.heap_dense_live) {
                atomic_store_explicit(&dense_graduated[bucket], 1, memory_order_relaxed);
                stat_add(&dense_st_graduated, 1);
            }
            stat_add(&dense_st_allocs, 1);
        } else if (need < atomic_load_explicit(&dense_full_need, memory_order_relaxed)) {
            atomic_store_explicit(&dense_full_need, need, memory_order_relaxed);
        }
    }
    debug_check();
    lock_release(&dense_lock);
    return p;
}

/* What p, a pointer into the dense region s, is: a live block's start, a
 * freed one's, or neither (lock held).  *bucket: a live block's. */
static enum fault block_check(const struct span *s, const void *p, unsigned *bucket) {
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)s->start;
    /* a header inside the region (p lies in it); the size check below
     * bounds the block by the fence */
    if ((a & (GRAIN - 1)) || a < lo + FIRST + HDR) return FAULT_INVALID;
    const struct block *b = (const struct block *)(a - HDR);
    size_t size = block_size(b);
    if (size < MIN_BLOCK || (size & (GRAIN - 1)) || a - HDR + size > lo + FIRST + REGION_USABLE) return FAULT_INVALID;
    uint64_t x = b->tag ^ tag_base(b, size);
    if (x == FREE_MARK) return FAULT_FREED;
    if ((x & (((uint64_t)1 << BUCKET_SHIFT) - 1)) || (x >> BUCKET_SHIFT) >= DENSE_BUCKETS || !(b->head & CINUSE))
        return FAULT_INVALID;
    *bucket = (unsigned)(x >> BUCKET_SHIFT);
    return FAULT_NONE;
}

size_t dense_usable(const struct span *s, const void *p, enum fault *f) {
    unsigned bucket;
    lock_acquire(&dense_lock);
    *f = block_check(s, p, &bucket);
    size_t n = *f ? 0 : block_size(block_of(p)) - HDR;
    lock_release(&dense_lock);
    return n;
}

enum fault dense_free(const struct span *s, void *p) {
    unsigned bucket;
    lock_acquire(&dense_lock);
    enum fault f = block_check(s, p, &bucket);
    if (f) {
        lock_release(&dense_lock);
        return f;
    }
    struct block *b = block_of(p);
    size_t size = block_size(b);
    dense_live_of[bucket]--;
    stat_add(&dense_st_frees, 1);
    stat_add(&dense_st_live_bytes, -(uint64_t)(size - HDR));
    b->tag = tag_base(b, size) ^ FREE_MARK; /* before it merges: no in-use tag outlives it */
    for (bool purged = false;;) {
        struct block *after = block_at(b, size);
        if (!in_use(after)) {
            bins_remove(after);
            size += block_size(after);
        }
        if (!(b->head & PINUSE)) {
            size_t before = *(const uint64_t *)((const char *)b - 8);
            b = (struct block *)((char *)b - before);
            bins_remove(b);
            size += before;
        }
        uintptr_t lo, hi;
        /* a region this free emptied goes back whole (purged there) unless
         * it is the one empty region kept */
        bool whole = size == REGION_USABLE,
             leaves = whole && (dense_empty_regions > 0 || atomic_load_explicit(&dense_closed, memory_order_relaxed));
        if (purged || leaves || !atomic_load_explicit(&dense_graduated[bucket], memory_order_relaxed) ||
            (!whole && atomic_load_explicit(&dense_st_region_bytes, memory_order_relaxed) < PURGE_FROM_BYTES) ||
            !block_purgeable(b, size, &lo, &hi))
            break;
        /* its size left the dense heap: its pages go back to the kernel,
         * the lock released and the block held in use meanwhile; then it
         * merges with the neighbours freed meanwhile.  In a small dense
         * heap a graduated size's pieces stay for the other sizes (a purge
         * there is a fault later), but not a whole region it emptied: a
         * program whose sizes all left (a long-running one, past its
         * start) would keep it resident for nothing */
        b->head = size | CINUSE | PINUSE;
        b->tag = tag_base(b, size) ^ PURGE_MARK;
        set_pinuse(block_at(b, size));
        lock_release(&dense_lock);
        os_purge((void *)lo, hi - lo);
        lock_acquire(&dense_lock);
        stat_add(&dense_st_purged_bytes, hi - lo);
        b->tag = tag_base(b, size) ^ FREE_MARK;
        purged = true;
    }
    block_make_free(b, size);
    if (size >= atomic_load_explicit(&dense_full_need, memory_order_relaxed))
        atomic_store_explicit(&dense_full_need, SIZE_MAX, memory_order_relaxed);
    struct span *empty = NULL;
    if (block_is_region(b) && (++dense_empty_regions > 1 || atomic_load_explicit(&dense_closed, memory_order_relaxed))) {
        dense_empty_regions--;
        empty = region_take_out(b);
    }
    debug_check();
    lock_release(&dense_lock);
    if (empty) region_give_back(empty);
    return FAULT_NONE;
}

/* The live block b (of bucket) now holds n bytes, by giving back its tail
 * or taking the free block after it (lock held); false: it cannot, and is
 * unchanged. */
static bool block_resize(struct block *b, unsigned bucket, size_t n) {
    if (n > DENSE_MAX_BYTES) return false;
    size_t need = need_of(n), size = block_size(b);
    struct block *after = block_at(b, size);
    size_t room = size + (in_use(after) ? 0 : block_size(after));
    if (need > room || (need < size && size - need < MIN_BLOCK)) return false;
    if (!in_use(after)) {
        bins_remove(after);
        if (block_is_region(after)) dense_empty_regions--;
        after->tag = 0;
    }
    stat_add(&dense_st_live_bytes, -(uint64_t)(size - HDR));
    b->head = room | (b->head & (PINUSE | CINUSE));
    if (room != size) set_pinuse(block_at(b, room));
    block_take_for(b, need, bucket); /* the tail past need, if a block's worth, free again */
    return true;
}

enum fault dense_realloc(const struct span *s, void *p, size_t n, size_t grow_to, size_t *usable, bool *in_place) {
    unsigned bucket;
    lock_acquire(&dense_lock);
    enum fault f = block_check(s, p, &bucket);
    if (!f) {
        struct block *b = block_of(p);
        *usable = block_size(b) - HDR;
        *in_place = (n <= *usable && n > *usable / 2) || block_resize(b, bucket, n > *usable ? grow_to : n);
        debug_check();
    }
    lock_release(&dense_lock);
    return f;
}

void dense_stats(struct dense_stats *st) {
    st->allocs = atomic_load_explicit(&dense_st_allocs, memory_order_relaxed);
    st->frees = atomic_load_explicit(&dense_st_frees, memory_order_relaxed);
    st->live_bytes = atomic_load_explicit(&dense_st_live_bytes, memory_order_relaxed);
    st->region_bytes = atomic_load_explicit(&dense_st_region_bytes, memory_order_relaxed);
    st->regions = atomic_load_explicit(&dense_st_regions, memory_order_relaxed);
    st->graduated = atomic_load_explicit(&dense_st_graduated, memory_order_relaxed);
    st->purged_bytes = atomic_load_explicit(&dense_st_purged_bytes, memory_order_relaxed);
    st->regions_added = atomic_load_explicit(&dense_st_regions_added, memory_order_relaxed);
    st->closed = atomic_load_explicit(&dense_closed, memory_order_relaxed);
}

void dense_visit_locks(lock_visit_fn *fn, void *ctx) { fn(ctx, "dense", -1, &dense_lock); }
void dense_lock_all(void) { lock_acquire(&dense_lock); }
void dense_unlock_all(bool child) {
    if (child) lock_reset(&dense_lock);
    else lock_release(&dense_lock);
}

/* ---- invariants (lock held) ---- */
size_t dense_check_locked(void) {
    size_t bad = 0, free_blocks = 0, on_bins = 0;
    uint32_t empty = 0;
    uint64_t live = 0;
    for (const struct span *s = dense_regions; s; s = s->next) {
        bad += span_kind(s) != SPAN_DENSE || span_lookup((uintptr_t)s->start + REGION_BYTES - 1) != s ||
               ((uintptr_t)s->start & (REGION_BYTES - 1));
        const char *end = s->start + FIRST + REGION_USABLE;
        bool prev_used = true, prev_free = false;
        const struct block *b = block_at(s->start, FIRST);
        while ((const char *)b < end) {
            size_t size = block_size(b);
            if (size < MIN_BLOCK || (size & (GRAIN - 1)) || (const char *)b + size > end) return bad + 1;
            bad += !(b->head & PINUSE) != !prev_used;
            if (b->head & CINUSE) {
                uint64_t x = b->tag ^ tag_base(b, size);
                if (x != PURGE_MARK) { /* (a block being purged is no live one) */
                    bad += (x & (((uint64_t)1 << BUCKET_SHIFT) - 1)) != 0 || (x >> BUCKET_SHIFT) >= DENSE_BUCKETS;
                    live += size - HDR;
                }
                prev_free = false;
            } else {
                bad += prev_free || b->tag != (tag_base(b, size) ^ FREE_MARK) ||
                       (!is_fence(block_at(b, size)) && *(const uint64_t *)((const char *)b + size - 8) != size);
                free_blocks++;
                empty += size == REGION_USABLE;
                prev_free = true;
            }
            prev_used = (b->head & CINUSE) != 0;
            b = block_at(b, size);
        }
        bad += (const char *)b != end || !is_fence(b);
    }
    for (unsigned i = 0; i < NBINS; i++) {
        bad += !dense_bins[i] != !(dense_binmap[i / 64] & ((uint64_t)1 << (i % 64)));
        for (const struct block *b = dense_bins[i]; b; b = b->next) {
            if (++on_bins > free_blocks) return bad + 1;
            bad += (b->head & CINUSE) || bin_of(block_size(b)) != i || (b->next && b->next->prev != b);
        }
    }
    return bad + (on_bins != free_blocks) + (empty != dense_empty_regions) + (empty > 1) +
           (live != atomic_load_explicit(&dense_st_live_bytes, memory_order_relaxed));
}
size_t dense_check(void) {
    lock_acquire(&dense_lock);
    size_t bad = dense_check_locked();
    lock_release(&dense_lock);
    return bad;
}
#ifdef FOLIO_DEBUG
/* debug builds: every 64th call checks every invariant above */
static void debug_check(void) {
    static uint32_t n;
    if (++n % 64 == 0 && dense_check_locked()) os_fatal_ptr("dense heap invariant broken, dense_regions at", dense_regions);
}
#else
static void debug_check(void) {}
#endif
