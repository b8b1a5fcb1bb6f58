/* Unit test: the huge-page policy (thp.c) and the zone's use of it.
 *  - which chunks are advised: none under FOLIO_THP=never (no MADV_HUGEPAGE
 *    call, counted by os.c, while the heap grows past 32 MiB); under auto
 *    not a chunk of a small heap nor one already touched; in a heap of
 *    8-32 MiB not chunks handed out but not written, and the chunk after
 *    two written whole, or after chunks that hold resident 3/4 of the pages
 *    handed out, not less; the next untouched chunk once the heap holds
 *    32 MiB;
 *  - a huge chunk is purged only whole: a dirty free block in it is left
 *    resident while more than half of the chunk is in use (counted), and
 *    purged once half is free, after MADV_NOHUGEPAGE; trim and memory
 *    pressure purge at once;
 *  - collapse candidates (dense at two passes): untouched-policy chunks at most 1/16 free in a
 *    heap of 32 MiB;
 *  - the zone's per-chunk free counts and invariants hold throughout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_layer.h"
#include "unit.h"

#define GROW ((int)(THP_HEAP_PAGES / CHUNK_PAGES) + 2)
static struct span *grown[2 * GROW];
#define DENSE_MAX 16
static struct span *dense[DENSE_MAX];

/* The free block of the zone that starts at page idx of chunk c, if any. */
static struct span *free_block_at(struct chunk *c, uint32_t idx) {
    struct span *d = atomic_load(&c->span_of[idx]);
    return d && span_kind(d) == SPAN_ZONE_FREE && d->page_idx == idx && d->chunk == c ? d : NULL;
}

static void free_dirty(struct span *s) {
    s->flags = 0; /* as if written: the zone must purge it before reuse is free of faults */
    zone_free_span(s);
}

int main(void) {
    folio_init();
    opt.purge_delay_ms = 0;
    const struct os_thp *sys = thp_system();
    bool allowed = false;
    for (int i = 0; i < OS_THP_SIZES; i++)
        allowed |= sys->size_mode[i] == OS_THP_MADVISE || sys->size_mode[i] == OS_THP_ALWAYS;
    allowed |= sys->pmd == OS_THP_MADVISE || sys->pmd == OS_THP_ALWAYS;

    /* ---- the purge rule, alone ---- */
    EXPECT(!thp_keep_whole(CHUNK_HUGE_NONE, 1, false), "a 4 KiB chunk is purged in part");
    EXPECT(!thp_keep_whole(CHUNK_HUGE_SPLIT, 1, false), "a split chunk is purged in part");
    EXPECT(thp_keep_whole(CHUNK_HUGE_ADVISED, CHUNK_PAGES / 2 - 1, false),
           "an advised chunk more than half in use is kept whole");
    EXPECT(thp_keep_whole(CHUNK_HUGE_COLLAPSED, 8, false), "a collapsed chunk is kept whole");
    EXPECT(!thp_keep_whole(CHUNK_HUGE_ADVISED, CHUNK_PAGES / 2, false), "a half-free huge chunk is purged");
    EXPECT(!thp_keep_whole(CHUNK_HUGE_ADVISED, 8, true), "malloc_trim purges a huge chunk in part");
    pageset_force_pressure(PRESSURE_RECLAIM);
    EXPECT(!thp_keep_whole(CHUNK_HUGE_ADVISED, 8, false), "memory pressure purges a huge chunk in part");
    pageset_force_pressure(PRESSURE_BELOW_HIGH);
    EXPECT(!thp_keep_whole(CHUNK_HUGE_ADVISED, 8, false), "below high purges a huge chunk in part");
    pageset_force_pressure(0);

    /* ---- collapse candidates ---- */
    EXPECT(thp_collapse_wanted(CHUNK_HUGE_NONE, CHUNK_PAGES / 16, THP_HEAP_PAGES) == allowed,
           "a dense 4 KiB chunk of a large heap is collapsed where the system allows it");
    EXPECT(!thp_collapse_wanted(CHUNK_HUGE_NONE, CHUNK_PAGES / 16 + 1, THP_HEAP_PAGES), "not dense");
    EXPECT(!thp_collapse_wanted(CHUNK_HUGE_NONE, 0, THP_HEAP_PAGES - 1), "a small heap");
    EXPECT(!thp_collapse_wanted(CHUNK_HUGE_ADVISED, 0, THP_HEAP_PAGES), "already huge");
    EXPECT(!thp_collapse_wanted(CHUNK_HUGE_REFUSED, 0, THP_HEAP_PAGES), "refused before");
    /* a pass collapses a chunk only when the pass before found it dense too */
    uint8_t st = CHUNK_HUGE_NONE;
    EXPECT(!thp_collapse_pass(&st, 0, THP_HEAP_PAGES), "a chunk found dense once is not collapsed");
    EXPECT(st == (allowed ? CHUNK_HUGE_DENSE : CHUNK_HUGE_NONE), "a dense chunk is marked (%u)", st);
    EXPECT(thp_collapse_pass(&st, 0, THP_HEAP_PAGES) == allowed, "dense at two passes: collapsed");
    EXPECT(!thp_collapse_pass(&st, CHUNK_PAGES / 2, THP_HEAP_PAGES) && st == CHUNK_HUGE_NONE,
           "a marked chunk no longer dense loses its mark");
    EXPECT(!thp_collapse_pass(&st, 0, THP_HEAP_PAGES), "and starts over");
    st = CHUNK_HUGE_ADVISED;
    EXPECT(!thp_collapse_pass(&st, 0, THP_HEAP_PAGES) && st == CHUNK_HUGE_ADVISED, "a huge chunk is left as it is");

    /* ---- auto: small heaps and touched chunks are not advised (no call is made) ---- */
    struct os_advice_calls a0, a1;
    struct span *first = zone_alloc_pages(CHUNK_PAGES, 1);
    EXPECT(first, "a chunk");
    os_advice_calls(&a0);
    uint8_t state = CHUNK_HUGE_NONE;
    thp_chunk_used(first->start, &state, true, THP_DENSE_WATCH_PAGES - 1);
    EXPECT(state == CHUNK_HUGE_NONE, "a chunk of a heap under 4 MiB was advised");
    thp_chunk_used(first->start, &state, false, THP_HEAP_PAGES);
    EXPECT(state == CHUNK_HUGE_NONE, "a touched chunk was advised");
    os_advice_calls(&a1);
    EXPECT(a1.hugepage == a0.hugepage, "a chunk left alone got MADV_HUGEPAGE");

    /* ---- auto, a heap of 8-32 MiB: chunks handed out but not written are
     * not advised; written whole one after another, the chunk after two
     * of them is ---- */
    int ndense = 0;
    while (zone_in_use_pages() < THP_DENSE_HEAP_PAGES + CHUNK_PAGES && ndense < DENSE_MAX - 3) {
        dense[ndense] = zone_alloc_pages(CHUNK_PAGES, 1);
        EXPECT(dense[ndense], "chunk %d", ndense);
        EXPECT(zone_chunk_huge(dense[ndense]) == CHUNK_HUGE_NONE,
               "chunk %d (not written) of a %zu-page heap advised", ndense, zone_in_use_pages());
        ndense++;
    }
    for (int i = 0; i < 3; i++) {
        struct span *s = dense[ndense++] = zone_alloc_pages(CHUNK_PAGES, 1);
        EXPECT(s, "written chunk %d", i);
        uint8_t want = i == 2 && allowed ? CHUNK_HUGE_ADVISED : CHUNK_HUGE_NONE;
        EXPECT(zone_chunk_huge(s) == want, "chunk %d after %d written whole: state %u, not %u", ndense - 1, i,
               zone_chunk_huge(s), want);
        if (i < 2) memset(s->start, 1, CHUNK_SIZE);
    }
    EXPECT(zone_in_use_pages() < THP_HEAP_PAGES, "the dense run needs a heap under 32 MiB (%zu pages)",
           zone_in_use_pages());
    EXPECT(zone_check() == 0, "zone inconsistent after the dense run");

    /* ---- auto, a heap of 8-32 MiB with no dense run: a new chunk is
     * advised while the zone's chunks hold resident at least 3/4 of the pages
     * handed out (the heap's size is the call's; its second call with one
     * chunk is no run: its chunk is the one started before it) ---- */
    size_t resident = zone_chunks_resident();
    size_t sparse_heap = resident * THP_WRITTEN_DEN / THP_WRITTEN_NUM + CHUNK_PAGES;
    size_t written_heap = resident > THP_DENSE_HEAP_PAGES ? resident : THP_DENSE_HEAP_PAGES;
    EXPECT(resident >= 2 * CHUNK_PAGES && sparse_heap < THP_HEAP_PAGES &&
               written_heap * THP_WRITTEN_NUM <= resident * THP_WRITTEN_DEN,
           "the chunks hold %zu pages resident: no room for the written rule's two cases", resident);
    uint8_t ws = CHUNK_HUGE_NONE;
    thp_chunk_used(first->start, &ws, true, THP_DENSE_WATCH_PAGES - 1); /* started: no run through it */
    os_advice_calls(&a0);
    thp_chunk_used(first->start, &ws, true, sparse_heap);
    EXPECT(ws == CHUNK_HUGE_NONE, "a chunk of a %zu-page heap with %zu pages resident was advised", sparse_heap,
           resident);
    thp_chunk_used(first->start, &ws, true, written_heap);
    EXPECT(ws == (allowed ? CHUNK_HUGE_ADVISED : CHUNK_HUGE_NONE),
           "a chunk of a %zu-page heap with %zu pages resident: state %u", written_heap, resident, ws);
    thp_advise_flush();
    os_advice_calls(&a1);
    if (allowed && sys->pmd != OS_THP_ALWAYS)
        EXPECT(a1.hugepage == a0.hugepage + 1, "%llu MADV_HUGEPAGE calls for the written heap's chunk, not 1",
               (unsigned long long)(a1.hugepage - a0.hugepage));
    os_advise_huge(first->start, CHUNK_SIZE, false); /* first stays a chunk of 4 KiB pages */

    /* ---- never: the heap grows past 32 MiB without MADV_HUGEPAGE ---- */
    opt.thp = FOLIO_THP_NEVER;
    struct thp_stats t0, t1;
    thp_stats(&t0);
    os_advice_calls(&a0);
    for (int i = 0; i < GROW; i++) {
        grown[i] = zone_alloc_pages(CHUNK_PAGES, 1);
        EXPECT(grown[i], "chunk %d", i);
    }
    EXPECT(zone_in_use_pages() >= THP_HEAP_PAGES, "the heap holds %zu pages", zone_in_use_pages());
    os_advice_calls(&a1);
    thp_stats(&t1);
    EXPECT(a1.hugepage == a0.hugepage, "FOLIO_THP=never made %llu MADV_HUGEPAGE calls",
           (unsigned long long)(a1.hugepage - a0.hugepage));
    EXPECT(t1.advised == t0.advised, "FOLIO_THP=never advised %llu chunks",
           (unsigned long long)(t1.advised - t0.advised));
    for (int i = 0; i < GROW; i++)
        EXPECT(zone_chunk_huge(grown[i]) == CHUNK_HUGE_NONE, "chunk %d marked huge under never", i);

    /* ---- auto: the next untouched chunk of a 32 MiB heap is advised ---- */
    opt.thp = FOLIO_THP_AUTO;
    if (!allowed) {
        printf("SKIP auto advice and whole purges: the system allows no transparent huge pages "
               "(enabled=%s, 2 MiB pages %s)\n",
               os_thp_mode_names[sys->enabled], os_thp_mode_names[sys->pmd]);
        for (int i = 0; i < GROW; i++) free_dirty(grown[i]);
        for (int i = 0; i < ndense; i++) free_dirty(dense[i]);
        free_dirty(first);
        EXPECT(zone_check() == 0, "zone inconsistent");
        return 0;
    }
    struct span *x = zone_alloc_pages(CHUNK_PAGES, 1);
    EXPECT(x, "one more chunk");
    EXPECT(zone_chunk_huge(x) == CHUNK_HUGE_ADVISED, "the chunk of a 32 MiB heap is in state %u",
           zone_chunk_huge(x));
    os_advice_calls(&a1);
    thp_stats(&t1);
    EXPECT(t1.advised == t0.advised + 1, "advised %llu chunks, not 1",
           (unsigned long long)(t1.advised - t0.advised));
    if (sys->pmd != OS_THP_ALWAYS) /* under enabled=always no call is needed */
        EXPECT(a1.hugepage == a0.hugepage + 1, "%llu MADV_HUGEPAGE calls, not 1",
               (unsigned long long)(a1.hugepage - a0.hugepage));
    char *base = x->start;

    /* ---- a huge chunk is purged only whole ---- */
    free_dirty(x);
    struct span *q[4];
    for (int i = 0; i < 4; i++) {
        q[i] = zone_alloc_pages(CHUNK_PAGES / 4, 1);
        EXPECT(q[i] && q[i]->start >= base && q[i]->start < base + CHUNK_SIZE,
               "quarter %d not from the free huge chunk (fullest-first placement)", i);
    }
    EXPECT(zone_chunk_huge(q[0]) == CHUNK_HUGE_ADVISED, "the chunk lost its advice when reused");
    struct chunk *ch = q[0]->chunk;
    uint32_t i0 = q[0]->page_idx;
    struct span *other = NULL; /* q[0]'s buddy quarter */
    for (int i = 1; i < 4; i++)
        if ((q[i]->page_idx ^ i0) == CHUNK_PAGES / 4) other = q[i];
    EXPECT(other, "no buddy quarter");
    uint32_t ilow = i0 < other->page_idx ? i0 : other->page_idx;
    thp_stats(&t0);
    os_advice_calls(&a0);
    free_dirty(q[0]);
    zone_purge(false, 0);
    struct span *d = free_block_at(ch, i0);
    EXPECT(d && !(d->flags & SPAN_ZEROED), "a quarter of a huge chunk was purged while 3/4 is in use");
    thp_stats(&t1);
    EXPECT(t1.purges_skipped > t0.purges_skipped, "the kept purge was not counted");
    EXPECT(zone_chunk_huge(other) == CHUNK_HUGE_ADVISED, "state %u after a kept purge",
           zone_chunk_huge(other));
    EXPECT(zone_check() == 0, "zone inconsistent after a kept purge");
    /* the buddy quarter: half the chunk is free, so it is purged, split first */
    free_dirty(other);
    zone_purge(false, 0);
    d = free_block_at(ch, ilow);
    EXPECT(d && (d->flags & SPAN_ZEROED) && d->npages == CHUNK_PAGES / 2,
           "half a huge chunk free was not purged");
    thp_stats(&t1);
    os_advice_calls(&a1);
    EXPECT(t1.split == t0.split + 1, "the split was not counted");
    EXPECT(a1.nohugepage == a0.nohugepage + 1, "no MADV_NOHUGEPAGE before the partial purge");
    EXPECT(*(&arena_head_of((uintptr_t)ch)->huge[((uintptr_t)ch >> PAGE_SHIFT) & (ARENA_CHUNKS - 1)]) ==
               CHUNK_HUGE_SPLIT,
           "not SPLIT after a partial purge");
    EXPECT(zone_check() == 0, "zone inconsistent after a split purge");

    for (int i = 0; i < 4; i++)
        if (q[i] != q[0] && q[i] != other) free_dirty(q[i]);
    for (int i = 0; i < GROW; i++) free_dirty(grown[i]);
    for (int i = 0; i < ndense; i++) free_dirty(dense[i]);
    free_dirty(first);
    zone_purge(true, 0);
    EXPECT(zone_check() == 0, "zone inconsistent at the end");
    printf("thp: advised %llu, kept %llu, split %llu (enabled=%s, 2 MiB pages %s)\n",
           (unsigned long long)t1.advised, (unsigned long long)t1.purges_skipped,
           (unsigned long long)t1.split, os_thp_mode_names[sys->enabled], os_thp_mode_names[sys->pmd]);
    return 0;
}
