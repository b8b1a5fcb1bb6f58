/* Unit test: the pagemap returns what was set, 0 elsewhere, and rejects
 * addresses beyond 48 bits; malloc'd blocks resolve to their span through
 * the arena lookup (not the pagemap), huge blocks through the pagemap. */
#include <stdio.h>
#include <stdlib.h>

#include "api_layer.h"
#include "unit.h"


int main(void) {
    folio_init();
    opt.heap_dense_kib = 0; /* slabs and the page heap from the first block (no dense heap) */
    /* addresses in a range folio never maps: near the top of the user half */
    uintptr_t base = (uintptr_t)0x7f0000000000ull;
    for (int i = 0; i < 64; i++) {
        uintptr_t a = base + (uintptr_t)i * 37 * CHUNK_SIZE;
        EXPECT(pagemap_get(a) == 0, "fresh entry %d not empty", i);
        EXPECT(pagemap_set(a, (uintptr_t)0x1000 * (i + 1)), "set %d failed", i);
    }
    for (int i = 0; i < 64; i++) {
        uintptr_t a = base + (uintptr_t)i * 37 * CHUNK_SIZE;
        EXPECT(pagemap_get(a) == (uintptr_t)0x1000 * (i + 1), "entry %d", i);
        EXPECT(pagemap_get(a + CHUNK_SIZE - 1) == (uintptr_t)0x1000 * (i + 1), "chunk end %d", i);
        EXPECT(pagemap_get(a + CHUNK_SIZE) == 0 || i == 63, "neighbour of %d set", i);
        pagemap_set(a, 0);
        EXPECT(pagemap_get(a) == 0, "cleared entry %d", i);
    }
    EXPECT(pagemap_get((uintptr_t)1 << 48) == 0, "address beyond 48 bits");
    EXPECT(!pagemap_set((uintptr_t)1 << 50, 1), "set beyond 48 bits accepted");
    int stack;
    EXPECT(pagemap_get((uintptr_t)&stack) == 0, "stack address mapped");

    size_t sizes[] = {1, 100, 4000, 30000, 100000, 2000000, 5000000};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char *p = malloc(sizes[i]);
        EXPECT(p, "malloc %zu", sizes[i]);
        uintptr_t e = pagemap_get((uintptr_t)p);
        struct span *s = span_lookup((uintptr_t)p);
        if (sizes[i] <= LARGE_MAX) {
            EXPECT(e == 0, "arena block of %zu in the pagemap", sizes[i]);
            EXPECT(s && (char *)p >= s->start && (char *)p < s->start + ((size_t)s->npages << PAGE_SHIFT),
                   "span of %zu does not cover it", sizes[i]);
            EXPECT(s->kind == (sizes[i] <= SMALL_MAX ? SPAN_SLAB : SPAN_LARGE), "kind of %zu", sizes[i]);
        } else {
            EXPECT(e & PAGEMAP_HUGE_TAG, "huge block of %zu not tagged", sizes[i]);
            EXPECT(s == NULL, "huge block of %zu found in an arena", sizes[i]);
        }
        free(p);
    }
    puts("pagemap: ok");
    return 0;
}
