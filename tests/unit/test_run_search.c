/* Unit test: a large span for which no aligned free block of its order is
 * left in the large chunks is carved from free blocks that lie side by side
 * in a chunk already used (run_search), not from a new chunk.  Four spans of
 * 128 pages fill one large chunk; freeing the second and the third leaves
 * two free blocks of order 7 that are not buddies (128's is 0, 256's is
 * 384).  A span of 200 pages (order 8) then has no aligned block anywhere
 * in the large chunks: it must start at page 128 of that chunk, and the zone
 * must not grow.  Before run_search it took a whole free chunk.  The hint
 * that the big-block caches read (zone_large_fits_hint) must agree.  A
 * block that realloc will grow does not take such a run. */
#include <stdio.h>

#include "api_layer.h"
#include "unit.h"

int main(void) {
    folio_init();
    struct span *q[4];
    for (int i = 0; i < 4; i++) EXPECT(q[i] = zone_alloc_pages(128, 1), "alloc of 128 pages failed");
    for (int i = 1; i < 4; i++) {
        EXPECT(q[i]->chunk == q[0]->chunk, "span %d of 128 pages in another chunk", i);
        EXPECT(q[i]->page_idx == 128u * (unsigned)i, "span %d at page %u, not %d", i, q[i]->page_idx, 128 * i);
    }
    zone_free_span(q[1]);
    zone_free_span(q[2]);
    EXPECT(zone_check() == 0, "zone inconsistent after the frees");
    EXPECT(zone_large_fits_hint(128), "a free block of order 7 is in a large chunk, the hint says no");
    EXPECT(!zone_large_fits_hint(200), "no free block of order 8 is in a large chunk, the hint says yes");
    struct zone_stats before, after;
    zone_stats(&before);
    struct span *r = zone_alloc_pages(200, 1);
    EXPECT(r, "alloc of 200 pages failed");
    zone_stats(&after);
    EXPECT(r->chunk == q[0]->chunk && r->page_idx == 128,
           "200 pages went to page %u of %s chunk, not to the free run at page 128", r->page_idx,
           r->chunk == q[0]->chunk ? "the same" : "another");
    EXPECT(r->npages == 200, "asked 200 pages, got %u", r->npages);
    EXPECT(after.chunks == before.chunks, "the zone grew from %llu to %llu chunks",
           (unsigned long long)before.chunks, (unsigned long long)after.chunks);
    EXPECT(zone_check() == 0, "zone inconsistent after the run was taken");
    EXPECT(zone_large_fits_hint(56), "the run's tail (56 pages) is free, the hint says no");
    zone_free_span(r);
    EXPECT(zone_check() == 0, "zone inconsistent after the run was freed");

    /* a block realloc will grow takes the block of its order, not the run
     * (it would move at its next growths) */
    struct span *g = zone_alloc_growable(200, 1);
    EXPECT(g && !(g->chunk == q[0]->chunk && g->page_idx == 128), "a growable block took the run at page 128");
    EXPECT(zone_resize(g, 256), "the growable block could not grow in place to its order's 256 pages");
    zone_free_span(g);
    zone_free_span(q[0]);
    zone_free_span(q[3]);
    EXPECT(zone_check() == 0, "zone inconsistent at the end");
    printf("test_unit_run_search: ok\n");
    return 0;
}
