/* pageset: per-CPU caches of free blocks in front of the zone.
 *
 * One pageset per possible CPU caches blocks of orders 0..PCP_MAX_ORDER and
 * whole 2 MiB chunks.  A pageset is taken with trylock only: when another
 * thread holds it (it was preempted, or migrated), the caller goes straight to
 * the zone instead of waiting.  Fields mirror the kernel's per_cpu_pages.
 *
 * Invariants, under ps->lock:
 *  - count == sum over lists of 2^order (base pages; chunks are counted in
 *    nr_chunks, not count);
 *  - count < high after every free returns (a free that reaches high drains
 *    the oldest blocks to the zone in one zone-lock hold);
 *  - blocks on the lists have kind SPAN_PCP_FREE and NULL span_of entries,
 *    so the zone never merges with them.
 * high is fixed (high_min == high_max) until auto-tuning lands. */
#include "internal.h"

struct pageset {
    lock_t lock;
    long count, high, high_min, high_max, batch;
    int alloc_factor;
    long free_count;
    struct span *head[PCP_MAX_ORDER + 1], *tail[PCP_MAX_ORDER + 1];
    struct span *chunks;
    long nr_chunks;
    uint64_t refills, drains;
    _Atomic uint64_t trylock_failed;
} __attribute__((aligned(CACHELINE)));

static struct pageset *pagesets;
static int nr_pagesets;

void pageset_init(void) {
    int n = os_cpu_count();
    if (n > 1024) n = 1024;
    pagesets = meta_alloc(sizeof(struct pageset) * (size_t)n);
    if (!pagesets) return;
    long batch = opt.pcp_batch > 0 ? opt.pcp_batch : 1;
    long high = opt.pcp_high > 0 ? opt.pcp_high : 4 * batch;
    for (int i = 0; i < n; i++) {
        struct pageset *ps = &pagesets[i];
        ps->batch = batch;
        ps->high = ps->high_min = ps->high_max = high;
    }
    nr_pagesets = n;
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

/* Drain at least `pages` base pages (oldest blocks first, round robin over
 * orders) to the zone. */
static void drain(struct pageset *ps, long pages) {
    struct span *out[64];
    ps->drains++;
    while (pages > 0 && ps->count > 0) {
        int n = 0;
        for (unsigned o = 0; n < 64 && pages > 0 && ps->count > 0; o = (o + 1) % (PCP_MAX_ORDER + 1)) {
            struct span *s = pop_tail(ps, o);
            if (!s) continue;
            out[n++] = s;
            pages -= 1l << o;
        }
        zone_free_bulk(out, n);
    }
}

static struct span *pcp_alloc(unsigned o) {
    struct pageset *ps = this_pageset();
    if (!ps || !lock_try(&ps->lock)) {
        if (ps) atomic_fetch_add_explicit(&ps->trylock_failed, 1, memory_order_relaxed);
        return zone_alloc_pages((size_t)1 << o, 1);
    }
    ps->free_count >>= 1;
    struct span *s = pop_head(ps, o);
    if (!s) {
        struct span *got[64];
        long want = ps->batch >> o;
        if (want < 2) want = 2;
        if (want > 64) want = 64;
        int n = zone_alloc_bulk(o, (int)want, got);
        ps->refills++;
        for (int i = n - 1; i >= 0; i--) push_head(ps, got[i], o);
        s = pop_head(ps, o);
    }
    lock_release(&ps->lock);
    if (s) span_set_kind(s, SPAN_TAKEN);
    return s;
}

static void pcp_free(struct span *s, unsigned o) {
    struct pageset *ps = this_pageset();
    if (!ps || !lock_try(&ps->lock)) {
        if (ps) atomic_fetch_add_explicit(&ps->trylock_failed, 1, memory_order_relaxed);
        zone_free_span(s);
        return;
    }
    push_head(ps, s, o);
    ps->alloc_factor >>= 1;
    if (ps->free_count < (ps->batch << 5)) ps->free_count += 1l << o;
    if (ps->count >= ps->high) {
        long to_free = ps->free_count;
        if (to_free > ps->high - ps->batch) to_free = ps->high - ps->batch;
        if (to_free < ps->batch) to_free = ps->batch;
        drain(ps, to_free);
    }
    lock_release(&ps->lock);
}

static struct span *chunk_alloc(void) {
    struct pageset *ps = this_pageset();
    struct span *s = NULL;
    if (ps && lock_try(&ps->lock)) {
        s = ps->chunks;
        if (s) {
            ps->chunks = s->next;
            ps->nr_chunks--;
        }
        lock_release(&ps->lock);
    }
    if (s) {
        span_set_kind(s, SPAN_TAKEN);
        return s;
    }
    return zone_alloc_pages(CHUNK_PAGES, 1);
}

static void chunk_free(struct span *s) {
    struct pageset *ps = this_pageset();
    if (ps && lock_try(&ps->lock)) {
        if (ps->nr_chunks < opt.pcp_chunks) {
            span_set_kind(s, SPAN_PCP_FREE);
            s->next = ps->chunks;
            ps->chunks = s;
            ps->nr_chunks++;
            lock_release(&ps->lock);
            return;
        }
        lock_release(&ps->lock);
    }
    zone_free_span(s);
}

/* The page heap's entry points: a span of exactly npages pages, aligned to
 * align_pages pages (a power of two). */
struct span *page_alloc(size_t npages, size_t align_pages) {
    if ((npages & (npages - 1)) == 0 && align_pages <= npages) {
        if (npages <= (1u << PCP_MAX_ORDER)) return pcp_alloc((unsigned)__builtin_ctzll(npages));
        if (npages == CHUNK_PAGES) return chunk_alloc();
    }
    return zone_alloc_pages(npages, align_pages);
}

void page_free(struct span *s) {
    size_t n = s->npages;
    s->flags &= SPAN_ZEROED;
    if ((n & (n - 1)) == 0 && (s->page_idx & (n - 1)) == 0) {
        if (n <= (1u << PCP_MAX_ORDER)) return pcp_free(s, (unsigned)__builtin_ctzll(n));
        if (n == CHUNK_PAGES) return chunk_free(s);
    }
    zone_free_span(s);
}

void pageset_drain_all(void) {
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset *ps = &pagesets[i];
        lock_acquire(&ps->lock);
        drain(ps, ps->count);
        while (ps->chunks) {
            struct span *s = ps->chunks;
            ps->chunks = s->next;
            ps->nr_chunks--;
            zone_free_span(s);
        }
        lock_release(&ps->lock);
    }
}

int pageset_count(void) { return nr_pagesets; }

void pageset_stats(int i, struct pageset_stats *st) {
    struct pageset *ps = &pagesets[i];
    lock_acquire(&ps->lock);
    st->cpu = i;
    st->count = ps->count;
    st->high = ps->high;
    st->high_min = ps->high_min;
    st->high_max = ps->high_max;
    st->batch = ps->batch;
    st->chunks = ps->nr_chunks;
    st->refills = ps->refills;
    st->drains = ps->drains;
    st->trylock_failed = atomic_load_explicit(&ps->trylock_failed, memory_order_relaxed);
    lock_release(&ps->lock);
}

void pageset_totals(uint64_t *refills, uint64_t *drains, uint64_t *held_pages) {
    *refills = *drains = *held_pages = 0;
    for (int i = 0; i < nr_pagesets; i++) {
        struct pageset_stats st;
        pageset_stats(i, &st);
        *refills += st.refills;
        *drains += st.drains;
        *held_pages += (uint64_t)st.count + (uint64_t)st.chunks * CHUNK_PAGES;
    }
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
