/* slab: the slow paths of the object layer, per-thread heaps, remote frees,
 * thread exit and adoption of abandoned slabs.  The invariants are stated in
 * obj.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>

#include "obj.h"

static struct span span_empty; /* every bin's cur when it has none: free == NULL */
/* no thread's.  Its bins' cur stay NULL: heap_current() is NULL for it, so
 * no slow path reads them, and 73 pointers to span_empty were relocations
 * that made every process copy two pages of .data at load.  Nothing writes
 * it and nothing relocates it (ARENA_HINT_NONE is a constant), so it is
 * read-only data: mk/layout.ld puts it after the dynamic symbols, whose
 * first read by ld.so maps it too (fault-around), where in .data its two
 * pages were a copy and a read fault in every process. */
__attribute__((section(".rodata.heap_none")))
const struct heap heap_none = {.objmap_id = OBJMAP_ID_NONE, .arena_hint = ARENA_HINT_NONE};
__thread struct heap *tl_heap __attribute__((tls_model("initial-exec"))) = HEAP_NONE;
struct heap heap_abandoned; /* owner of abandoned slabs: never a thread's heap (its objmap_id 0: no word) */
static uint32_t heap_ids; /* heaps made so far (heap_lock): the next one's objmap id */

/* heap registry (stats, reuse of exited threads' heaps) */
static FORK_STATE lock_t heap_lock = LOCK_INIT(LOCK_RANK_HEAPS);
static struct heap *heaps_all; /* every heap struct, under heap_lock */
/* heaps of exited threads, for the next ones: a starting thread takes one
 * without a lock (heap_lock only registers a new struct, and folds an
 * exiting heap's counts into the dead ones for the report) */
static lf_stack heaps_free;
#define HEAP_NEXT offsetof(struct heap, free_next)
static struct heap_counts dead_counts; /* large-block counts of heaps whose thread exited */
/* large blocks of threads without a heap */
static struct {
    _Atomic uint64_t allocs, bytes, frees, pages;
} heapless_large;

void heap_count_large_shared(uint64_t allocs, uint64_t bytes, uint64_t frees, uint64_t pages) {
    atomic_fetch_add_explicit(&heapless_large.allocs, allocs, memory_order_relaxed);
    atomic_fetch_add_explicit(&heapless_large.bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&heapless_large.frees, frees, memory_order_relaxed);
    atomic_fetch_add_explicit(&heapless_large.pages, pages, memory_order_relaxed);
}
static uint64_t dead_allocs[NCLASSES], dead_frees[NCLASSES]; /* their per-class counts */

/* abandoned slabs, per class, waiting for a live thread to adopt them
 * (lock-free stacks: no lock that every starting or exiting thread takes) */
static lf_stack abandoned[NCLASSES];
#define SPAN_NEXT offsetof(struct span, next)

/* Spare slabs: empty slabs that exited threads left (their own, and the
 * abandoned ones their objects' frees emptied), by the class they last
 * served, on lock-free stacks; their pages still map to them.  A starting
 * thread takes its slabs from here before the page heap, so thread churn
 * does not cycle pages through the pagesets and the zone, where each freed
 * page would stay resident for the purge delay while the next thread's
 * slabs come from elsewhere.  A slab goes back to its own class first, then
 * to the nearest class of its size: a slab's resident pages are what its
 * classes' peaks touched, so one that moved between classes would end up
 * resident whole while each class uses a part.  The purger purges and
 * gives back the ones no thread took within a quarter of the delay. */
static lf_stack spare[NCLASSES];
static _Atomic size_t spare_pages;

static pthread_key_t heap_key;
/* frees by threads with no heap: every free of such a thread adds here, so
 * the array has lines of its own (it ends on a line boundary too); placed
 * by the link next to slab_secret, which every malloc and free reads, it
 * made a consumer thread's frees slow down its producer's mallocs */
static _Atomic uint64_t remote_frees_without_heap[NCLASSES] __attribute__((aligned(CACHELINE)));
_Static_assert(sizeof(remote_frees_without_heap) % CACHELINE == 0, "no other variable on its last line");

_Noreturn void slab_bad_free(const void *p) { os_fatal_ptr("free(): invalid pointer", p); }
_Noreturn void slab_bad_link(const void *obj) { os_fatal_ptr("malloc(): corrupted free list at", obj); }

/* ---- links of a bin's list (obj.h, free-list links) ----
 * p is a free object of class c: in a page of a slab of c (so its two
 * words, 16-byte aligned, are mapped) and tagged free.  The tag is p's
 * address keyed by the secret: only a free object's start holds its own,
 * so no object-start test is needed.  Its slab may be another heap's by
 * now (one that floated and was handed on). */
static bool bin_object_free(unsigned c, const void *p) {
    if ((uintptr_t)p & 15) return false;
    const struct span *s = span_lookup((uintptr_t)p);
    return s && span_kind(s) == SPAN_SLAB && s->cls == c && small_is_freed(p);
}
/* The successor of obj on a bin list of class c; a link out of obj's arena
 * is followed only to a free object of c, else the process ends. */
static void *bin_link_next(unsigned c, const void *obj) {
    uintptr_t d = *(const uintptr_t *)obj ^ slab_secret; /* next ^ obj */
    void *next = (void *)(d ^ (uintptr_t)obj);
    if (likely(slab_link_stays(d, obj)) || bin_object_free(c, next)) return next;
    slab_bad_link(obj);
}

/* ---- objmap words (obj.h) ---- */
/* s's words for owner h: 0 for NULL, heap_abandoned or a heap without id */
static void objmap_set(const struct span *s, const struct heap *h) {
    uint32_t id = h && h->objmap_id != OBJMAP_ID_NONE ? h->objmap_id & ~OBJMAP_CARVED : 0;
    _Atomic uint32_t *w = arena_objmap_slot((uintptr_t)s->start);
    /* pages [0, carved) end at or below the bump pointer; the words differ
     * only in the page index, one add apart (a thread's exit and each slab
     * it adopts rewrite every page of a slab) */
    uint32_t carved = s->bump == s->bump_end ? s->npages : (uint32_t)((size_t)(s->bump - s->start) >> PAGE_SHIFT);
    uint32_t v = objmap_word(id, s->cls, 0, false), step = id ? objmap_word(id, 0, 1, false) - id : 0;
    uint32_t i = 0;
    for (uint32_t mark = id ? OBJMAP_CARVED : 0; i < carved; i++, v += step)
        atomic_store_explicit(&w[i], v | mark, memory_order_relaxed);
    for (; i < s->npages; i++, v += step) atomic_store_explicit(&w[i], v, memory_order_relaxed);
}
/* s's bump pointer moved from `from` up to s->bump: the pages that now end
 * below it are carved */
static void objmap_carve(const struct span *s, const char *from) {
    _Atomic uint32_t *w = arena_objmap_slot((uintptr_t)s->start);
    uint32_t i = (uint32_t)((size_t)(from - s->start) >> PAGE_SHIFT);
    uint32_t end = s->bump == s->bump_end ? s->npages : (uint32_t)((size_t)(s->bump - s->start) >> PAGE_SHIFT);
    for (; i < end; i++) {
        uint32_t v = atomic_load_explicit(&w[i], memory_order_relaxed);
        if (v) atomic_store_explicit(&w[i], v | OBJMAP_CARVED, memory_order_relaxed);
    }
}

/* Take the objects other threads freed back into s.  Returns how many.
 * The remote list's head word carries its length (slab_remote_count), so no
 * object of it is read here: when s->free is empty (the allocation path's
 * case) the list becomes s->free whole, each link checked when a pop
 * follows it (slab_link_next); when the list holds every object slab_used
 * counts, s is empty and starts over (every object back in the bump area);
 * otherwise the list stays where it is until one of those holds (s has
 * free objects meanwhile, and a slab with objects in use is not empty
 * whatever the list's length), so no path walks a list of cold objects. */
static uint32_t collect_list(struct span *s, uintptr_t tf);
/* s's bump pointer is about to start over: the pages it reached count as
 * written (s->touched, which extend() reads) */
static void slab_note_written(struct span *s) {
    uint32_t reached = (uint32_t)(((size_t)(s->bump - s->start) + PAGE_SIZE - 1) >> PAGE_SHIFT);
    if (reached > s->touched) s->touched = reached;
}
/* inline: most calls find no list (one load) */
static inline uint32_t collect(struct span *s) {
    uintptr_t tf = atomic_load_explicit(&s->thread_free, memory_order_relaxed);
    if (slab_remote_count(tf) == 0) return 0;
    return collect_list(s, tf);
}
static uint32_t collect_list(struct span *s, uintptr_t tf) {
    uint32_t used = slab_used(s);
    if (s->free && slab_remote_count(tf) < used) return 0; /* deferred */
    tf = atomic_exchange_explicit(&s->thread_free, 0, memory_order_acq_rel);
    if (slab_remote_count(tf) == 0) return 0;
    void *head = slab_remote_head(tf);
    uint32_t n = slab_remote_count(tf);
    if (n == 0 || n > used) slab_bad_link(head);
    if (!s->free) {
        s->free = head;
    } else { /* n == used: nothing of s is in use */
        s->free = NULL;
        slab_note_written(s);
        s->bump = s->start;
        objmap_set(s, atomic_load_explicit(&s->owner, memory_order_relaxed));
    }
    slab_set_used(s, used - n);
    struct heap *h = heap_current();
    if (h) {
        HEAP_COUNT(h->remote_collects, 1);
        HEAP_COUNT(h->remote_collected, n);
    }
    return n;
}

/* Return a slab's pages: to the heap's small cache of empty slabs, or to the
 * page heap.  A cached slab keeps its pages mapped to its descriptor (kind
 * SPAN_TAKEN, so a stale free of one of its objects is still caught as an
 * invalid pointer): reusing it for the next slab then skips unmapping and
 * remapping every page. */
static void retire(struct heap *h, struct span *s) {
    span_set_kind(s, SPAN_TAKEN);
    s->flags = 0;
    atomic_store_explicit(&s->owner, NULL, memory_order_relaxed);
    objmap_set(s, NULL);
    if (h && h->nr_empty < h->empty_high.high) {
        s->next = h->empty;
        h->empty = s;
        h->nr_empty++;
        return;
    }
    if (h) cache_high_give(&h->empty_high, 1);
    span_map_pages(s, NULL, s->page_idx, s->npages);
    page_free(s);
}

/* Give slabs of the heap's empty cache back to the page heap until keep
 * remain. */
static void empty_cache_drain(struct heap *h, long keep) {
    while (h->nr_empty > keep) {
        struct span *s = h->empty;
        h->empty = s->next;
        h->nr_empty--;
        span_map_pages(s, NULL, s->page_idx, s->npages);
        page_free(s);
    }
}

static bool list_flush(struct heap *h, struct bin *b, uint32_t keep);
static void run_flush(struct heap *h);
/* bin b's list: its high (the only copy is heap->list_high) and length */
/* Relaxed loads: the report reads other threads' lists too (bin_allocs),
 * each word as last stored (HEAP_COUNT, HEAP_SET). */
static inline uint32_t list_high(const struct heap *h, const struct bin *b) {
    return (uint32_t)__atomic_load_n(&h->list_high[b - h->bins].high, __ATOMIC_RELAXED);
}
static inline uint32_t list_len(const struct heap *h, const struct bin *b) {
    return list_high(h, b) - (uint32_t)__atomic_load_n(&b->list_room, __ATOMIC_RELAXED);
}
/* b's mallocs so far (obj.h, struct bin) */
static uint64_t bin_allocs(const struct heap *h, const struct bin *b) {
    return __atomic_load_n(&b->listed, __ATOMIC_RELAXED) + __atomic_load_n(&b->frees, __ATOMIC_RELAXED) -
           list_len(h, b);
}
/* The caches' decay (empty slabs, large blocks, bin lists), run by the
 * maintenance tick of the calling thread (only the owner touches its
 * caches): once per purge delay, a cache that had no miss halves its high,
 * and what is above it goes to the page heap (a bin list's, to its slabs,
 * so that they can empty), so a burst's memory is given back once bursts
 * stop. */
void heap_decay_current(uint64_t now) {
    struct heap *h = heap_current();
    if (!h || now < h->empty_decay_at) return;
    bool first = h->empty_decay_at == 0;
    h->empty_decay_at = now + (opt.purge_delay_ms ? (uint64_t)opt.purge_delay_ms : 1000);
    if (first) return;
    run_flush(h);
    for (unsigned c = 0; c < NCLASSES; c++) {
        struct bin *b = &h->bins[c];
        uint32_t len = list_len(h, b);
        uint32_t high = (uint32_t)cache_high_decay(&h->list_high[c], classes[c].capacity);
        HEAP_SET(b->list_room, (int32_t)high - (int32_t)len);
        if (len > high) list_flush(h, b, high / 2);
    }
    empty_cache_drain(h, cache_high_decay(&h->empty_high, opt.heap_empty_slabs));
    heap_big_drain(h, cache_high_decay(&h->big_high, 0));
    h->big_given_sizes = 0;
}

/* An empty slab of an exited thread (kind SPAN_SLAB, or SPAN_TAKEN from a
 * heap's cache) goes to the spare lists. */
static void spare_put(struct span *s) {
    if (opt.purge_delay_ms == 0) { /* nothing is kept */
        retire(NULL, s);
        return;
    }
    span_set_kind(s, SPAN_TAKEN);
    s->flags = 0;
    atomic_store_explicit(&s->owner, NULL, memory_order_relaxed);
    objmap_set(s, NULL);
    s->freed_at = os_now_ms();
    atomic_fetch_add_explicit(&spare_pages, s->npages, memory_order_relaxed);
    lf_push(&spare[s->cls], s, s, SPAN_NEXT);
}

/* A spare slab for class c (its pages still map to it), or NULL: one that
 * served c, else one of the same size that served the nearest class. */
static struct span *spare_get(unsigned c) {
    if (atomic_load_explicit(&spare_pages, memory_order_relaxed) == 0) return NULL;
    uint32_t npages = classes[c].pages;
    for (unsigned d = 0; d < NCLASSES; d++) {
        unsigned k[2] = {c - d, c + d}; /* c - d wraps past 0: out of range */
        for (unsigned i = 0; i < (d ? 2u : 1u); i++) {
            if (k[i] >= NCLASSES || classes[k[i]].pages != npages || lf_empty(&spare[k[i]])) continue;
            struct span *s = lf_pop(&spare[k[i]], SPAN_NEXT);
            if (!s) continue;
            atomic_fetch_sub_explicit(&spare_pages, s->npages, memory_order_relaxed);
            return s;
        }
    }
    return NULL;
}

size_t slab_spare_bytes(void) {
    return atomic_load_explicit(&spare_pages, memory_order_relaxed) << PAGE_SHIFT;
}

/* Give spare slabs spared at least min_age_ms ago back to the page heap,
 * purged (they waited here rather than in the zone); 0: every one. */
static void spare_trim(uint64_t min_age_ms) {
    if (!atomic_load_explicit(&spare_pages, memory_order_relaxed)) return; /* no read of spare[] (a page of its own) */
    struct span *old = NULL;
    uint64_t now = os_now_ms();
    for (unsigned o = 0; o < NCLASSES; o++) {
        if (lf_empty(&spare[o])) continue;
        struct span *young = NULL, *young_last = NULL, *s;
        while ((s = lf_pop(&spare[o], SPAN_NEXT))) {
            if (now - s->freed_at < min_age_ms) {
                s->next = young;
                young = s;
                if (!young_last) young_last = s;
            } else {
                atomic_fetch_sub_explicit(&spare_pages, s->npages, memory_order_relaxed);
                s->next = old;
                old = s;
            }
        }
        if (young) lf_push(&spare[o], young, young_last, SPAN_NEXT);
    }
    /* returning pages may run the purger, which comes back here: the
     * spans taken are this call's alone by then */
    while (old) {
        struct span *s = old;
        old = s->next;
        span_map_pages(s, NULL, s->page_idx, s->npages);
        os_purge(s->start, (size_t)s->npages << PAGE_SHIFT);
        s->flags = SPAN_ZEROED;
        page_free(s);
    }
}

/* Let the exhausted slab s (on none of h's lists) float.  Fails (false)
 * when remote frees arrived meanwhile: the caller collects them instead. */
static bool make_full(struct heap *h, struct span *s) {
    uintptr_t e = 0;
    int32_t slow_used = s->slow_used;
    unsigned c = s->cls;
    slab_set_slow_used(s, 0); /* before: once it floats, another thread may take it */
    if (!atomic_compare_exchange_strong_explicit(&s->thread_free, &e, SLAB_FLOATING,
                                                 memory_order_acq_rel, memory_order_relaxed)) {
        slab_set_slow_used(s, slow_used);
        return false;
    }
    h->bin_slow[c].filled = true;
    return true;
}

/* Carve never-used objects onto s->free: every object that starts below a
 * page boundary, so that the bump pointer never has a carved object on its
 * page (the objmap marks whole pages carved).  Past the pages the slab may
 * have written (s->touched: none for a slab fresh from the kernel or
 * purged; for a recycled one, what its bump pointers reached), up to the
 * end of the pages the first of them covers, which its owner is about to
 * write anyway: a page fault costs more than the slow path that the classes
 * of 4 KiB and up then take per object.  Below that (resident pages) at
 * least a page's worth and 8, so that those classes do not take the slow
 * path on every allocation, but never past the written pages. */
static void extend(struct span *s) {
    size_t size = s->obj_size;
    char *p = s->bump;
    size_t left = (size_t)(s->bump_end - p) / size, k;
    uintptr_t written = (uintptr_t)s->start + ((size_t)s->touched << PAGE_SHIFT);
    bool fresh = (uintptr_t)p >= written;
    size_t least = fresh ? 1 : PAGE_SIZE / size < 8 ? 8 : PAGE_SIZE / size;
    /* the page boundary at or after the end of the least'th object */
    uintptr_t boundary = ((uintptr_t)p + least * size + PAGE_SIZE - 1) & ~(uintptr_t)(PAGE_SIZE - 1);
    if (!fresh && boundary > written) boundary = written; /* page-aligned, above p */
    k = (boundary - (uintptr_t)p - 1) / size + 1;
    if (k > left) k = left;
    /* each carved object carries its free tag (its link's line): a free of
     * one never handed out is a double free */
    for (size_t i = 0; i < k; i++) {
        uintptr_t *w = (uintptr_t *)(p + i * size);
        w[0] = slab_link_encode(slab_tag(w), i + 1 < k ? p + (i + 1) * size : s->free);
        w[1] = slab_tag(w);
    }
    s->free = p;
    s->bump = p + k * size;
    objmap_carve(s, p);
}

static struct span *slab_new(struct heap *h, unsigned c) {
    const struct class_info *ci = &classes[c];
    /* an empty slab of this thread's: one that served c, else one of c's
     * size (as for the spare slabs below, a slab keeps to its class) */
    struct span *s = NULL, **pp, **fit = NULL;
    for (pp = &h->empty; *pp; pp = &(*pp)->next) {
        if ((*pp)->npages != ci->pages) continue;
        if (!fit) fit = pp;
        if ((*pp)->cls == c) {
            fit = pp;
            break;
        }
    }
    if (fit) {
        s = *fit;
        *fit = s->next;
        h->nr_empty--;
        HEAP_COUNT(h->slab_cache_hits, 1);
    }
    if (!s && cache_high_raise(&h->empty_high, opt.heap_empty_max)) { /* a burst deeper than the cache */
        HEAP_COUNT(h->slab_cache_raises, 1);
        if ((uint64_t)h->empty_high.high > h->slab_cache_high_peak)
            HEAP_SET(h->slab_cache_high_peak, (uint64_t)h->empty_high.high);
    }
    if (!s) s = spare_get(c);
    bool mapped = s != NULL; /* from a cache: its pages still map to it */
    if (!s) {
        s = page_alloc(ci->pages, 1);
        if (!s) return NULL;
    }
    /* the pages written so far: a recycled slab's bump pointer (of the
     * class it served last) reached at most its touched pages; a slab from
     * the page heap is written whole unless its pages are known zero */
    if (mapped) slab_note_written(s);
    else s->touched = (s->flags & SPAN_ZEROED) ? 0 : s->npages;
    s->cls = (uint8_t)c;
    s->obj_size = ci->size;
    s->obj_inv = class_inv(ci);
    s->capacity = ci->capacity;
    s->free = NULL;
    s->slow_used = 0;
    slab_set_used(s, 0);
    s->bump = s->start;
    s->bump_end = s->start + (size_t)ci->capacity * ci->size;
    s->flags = 0;
    s->next = s->prev = NULL;
    atomic_store_explicit(&s->thread_free, 0, memory_order_relaxed);
    atomic_store_explicit(&s->owner, h, memory_order_relaxed);
    __atomic_store_n(&s->kind, (uint8_t)SPAN_SLAB, __ATOMIC_RELEASE); /* publishes the fields above */
    objmap_set(s, h);
    h->arena_hint = arena_base((uintptr_t)s->start);
    if (!mapped) span_map_pages(s, s, s->page_idx, s->npages);
    /* a class that filled a slab fills this one too: fault it in at once */
    if (!mapped && s->touched == 0 && h->bin_slow[c].filled &&
        thp_populate(s->start, (size_t)s->npages << PAGE_SHIFT, zone_chunk_huge(s)))
        s->touched = s->npages;
    return s;
}

/* Adopt a slab of class c left by an exited thread, or handed on by the
 * frees of other threads while it floated (slab_float_taken). */
static struct span *adopt(struct heap *h, unsigned c) {
    for (;;) {
        if (lf_empty(&abandoned[c])) return NULL;
        struct span *s = lf_pop(&abandoned[c], SPAN_NEXT);
        if (!s) return NULL;
        s->next = s->prev = NULL;
        atomic_store_explicit(&s->owner, h, memory_order_release);
        collect(s);
        objmap_set(s, h);
        h->arena_hint = arena_base((uintptr_t)s->start);
        if (slab_used(s) == 0) {
            if (h->nr_empty < h->empty_high.high) retire(h, s);
            else spare_put(s);
            continue;
        }
        if (s->free || s->bump < s->bump_end) return s;
        if (!make_full(h, s)) return s; /* remote frees arrived: usable */
    }
}

static bool rescue_drain(struct heap *from, struct heap *h, bool exiting);
static void heap_thread_exit(void *arg);
/* registered by the layer above: runs at the end of every thread exit */
static void (*exit_hook)(void);
void heap_set_exit_hook(void (*fn)(void)) { exit_hook = fn; }
static void reclaim_emptied(unsigned budget);
#define RECLAIM_PER_EXIT 128 /* abandoned slabs a thread exit looks at */

static struct heap *heap_create(void) {
    struct heap *h = lf_pop(&heaps_free, HEAP_NEXT);
    if (!h) {
        h = meta_alloc_page(sizeof *h);
        if (!h) return NULL;
        lock_acquire(&heap_lock);
        h->all_next = heaps_all;
        heaps_all = h;
        h->objmap_id = heap_ids < OBJMAP_ID_MAX ? ++heap_ids | OBJMAP_CARVED : OBJMAP_ID_NONE;
        lock_release(&heap_lock);
    }
    for (unsigned c = 0; c < NCLASSES; c++) {
        h->bins[c].list = NULL;
        cache_high_init(&h->list_high[c], classes[c].capacity);
        h->bins[c].list_room = (int32_t)classes[c].capacity;
        h->bins[c].cur = &span_empty;
        h->bins[c].partial = NULL;
        h->bin_slow[c].filled = false;
        h->bins[c].lim = classes[c].free_lim;
        h->bins[c].mul = classes[c].free_mul;
        h->bin_slow[c].refill = 4;
        h->bin_slow[c].young = (uint16_t)class_young_objects(c);
        h->bins[c].listed = 0;
        h->bins[c].frees = 0;
    }
    h->list_refills = h->list_flushes = h->list_flushed = h->remote_batches = 0;
    h->arena_hint = ARENA_HINT_NONE;
    /* h->runs are all empty: a new heap's metadata is zeroed, and an exited
     * thread's heap flushed them (their slab pointers may be stale, which
     * only a free onto that very slab matches) */
    h->large_allocs = h->large_bytes = h->large_frees = h->large_pages = 0;
    h->remote_frees = h->remote_collects = h->remote_collected = 0;
    h->slab_cache_hits = h->slab_cache_raises = 0;
    h->slab_cache_high_peak = (uint64_t)opt.heap_empty_slabs;
    h->empty = NULL;
    h->nr_empty = 0;
    cache_high_init(&h->empty_high, opt.heap_empty_slabs);
    for (unsigned n = 0; n <= BIG_CACHE_PAGES; n++) h->big[n] = NULL;
    h->big_pages = 0;
    h->big_given_sizes = 0;
    cache_high_init(&h->big_high, 0);
    h->big_cache_hits = h->big_cache_returns = 0;
    h->empty_decay_at = 0;
    /* heap_counts reads a heap's counters once it sees it live */
    __atomic_store_n(&h->live, true, __ATOMIC_RELEASE);
    tl_heap = h;
    pthread_setspecific(heap_key, h);
    return h;
}

#ifdef FOLIO_DEBUG
static size_t check_slab(const struct heap *h, unsigned c, const struct span *s);
/* debug builds: every 64th slow-path allocation of a thread checks the slab
 * it allocates from */
static void debug_check_slab(struct heap *h, unsigned c, struct span *s) {
    static __thread uint32_t calls;
    if (++calls % 64 == 0 && check_slab(h, c, s) != 0) {
        os_write_err("folio: slab invariant violated\n");
        os_fatal_ptr("slab:", s);
    }
}
#else
static inline void debug_check_slab(struct heap *h, unsigned c, struct span *s) {
    (void)h, (void)c, (void)s;
}
#endif

void *small_alloc_slow(size_t n, bool may_take_pages, bool *need_pages) {
    struct heap *h = heap_current();
    if (!h && !(h = heap_create())) {
        as_reclaim(); /* no heap yet: nothing of this thread's to give back */
        if (!(h = heap_create())) {
            errno = ENOMEM;
            return NULL;
        }
    }
    unsigned c = small_class_of(n);
    struct bin *b = &h->bins[c];
    struct bin_slow *young = NULL; /* b's class is young: served from its young target's bin */
    if (unlikely(h->bin_slow[c].young)) {
        young = &h->bin_slow[c];
        c = classes[c].young;
        b = &h->bins[c];
        void **p = b->list;
        if (p) { /* the target's list, as small_alloc_fast pops it */
            young->young--;
            return bin_pop(b, p, bin_link_next(c, p));
        }
    }
    run_flush(h); /* before this thread looks for free objects: what it holds may be them */
    bool carved = false;
    for (;;) {
        struct span *s = b->cur;
        if (s != &span_empty) {
            if (s->free || collect(s)) break;
            if (s->bump < s->bump_end) {
                /* another slab's free objects before a page of this one
                 * that nothing wrote yet: s (in use, so it cannot empty
                 * unseen) waits on the partial list with its bump area */
                struct span *p = b->partial;
                if (p && p->free && slab_used(s) != 0 &&
                    (uintptr_t)s->bump >= (uintptr_t)s->start + ((size_t)s->touched << PAGE_SHIFT)) {
                    span_list_remove(&b->partial, p);
                    slab_set_slow_used(s, 0); /* no longer current */
                    span_list_push(&b->partial, s);
                    slab_set_slow_used(p, -1); /* current */
                    b->cur = p;
                    continue;
                }
                extend(s);
                carved = true;
                break;
            }
            if (!make_full(h, s)) continue;
            b->cur = &span_empty;
        }
        if (atomic_load_explicit(&h->rescue_mask, memory_order_relaxed)) rescue_drain(h, h, false);
        if (b->partial) {
            s = b->partial;
            span_list_remove(&b->partial, s);
            slab_set_slow_used(s, -1); /* current */
            b->cur = s;
            continue;
        }
        s = adopt(h, c);
        if (!s) {
            if (!may_take_pages) { /* the caller runs the maintenance tick first */
                *need_pages = true;
                return NULL;
            }
            s = slab_new(h, c);
            if (!s) { /* a mapping failed: give address space back, retry once */
                as_reclaim();
                s = slab_new(h, c);
            }
        }
        if (!s) {
            errno = ENOMEM;
            return NULL;
        }
        slab_set_slow_used(s, -1); /* current */
        b->cur = s;
    }
    /* the list is empty: it takes the slab's free list (counted used from
     * now on, with no object read), and malloc the first object of it; of
     * objects carved just now (in cache) only a batch, so that a thread
     * that uses a class little does not hold a page of it (what a thread's
     * lists hold it gives back one object at a time when it exits).  Other
     * free lists are taken whole: walking one (another thread's frees,
     * cold) would wait on each object in turn. */
    struct span *s = b->cur;
    debug_check_slab(h, c, s);
    uint32_t used = slab_used(s);
    uint32_t nfree = s->capacity - used - (uint32_t)((size_t)(s->bump_end - s->bump) / s->obj_size);
    void **p = s->free;
    uint32_t batch = h->bin_slow[c].refill;
    if (batch < classes[c].list_batch)
        h->bin_slow[c].refill = (uint16_t)(batch * 2 < classes[c].list_batch ? batch * 2 : classes[c].list_batch);
    if (carved && nfree > batch) {
        nfree = batch;
        void *last = p;
        for (uint32_t i = 1; i < nfree; i++) last = slab_link_next(last);
        s->free = slab_link_next(last);
        *(uintptr_t *)last = slab_link_encode(slab_tag(last), NULL);
    } else {
        s->free = NULL;
    }
    slab_set_used(s, used + nfree);
    cache_high_raise(&h->list_high[c], class_list_max[c]); /* grows if it flushed and runs dry again */
    b->list = slab_link_next(p);
    HEAP_SET(b->list_room, (int32_t)list_high(h, b) - (int32_t)(nfree - 1));
    p[1] = NULL;
    HEAP_COUNT(b->listed, nfree); /* and malloc takes p: one of them */
    HEAP_COUNT(h->list_refills, 1);
    if (young) young->young--;
    return p;
}

static bool remote_push_run(struct heap *h, struct span *s, void *first, void *last, uint32_t n, bool exiting);
/* A run of n of s's objects (first -> ... -> last, tagged free) from h's
 * bin list goes back onto s->free: only last's link is written.  True when
 * that retired s: it emptied (not the current slab).  A slab that floats,
 * or that was handed on to another heap meanwhile, takes the run as a
 * remote push (its free list is not h's to write).  At thread exit
 * (exiting) an emptied slab stays where it is: heap_abandon spares it for
 * the next threads instead of the page heap. */
static bool slab_put(struct heap *h, struct span *s, void *first, void *last, uint32_t n, bool exiting) {
    /* only h sets SLAB_FLOATING, and a slab handed on floats until its taker
     * owns it: so without the bit, the owner read next is the slab's */
    if (unlikely(atomic_load_explicit(&s->thread_free, memory_order_acquire) & SLAB_FLOATING) ||
        unlikely(atomic_load_explicit(&s->owner, memory_order_relaxed) != h))
        return remote_push_run(h, s, first, last, n, exiting);
    *(uintptr_t *)last = slab_link_encode(slab_tag(last), s->free);
    s->free = first;
    s->room -= (int32_t)n; /* used - n */
    if (s->room >= 0) return false;
    struct bin *b = &h->bins[s->cls];
    if (s == b->cur || exiting) return false; /* keep the current slab even when empty */
    span_list_remove(&b->partial, s);
    retire(h, s);
    return true;
}

/* heap_counts' floating_slabs_*: what became of floating slabs that other
 * threads' frees took */
static _Atomic uint64_t floating_queued, floating_handed, floating_spared;

/* The abandoned lists take s (its objects' frees push; an adopter or the
 * purger collects them).  The owner is written before anything else: a
 * list flush of its old owner reads it once SLAB_FLOATING is gone. */
static void float_hand_on(struct span *s) {
    atomic_store_explicit(&s->owner, &heap_abandoned, memory_order_release);
    objmap_set(s, NULL); /* its old owner's frees find the span, and push */
    atomic_fetch_add_explicit(&floating_handed, 1, memory_order_relaxed);
    lf_push(&abandoned[s->cls], s, s, SPAN_NEXT);
}

/* Every object of s came back onto its remote list, which this thread
 * claimed: the spare lists take s, for the next new slab of any thread. */
static void float_spare(struct span *s) {
    atomic_store_explicit(&s->thread_free, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&floating_spared, 1, memory_order_relaxed);
    spare_put(s);
}

/* s, taken back by its owner h with SLAB_TF_BITS cleared: its remote list
 * collected, onto its bin's partial list, or retired when that emptied it
 * (true; at exit it stays for heap_abandon to spare). */
static bool float_take_back(struct heap *h, struct span *s, bool exiting) {
    collect(s);
    if (slab_used(s) == 0 && !exiting) {
        retire(h, s);
        return true;
    }
    span_list_push(&h->bins[s->cls].partial, s);
    return false;
}

/* ---- the rescue slots ----
 * A heap's rescue[] holds its floating slabs that another thread's push
 * took (slab_float_taken); bit i of rescue_mask is set from when a pusher
 * allocates slot i until the slot is emptied again, so a pusher that finds
 * a bit clear finds its slot NULL.  A slot is emptied by exactly one of:
 * its heap (or, for a heap whose thread exited, the purger) with an
 * exchange, or the thread whose push brought every object of its slab back
 * (float_complete) with a compare-and-swap; whichever does decides the
 * slab's fate.  Between them, thread_free's compare-and-swaps decide who
 * has the objects: SLAB_TAKEN alone (no count) means the completing thread
 * claimed them. */
static bool rescue_queue(struct heap *o, struct span *s) {
    uint64_t m = atomic_load_explicit(&o->rescue_mask, memory_order_relaxed), bit;
    do {
        if (m == UINT64_MAX) return false;
        bit = ~m & (m + 1);
    } while (!atomic_compare_exchange_weak_explicit(&o->rescue_mask, &m, m | bit, memory_order_acquire,
                                                    memory_order_relaxed));
    atomic_store_explicit(&o->rescue[__builtin_ctzll(bit)], s, memory_order_release);
    return true;
}

/* Empty from's rescue slots.  h == from (its own thread, or its exit:
 * exiting): each slab goes back to its bin's partial list, or retires when
 * empty.  h == NULL (the purger, from's thread gone): each goes to the
 * abandoned lists (counted handed on), or to the spare lists when empty.
 * True when a slab was retired. */
static bool rescue_drain(struct heap *from, struct heap *h, bool exiting) {
    uint64_t m = atomic_load_explicit(&from->rescue_mask, memory_order_acquire);
    bool retired = false;
    while (m) {
        unsigned i = (unsigned)__builtin_ctzll(m);
        m &= m - 1;
        struct span *s = atomic_exchange_explicit(&from->rescue[i], NULL, memory_order_acq_rel);
        if (!s) continue; /* its pusher has not stored it yet, or float_complete took it */
        atomic_fetch_and_explicit(&from->rescue_mask, ~(1ull << i), memory_order_release);
        if (!h) atomic_store_explicit(&s->owner, &heap_abandoned, memory_order_release);
        uintptr_t tf = atomic_load_explicit(&s->thread_free, memory_order_acquire);
        while (tf != SLAB_TAKEN && !atomic_compare_exchange_weak_explicit(&s->thread_free, &tf, tf & ~SLAB_TF_BITS,
                                                                          memory_order_acq_rel, memory_order_acquire))
            ;
        if (tf == SLAB_TAKEN) { /* a thread's push brought every object back, and claimed them */
            float_spare(s);
        } else if (h) {
            retired |= float_take_back(h, s, exiting);
        } else {
            collect(s);
            if (slab_used(s) == 0) spare_put(s);
            else float_hand_on(s);
        }
    }
    return retired;
}

/* The push that took floating slab s's remote list (now tf) to its bar
 * (and set SLAB_TAKEN): this thread alone decides where s goes (see
 * obj.h).  True when s was retired (the owner's own push emptied it). */
static __attribute__((noinline, cold)) bool slab_float_taken(struct heap *h, struct span *s, uintptr_t tf, bool exiting) {
    struct heap *o = atomic_load_explicit(&s->owner, memory_order_acquire);
    if (h && o == h) {
        atomic_fetch_and_explicit(&s->thread_free, ~SLAB_TF_BITS, memory_order_acq_rel);
        return float_take_back(h, s, exiting);
    }
    if (slab_remote_count(tf) == s->capacity) { /* no object in use, none on any list */
        float_spare(s);
        return false;
    }
    if (__atomic_load_n(&o->live, __ATOMIC_ACQUIRE) && rescue_queue(o, s)) {
        atomic_fetch_add_explicit(&floating_queued, 1, memory_order_relaxed);
        return false;
    }
    float_hand_on(s); /* its owner exited, or has 64 slabs waiting */
    return false;
}

/* This thread's push (head) brought every object of s, which a push took
 * while it floated, back onto its remote list.  If s waits in its owner's
 * rescue slots, take it from there (the owner may be busy elsewhere,
 * descheduled or gone) and give it to the spare lists, where the next new
 * slab of any thread finds it.
 * Nothing of s is this thread's any more: since the push, the owner (or
 * the purger) may have emptied the slot, collected the objects and retired
 * s, which may even serve again.  Its owner is then NULL (retired, spare),
 * or a heap (heap structs are never freed) whose slots do not hold this s
 * with this head: the compare-and-swaps below fail on what changed. */
static __attribute__((noinline, cold)) void float_complete(struct span *s, uintptr_t head) {
    struct heap *o = atomic_load_explicit(&s->owner, memory_order_acquire);
    if (!o || o == &heap_abandoned) return; /* retired meanwhile; or handed on: an adopter or the purger takes it */
    for (unsigned i = 0; i < RESCUE_SLOTS; i++) {
        if (atomic_load_explicit(&o->rescue[i], memory_order_acquire) != s) continue;
        if (!atomic_compare_exchange_strong_explicit(&s->thread_free, &head, SLAB_TAKEN, memory_order_acq_rel,
                                                     memory_order_relaxed))
            return; /* its owner took it meanwhile */
        struct span *want = s;
        if (!atomic_compare_exchange_strong_explicit(&o->rescue[i], &want, NULL, memory_order_acq_rel,
                                                     memory_order_relaxed))
            return; /* its owner (or the purger) emptied the slot: it gives s away */
        atomic_fetch_and_explicit(&o->rescue_mask, ~(1ull << i), memory_order_release);
        float_spare(s);
        return;
    }
}

/* s floats, and its owner's thread exited: the first free takes it (to the
 * abandoned lists, where any thread adopts it), as the exit would have
 * had s been on a list */
static inline bool float_owner_gone(const struct span *s) {
    return !__atomic_load_n(&atomic_load_explicit(&s->owner, memory_order_relaxed)->live, __ATOMIC_RELAXED);
}

/* Hand a run of one slab's objects (first .. last, linked, n of them) to
 * the slab's owner: one atomic push onto s->thread_free.  Inline: a free of
 * another thread's object is one such push of one object.  True when s was
 * retired (slab_float_taken). */
static inline __attribute__((always_inline)) bool remote_push_run(struct heap *h, struct span *s, void *first, void *last, uint32_t n, bool exiting) {
    uintptr_t *w = last, tag = slab_tag(last);
    uintptr_t old = atomic_load_explicit(&s->thread_free, memory_order_relaxed), head;
    /* read while these n objects are out: until the push s cannot be
     * retired; after it, its owner may retire it and another thread make it
     * a new slab (slab_new writes capacity) */
    uint32_t capacity = s->capacity;
    bool take;
    do {
        w[0] = slab_link_encode(tag, slab_remote_head(old));
        head = slab_remote_push(old, first, n);
        take = unlikely((old & SLAB_TF_BITS) == SLAB_FLOATING) &&
               (slab_remote_count(head) >= slab_float_bar(s) || float_owner_gone(s));
        if (take) head |= SLAB_TAKEN;
    } while (!atomic_compare_exchange_weak_explicit(&s->thread_free, &old, head,
                                                    memory_order_acq_rel, memory_order_relaxed));
    if (h) HEAP_COUNT(h->remote_batches, 1);
    if (unlikely(take)) return slab_float_taken(h, s, head, exiting);
    if (unlikely(old & SLAB_TAKEN) && slab_remote_count(head) == capacity) float_complete(s, head);
    return false;
}

/* Give objects of bin b's list (all of h's own slabs) back to their slabs
 * until `keep` remain, in runs: objects of one slab next to each other on
 * the list are still linked as they should be on the slab, so a run costs
 * one lookup and one link, and each object one read.  True when a slab was
 * retired (the caller runs the tick).  h is explicit: at thread exit
 * tl_heap is no longer h. */
static bool list_flush_as(struct heap *h, struct bin *b, uint32_t keep, bool exiting) {
    uint32_t len = list_len(h, b), n = 0;
    unsigned c = (unsigned)(b - h->bins);
    bool retired = false;
    while (len > keep) {
        void *first = b->list, *last = first, *next = bin_link_next(c, first);
        struct span *s = span_lookup((uintptr_t)first);
        const char *lo = s->start, *hi = s->bump; /* s's objects lie in [start, bump) */
        uint32_t k = 1;
        while (len - k > keep && (const char *)next >= lo && (const char *)next < hi) {
            last = next;
            next = bin_link_next(c, next);
            k++;
        }
        b->list = next;
        len -= k;
        n += k;
        retired |= slab_put(h, s, first, last, k, exiting);
    }
    HEAP_SET(b->list_room, (int32_t)(list_high(h, b) - len));
    HEAP_COUNT(b->listed, -(uint64_t)n);
    if (n) {
        HEAP_COUNT(h->list_flushes, 1);
        HEAP_COUNT(h->list_flushed, n);
    }
    return retired;
}
static bool list_flush(struct heap *h, struct bin *b, uint32_t keep) {
    return list_flush_as(h, b, keep, false);
}

/* A free's push found the list past its bound: half of it goes back to
 * its slabs.  True when a slab was retired (the caller runs the tick). */
bool small_free_slow(const struct span *s) {
    struct heap *h = tl_heap;
    struct bin *b = &h->bins[s->cls];
    uint32_t before = list_len(h, b);
    bool retired = list_flush(h, b, list_high(h, b) / 2);
    cache_high_give(&h->list_high[s->cls], (long)before - (long)list_len(h, b));
    return retired;
}

/* small_free's faults: a pointer that is no object start, or one past the
 * bump pointer, is invalid; an object already free is a double free.
 * noipa: the compiler must not find out that it does not return (free()
 * would then call it, with a stack frame, instead of jumping to it). */
__attribute__((noipa, cold)) void slab_free_fault(const struct span *s, const void *p) {
    if (!small_is_object_start(s, p)) slab_bad_free(p);
    if (small_is_freed(p)) os_fatal_ptr("free(): double free", p);
    slab_bad_free(p);
}

/* malloc's pop when the head p of its bin's list links to another arena:
 * the bin is found again from p's slab (a list holds objects of its own
 * class), the link followed as a flush follows it.  noipa: malloc jumps
 * here, with no stack frame of its own. */
__attribute__((noipa)) void *bin_pop_far(void *p) {
    struct heap *h = tl_heap;
    const struct span *s = span_lookup((uintptr_t)p);
    if (!s || span_kind(s) != SPAN_SLAB || h->bins[s->cls].list != p) slab_bad_link(p);
    return bin_pop(&h->bins[s->cls], p, bin_link_next(s->cls, p));
}

/* Hand class c's pending run (if it holds objects) to its slab; the slab
 * stays the one the class's next remote free is compared with (a slab with
 * objects out cannot be retired, so a match is always the same slab). */
static void run_push(struct heap *h, unsigned c) {
    struct remote_run *r = &h->runs[c];
    if (!r->n) return;
    remote_push_run(h, r->slab, r->first, r->last, r->n, false);
    r->first = r->last = NULL;
    r->n = 0;
    h->runs_pending[c / 64] &= ~(1ull << (c % 64));
}
/* every pending run (not inlined: four callers, none of them hot) */
static __attribute__((noinline)) void run_flush(struct heap *h) {
    for (unsigned w = 0; w < sizeof h->runs_pending / sizeof h->runs_pending[0]; w++)
        while (h->runs_pending[w]) run_push(h, w * 64 + (unsigned)__builtin_ctzll(h->runs_pending[w]));
}

/* A thread with no heap that frees other threads' objects gets one at its
 * HEAPLESS_FREES_MAX-th such free, so that a thread that only frees (a
 * consumer) batches them too; a thread whose heap was torn down at its exit
 * never does (HEAPLESS_EXITED): a free from a later destructor is pushed at
 * once, leaving nothing pending that no exit would flush. */
#define HEAPLESS_FREES_MAX 16
#define HEAPLESS_EXITED UINT8_MAX
static __thread uint8_t tl_heapless_frees __attribute__((tls_model("initial-exec")));
/* the heap a heapless thread's remote free of class c counts in, or NULL
 * (counted in the shared counters) */
static __attribute__((noinline, cold)) struct heap *heapless_remote_free(unsigned c) {
    if (tl_heapless_frees < HEAPLESS_FREES_MAX && ++tl_heapless_frees == HEAPLESS_FREES_MAX) {
        struct heap *h = heap_create();
        if (h) return h; /* (NULL: the metadata is out of memory) */
    }
    atomic_fetch_add_explicit(&remote_frees_without_heap[c], 1, memory_order_relaxed);
    return NULL;
}

/* A free by a thread that does not own s (or of an abandoned slab).  The
 * first free of a class onto a slab is pushed at once (one compare-and-swap,
 * as with no batching: a program that frees other threads' objects in no
 * order pays nothing more); the next ones of the class onto the same slab
 * wait on the class's pending run, which goes over in one push (classes of
 * 8 KiB and more: each pushed at once). */
void slab_remote_free(struct span *s, void *p) {
    if (unlikely(!small_is_object_start(s, p))) slab_bad_free(p);
    uintptr_t *w = p;
    uintptr_t tag = slab_tag(p);
    if (unlikely(w[1] == tag)) os_fatal_ptr("free(): double free", p);
    unsigned c = s->cls;
    w[1] = tag;
    struct heap *h = heap_current();
    if (unlikely(!h)) h = heapless_remote_free(c);
    if (h) {
        HEAP_COUNT(h->bins[c].frees, 1);
        HEAP_COUNT(h->bins[c].listed, (uint64_t)-1); /* a free that no list took */
        HEAP_COUNT(h->remote_frees, 1);
        struct remote_run *r = &h->runs[c];
        if (s == r->slab && classes[c].run_max > 1) {
            if (r->n >= classes[c].run_max) run_push(h, c);
            if (!r->n) {
                r->last = p;
                h->runs_pending[c / 64] |= 1ull << (c % 64);
            }
            w[0] = slab_link_encode(tag, r->first);
            r->first = p;
            r->n++;
            return;
        }
        run_push(h, c);
        r->slab = s;
    }
    remote_push_run(h, s, p, p, 1, false);
}

/* Thread exit: give every slab with live objects to the abandoned lists and
 * the rest to the spare lists; the heap struct is kept for reuse. */
static void heap_abandon(struct heap *h) {
    run_flush(h);
    for (unsigned c = 0; c < NCLASSES; c++) list_flush_as(h, &h->bins[c], 0, true);
    rescue_drain(h, h, true); /* (what other threads queue from now on, the purger takes) */
    for (unsigned c = 0; c < NCLASSES; c++) {
        struct bin *b = &h->bins[c];
        struct span *list = NULL;
        if (b->cur != &span_empty) {
            slab_set_slow_used(b->cur, 0); /* no longer current */
            span_list_push(&list, b->cur);
        }
        b->cur = &span_empty;
        while (b->partial) {
            struct span *s = b->partial;
            span_list_remove(&b->partial, s);
            span_list_push(&list, s);
        }
        while (list) {
            struct span *s = list;
            list = s->next;
            collect(s);
            if (slab_used(s) == 0) {
                spare_put(s);
                continue;
            }
            atomic_store_explicit(&s->owner, &heap_abandoned, memory_order_release);
            objmap_set(s, NULL);
            lf_push(&abandoned[c], s, s, SPAN_NEXT);
        }
    }
    while (h->empty) {
        struct span *s = h->empty;
        h->empty = s->next;
        spare_put(s);
    }
    h->nr_empty = 0;
    heap_big_drain(h, 0);
    lock_acquire(&heap_lock);
    for (unsigned c = 0; c < NCLASSES; c++) {
        dead_allocs[c] += bin_allocs(h, &h->bins[c]);
        dead_frees[c] += h->bins[c].frees;
        h->bins[c].listed = h->bins[c].frees = 0;
    }
    dead_counts.large_allocs += h->large_allocs;
    dead_counts.large_bytes += h->large_bytes;
    dead_counts.large_frees += h->large_frees;
    dead_counts.large_pages += h->large_pages;
    h->large_allocs = h->large_bytes = h->large_frees = h->large_pages = 0;
    dead_counts.remote_frees += h->remote_frees;
    dead_counts.remote_collects += h->remote_collects;
    dead_counts.remote_collected += h->remote_collected;
    dead_counts.slab_cache_hits += h->slab_cache_hits;
    dead_counts.slab_cache_raises += h->slab_cache_raises;
    dead_counts.big_cache_hits += h->big_cache_hits;
    dead_counts.big_cache_returns += h->big_cache_returns;
    h->big_cache_hits = h->big_cache_returns = 0;
    dead_counts.list_refills += h->list_refills;
    dead_counts.list_flushes += h->list_flushes;
    dead_counts.list_flushed += h->list_flushed;
    dead_counts.remote_batches += h->remote_batches;
    h->list_refills = h->list_flushes = h->list_flushed = h->remote_batches = 0;
    if (h->slab_cache_high_peak > dead_counts.slab_cache_high_peak)
        dead_counts.slab_cache_high_peak = h->slab_cache_high_peak;
    h->remote_frees = h->remote_collects = h->remote_collected = 0;
    h->slab_cache_hits = h->slab_cache_raises = 0;
    __atomic_store_n(&h->live, false, __ATOMIC_RELAXED);
    lock_release(&heap_lock);
    lf_push(&heaps_free, h, h, HEAP_NEXT);
    /* the frees of this thread (and of the others) emptied abandoned slabs:
     * spare them for the threads to come, a bounded share per exit */
    reclaim_emptied(RECLAIM_PER_EXIT);
}

static void heap_thread_exit(void *arg) {
    struct heap *h = arg;
    if (h && tl_heap == h) {
        tl_heap = HEAP_NONE;
        tl_heapless_frees = HEAPLESS_EXITED;
        heap_abandon(h);
    }
    if (exit_hook) exit_hook();
}

/* Move abandoned slabs whose objects have all been freed to the spare lists
 * (no thread adopts them otherwise): up to `budget` slabs (0: every one),
 * round robin over the classes.  Each slab looked at is popped, so it is
 * this call's alone meanwhile (an adopter may take the others); the ones
 * still in use go back on top of their stack. */
static void reclaim_emptied(unsigned budget) {
    static _Atomic unsigned next_class;
    unsigned left = budget ? budget : UINT_MAX;
    unsigned c = budget ? atomic_load_explicit(&next_class, memory_order_relaxed) % NCLASSES : 0;
    for (unsigned k = 0; k < NCLASSES && left; k++, c = (c + 1) % NCLASSES) {
        struct span *keep = NULL, *keep_last = NULL, *s;
        while (left && (s = lf_pop(&abandoned[c], SPAN_NEXT))) {
            left--;
            collect(s);
            if (slab_used(s) == 0) {
                spare_put(s);
                continue;
            }
            s->next = keep;
            keep = s;
            if (!keep_last) keep_last = s;
        }
        if (keep) lf_push(&abandoned[c], keep, keep_last, SPAN_NEXT);
    }
    if (budget) atomic_store_explicit(&next_class, c, memory_order_relaxed);
}

/* Slabs queued in the rescue slots of heaps whose thread exited (after it
 * emptied them) go to the abandoned lists, up to 16 heaps per call.  A
 * heap reused meanwhile by a new thread loses them to the abandoned lists
 * too, which is safe (rescue_drain). */
static void rescue_orphans(void) {
    struct heap *dead[16];
    unsigned n = 0;
    lock_acquire(&heap_lock);
    for (struct heap *h = heaps_all; h && n < 16; h = h->all_next)
        if (!__atomic_load_n(&h->live, __ATOMIC_RELAXED) &&
            atomic_load_explicit(&h->rescue_mask, memory_order_relaxed))
            dead[n++] = h;
    lock_release(&heap_lock);
    for (unsigned i = 0; i < n; i++) rescue_drain(dead[i], NULL, false);
}

/* The purger's share: every emptied abandoned slab to the spare lists, and
 * the spare slabs no thread took within a quarter of the delay back. */
void slab_reclaim_abandoned(void) {
    rescue_orphans();
    reclaim_emptied(0);
    spare_trim((uint64_t)opt.purge_delay_ms / 4);
}

static const struct obj_hooks hooks = {
    .reclaim = slab_reclaim_abandoned,
    .give_back = heap_trim_current,
    .held_bytes = slab_spare_bytes,
};

uint64_t slab_secret;

void slab_init(void) {
    /* the heap registry's page (heaps_free, heaps_all, heap_ids; then
     * arena_map[0]) is first read (heap_create's pop, free(NULL)) and
     * written only after: a write here makes its first touch one fault,
     * not a zero-page mapping and then its copy */
    __atomic_store_n(&heap_ids, 0, __ATOMIC_RELAXED);
    slab_secret = os_random_seed();
    pthread_key_create(&heap_key, heap_thread_exit);
    purge_register(&hooks);
}

/* Totals over dead heaps, live heaps and heapless frees.  An object's
 * alloc and free may be counted on different heaps: live bytes are summed
 * per class (exact once the threads are quiet; counts wrap consistently). */
void heap_counts(struct heap_counts *hc) {
    uint64_t allocs[NCLASSES], frees[NCLASSES];
    lock_acquire(&heap_lock);
    *hc = dead_counts;
    hc->large_allocs += atomic_load_explicit(&heapless_large.allocs, memory_order_relaxed);
    hc->large_bytes += atomic_load_explicit(&heapless_large.bytes, memory_order_relaxed);
    hc->large_frees += atomic_load_explicit(&heapless_large.frees, memory_order_relaxed);
    hc->large_pages += atomic_load_explicit(&heapless_large.pages, memory_order_relaxed);
    for (unsigned c = 0; c < NCLASSES; c++) {
        allocs[c] = dead_allocs[c];
        uint64_t heapless = atomic_load_explicit(&remote_frees_without_heap[c], memory_order_relaxed);
        frees[c] = dead_frees[c] + heapless;
        hc->remote_frees += heapless;
        hc->remote_batches += heapless; /* a thread without a heap pushes each at once */
    }
    for (struct heap *h = heaps_all; h; h = h->all_next) {
        if (!__atomic_load_n(&h->live, __ATOMIC_ACQUIRE)) continue;
        for (unsigned c = 0; c < NCLASSES; c++) {
            allocs[c] += bin_allocs(h, &h->bins[c]);
            frees[c] += __atomic_load_n(&h->bins[c].frees, __ATOMIC_RELAXED);
        }
        hc->large_allocs += __atomic_load_n(&h->large_allocs, __ATOMIC_RELAXED);
        hc->large_bytes += __atomic_load_n(&h->large_bytes, __ATOMIC_RELAXED);
        hc->large_frees += __atomic_load_n(&h->large_frees, __ATOMIC_RELAXED);
        hc->large_pages += __atomic_load_n(&h->large_pages, __ATOMIC_RELAXED);
        hc->remote_frees += __atomic_load_n(&h->remote_frees, __ATOMIC_RELAXED);
        hc->remote_collects += __atomic_load_n(&h->remote_collects, __ATOMIC_RELAXED);
        hc->remote_collected += __atomic_load_n(&h->remote_collected, __ATOMIC_RELAXED);
        hc->slab_cache_hits += __atomic_load_n(&h->slab_cache_hits, __ATOMIC_RELAXED);
        hc->slab_cache_raises += __atomic_load_n(&h->slab_cache_raises, __ATOMIC_RELAXED);
        hc->big_cache_hits += __atomic_load_n(&h->big_cache_hits, __ATOMIC_RELAXED);
        hc->big_cache_returns += __atomic_load_n(&h->big_cache_returns, __ATOMIC_RELAXED);
        hc->list_refills += __atomic_load_n(&h->list_refills, __ATOMIC_RELAXED);
        hc->list_flushes += __atomic_load_n(&h->list_flushes, __ATOMIC_RELAXED);
        hc->list_flushed += __atomic_load_n(&h->list_flushed, __ATOMIC_RELAXED);
        hc->remote_batches += __atomic_load_n(&h->remote_batches, __ATOMIC_RELAXED);
        uint64_t high = __atomic_load_n(&h->slab_cache_high_peak, __ATOMIC_RELAXED);
        if (high > hc->slab_cache_high_peak) hc->slab_cache_high_peak = high;
    }
    lock_release(&heap_lock);
    hc->floating_slabs_queued = atomic_load_explicit(&floating_queued, memory_order_relaxed);
    hc->floating_slabs_handed = atomic_load_explicit(&floating_handed, memory_order_relaxed);
    hc->floating_slabs_spared = atomic_load_explicit(&floating_spared, memory_order_relaxed);
    for (unsigned c = 0; c < NCLASSES; c++) {
        hc->small_allocs += allocs[c];
        hc->small_bytes += allocs[c] * classes[c].size;
        hc->frees += frees[c];
        hc->small_live_bytes += (allocs[c] - frees[c]) * classes[c].size;
    }
}

/* Give the calling thread's empty slabs back to the page heap (malloc_trim,
 * as_reclaim): its cache of empty slabs, each bin's current slab when
 * nothing in it is in use (the bin takes a slab again on its next miss),
 * and every spare slab. */
void heap_trim_current(void) {
    struct heap *h = heap_current();
    if (h) { /* first: the objects they hold may empty abandoned slabs */
        run_flush(h);
        for (unsigned c = 0; c < NCLASSES; c++) list_flush(h, &h->bins[c], 0);
    }
    reclaim_emptied(0);
    spare_trim(0);
    if (!h) return;
    for (unsigned c = 0; c < NCLASSES; c++) {
        struct bin *b = &h->bins[c];
        struct span *s = b->cur;
        if (s == &span_empty) continue;
        collect(s);
        if (slab_used(s) != 0) continue;
        b->cur = &span_empty;
        slab_set_slow_used(s, 0);
        retire(NULL, s);
    }
    empty_cache_drain(h, 0);
    heap_big_drain(h, 0);
}

void heap_visit_locks(lock_visit_fn *fn, void *ctx) {
    fn(ctx, "heaps", -1, &heap_lock);
    dense_visit_locks(fn, ctx);
}

/* fork: the lock-free stacks need nothing (a span or heap another thread
 * held in the middle of a push or pop is lost to the child, as that
 * thread's own heap is) */
void heap_lock_all(void) {
    lock_acquire(&heap_lock);
    dense_lock_all();
}
void heap_unlock_all(bool child) {
    dense_unlock_all(child);
    if (child) lock_reset(&heap_lock);
    else lock_release(&heap_lock);
}

/* ---- invariants (obj.h), checked by the owner ---- */

/* Walk a free list from p, decoded as slab_link_next does, without ending
 * the process on a bad link: entries counted in *n (at most `limit`, past
 * which the list has a cycle or more objects than can be free).  Every
 * entry must be an object start of s below the bump pointer that carries
 * its free tag. */
static size_t check_list(const struct span *s, const void *p, uint32_t limit, uint32_t *n) {
    size_t bad = 0;
    *n = 0;
    while (p) {
        if (++*n > limit) return bad + 1;
        if (!small_is_object_start(s, p) || (const char *)p >= s->bump || !small_is_freed(p))
            return bad + 1; /* not an object of s: do not read further */
        uintptr_t d = *(const uintptr_t *)p ^ slab_secret; /* next ^ p */
        if (!slab_link_stays(d, p)) return bad + 1;
        p = slab_link_next(p);
    }
    return bad;
}

/* One slab of bin c of heap h (h's thread only).  used, free and bump are
 * the owner's, so used + free list + bump area == capacity holds exactly.
 * Other threads may push onto thread_free meanwhile, but only at its head:
 * the list from one snapshot of the head stays as it is until the owner
 * collects it, every object on it is counted in used, so its length is at
 * most used, and the snapshot's count is that length. */
static size_t check_slab(const struct heap *h, unsigned c, const struct span *s) {
    size_t bad = 0;
    bad += span_kind(s) != SPAN_SLAB;
    bad += atomic_load_explicit(&s->owner, memory_order_relaxed) != h;
    bad += s->cls != c || s->obj_size != classes[c].size || s->capacity != classes[c].capacity;
    if (s->bump < s->start || s->bump > s->bump_end ||
        (size_t)(s->bump - s->start) % s->obj_size != 0 ||
        s->bump_end != s->start + (size_t)s->capacity * s->obj_size)
        return bad + 1;
    uint32_t bump_objs = (uint32_t)((size_t)(s->bump_end - s->bump) / s->obj_size), nfree, nremote;
    bad += check_list(s, s->free, s->capacity, &nfree);
    uint32_t used = slab_used(s);
    bad += used > s->capacity || (uint64_t)used + nfree + bump_objs != s->capacity;
    uintptr_t tf = atomic_load_explicit(&s->thread_free, memory_order_acquire);
    bad += (tf & SLAB_TF_BITS) != 0; /* on a list of h's: not floating */
    bad += check_list(s, slab_remote_head(tf), used, &nremote);
    bad += nremote != slab_remote_count(tf); /* the head's count is the list's length */
    bad += s->slow_used != (s == h->bins[c].cur ? -1 : 0);
    /* the objmap words: h's id, the class, the page, carved up to the bump
     * pointer's page (every object started below it is carved) */
    uint32_t id = h->objmap_id != OBJMAP_ID_NONE ? h->objmap_id & ~OBJMAP_CARVED : 0;
    const _Atomic uint32_t *w = arena_objmap_slot((uintptr_t)s->start);
    for (uint32_t i = 0; i < s->npages; i++) {
        const char *page_end = s->start + ((size_t)(i + 1) << PAGE_SHIFT);
        bool carved = page_end <= s->bump || s->bump == s->bump_end;
        bad += atomic_load_explicit(&w[i], memory_order_relaxed) != objmap_word(id, c, i, carved);
    }
    /* extend() carves to a page boundary: no carved object starts on the
     * bump pointer's page (whose word says not carved) */
    if (s->bump != s->start && s->bump != s->bump_end)
        bad += (size_t)(s->bump - s->obj_size - s->start) >> PAGE_SHIFT ==
               (size_t)(s->bump - s->start) >> PAGE_SHIFT;
    return bad;
}

/* A bin list: linked both ways, each slab valid; bounded walk. */
static size_t check_bin_list(const struct heap *h, unsigned c, const struct span *head) {
    size_t bad = 0;
    const struct span *prev = NULL;
    for (size_t n = 0; head; prev = head, head = head->next) {
        if (++n > ((size_t)1 << 24)) return bad + 1; /* a cycle */
        bad += head->prev != prev;
        bad += check_slab(h, c, head);
    }
    return bad;
}

/* Bin c's list: its high less list_room objects, each a free (tagged) object
 * of a slab of class c below its bump pointer (h's, or handed on while it
 * floated), with no cycle; its copies of the class's free_mul and free_lim
 * are the class table's. */
static size_t check_bin_objects(const struct heap *h, unsigned c, const struct bin *b) {
    size_t bad = b->mul != classes[c].free_mul || b->lim != classes[c].free_lim;
    long high = h->list_high[c].high;
    if (b->list_room > high || high < classes[c].capacity || high > class_list_max[c]) return 1;
    uint32_t want = list_len(h, b), n = 0;
    for (const void *p = b->list; p;) {
        if (++n > want) return bad + 1; /* longer than counted, or a cycle */
        const struct span *s = span_lookup((uintptr_t)p);
        if (!s || span_kind(s) != SPAN_SLAB || s->cls != c || !small_is_object_start(s, p) || (const char *)p >= s->bump || !small_is_freed(p))
            return bad + 1; /* not a free object of h's: do not read further */
        uintptr_t d = *(const uintptr_t *)p ^ slab_secret; /* next ^ p */
        const void *next = (const void *)(d ^ (uintptr_t)p);
        if (!slab_link_stays(d, p) && !bin_object_free(c, next)) return bad + 1;
        p = next;
    }
    return bad + (n != want);
}

size_t slab_check_current(void) {
    struct heap *h = heap_current();
    if (!h) return 0;
    size_t bad = 0;
    for (unsigned c = 0; c < NCLASSES; c++) {
        const struct bin *b = &h->bins[c];
        if (b->cur == NULL) {
            bad++;
        } else if (b->cur != &span_empty) {
            bad += check_slab(h, c, b->cur);
            bad += b->cur->prev != NULL || b->cur->next != NULL;
        }
        bad += check_bin_list(h, c, b->partial);
        bad += check_bin_objects(h, c, b);
    }
    bad += span_empty.free != NULL;
    long n = 0;
    for (const struct span *s = h->empty; s; s = s->next) {
        if (++n > h->nr_empty) break;
        bad += span_kind(s) != SPAN_TAKEN || atomic_load_explicit(&s->owner, memory_order_relaxed) != NULL;
    }
    bad += n != h->nr_empty || h->nr_empty > h->empty_high.high || h->empty_high.high > opt.heap_empty_max;
    return bad;
}
