/* Unit test: buddy invariants (zone_check) hold after every allocation and
 * free of random page counts and alignments; spans are exact, aligned and
 * disjoint, and their chunk metas at the address computed from them; freeing
 * everything merges back to the starting free count; the
 * pagesets stay within their limits and count their refills. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_layer.h"
#include "unit.h"


#define N 400
static struct span *live[N];

static unsigned rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

int main(void) {
    folio_init();
    EXPECT(zone_check() == 0, "zone inconsistent at start");
    struct zone_stats before;
    zone_stats(&before);
    unsigned seed = 12345;
    for (int step = 0; step < 20000; step++) {
        int i = (int)(rnd(&seed) % N);
        if (live[i]) {
            memset(live[i]->start, 0xa5, (size_t)live[i]->npages << PAGE_SHIFT);
            live[i]->flags = 0;
            zone_free_span(live[i]);
            live[i] = NULL;
        } else {
            size_t pages = 1 + rnd(&seed) % (rnd(&seed) % 4 ? 16 : CHUNK_PAGES);
            size_t align = (size_t)1 << (rnd(&seed) % 4 ? 0 : rnd(&seed) % 10);
            struct span *s = zone_alloc_pages(pages, align);
            EXPECT(s, "alloc of %zu pages failed", pages);
            EXPECT(s->npages == pages, "asked %zu pages, got %u", pages, s->npages);
            EXPECT(((uintptr_t)s->start & ((align << PAGE_SHIFT) - 1)) == 0, "misaligned to %zu pages", align);
            EXPECT(s->start == chunk_base(s->chunk) + ((size_t)s->page_idx << PAGE_SHIFT), "start/page_idx");
            EXPECT(chunk_of((uintptr_t)s->start) == s->chunk, "chunk meta not at its computed address");
            EXPECT(s->page_idx + pages <= CHUNK_PAGES, "span crosses its chunk");
            if (s->flags & SPAN_ZEROED)
                for (size_t b = 0; b < (pages << PAGE_SHIFT); b += 512)
                    EXPECT(s->start[b] == 0, "zeroed span not zero at %zu", b);
            for (int j = 0; j < N; j++) {
                struct span *o = live[j];
                if (!o) continue;
                EXPECT(s->start + (pages << PAGE_SHIFT) <= o->start ||
                           o->start + ((size_t)o->npages << PAGE_SHIFT) <= s->start,
                       "spans overlap");
            }
            live[i] = s;
        }
        if (step % 97 == 0) EXPECT(zone_check() == 0, "zone inconsistent at step %d", step);
    }
    for (int i = 0; i < N; i++)
        if (live[i]) zone_free_span(live[i]);
    EXPECT(zone_check() == 0, "zone inconsistent after freeing all");
    struct zone_stats after;
    zone_stats(&after);
    /* new chunks came in free, but for the metadata pages of new arenas */
    uint64_t want = before.free_pages + (after.chunks - before.chunks) * CHUNK_PAGES -
                    (after.meta_pages - before.meta_pages);
    EXPECT(after.free_pages == want, "free pages %llu, expected %llu", (unsigned long long)after.free_pages,
           (unsigned long long)want);

    /* purge: everything dirty goes, and comes back zeroed */
    zone_purge(true, 0);
    EXPECT(zone_check() == 0, "zone inconsistent after purge");
    zone_stats(&after);
    EXPECT(after.dirty_pages == 0, "dirty pages left after a full purge");
    EXPECT(after.purged_bytes > before.purged_bytes, "nothing was purged");

    /* pagesets: many order-0 frees drain, never exceed high */
    static struct span *pg[2000];
    for (int i = 0; i < 2000; i++) EXPECT(pg[i] = page_alloc(1, 1), "page_alloc");
    for (int i = 0; i < 2000; i++) {
        pg[i]->flags = 0;
        page_free(pg[i]);
    }
    struct pageset_stats sum;
    pageset_totals(&sum);
    EXPECT(sum.refills > 0, "no refills");
    for (int i = 0; i < pageset_count(); i++) {
        struct pageset_stats st;
        pageset_stats(i, &st);
        EXPECT(st.count <= st.high_max, "cpu %d holds %ld > high_max %ld", i, st.count, st.high_max);
        EXPECT(st.high_min <= st.high && st.high <= st.high_max, "cpu %d high %ld outside [%ld, %ld]", i,
               st.high, st.high_min, st.high_max);
    }
    EXPECT(zone_check() == 0, "zone inconsistent after pageset traffic");
    puts("zone: ok");
    return 0;
}
