/* tests/support/race_objects.h: what an owner thread leaves to other threads
 * in the floating-slab race tests (test_float_handoff, test_float_race):
 * objs[0..n) from malloc, 16 B-2 KiB from a sequence seeded with seed, the
 * first bytes of each written (so its pages are the owner's).  Returns the
 * sequence's last value.  Include after check.h and api.h. */
#ifndef FOLIO_TEST_RACE_OBJECTS_H
#define FOLIO_TEST_RACE_OBJECTS_H

static inline unsigned malloc_race_objects(void **objs, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t size = 16 + (seed >> 8) % 2033;
        objs[i] = malloc(size);
        CHECK(objs[i] != NULL, "malloc(%zu)", size);
        memset(objs[i], 3, size < 64 ? size : 64);
    }
    return seed;
}

#endif
