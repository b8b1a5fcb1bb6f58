/* Unit test: in a heap of at most 4 chunks, a block that realloc will grow
 * (zone_alloc_growable) has four times its size of room: a block of the
 * slabs' sizes allocated right after it does not land in that room, and the
 * block then grows in place to four times its size.  With only its own power
 * of two (32 pages for 25), the 32-page block took the buddy after it and
 * stopped it at 32 pages. */
#include <stdio.h>

#include "api_layer.h"
#include "unit.h"

int main(void) {
    folio_init();
    struct span *q = zone_alloc_growable(25, 1);
    EXPECT(q, "growable alloc of 25 pages failed");
    struct span *b = zone_alloc_pages(32, 1);
    EXPECT(b, "alloc of 32 pages failed");
    EXPECT(zone_resize(q, 100), "a growable block of 25 pages in a small heap could not grow to 100 in place");
    EXPECT(q->npages == 100, "resized to %u pages, not 100", q->npages);
    EXPECT(zone_check() == 0, "zone inconsistent");
    zone_free_span(b);
    zone_free_span(q);
    EXPECT(zone_check() == 0, "zone inconsistent at the end");
    printf("test_unit_grow_room: ok\n");
    return 0;
}
