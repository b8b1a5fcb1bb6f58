/* Unit test: size classes waste at most 15 bytes or 1/8, the fast table
 * agrees with size_class (every size up to SMALL_MAX), slabs hold >= 8 objects with <= 1/8 tail waste,
 * and the reciprocal offset check accepts exactly the object starts. */
#include <stdio.h>
#include <stdlib.h>

#include "api_layer.h"
#include "unit.h"


int main(void) {
    folio_init();
    for (size_t n = 1; n <= SMALL_MAX; n++) {
        unsigned c = size_class(n);
        EXPECT_ALL(c < NCLASSES, "class of %zu out of range", n);
        uint32_t size = classes[c].size;
        EXPECT_ALL(size >= n, "class %u size %u < %zu", c, size, n);
        EXPECT_ALL(size % 16 == 0, "class %u size %u not 16-aligned", c, size);
        EXPECT_ALL(size - n <= 15 || (size - n) * 8 <= size, "waste %zu of %u for %zu", size - n, size, n);
        if (c > 0) EXPECT_ALL(classes[c - 1].size < n, "%zu fits the smaller class %u", n, c - 1);
        EXPECT_ALL(class_of_small[(n + 15) >> 4] == c, "table disagrees at %zu", n);
    }
    for (unsigned c = 0; c < NCLASSES; c++) {
        const struct class_info *ci = &classes[c];
        size_t bytes = (size_t)ci->pages << PAGE_SHIFT;
        EXPECT_ALL((ci->pages & (ci->pages - 1)) == 0, "class %u slab pages %u", c, ci->pages);
        EXPECT_ALL(ci->capacity >= 8, "class %u capacity %u", c, ci->capacity);
        EXPECT_ALL((bytes - (size_t)ci->capacity * ci->size) * 8 <= bytes, "class %u tail waste", c);
        for (uint64_t off = 0; off < bytes; off++) {
            int ok = off * ci->inv < ci->inv;
            EXPECT_ALL(ok == (off % ci->size == 0), "class %u offset %llu check %d", c,
                   (unsigned long long)off, ok);
        }
        if (c + 1 < NCLASSES) EXPECT_ALL(classes[c + 1].size > ci->size, "classes not increasing at %u", c);
    }
    EXPECT_ALL(classes[NCLASSES - 1].size == SMALL_MAX, "last class %u", classes[NCLASSES - 1].size);
    if (unit_failures) return 1;
    puts("sizeclass: ok");
    return 0;
}
