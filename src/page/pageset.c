/* pageset: per-CPU caches of free blocks in front of the zone, with the
 * kernel's PCP high auto-tuning (seed 003, mm/page_alloc.c as of v6.19).
 *
 * One pageset per possible CPU caches blocks of orders 0..PCP_MAX_ORDER and
 * whole 2 MiB chunks.  A pageset is taken with trylock only: when another
 * thread holds it (preempted, or migrated), the caller goes straight to the
 * zone instead of waiting.
 *
 * Invariants, under ps->lock:
 *  - count == sum over lists of 2^order + nr_chunks x 512 (base pages:
 *    whole chunks count against high, drain and decay like the rest, as the
 *    kernel's pageblock-order pages do);
 *  - high_min <= high <= high_max after every operation; in manual mode
 *    (FOLIO_PCP_AUTOTUNE=0 or FOLIO_PCP_HIGH set) high_min == high_max;
 *  - a free that finds count >= high drains the oldest blocks to the
 *    zone's depot (zone.c: 16 shards by page count, each with its own
 *    lock), up to 32 batches per drain step, where those of sizes another
 *    pageset asked for wait for its next miss; a decay, the reclaim cap and
 *    drain_all give theirs to the buddy lists, a batch per zone-lock hold
 *    (to merge, and be purged);
 *  - a refill takes what the depot holds of its order first (one hold of
 *    its shard's lock), then the buddy lists' blocks (one zone-lock hold);
 *  - blocks on the lists have kind SPAN_PCP_FREE and NULL span_of entries,
 *    so the zone never merges with them;
 *  - a span of any other size below a chunk (an odd page count, or a power
 *    of two above order 6 or not aligned to it) is kept whole on the exact
 *    list of its page count, counted in count with its pages, and drained
 *    whole: the zone carved it (best fit, from a large chunk's free runs) and
 *    merges it back.  A free of such a span is a cache of it for the next
 *    request of the same size, or of an odd size up to a quarter smaller
 *    (above order 6 only while the lists hit: exact_keeps).
 *    A miss takes spans of its size from the depot, up to two batches'
 *    worth within the lists' bound (a size some pageset had to give back:
 *    it repeats), else one span from the zone (no refill: sizes
 *    that never repeat would fill the lists); a free past the lists' bound
 *    trims them a batch below it, into the depot.
 *
 * What the kernel's quantities mean here:
 *  - the zone size is the chunks the zone has put in use (no cap), at
 *    least FOLIO_PCP_ZONE_MIN_MIB: high_max = zone pages / 8 / pagesets in
 *    use (those that served an allocation or a free since their last idle
 *    decay: the CPUs this process runs on, as the kernel splits among the
 *    CPUs of a zone's node), so caches scale with the heap and with the
 *    CPUs actually used; reached only by a workload that keeps missing, and
 *    decayed back to high_min within seconds once it stops;
 *  - the low watermark share (high_min) is 4 x batch, the fixed high;
 *  - ZONE_BELOW_HIGH and ZONE_RECLAIM_ACTIVE come from pressure.c, read on
 *    refills and frees;
 *  - the decay (vmstat worker) runs from refills on any CPU once a second
 *    (from a pageset's fourth refill on), for every pageset it can trylock,
 *    and from the background purger. */
#include <stdlib.h>
#include <string.h>

#include "page.h"

#define PCP_BATCH_SCALE_MAX 5
/* free_high applies to orders 1..3 as in the kernel (PAGE_ALLOC_COSTLY_ORDER);
 * orders 4..6, folio's larger slabs, are cached as the kernel caches its
 * pageblock-order (THP) pages: no fast drain, and they end a free_high run */
#define PCP_COSTLY_ORDER 3
#define PCPF_PREV_FREE_HIGH_ORDER 0x1u
#define DECAY_INTERVAL_MS 1000u
/* a pageset's first refills run no decay: a short program's pagesets have
 * nothing to decay, and its first clock read costs two page faults (libc's
 * clock_gettime and the kernel's time page), which most short programs
 * never pay otherwise */
#define DECAY_FROM_REFILLS 4u
#define RECLAIM_PASS_MS 100u
/* the drain rotation's slot after the orders: the whole chunks */
#define CHUNK_SLOT (PCP_MAX_ORDER + 1)
#define CHUNK_ORDER 9
/* the drain rotation's last slot: the exact lists */
#define EXACT_SLOT (CHUNK_SLOT + 1)

/* Spans kept by exact page count (any size below a chunk that the order
 * lists do not hold), with a bit per non-empty list so that a drain finds
 * one without walking 512 heads.  Allocated on a pageset's first such free
 * (most programs never make one). */
struct exact_lists {
    /* the counts and bits every push and pop writes first, then each
     * size's head and tail together: a free of one size writes one or two
     * pages of the table (8.4 KiB), not three or four */
    uint64_t nonempty[CHUNK_PAGES / 64];
    uint64_t drained[CHUNK_PAGES / 64]; /* sizes drained to the zone since their last miss */
    uint32_t cursor; /* the drain's next page count */
    /* the lists' own bound, within the pageset's high: spans of a size
     * that is not asked for again only pin their chunks and stay resident,
     * so the bound starts at a batch (a few spans, against the zone lock of
     * a size freed and taken in turns) and grows only by the sizes that
     * come back after a drain, while the lists mostly hit */
    long pages, high;
    uint64_t hits_win, misses_win; /* since the last decay */
    bool grew;                     /* since the last decay */
    struct {
        struct span *head, *tail;
    } list[CHUNK_PAGES];
};

struct pageset {
    lock_t lock;
    long count, high, high_min, high_max, batch;
    int alloc_factor;
    unsigned flags;
    long free_count;
    struct span *head[PCP_MAX_ORDER + 1], *tail[PCP_MAX_ORDER + 1];
    struct span *chunks;
    long nr_chunks;
    bool in_use; /* counted in nr_in_use */
    struct exact_lists *exact;
    uint64_t exact_hits, exact_misses, exact_near_hits;
    long high_lowest, high_highest;
    uint64_t last_decay_ms;
    uint64_t uses, uses_at_decay; /* allocations and frees served; their count at the last decay */
    uint64_t refills, drains, free_high_drains, decays, reclaim_caps, chunks_drained;
    _Atomic uint64_t trylock_failed;
} __attribute__((aligned(CACHELINE)));

static struct pageset *pagesets;
/* the pagesets of a machine of up to 4 CPUs: with the other locks fork takes */
static FORK_STATE struct pageset pagesets_fork[4];
static int nr_pagesets;
/* The kernel's PCPF_FREE_HIGH_BATCH, the same on every pageset: a CPU's
 * share of the last-level cache holds more than 3 batches, so a free_high
 * drain waits until a batch is held.  Read from sysfs (cpu0's cache leaves:
 * about 7 system calls) the first time a free_high decision needs it, not
 * at start: most processes never make one.  0: not read yet, 1: off, 2: on. */
static _Atomic int free_high_batch;
static _Atomic int nr_in_use; /* pagesets high_max is shared among */
static int forced_cpus;        /* tests: > 0 replaces nr_in_use */
static long forced_heap;       /* tests: > 0 replaces the zone's pages */
static _Atomic uint64_t next_decay_ms, next_reclaim_ms;
/* some pageset held more than GROWN_PAGES after a free: the 2 MiB backlog
 * a background purger is started for, which its decay then shrinks (a
 * small program's caches, below that, never start one; a high that grew
 * past it while the pageset held a few dozen pages started a purger, a
 * thread and its first faults, in short programs such as git status) */
static _Atomic int pcp_grown;
#define GROWN_PAGES 512

/* ---- static sizing ---- */

static void set_high(struct pageset *ps, long high) {
    ps->high = high;
    if (high < ps->high_lowest) ps->high_lowest = high;
    if (high > ps->high_highest) ps->high_highest = high;
}

static bool autotune(void) { return opt.pcp_autotune && opt.pcp_high <= 0; }

/* A pageset that serves an allocation or a free is in use until a decay
 * finds it idle (ps->lock held). */
static void note_use(struct pageset *ps) {
    ps->uses++;
    if (!ps->in_use) {
        ps->in_use = true;
        atomic_fetch_add_explicit(&nr_in_use, 1, memory_order_relaxed);
    }
}

/* The zone size the limits derive from: the heap in use, but never less
 * than FOLIO_PCP_ZONE_MIN_MIB.  The kernel's zone includes free RAM, so its
 * 1/8 is room to spare; a young process's heap is small, and 1/8 of it
 * would not hold one burst of its slabs (measured on the pageset suite's
 * pool: a floor of 0, 32 and 64 MiB took 75%, 5% and 1% of fixed high's
 * pages from the zone). */
static long zone_size_pages(void) {
    long heap = forced_heap > 0 ? forced_heap : (long)zone_managed_pages();
    long floor_pages = (long)(((size_t)opt.pcp_zone_min_mib << 20) >> PAGE_SHIFT);
    return heap > floor_pages ? heap : floor_pages;
}

/* high_min/high_max from the zone size (pageset lock held). */
static void size_limits(struct pageset *ps, long zone_pages) {
    long batch = ps->batch;
    if (!autotune()) {
        ps->high_min = ps->high_max = opt.pcp_high > 0 ? opt.pcp_high : 4 * batch;
    } else {
        ps->high_min = 4 * batch;
        int split = forced_cpus > 0 ? forced_cpus : atomic_load_explicit(&nr_in_use, memory_order_relaxed);
        long share = zone_pages / 8 / (split > 0 ? split : 1);
        ps->high_max = share > ps->high_min ? share : ps->high_min;
    }
    long h = ps->high < ps->high_min ? ps->high_min : ps->high > ps->high_max ? ps->high_max : ps->high;
    set_high(ps, h);
}

void pageset_init(void) {
    int n = os_cpu_count();
    if (n > 1024) n = 1024;
    pagesets = n <= 4 ? pagesets_fork : meta_alloc(sizeof(struct pageset) * (size_t)n);
    if (!pagesets) return;
    nr_pagesets = n;
    long batch = opt.pcp_batch;
    for (int i = 0; i < n; i++) {
        struct pageset *ps = &pagesets[i];
        lock_set_rank(&ps->lock, LOCK_RANK_PAGESET);
        ps->batch = batch;
        ps->high = ps->high_lowest = ps->high_highest = 4 * batch;
        ps->flags = 0;
        size_limits(ps, 0);
        ps->high_lowest = ps->high_highest = ps->high;
    }
}

/* ---- lists ---- */

/* the order lists hold aligned powers of two up to order 6 */
static bool pcp_order_fits(uint32_t n, uint32_t page_idx) {
    return n >= 1 && n <= (1u << PCP_MAX_ORDER) && (n & (n - 1)) == 0 && (page_idx & (n - 1)) == 0;
}

static struct pageset *this_pageset(void) {
    int cpu = os_cpu();
    return cpu < nr_pagesets ? &pagesets[cpu] : NULL;
}

static void push_head(struct pageset *ps, struct span *s, unsigned o) {
    span_set_kind(s, SPAN_PCP_FREE);
    s->order = (uint8_t)o;
    s->prev = NULL;
    s->next = ps->head[o];
    if (ps->head[o]) ps->head[o]->prev = s;
    else ps->tail[o] = s;
    ps->head[o] = s;
    ps->count += 1l << o;
}
static struct span *pop_head(struct pageset *ps, unsigned o) {
    struct span *s = ps->head[o];
    if (!s) return NULL;
    ps->head[o] = s->next;
    if (s->next) s->next->prev = NULL;
    else ps->tail[o] = NULL;
    ps->count -= 1l << o;
    return s;
}
static struct span *pop_tail(struct pageset *ps, unsigned o) {
    struct span *s = ps->tail[o];
    if (!s) return NULL;
    ps->tail[o] = s->prev;
    if (s->prev) s->prev->next = NULL;
    else ps->head[o] = NULL;
    ps->count -= 1l << o;
    return s;
}

/* Drain at least `pages` base pages to the zone, oldest blocks first, one
 * zone-lock hold per batch (free_pcppages_bulk), one block from each list
 * in turn starting with the list of order `first` (CHUNK_ORDER: the
 * chunks).  The kernel empties each list before the next; taking one block
 * per list keeps more small blocks cached for the slabs' refills. */
static struct span *pop_chunk(struct pageset *ps) {
    struct span *s = ps->chunks;
    if (!s) return NULL;
    ps->chunks = s->next;
    ps->nr_chunks--;
    ps->count -= CHUNK_PAGES;
    return s;
}

static struct span *exact_pop_next(struct pageset *ps);
static void exact_decay(struct pageset *ps);

/* The depot's bound (zone.c): a sixteenth of the zone size the pagesets'
 * limits derive from; none under memory pressure. */
static long zone_size_pages(void);
static long depot_bound(void) { return pressure_peek() ? 0 : zone_size_pages() / 16; }
/* Spans of the exact lists go to the depot only while the lists hit at
 * least as often as they miss (since the last decay): their sizes repeat.
 * (A program whose large blocks are of sizes that never repeat, as
 * alloc/mixed's 32 KiB-1 MiB, would fill the depot with spans nobody takes,
 * which pin their chunks for a purge delay: its heap grew by a third.) */
static bool exact_repeats(const struct pageset *ps) {
    return ps->exact && ps->exact->hits_win >= ps->exact->misses_win;
}

/* overflow: the pageset is over its high (a free, a trim); its blocks wait
 * in the zone's depot for the next pageset that misses their size, up to
 * 32 batches at a time (the depot moves pointers, not pages).
 * Otherwise (decay, reclaim, drain_all) they go to the buddy lists, a
 * batch per hold, to merge and be purged. */
static void drain(struct pageset *ps, long pages, unsigned first, bool overflow) {
    ps->drains++;
    unsigned o = first > PCP_MAX_ORDER ? CHUNK_SLOT : first;
    long per_hold = overflow ? ps->batch << PCP_BATCH_SCALE_MAX : ps->batch;
    while (pages > 0 && ps->count > 0) {
        struct span *list = NULL;
        long chunk = 0;
        while (chunk < per_hold && chunk < pages && ps->count > 0) {
            unsigned slot = o;
            o = (o + 1) % (EXACT_SLOT + 1);
            struct span *s = slot == CHUNK_SLOT ? pop_chunk(ps)
                             : slot == EXACT_SLOT ? exact_pop_next(ps)
                                                  : pop_tail(ps, slot);
            if (!s) continue;
            s->next = list;
            list = s;
            if (slot == CHUNK_SLOT) ps->chunks_drained++;
            chunk += s->npages;
        }
        pages -= chunk;
        if (overflow) zone_depot_put((int)(ps - pagesets), list, depot_bound(), exact_repeats(ps));
        else zone_free_bulk(list);
    }
}

/* ---- the tuning rules ---- */

/* nr_pcp_alloc: how many blocks a refill takes; a miss grows high. */
static long nr_alloc(struct pageset *ps, unsigned o, bool below_high) {
    long high = ps->high;
    if (high < ps->batch) return 1;
    long b = o ? ps->batch : ps->batch << ps->alloc_factor;
    if (ps->high_min != ps->high_max && !below_high) {
        high = high + b < ps->high_max ? high + b : ps->high_max;
        set_high(ps, high);
    }
    if (o == 0) {
        long room = high - ps->count - ps->batch;
        if (room < ps->batch) room = ps->batch;
        if (b <= room && ps->alloc_factor < PCP_BATCH_SCALE_MAX) ps->alloc_factor++;
        if (b > room) b = room;
    }
    if (b > 1) {
        b >>= o;
        if (b < 2) b = 2;
    }
    return b;
}

/* nr_pcp_high: the level at which a free drains; adjusts high. */
static long nr_high(struct pageset *ps, bool free_high, int pressure) {
    long high = ps->high, batch = ps->batch;
    if (high == 0) return 0;
    if (free_high) {
        long h = high - (batch << PCP_BATCH_SCALE_MAX);
        set_high(ps, h > ps->high_min ? h : ps->high_min);
        return 0;
    }
    long fc = ps->free_count > batch ? ps->free_count : batch;
    /* reclaim active: shrink, and cap at 4 batches even a fixed high */
    if (pressure & PRESSURE_RECLAIM) {
        set_high(ps, high - fc > ps->high_min ? high - fc : ps->high_min);
        if (ps->count >= (4 * batch < ps->high ? 4 * batch : ps->high)) ps->reclaim_caps++;
        return 4 * batch < ps->high ? 4 * batch : ps->high;
    }
    if (ps->high_min == ps->high_max) return high;
    if (pressure & PRESSURE_BELOW_HIGH) {
        set_high(ps, high - fc > ps->high_min ? high - fc : ps->high_min);
        return ps->count > ps->high_min ? ps->count : ps->high_min;
    }
    if (ps->count >= high) {
        long need = ps->free_count + batch;
        if (ps->high < need) set_high(ps, need < ps->high_max ? need : ps->high_max);
    }
    return high;
}

/* nr_pcp_free: how many pages an overflowing free drains. */
static long nr_free(struct pageset *ps, long high, bool free_high) {
    long batch = ps->batch;
    /* free_high drains everything (up to 32 batches); PCPF_FREE_HIGH_BATCH
     * only delayed the drain until a batch was held (after_free), so the
     * zone lock is taken once per batch of hand-offs, not once per free */
    if (free_high) return ps->count < (batch << PCP_BATCH_SCALE_MAX) ? ps->count : batch << PCP_BATCH_SCALE_MAX;
    if (high < batch) return 1;
    long n = ps->free_count, hi = high - batch;
    if (n > hi) n = hi;
    if (n < batch) n = batch;
    return n;
}

/* decay_pcp_high: lower high by 1/8 (never draining more than 32 batches
 * per tick) and drain the excess.  One departure from the kernel: a pageset
 * that served nothing during a whole decay interval drops to high_min at
 * once.  A CPU's pageset in the kernel serves the whole machine and will be
 * used again; a process that went idle holds memory nobody else can use, and
 * the 1/8 steps would keep it for 15 seconds or more. */
static void decay(struct pageset *ps) {
    ps->decays++;
    bool idle = ps->uses == ps->uses_at_decay;
    ps->uses_at_decay = ps->uses;
    if (idle && ps->in_use) { /* no longer one of the CPUs high_max is split among */
        ps->in_use = false;
        atomic_fetch_sub_explicit(&nr_in_use, 1, memory_order_relaxed);
    }
    if (idle && ps->high > ps->high_min) {
        set_high(ps, ps->high_min);
    } else if (ps->high > ps->high_min) {
        long a = ps->count - (ps->batch << PCP_BATCH_SCALE_MAX), b = ps->high - ps->high / 8;
        long h = a > b ? a : b;
        set_high(ps, h > ps->high_min ? h : ps->high_min);
    }
    exact_decay(ps);
    if (ps->count > ps->high) drain(ps, ps->count - ps->high, 0, false);
}

/* Decay every pageset that is due and free to take (trylock). */
static void decay_due(uint64_t now) {
    uint64_t due = atomic_load_explicit(&next_decay_ms, memory_order_relaxed);
    if (now < due || !atomic_compare_exchange_strong(&next_decay_ms, &due, now + DECAY_INTERVAL_MS / 4))
        return;
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset *ps = &pagesets[i];
        if (!lock_try(&ps->lock)) continue;
        if (now - ps->last_decay_ms >= DECAY_INTERVAL_MS) {
            ps->last_decay_ms = now;
            decay(ps);
        }
        lock_release(&ps->lock);
    }
}

static struct span *alloc_on(struct pageset *ps, unsigned o) {
    note_use(ps);
    ps->free_count >>= 1;
    struct span *s = pop_head(ps, o);
    if (!s) {
        bool below_high = pressure_state() != 0;
        size_limits(ps, zone_size_pages());
        struct span *list, *got[ZONE_REFILL_MAX];
        long n = zone_refill((int)(ps - pagesets), 1u << o, nr_alloc(ps, o, below_high), got, &list);
        ps->refills++;
        for (long i = 0; i < n; i++) push_head(ps, got[i], o); /* from the depot */
        while (list) {
            struct span *b = list;
            list = b->next;
            push_head(ps, b, o);
        }
        s = pop_head(ps, o);
    }
    if (s) span_set_kind(s, SPAN_TAKEN);
    return s;
}

/* ---- the exact lists ---- */

/* The pageset's exact lists, allocated on its first use (ps->lock held:
 * the meta lock ranks above it); NULL if metadata is short. */
static struct exact_lists *exact_of(struct pageset *ps) {
    if (!ps->exact && (ps->exact = meta_alloc(sizeof *ps->exact))) ps->exact->high = ps->batch;
    return ps->exact;
}

/* The order a span of n pages is accounted as by the tuning rules (the
 * order the kernel would allocate it at). */
static unsigned exact_order(uint32_t n) { return (unsigned)(32 - __builtin_clz(n - 1)); }

static void exact_push(struct pageset *ps, struct exact_lists *e, struct span *s) {
    uint32_t n = s->npages;
    span_set_kind(s, SPAN_PCP_FREE);
    s->order = (uint8_t)exact_order(n);
    s->prev = NULL;
    s->next = e->list[n].head;
    if (e->list[n].head) e->list[n].head->prev = s;
    else e->list[n].tail = s;
    e->list[n].head = s;
    e->nonempty[n / 64] |= 1ull << (n % 64);
    e->pages += n;
    ps->count += n;
}
static void exact_unlink(struct pageset *ps, struct exact_lists *e, struct span *s) {
    uint32_t n = s->npages;
    if (s->prev) s->prev->next = s->next;
    else e->list[n].head = s->next;
    if (s->next) s->next->prev = s->prev;
    else e->list[n].tail = s->prev;
    if (!e->list[n].head) e->nonempty[n / 64] &= ~(1ull << (n % 64));
    e->pages -= n;
    ps->count -= n;
}
/* The drain's pick: the oldest span of the next non-empty size after the
 * cursor, so that a drain spreads over the sizes as it does over the orders. */
static struct span *exact_pop_next(struct pageset *ps) {
    struct exact_lists *e = ps->exact;
    if (!e) return NULL;
    for (uint32_t k = 0; k < CHUNK_PAGES / 64 + 1; k++) {
        uint32_t w = ((e->cursor / 64) + k) % (CHUNK_PAGES / 64);
        uint64_t bits = e->nonempty[w];
        if (k == 0) bits &= ~0ull << (e->cursor % 64);
        if (!bits) continue;
        uint32_t n = w * 64 + (uint32_t)__builtin_ctzll(bits);
        struct span *s = e->list[n].tail;
        exact_unlink(ps, e, s);
        e->drained[n / 64] |= 1ull << (n % 64);
        e->cursor = (n + 1) % CHUNK_PAGES;
        return s;
    }
    return NULL;
}

/* The free side of the tuning rules, after a block of order o (`pages`
 * pages: fewer for an exact span) went on the lists
 * (free_frozen_page_commit). */
static void after_free(struct pageset *ps, unsigned o, long pages, int pressure) {
    note_use(ps);
    if (ps->count > GROWN_PAGES && !atomic_load_explicit(&pcp_grown, memory_order_relaxed))
        atomic_store_explicit(&pcp_grown, 1, memory_order_relaxed);
    ps->alloc_factor >>= 1;
    bool free_high = false;
    if (o >= 1 && o <= PCP_COSTLY_ORDER) {
        free_high = ps->free_count >= ps->batch + ps->high_min / 2 &&
                    (ps->flags & PCPF_PREV_FREE_HIGH_ORDER) &&
                    (ps->count >= ps->batch || !pageset_free_high_batch());
        ps->flags |= PCPF_PREV_FREE_HIGH_ORDER;
    } else {
        ps->flags &= ~PCPF_PREV_FREE_HIGH_ORDER;
    }
    if (ps->free_count < (ps->batch << PCP_BATCH_SCALE_MAX)) ps->free_count += pages;
    long high = nr_high(ps, free_high, pressure);
    if (ps->count < high) return;
    if (free_high) ps->free_high_drains++;
    /* free_high and a chunk start with the list just freed into (the
     * kernel's pindex); other overflows with order 0, as before */
    drain(ps, nr_free(ps, high, free_high), free_high || o == CHUNK_ORDER ? o : 0, true);
}

static void free_on(struct pageset *ps, struct span *s, unsigned o, int pressure) {
    push_head(ps, s, o);
    after_free(ps, o, 1l << o, pressure);
}

/* The exact lists' bound as an overflow applies it: their own, but at
 * least high_min below high once high has grown past 2 x high_min (the
 * order lists, the slabs' blocks, keep that room: without it a workload
 * whose large blocks fill the pageset drains its slabs' blocks on every
 * overflow and refills them on the next slab). */
static long exact_bound(const struct pageset *ps, const struct exact_lists *e) {
    long room = ps->high - ps->high_min > ps->high_min ? ps->high - ps->high_min : ps->high_min;
    return e->high < room ? e->high : room;
}

/* The exact lists back within their bound: the excess to the zone in one
 * hold.  overflow (a free or a refill went past it): to a batch below it,
 * into the depot (drain); otherwise (decay) to the bound, to the buddy
 * lists. */
static void exact_trim(struct pageset *ps, struct exact_lists *e, bool overflow) {
    struct span *list = NULL;
    long bound = overflow ? exact_bound(ps, e) : e->high;
    if (e->pages <= bound) return;
    long target = overflow ? bound - ps->batch : bound;
    while (e->pages > (target > 0 ? target : 0)) {
        struct span *s = exact_pop_next(ps);
        if (!s) break;
        s->next = list;
        list = s;
    }
    if (list && overflow) zone_depot_put((int)(ps - pagesets), list, depot_bound(), exact_repeats(ps));
    else if (list) zone_free_bulk(list);
}

/* At each decay the bound halves (not below a batch) unless it grew and
 * the lists hit at least every other time since the last one. */
static void exact_decay(struct pageset *ps) {
    struct exact_lists *e = ps->exact;
    if (!e) return;
    if (!e->grew || e->hits_win * 2 < e->misses_win) e->high = e->high / 2 > ps->batch ? e->high / 2 : ps->batch;
    e->grew = false;
    e->hits_win = e->misses_win = 0;
    exact_trim(ps, e, false);
}

/* Whether the lists keep a freed span of n pages.  Above the largest order
 * (256 KiB) only while they hit at least every other time in this decay
 * window (or before its fifth miss): the bound holds one or two such spans,
 * so sizes of that range that repeat only among many others hit rarely,
 * and a span held for its size kept its pages, touched by the last block,
 * from the next block of another size, which the zone then carved from
 * pages not yet touched; given to the zone, it merges at once and best fit
 * serves any size from it (docs/notes/server-patterns.md, session 32).  One
 * size freed and taken in turns (a buffer per request) hits every time,
 * and its malloc and free then take no process-wide lock. */
static bool exact_keeps(const struct exact_lists *e, uint32_t n) {
    return n <= (1u << PCP_MAX_ORDER) || e->misses_win <= 4 || e->hits_win >= e->misses_win;
}

/* An aligned power of two up to order 6 goes on its order's list, any other
 * span below a chunk on its exact list if the lists keep it (e: the table,
 * NULL if it could not be had; false: the caller gives the span to the
 * zone). */
static bool free_span_on(struct pageset *ps, struct span *s, struct exact_lists *e, int pressure) {
    uint32_t n = s->npages;
    if (pcp_order_fits(n, s->page_idx)) {
        free_on(ps, s, (unsigned)__builtin_ctz(n), pressure);
        return true;
    }
    if (!e || !exact_keeps(e, n)) return false;
    exact_push(ps, e, s);
    exact_trim(ps, e, true); /* may give s itself to the zone: s is not read after it */
    after_free(ps, exact_order(n), n, pressure);
    return true;
}

/* The near fit: the smallest page count in (n, n + n / EXACT_NEAR_DIV]
 * with a span on the lists, else 0.  For odd sizes only (n not a power of
 * two: never a slab's, whose span must be its class's).  A large block
 * that takes such a span keeps its tail: pages a previous block wrote,
 * resident whether they wait here or there, where a miss costs a split in
 * the zone now and a merge when the lists overflow. */
#define EXACT_NEAR_DIV 4u
static uint32_t exact_near(const struct exact_lists *e, uint32_t n) {
    if (!(n & (n - 1))) return 0;
    uint32_t last = n + n / EXACT_NEAR_DIV;
    if (last >= CHUNK_PAGES) last = CHUNK_PAGES - 1;
    for (uint32_t m = n + 1; m <= last; m = (m / 64 + 1) * 64) {
        uint64_t bits = e->nonempty[m / 64] >> (m % 64);
        if (bits) {
            uint32_t f = m + (uint32_t)__builtin_ctzll(bits);
            return f <= last ? f : 0;
        }
    }
    return 0;
}

/* A span of n pages from the exact lists (the most recently freed of that
 * size, still in cache; else of the nearest size up, exact_near), or NULL. */
static struct span *exact_alloc_on(struct pageset *ps, uint32_t n) {
    struct exact_lists *e = ps->exact;
    struct span *s = e ? e->list[n].head : NULL;
    note_use(ps);
    ps->free_count >>= 1;
    uint32_t near = !s && e ? exact_near(e, n) : 0;
    if (near) {
        s = e->list[near].head;
        ps->exact_near_hits++;
    }
    /* a miss for a size this pageset drained (it could not hold it) grows
     * the lists' bound, and high as a refill does (nr_pcp_alloc), by the
     * span at least, while the lists hit at least every other time (the
     * first few misses after a decay grow it regardless: a size larger
     * than the bound gets its chance); a miss for a size never held does
     * not: sizes that never repeat would grow the lists for nothing */
    if (!s) {
        ps->exact_misses++;
        uint64_t bit = 1ull << (n % 64);
        if (!e) return NULL;
        e->misses_win++;
        if (!(e->drained[n / 64] & bit) || (e->misses_win > 4 && e->hits_win * 2 < e->misses_win)) return NULL;
        e->drained[n / 64] &= ~bit;
        long grow = ps->batch > (long)n ? ps->batch : (long)n;
        /* up to high_max, never down to it: high_max may have fallen below
         * what the lists hold (a smaller zone, more pagesets in use), and
         * the bound then stays to decay as usual */
        long raised = e->high + grow < ps->high_max ? e->high + grow : ps->high_max;
        if (raised > e->high) e->high = raised;
        e->grew = true;
        bool below_high = pressure_state() != 0;
        size_limits(ps, zone_size_pages());
        if (ps->high_min != ps->high_max && !below_high) {
            long h = ps->high + grow;
            set_high(ps, h < ps->high_max ? h : ps->high_max);
        }
        return NULL;
    }
    exact_unlink(ps, e, s);
    ps->exact_hits++;
    e->hits_win++;
    span_set_kind(s, SPAN_TAKEN);
    return s;
}

/* A miss on the exact lists (ps->lock held): spans of n pages from the
 * zone's depot, up to two batches' worth or the lists' room (the first
 * for the caller, the rest kept), else one span from the buddy lists; one
 * zone hold.  NULL: the zone has none (the caller retries unlocked). */
static struct span *exact_refill(struct pageset *ps, uint32_t n) {
    struct exact_lists *e = ps->exact;
    struct span *got[ZONE_REFILL_MAX];
    long want = 1;
    long bound = e ? exact_bound(ps, e) : 0;
    if (e && e->pages + (long)n <= bound) {
        long room = 1 + (bound - e->pages) / (long)n, batches = 2 * ps->batch / (long)n;
        want = room < batches ? room : batches;
        if (want < 1) want = 1;
    }
    long k = zone_refill((int)(ps - pagesets), n, want, got, NULL);
    if (k <= 0) return NULL;
    for (long i = 1; i < k; i++) exact_push(ps, e, got[i]);
    span_set_kind(got[0], SPAN_TAKEN);
    return got[0];
}

#ifdef FOLIO_DEBUG
static size_t check_one(struct pageset *ps);
/* debug builds: every 64th pageset release on the main paths checks that
 * pageset's invariants (the lock is still held) */
static void debug_check(struct pageset *ps) {
    static _Atomic uint64_t releases;
    if ((atomic_fetch_add_explicit(&releases, 1, memory_order_relaxed) + 1) % 64 == 0 &&
        check_one(ps) != 0) {
        os_write_err("folio: pageset invariant violated\n");
        os_fatal_ptr("pageset:", ps);
    }
}
#else
static inline void debug_check(struct pageset *ps) { (void)ps; }
#endif

/* Reclaim active: every pageset it can take (trylock) is capped at once, at
 * most every 100 ms, not only the next one to free: the kernel's cap
 * reaches each CPU at its next free, and a CPU of this process may not
 * free again for a long time. */
static void reclaim_due(void) {
    uint64_t now = os_now_ms(), due = atomic_load_explicit(&next_reclaim_ms, memory_order_relaxed);
    if (now < due || !atomic_compare_exchange_strong(&next_reclaim_ms, &due, now + RECLAIM_PASS_MS)) return;
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset *ps = &pagesets[i];
        if (!lock_try(&ps->lock)) continue;
        set_high(ps, ps->high_min);
        long cap = 4 * ps->batch < ps->high ? 4 * ps->batch : ps->high;
        if (ps->count > cap) {
            ps->reclaim_caps++;
            drain(ps, ps->count - cap, 0, false);
        }
        lock_release(&ps->lock);
    }
    zone_depot_flush(); /* and the depot, which overflows fed until now */
}

/* The calling CPU's pageset, locked, or when another thread holds it (its
 * holder was preempted, or this thread migrated) the next CPU's if that is
 * free; otherwise this CPU's after waiting: under
 * oversubscription, falling back to the zone would make the zone's lock
 * the one every thread queues on.  NULL: no pageset for this CPU (the
 * caller uses the zone). */
static struct pageset *take_pageset(void) {
    int cpu = os_cpu();
    if (cpu >= nr_pagesets) return NULL;
    struct pageset *ps = &pagesets[cpu];
    if (lock_try(&ps->lock)) return ps;
    atomic_fetch_add_explicit(&ps->trylock_failed, 1, memory_order_relaxed);
    if (nr_pagesets > 1) {
        struct pageset *next = &pagesets[cpu + 1 < nr_pagesets ? cpu + 1 : 0];
        if (lock_try(&next->lock)) return next;
        atomic_fetch_add_explicit(&next->trylock_failed, 1, memory_order_relaxed);
    }
    /* wait for this CPU's own, whose holders are only the threads of this
     * CPU, rather than queue on the zone's, which every thread of the
     * process would then share */
    lock_acquire(&ps->lock);
    return ps;
}

/* npages: a power of two up to order 6 (an order list), or any other count
 * below a chunk (an exact list) */
static struct span *pcp_alloc(size_t npages) {
    struct pageset *ps = take_pageset();
    if (!ps) return zone_alloc_pages(npages, 1);
    uint64_t refills = ps->refills;
    bool order = pcp_order_fits((uint32_t)npages, 0);
    struct span *s = order ? alloc_on(ps, (unsigned)__builtin_ctzl(npages)) : exact_alloc_on(ps, (uint32_t)npages);
    if (!s && !order) s = exact_refill(ps, (uint32_t)npages);
    bool refilled = ps->refills != refills;
    debug_check(ps);
    lock_release(&ps->lock);
    if (refilled && autotune() && refills >= DECAY_FROM_REFILLS) decay_due(os_now_ms());
    if (refilled && (pressure_peek() & PRESSURE_RECLAIM)) reclaim_due();
    return s ? s : zone_alloc_pages(npages, 1);
}

static void pcp_free(struct span *s) {
    int pressure = pressure_state(); /* it may read the clock: not under the lock */
    struct pageset *ps = take_pageset();
    if (!ps) {
        zone_free_span(s);
        return;
    }
    bool done = free_span_on(ps, s, pcp_order_fits(s->npages, s->page_idx) ? NULL : exact_of(ps), pressure);
    debug_check(ps);
    lock_release(&ps->lock);
    if (!done) zone_free_span(s);
    if (pressure_peek() & PRESSURE_RECLAIM) reclaim_due();
}

/* ---- whole chunks ---- */

/* Whole chunks are the pagesets' largest list (the kernel's pageblock
 * order): counted in count, drained and decayed with the rest, at most
 * FOLIO_PCP_CHUNKS of them.  An empty list is not refilled in bulk: one
 * chunk comes from the zone. */
static struct span *chunk_alloc(void) {
    struct pageset *ps = this_pageset();
    struct span *s = NULL;
    if (ps && lock_try(&ps->lock)) {
        note_use(ps);
        ps->free_count >>= 1;
        s = pop_chunk(ps);
        lock_release(&ps->lock);
    }
    if (s) {
        span_set_kind(s, SPAN_TAKEN);
        return s;
    }
    return zone_alloc_pages(CHUNK_PAGES, 1);
}

static void chunk_free(struct span *s) {
    int pressure = pressure_state();
    struct pageset *ps = this_pageset();
    if (ps && lock_try(&ps->lock)) {
        if (ps->nr_chunks < opt.pcp_chunks) {
            span_set_kind(s, SPAN_PCP_FREE);
            s->next = ps->chunks;
            ps->chunks = s;
            ps->nr_chunks++;
            ps->count += CHUNK_PAGES;
            after_free(ps, CHUNK_ORDER, CHUNK_PAGES, pressure);
            debug_check(ps);
            lock_release(&ps->lock);
            if (pressure_peek() & PRESSURE_RECLAIM) reclaim_due();
            return;
        }
        lock_release(&ps->lock);
    }
    zone_free_span(s);
}

/* ---- the page heap's entry points ---- */

/* Every span below a chunk goes through the pagesets: the slabs' powers of
 * two on the order lists, the large blocks of other sizes on the exact
 * lists (whole: a span the zone carved goes back to it as it was, so
 * nothing cut from it sits on the order lists while its chunk could merge);
 * an aligned request of another size goes to the zone. */
static bool pcp_size(size_t n, size_t align_pages) {
    return n >= 1 && n < CHUNK_PAGES && (align_pages <= 1 || (pcp_order_fits((uint32_t)n, 0) && align_pages <= n));
}

/* A span of npages pages aligned to align_pages (a power of two); for an
 * odd npages, from an exact list, up to a quarter more (exact_near). */
struct span *page_alloc(size_t npages, size_t align_pages) {
    if (pcp_size(npages, align_pages)) return pcp_alloc(npages);
    if (npages == CHUNK_PAGES && align_pages <= npages) return chunk_alloc();
    return zone_alloc_pages(npages, align_pages);
}

void page_free(struct span *s) {
    size_t n = s->npages;
    s->flags &= SPAN_ZEROED;
    if (pcp_size(n, 1)) return pcp_free(s);
    if (n == CHUNK_PAGES && s->page_idx == 0) return chunk_free(s);
    zone_free_span(s);
}

/* The background purger's tick: decay whatever is due. */
void pageset_decay_tick(void) {
    if (autotune() && nr_pagesets) decay_due(os_now_ms());
}

/* (the report's too: the hand-off figures depend on it) */
bool pageset_free_high_batch(void) {
    int v = atomic_load_explicit(&free_high_batch, memory_order_relaxed);
    if (!v) { /* racing readers read the same files and store the same value */
        size_t llc = os_llc_bytes();
        v = llc / (size_t)(nr_pagesets > 0 ? nr_pagesets : 1) / PAGE_SIZE > (size_t)(3 * opt.pcp_batch) ? 2 : 1;
        atomic_store_explicit(&free_high_batch, v, memory_order_relaxed);
    }
    return v == 2;
}

bool pageset_grown(void) { return atomic_load_explicit(&pcp_grown, memory_order_relaxed); }

void pageset_drain_all(void) {
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset *ps = &pagesets[i];
        lock_acquire(&ps->lock);
        drain(ps, ps->count, 0, false);
        lock_release(&ps->lock);
    }
}

/* ---- driving one pageset directly (tests; built into test builds only) ---- */
#ifdef FOLIO_TEST_HOOKS

struct span *pageset_alloc_on(int i, unsigned o) {
    struct pageset *ps = &pagesets[i];
    lock_acquire(&ps->lock);
    struct span *s = alloc_on(ps, o);
    lock_release(&ps->lock);
    return s;
}
void pageset_free_on(int i, struct span *s, unsigned o) {
    struct pageset *ps = &pagesets[i];
    (void)o;
    s->flags &= SPAN_ZEROED;
    int pressure = pressure_state();
    lock_acquire(&ps->lock);
    bool done = free_span_on(ps, s, pcp_order_fits(s->npages, s->page_idx) ? NULL : exact_of(ps), pressure);
    lock_release(&ps->lock);
    if (!done) zone_free_span(s);
}
void pageset_decay_on(int i) {
    struct pageset *ps = &pagesets[i];
    lock_acquire(&ps->lock);
    decay(ps);
    lock_release(&ps->lock);
}
void pageset_mark_used(int i) {
    struct pageset *ps = &pagesets[i];
    lock_acquire(&ps->lock);
    note_use(ps);
    lock_release(&ps->lock);
}
void pageset_force_sizing(int cpus, long heap_pages) {
    forced_cpus = cpus;
    forced_heap = heap_pages;
}
void pageset_hold_decay(void) { atomic_store(&next_decay_ms, UINT64_MAX); }
#endif

/* ---- counters ---- */

int pageset_count(void) { return nr_pagesets; }

void pageset_stats(int i, struct pageset_stats *st) {
    struct pageset *ps = &pagesets[i];
    lock_acquire(&ps->lock);
    st->cpu = i;
    st->count = ps->count;
    st->high = ps->high;
    st->high_min = ps->high_min;
    st->high_max = ps->high_max;
    st->high_lowest = ps->high_lowest;
    st->high_highest = ps->high_highest;
    st->batch = ps->batch;
    st->chunks = ps->nr_chunks;
    st->refills = ps->refills;
    st->drains = ps->drains;
    st->free_high_drains = ps->free_high_drains;
    st->decays = ps->decays;
    st->reclaim_caps = ps->reclaim_caps;
    st->chunks_drained = ps->chunks_drained;
    st->exact_pages = ps->exact ? ps->exact->pages : 0;
    st->exact_high = ps->exact ? ps->exact->high : 0;
    st->exact_hits = ps->exact_hits;
    st->exact_misses = ps->exact_misses;
    st->exact_near_hits = ps->exact_near_hits;
    st->in_use = ps->in_use;
    st->trylock_failed = atomic_load_explicit(&ps->trylock_failed, memory_order_relaxed);
    lock_release(&ps->lock);
}

void pageset_totals(struct pageset_stats *sum) {
    memset(sum, 0, sizeof *sum);
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset_stats st;
        pageset_stats(i, &st);
        sum->count += st.count; /* chunks included */
        sum->chunks += st.chunks;
        sum->reclaim_caps += st.reclaim_caps;
        sum->chunks_drained += st.chunks_drained;
        sum->exact_hits += st.exact_hits;
        sum->exact_misses += st.exact_misses;
        sum->exact_near_hits += st.exact_near_hits;
        sum->refills += st.refills;
        sum->drains += st.drains;
        sum->free_high_drains += st.free_high_drains;
        sum->decays += st.decays;
        sum->trylock_failed += st.trylock_failed;
    }
    sum->in_use = atomic_load_explicit(&nr_in_use, memory_order_relaxed);
}

void pageset_visit_locks(lock_visit_fn *fn, void *ctx) {
    for (int i = 0; i < nr_pagesets; i++) fn(ctx, "pageset", i, &pagesets[i].lock);
}

void pageset_lock_all(void) {
    for (int i = 0; i < nr_pagesets; i++) lock_acquire(&pagesets[i].lock);
}
void pageset_unlock_all(bool child) {
    for (int i = 0; i < nr_pagesets; i++) {
        if (child) lock_reset(&pagesets[i].lock);
        else lock_release(&pagesets[i].lock);
    }
}

/* ---- invariants (the list at the top of this file) ---- */

/* A listed block that is not what the lists promise: 1 (no detail: the
 * caller counts). */
static size_t bad_block(const struct span *s, unsigned o) {
    size_t bad = 0;
    bad += span_kind(s) != SPAN_PCP_FREE;
    bad += s->order != o || s->npages != (1u << o);
    bad += (s->page_idx & ((1u << o) - 1)) != 0 || s->page_idx + s->npages > CHUNK_PAGES;
    bad += s->start != chunk_base(s->chunk) + ((size_t)s->page_idx << PAGE_SHIFT);
    bad += atomic_load_explicit(&s->chunk->span_of[s->page_idx], memory_order_relaxed) != NULL;
    return bad;
}

/* ps->lock held.  Walks are bounded (by the pages a chunk list could hold,
 * or the spare limit), so a cycle counts as a violation rather than a hang. */
static size_t check_one(struct pageset *ps) {
    size_t bad = 0;
    long pages = 0;
    for (unsigned o = 0; o <= PCP_MAX_ORDER; o++) {
        struct span *prev = NULL, *s = ps->head[o];
        for (long n = 0; s; prev = s, s = s->next) {
            if (++n > (1l << 30)) return bad + 1; /* a cycle */
            bad += bad_block(s, o);
            bad += s->prev != prev;
            pages += 1l << o;
        }
        bad += ps->tail[o] != prev;
    }
    bad += !(ps->high_min <= ps->high && ps->high <= ps->high_max);
    bad += !autotune() && ps->high_min != ps->high_max;
    long chunks = 0;
    for (struct span *s = ps->chunks; s; s = s->next) {
        if (++chunks > ps->nr_chunks) break;
        bad += span_kind(s) != SPAN_PCP_FREE || s->npages != CHUNK_PAGES || s->page_idx != 0;
    }
    bad += chunks != ps->nr_chunks;
    struct exact_lists *e = ps->exact;
    for (uint32_t n = 1; e && n < CHUNK_PAGES; n++) {
        struct span *prev = NULL, *s = e->list[n].head;
        for (long k = 0; s; prev = s, s = s->next) {
            if (++k > (1l << 30)) return bad + 1; /* a cycle */
            bad += span_kind(s) != SPAN_PCP_FREE || s->npages != n || s->order != exact_order(n);
            bad += pcp_order_fits(n, s->page_idx) || s->page_idx + n > CHUNK_PAGES;
            bad += s->start != chunk_base(s->chunk) + ((size_t)s->page_idx << PAGE_SHIFT);
            bad += atomic_load_explicit(&s->chunk->span_of[s->page_idx], memory_order_relaxed) != NULL;
            bad += s->prev != prev;
            pages += n;
        }
        bad += e->list[n].tail != prev;
        bad += !!(e->nonempty[n / 64] & (1ull << (n % 64))) != (e->list[n].head != NULL);
    }
    if (e) {
        long listed = 0;
        for (uint32_t n = 1; n < CHUNK_PAGES; n++)
            for (struct span *s = e->list[n].head; s; s = s->next) listed += n;
        bad += listed != e->pages || e->pages > e->high;
    }
    bad += pages + chunks * (long)CHUNK_PAGES != ps->count;
    return bad;
}

size_t pageset_check(void) {
    size_t bad = 0;
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset *ps = &pagesets[i];
        lock_acquire(&ps->lock);
        bad += check_one(ps);
        lock_release(&ps->lock);
    }
    return bad;
}

#ifdef FOLIO_TEST_HOOKS
/* tests: corrupt pageset i's count by delta (pageset_check must see it) */
void pageset_corrupt_count(int i, long delta) {
    struct pageset *ps = &pagesets[i];
    lock_acquire(&ps->lock);
    ps->count += delta;
    lock_release(&ps->lock);
}
#endif
