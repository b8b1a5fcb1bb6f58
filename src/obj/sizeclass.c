/* sizeclass: the small-object size classes.
 *
 * Classes are 16 bytes apart up to 128, then eight per power of two, so a
 * request wastes at most 15 bytes or 1/8 of its class.  A class's slab is the
 * smallest power-of-two run of pages (at least 8) that holds 8 objects and
 * leaves at most 1/8 of itself unused at the end.
 * Invariant: classes[size_class(n)].size >= n, and classes[c].size is a
 * multiple of 16; class_of_small agrees with size_class for n <= SMALL_MAX. */
#include "obj.h"

struct class_info classes[NCLASSES];
uint8_t class_of_small[(SMALL_MAX >> 4) + 1];
uint8_t class_young[NCLASSES];

#define YOUNG_MAX 2048 /* largest young target: from there an object fills half a page or more */

static uint32_t class_size(unsigned c) {
    if (c < 8) return (c + 1) * 16;
    unsigned k = 7 + (c - 8) / 8, sub = (c - 8) % 8;
    return (1u << k) + (sub + 1) * (1u << (k - 3));
}

void classes_init(void) {
    for (unsigned c = 0; c < NCLASSES; c++) {
        uint32_t size = class_size(c);
        uint32_t pages = 8;
        for (;;) {
            size_t bytes = (size_t)pages << PAGE_SHIFT;
            size_t cap = bytes / size;
            if (cap >= 8 && (bytes - cap * size) * 8 <= bytes) break;
            pages *= 2;
        }
        classes[c].size = size;
        classes[c].pages = pages;
        classes[c].capacity = (uint32_t)(((size_t)pages << PAGE_SHIFT) / size);
        classes[c].inv = UINT64_MAX / size + 1; /* ceil(2^64 / size) */
        classes[c].area = classes[c].capacity * size;
        /* a refill moves a whole slab's free list onto an empty bin list */
        uint64_t list = ((uint64_t)opt.heap_list_kib << 10) / size;
        classes[c].list_batch = 2048 / size < 8 ? 8 : 2048 / size > 64 ? 64 : 2048 / size;
        classes[c].list_max = (uint32_t)(list > 65535 ? 65535 : list < classes[c].capacity ? classes[c].capacity : list);
        if (classes[c].capacity >> 16) os_fatal_ptr("folio: more than 65535 objects in a slab of class", &classes[c]);
        if (pages > 256) os_fatal_ptr("folio: a slab of more than 256 pages (objmap words) in class", &classes[c]);
    }
    for (unsigned c = 0; c < NCLASSES; c++) {
        uint32_t size = classes[c].size, target = size;
        if (size < YOUNG_MAX)
            while (target & (target - 1)) target += target & -target; /* next power of two */
        class_young[c] = (uint8_t)size_class(target);
    }
    for (unsigned i = 0; i <= SMALL_MAX >> 4; i++) class_of_small[i] = (uint8_t)size_class(i ? i * 16 : 1);
}
