/* Unit test: the LARGE chunks' free runs (zone.c).  A span takes exactly
 * its page count (no power-of-two rounding); a freed span merges with the
 * free runs on both sides at once (boundary tags), so that a span as large
 * as the merged pages fits there without the zone growing; a span takes
 * the smallest run that holds it (best fit), not the first or the largest,
 * at the run's end (its front stays free behind the block before it); an
 * aligned span is cut from the middle of a run; a block that realloc
 * will grow keeps its power of two's pages free behind it (and is cut
 * from the front of a whole free chunk), and a smaller span takes another
 * run before that room;
 * spans of up to 64 pages come from other chunks; a run that fits is found
 * behind many on its list that do not; the hint the big-block caches read
 * agrees with the runs.  zone_check (every run's
 * tags, length and order, no two free runs side by side) after each step.
 * Each check fails on the buddy zone this replaced. */
#include <stdio.h>

#include "api_layer.h"
#include "unit.h"

static uint64_t chunks(void) {
    struct zone_stats st;
    zone_stats(&st);
    return st.chunks;
}

int main(void) {
    folio_init();
    /* five spans side by side in one large chunk, 100 + 90 + 120 + 80 + 110
     * = 500 pages, each exact, each cut at the end of the free run, right
     * below the one before: [412, 512), [322, 412), [202, 322), [122, 202),
     * [12, 122) */
    static const uint32_t len[5] = {100, 90, 120, 80, 110};
    struct span *q[5];
    uint32_t end = CHUNK_PAGES;
    for (int i = 0; i < 5; i++) {
        EXPECT(q[i] = zone_alloc_pages(len[i], 1), "alloc of %u pages failed", len[i]);
        EXPECT(q[i]->npages == len[i], "asked %u pages, got %u", len[i], q[i]->npages);
        end -= len[i];
        EXPECT(q[i]->chunk == q[0]->chunk && q[i]->page_idx == end, "span %d at page %u of %s chunk, not at %u", i,
               q[i]->page_idx, q[i]->chunk == q[0]->chunk ? "the same" : "another", end);
    }
    EXPECT(zone_check() == 0, "zone inconsistent after the allocations");
    uint64_t grown = chunks();

    /* best fit: free the 90 and the 80 (not side by side); 75 pages take
     * the end of the 80-page run, though the 90 was freed last and is first
     * on its list */
    zone_free_span(q[3]);
    zone_free_span(q[1]);
    EXPECT(zone_check() == 0, "zone inconsistent after two frees");
    struct span *r = zone_alloc_pages(75, 1);
    EXPECT(r && r->chunk == q[0]->chunk && r->page_idx == 202 - 75,
           "75 pages went to page %u, not to the end of the 80-page run [122, 202)", r ? r->page_idx : 0);
    zone_free_span(r); /* the 80 pages are one run again */

    /* merging on both sides: freeing the 120 between the 80 and the 90
     * leaves one run of 290 pages, [122, 412), which a span of 290 takes */
    zone_free_span(q[2]);
    EXPECT(zone_check() == 0, "zone inconsistent after the merge");
    EXPECT(zone_large_fits_hint(256), "a free run of 290 pages is in a large chunk, the hint says no");
    struct span *m = zone_alloc_pages(290, 1);
    EXPECT(m && m->chunk == q[0]->chunk && m->page_idx == 122,
           "290 pages went to page %u of %s chunk, not to the merged run at 122", m ? m->page_idx : 0,
           m && m->chunk == q[0]->chunk ? "the same" : "another");
    EXPECT(chunks() == grown, "the zone grew from %llu to %llu chunks", (unsigned long long)grown,
           (unsigned long long)chunks());
    zone_free_span(m);

    /* alignment: 65 pages aligned to 64 from the run [122, 412): the
     * highest aligned start they fit at, 320 */
    struct span *a = zone_alloc_pages(65, 64);
    EXPECT(a && a->chunk == q[0]->chunk && a->page_idx == 320, "65 pages aligned to 64 at page %u, not 320",
           a ? a->page_idx : 0);
    EXPECT(zone_check() == 0, "zone inconsistent after an aligned cut");
    zone_free_span(a);

    /* a block realloc will grow: with the 110 pages at [12, 122) freed too,
     * [0, 412) is one run; 150 pages are cut from it with their power of
     * two's pages, [156, 412), the 106 past them left free as the block's
     * room; a span of 70 pages then takes the end of the 156-page run
     * [0, 156), not the smaller room (a best fit would), and the block
     * grows in place */
    zone_free_span(q[4]);
    struct span *g = zone_alloc_growable(150, 1);
    EXPECT(g && g->chunk == q[0]->chunk && g->page_idx == 156, "a growable block of 150 pages at page %u, not 156",
           g ? g->page_idx : 0);
    struct span *t = zone_alloc_pages(70, 1);
    EXPECT(t && t->chunk == q[0]->chunk && t->page_idx == 156 - 70,
           "70 pages went to page %u, not to the end of the run [0, 156) (the room is [306, 412))",
           t ? t->page_idx : 0);
    EXPECT(zone_resize(g, 256), "a growable block could not grow in place into its room");
    EXPECT(zone_check() == 0, "zone inconsistent after a resize");
    zone_free_span(t);
    zone_free_span(g);

    /* spans of up to 64 pages that are no power of two come from chunks of
     * their own (a long-lived one would keep a chunk of large spans from
     * being whole again) */
    struct span *sm = zone_alloc_pages(20, 1);
    EXPECT(sm && sm->chunk != q[0]->chunk, "a span of 20 pages was cut from the chunk of large spans");
    zone_free_span(sm);

    zone_free_span(q[0]);
    EXPECT(zone_check() == 0, "zone inconsistent at the end");

    /* a block that will grow, from a whole free chunk: at its front, with
     * the whole chunk behind it */
    struct span *w = zone_alloc_growable(150, 1);
    EXPECT(w && w->page_idx == 0, "a growable block of 150 pages from a whole chunk at page %u, not 0",
           w ? w->page_idx : 0);
    EXPECT(zone_resize(w, CHUNK_PAGES), "it could not grow in place to the whole chunk");
    zone_free_span(w);
    EXPECT(zone_check() == 0, "zone inconsistent after the whole-chunk block");
    /* everything free: the chunk is whole again (no run of it is left) */
    EXPECT(!zone_large_fits_hint(100), "a whole free chunk is still a large run");
    /* a run that fits is found behind many that do not: 40 runs of 260
     * pages (each in its own chunk, a 252-page span beside it) freed after
     * one of 330; 300 pages take the 330 (on the next list up), and the
     * zone does not grow */
    enum { SHORT = 40 };
    static struct span *sh[SHORT], *by[SHORT];
    struct span *c = zone_alloc_pages(330, 1), *c2 = zone_alloc_pages(182, 1);
    EXPECT(c && c2 && c2->chunk == c->chunk, "330 + 182 pages did not share a chunk");
    for (int i = 0; i < SHORT; i++) {
        EXPECT((sh[i] = zone_alloc_pages(260, 1)) && (by[i] = zone_alloc_pages(252, 1)), "260 + 252 pages failed");
        EXPECT(by[i]->chunk == sh[i]->chunk, "260 + 252 pages did not share a chunk");
    }
    zone_free_span(c);
    for (int i = 0; i < SHORT; i++) zone_free_span(sh[i]);
    uint64_t before = chunks();
    struct span *f = zone_alloc_pages(300, 1);
    EXPECT(f && f->chunk == c->chunk, "300 pages did not take the 330-page run behind %d shorter ones", SHORT);
    EXPECT(chunks() == before, "the zone grew from %llu to %llu chunks", (unsigned long long)before,
           (unsigned long long)chunks());
    EXPECT(zone_check() == 0, "zone inconsistent after the search");
    zone_free_span(f);
    zone_free_span(c2);
    for (int i = 0; i < SHORT; i++) zone_free_span(by[i]);
    EXPECT(zone_check() == 0, "zone inconsistent after the long list");
    printf("test_unit_zone_runs: ok\n");
    return 0;
}
