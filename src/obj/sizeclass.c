/* sizeclass: the small-object size classes.
 *
 * Classes are 16 bytes apart up to 128, then eight per power of two, so a
 * request wastes at most 15 bytes or 1/8 of its class.  A class's slab is the
 * smallest power-of-two run of pages (at least 8) that holds 8 objects and
 * leaves at most 1/8 of itself unused at the end.
 * Invariant: classes[size_class(n)].size >= n, and classes[c].size is a
 * multiple of 16; bin_line_of_small holds size_class(n) + 1 for n <= SMALL_MAX.
 *
 * The tables are constant expressions (the macros below), so they are in
 * the library's read-only pages, which every process shares, rather than
 * written into a page of its own at start; only class_list_max, which an
 * option sets, is written by classes_init. */
#include "obj.h"

#define YOUNG_MAX 2048 /* largest young target: from there an object fills half a page or more */

/* class c's size (c < NCLASSES) */
#define CS_LOG(c) ((c) < 8u ? 7u : 7u + ((c) - 8u) / 8u)
#define CS_SUB(c) ((c) < 8u ? 0u : ((c) - 8u) % 8u)
#define CLASS_SIZE(c) ((c) < 8u ? ((c) + 1u) * 16u : (1u << CS_LOG(c)) + (CS_SUB(c) + 1u) * (1u << (CS_LOG(c) - 3u)))
/* size_class(n) for 1 <= n <= SMALL_MAX (obj.h), without __builtin_clzll */
#define LOG2_15(x) ((x) >= 16384u ? 14u : (x) >= 8192u ? 13u : (x) >= 4096u ? 12u : (x) >= 2048u ? 11u : \
                    (x) >= 1024u ? 10u : (x) >= 512u ? 9u : (x) >= 256u ? 8u : 7u)
#define SIZE_CLASS(n) ((n) <= 128u ? ((n) - 1u) >> 4 : \
                       8u + (LOG2_15((n) - 1u) - 7u) * 8u + ((((n) - 1u) >> (LOG2_15((n) - 1u) - 3u)) & 7u))
/* a slab of p pages holds 8 objects of size s and leaves at most 1/8 of itself */
#define SLAB_BYTES(p) ((uint32_t)((p) << PAGE_SHIFT))
#define SLAB_FITS(s, p) (SLAB_BYTES(p) / (s) >= 8u && (SLAB_BYTES(p) - SLAB_BYTES(p) / (s) * (s)) * 8u <= SLAB_BYTES(p))
#define SLAB_PAGES(s) (SLAB_FITS(s, 8u) ? 8u : SLAB_FITS(s, 16u) ? 16u : SLAB_FITS(s, 32u) ? 32u : \
                       SLAB_FITS(s, 64u) ? 64u : SLAB_FITS(s, 128u) ? 128u : 256u)
#define NEXT_POW2(s) ((s) <= 16u ? 16u : (s) <= 32u ? 32u : (s) <= 64u ? 64u : (s) <= 128u ? 128u : \
                      (s) <= 256u ? 256u : (s) <= 512u ? 512u : (s) <= 1024u ? 1024u : 2048u)
#define CLASS_CAP(c) (SLAB_BYTES(SLAB_PAGES(CLASS_SIZE(c))) / CLASS_SIZE(c))
#define CLASS_ENTRY(c)                                                                             \
    {                                                                                              \
        .size = CLASS_SIZE(c), .pages = SLAB_PAGES(CLASS_SIZE(c)), .capacity = CLASS_CAP(c),       \
        .free_mul = UINT64_MAX / CLASS_SIZE(c) + 2,                                                \
        .free_lim = CLASS_CAP(c) * (uint32_t)((uint64_t)CLASS_SIZE(c) * (UINT64_MAX / CLASS_SIZE(c) + 2)), \
        .young = CLASS_SIZE(c) < YOUNG_MAX ? SIZE_CLASS(NEXT_POW2(CLASS_SIZE(c))) : (c),           \
        .list_batch = 2048u / CLASS_SIZE(c) < 8u ? 8u : 2048u / CLASS_SIZE(c) > 64u ? 64u : 2048u / CLASS_SIZE(c), \
        .run_max = 8192u / CLASS_SIZE(c) < 1u ? 1u : 8192u / CLASS_SIZE(c) > 64u ? 64u : 8192u / CLASS_SIZE(c), \
    }
#define SMALL_ENTRY(i) (SIZE_CLASS((i) ? (i) * 16u : 1u) + 1u)
/* f(b), f(b + 1) ... for 8, 16, 256 and 2048 indices */
#define X8(f, b) f((b) + 0u), f((b) + 1u), f((b) + 2u), f((b) + 3u), f((b) + 4u), f((b) + 5u), f((b) + 6u), f((b) + 7u)
#define X16(f, b) X8(f, (b) + 0u), X8(f, (b) + 8u)
#define X256(f, b) X16(f, (b) + 0u), X16(f, (b) + 16u), X16(f, (b) + 32u), X16(f, (b) + 48u), \
                   X16(f, (b) + 64u), X16(f, (b) + 80u), X16(f, (b) + 96u), X16(f, (b) + 112u), \
                   X16(f, (b) + 128u), X16(f, (b) + 144u), X16(f, (b) + 160u), X16(f, (b) + 176u), \
                   X16(f, (b) + 192u), X16(f, (b) + 208u), X16(f, (b) + 224u), X16(f, (b) + 240u)
#define X2048(f, b) X256(f, (b) + 0u), X256(f, (b) + 256u), X256(f, (b) + 512u), X256(f, (b) + 768u), \
                    X256(f, (b) + 1024u), X256(f, (b) + 1280u), X256(f, (b) + 1536u), X256(f, (b) + 1792u)

_Static_assert(NCLASSES == 72 && CLASS_SIZE(NCLASSES - 1u) == SMALL_MAX, "the classes below are all of them");
_Static_assert((SMALL_MAX >> 4) == 2048, "bin_line_of_small below has 2049 entries");
const struct class_info classes[NCLASSES] = {
    X8(CLASS_ENTRY, 0u), X8(CLASS_ENTRY, 8u), X8(CLASS_ENTRY, 16u), X8(CLASS_ENTRY, 24u), X8(CLASS_ENTRY, 32u),
    X8(CLASS_ENTRY, 40u), X8(CLASS_ENTRY, 48u), X8(CLASS_ENTRY, 56u), X8(CLASS_ENTRY, 64u),
};
const uint8_t bin_line_of_small[(SMALL_MAX >> 4) + 1] = {X2048(SMALL_ENTRY, 0u), SMALL_ENTRY(2048u)};
uint32_t class_list_max[NCLASSES];

void classes_init(void) {
    for (unsigned c = 0; c < NCLASSES; c++) {
        const struct class_info *ci = &classes[c];
        if (ci->capacity >> 16) os_fatal_ptr("folio: more than 65535 objects in a slab of class", ci);
        if (!SLAB_FITS(ci->size, ci->pages)) /* SLAB_PAGES stops at 256 */
            os_fatal_ptr("folio: a slab of more than 256 pages (objmap words) in class", ci);
        uint64_t list = ((uint64_t)opt.heap_list_kib << 10) / ci->size;
        class_list_max[c] = (uint32_t)(list > 65535 ? 65535 : list < ci->capacity ? ci->capacity : list);
    }
}
