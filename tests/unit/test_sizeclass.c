/* Unit test: size classes waste at most 15 bytes or 1/8, the fast table
 * agrees with size_class (every size up to SMALL_MAX), slabs hold >= 8 objects with <= 1/8 tail waste,
 * and the reciprocal offset check accepts exactly the object starts; large
 * blocks take exact pages up to 64 KiB, then at most 1/4 more in at most
 * 4 classes per power of two, never more than a chunk, and a block freed
 * serves the next request of its class on the same CPU. */
#define _GNU_SOURCE
#include <malloc.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "api_layer.h"
#include "unit.h"


int main(void) {
    folio_init();
    opt.heap_dense_kib = 0; /* slabs and the page heap from the first block (no dense heap) */
    for (size_t n = 1; n <= SMALL_MAX; n++) {
        unsigned c = size_class(n);
        EXPECT_ALL(c < NCLASSES, "class of %zu out of range", n);
        uint32_t size = classes[c].size;
        EXPECT_ALL(size >= n, "class %u size %u < %zu", c, size, n);
        EXPECT_ALL(size % 16 == 0, "class %u size %u not 16-aligned", c, size);
        EXPECT_ALL(size - n <= 15 || (size - n) * 8 <= size, "waste %zu of %u for %zu", size - n, size, n);
        if (c > 0) EXPECT_ALL(classes[c - 1].size < n, "%zu fits the smaller class %u", n, c - 1);
        EXPECT_ALL(small_class_of(n) == c, "table disagrees at %zu", n);
    }
    for (unsigned c = 0; c < NCLASSES; c++) {
        const struct class_info *ci = &classes[c];
        size_t bytes = (size_t)ci->pages << PAGE_SHIFT;
        EXPECT_ALL((ci->pages & (ci->pages - 1)) == 0, "class %u slab pages %u", c, ci->pages);
        EXPECT_ALL(ci->capacity >= 8, "class %u capacity %u", c, ci->capacity);
        /* the young target (constant table): the next power of two below 2 KiB, else itself */
        uint32_t target = ci->size;
        if (target < 2048)
            while (target & (target - 1)) target += target & -target;
        EXPECT_ALL(ci->young == size_class(target), "class %u young target %u, not %u", c, ci->young,
                   size_class(target));
        EXPECT_ALL((bytes - (size_t)ci->capacity * ci->size) * 8 <= bytes, "class %u tail waste", c);
        for (uint64_t off = 0; off < bytes; off++) {
            int ok = off * class_inv(ci) < class_inv(ci);
            EXPECT_ALL(ok == (off % ci->size == 0), "class %u offset %llu check %d", c,
                   (unsigned long long)off, ok);
        }
        /* free()'s one test: an object start below the area, over the whole
         * slab (its slack too), and at offsets up to 2^32 */
        uint64_t rnd = 0x9e3779b97f4a7c15ull + c;
        for (uint64_t i = 0; i < bytes + (1u << 16); i++) {
            uint64_t off = i;
            if (i >= bytes) {
                rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
                off = i & 1 ? (rnd & 0xffffffffu) : (rnd % (ci->capacity + 64)) * ci->size;
            }
            int ok = off * ci->free_mul < ci->free_lim;
            int want = off % ci->size == 0 && off < (uint64_t)ci->capacity * ci->size;
            EXPECT_ALL(ok == want, "class %u offset %llu: free's test says %d", c, (unsigned long long)off, ok);
        }
        if (c + 1 < NCLASSES) EXPECT_ALL(classes[c + 1].size > ci->size, "classes not increasing at %u", c);
    }
    EXPECT_ALL(classes[NCLASSES - 1].size == SMALL_MAX, "last class %u", classes[NCLASSES - 1].size);

    size_t prev = 0, classes_in_octave = 0, octave = 0;
    for (size_t n = SMALL_MAX + 1; n <= LARGE_MAX; n += 512) {
        size_t pages = large_pages(n), exact = (n + PAGE_SIZE - 1) >> PAGE_SHIFT;
        EXPECT_ALL(pages >= exact && pages <= CHUNK_PAGES, "large_pages(%zu) = %zu", n, pages);
        EXPECT_ALL(exact <= 16 ? pages == exact : (pages - exact) * 4 <= exact, "large_pages(%zu) = %zu wastes more than 1/4", n, pages);
        EXPECT_ALL(pages >= prev, "large_pages not monotone at %zu", n);
        if (pages != prev) {
            size_t o = (size_t)(63 - __builtin_clzll(pages - 1));
            classes_in_octave = o == octave ? classes_in_octave + 1 : 1;
            octave = o;
            EXPECT_ALL(exact <= 16 || classes_in_octave <= 4, "class %zu: %zu classes in its power of two", pages, classes_in_octave);
        }
        prev = pages;
    }
    /* 137 and 150 pages share the 160-page class: the block freed serves the
     * second request (the CPU's pageset keeps it; pinned so both calls see
     * the same pageset) */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET((unsigned)sched_getcpu(), &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0) {
        void *a = malloc(137 * PAGE_SIZE);
        EXPECT(a && malloc_usable_size(a) == 160 * PAGE_SIZE, "usable size of 137 pages: %zu", a ? malloc_usable_size(a) : 0);
        uintptr_t was = (uintptr_t)a;
        free(a);
        void *b = malloc(150 * PAGE_SIZE);
        EXPECT((uintptr_t)b == was, "a 150-page request took %p, not the 160-page block %#lx just freed", b, (unsigned long)was);
        free(b);
    }
    if (unit_failures) return 1;
    puts("sizeclass: ok");
    return 0;
}
