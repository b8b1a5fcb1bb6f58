/* test_far_links: a thread's free list of one size class whose objects lie
 * in two 256 MiB arenas.  free() pushes an object on its bin's list with no
 * test of where the list's head lies, so a link from one arena to another
 * is normal there, and malloc follows it only after checking that it names
 * a free object of the list's class (obj.h, free-list links).  The first
 * arena is filled with 1 MiB blocks that are never written (address space
 * only), so that the class's next slab comes from the next arena; then
 * objects of both arenas are freed in turn (past the list's bound: its
 * flushes walk the links too) and as many allocated again: no block is
 * handed out twice, the bytes written into each stay, and the live
 * blocks outside the dense heap return to where they started.  Against a
 * build whose free pushes with no arena test but whose malloc still takes
 * every link out of the arena for a corruption, the process ends
 * ("corrupted free list"). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#define ARENA_SHIFT_BITS 28 /* 256 MiB */
#define OBJ 96
#define MAX_OBJS 200000
#define MAX_FILL 600 /* 1 MiB blocks: more than two arenas' worth */
#define HALF 256     /* objects freed from each arena */

static void *objs[MAX_OBJS];
static void *fill[MAX_FILL];

static uintptr_t arena_of(const void *p) { return (uintptr_t)p >> ARENA_SHIFT_BITS; }

/* Live blocks less the dense heap's: the blocks libc takes for folio's
 * background thread (its TLS, from the dense heap) appear when the purger
 * starts, which the frees below may or may not do (FOLIO_PURGE_DELAY_MS). */
static uint64_t live_not_dense(void)
{
    return report_u64("live_blocks") - (report_u64("dense_allocs") - report_u64("dense_frees"));
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    printf("far links: %d-byte objects\n", OBJ); /* stdio's buffer: live from here on */
    uint64_t blocks0 = live_not_dense();
    /* objects of one class in the first arena (the first of them may be
     * the dense heap's: the last HALF are a slab's) */
    int n = 0;
    for (; n < 2 * HALF; n++) {
        objs[n] = malloc(OPAQUE((size_t)OBJ));
        CHECK(objs[n] != NULL, "malloc(%d)", OBJ);
    }
    uintptr_t first = arena_of(objs[0]);
    /* large blocks until one lies past the first arena: the page heap
     * then has no room left in it */
    int nfill = 0;
    while (nfill < MAX_FILL) {
        fill[nfill] = malloc(OPAQUE((size_t)1 << 20));
        CHECK(fill[nfill] != NULL, "malloc(1 MiB)");
        if (arena_of(fill[nfill++]) != first)
            break;
    }
    if (arena_of(fill[nfill - 1]) == first)
        SKIP("no 1 MiB block left the first arena after %d of them", nfill);
    /* more objects of the class until HALF of them lie in another arena */
    int far = 0, far_from = -1;
    while (far < HALF && n < MAX_OBJS) {
        objs[n] = malloc(OPAQUE((size_t)OBJ));
        CHECK(objs[n] != NULL, "malloc(%d)", OBJ);
        if (arena_of(objs[n]) != first) {
            if (far_from < 0)
                far_from = n;
            far++;
        }
        n++;
    }
    if (far < HALF)
        SKIP("only %d of %d objects left the first arena", far, n);
    printf("far links: %d objects, the first arena's %d, then %d 1 MiB blocks, %d in the next arena\n",
           n, 2 * HALF, nfill, far);

    /* free the first arena's HALF and the next arena's last HALF in turn:
     * every push links to an object of the other arena */
    void *freed[2 * HALF];
    int nfreed = 0;
    for (int i = 0; i < HALF; i++) {
        void *a = objs[HALF + i], *b = objs[n - 1 - i];
        CHECK(arena_of(a) == first && arena_of(b) != first, "object %d's arenas", i);
        freed[nfreed++] = a;
        freed[nfreed++] = b;
        free(a);
        free(b);
        objs[HALF + i] = objs[n - 1 - i] = NULL;
    }
    /* and allocate them again: each pop follows a link to the other arena */
    void *again[2 * HALF];
    for (int i = 0; i < 2 * HALF; i++) {
        again[i] = malloc(OPAQUE((size_t)OBJ));
        CHECK(again[i] != NULL, "malloc(%d)", OBJ);
        memset(again[i], i & 0xff, OBJ);
    }
    for (int i = 0; i < 2 * HALF; i++) {
        const unsigned char *c = again[i];
        for (int k = 0; k < OBJ; k++)
            CHECK(c[k] == (unsigned char)(i & 0xff), "block %d byte %d overwritten", i, k);
    }
    qsort(freed, (size_t)nfreed, sizeof freed[0], cmp_ptr);
    void *sorted[2 * HALF];
    memcpy(sorted, again, sizeof sorted);
    qsort(sorted, 2 * HALF, sizeof sorted[0], cmp_ptr);
    int same = 0;
    for (int i = 0; i < 2 * HALF; i++) {
        CHECK(i == 0 || sorted[i] != sorted[i - 1], "malloc returned %p twice", sorted[i]);
        same += bsearch(&sorted[i], freed, (size_t)nfreed, sizeof freed[0], cmp_ptr) != NULL;
    }
    printf("far links: %d of %d blocks allocated again were freed ones\n", same, 2 * HALF);
    CHECK(same >= HALF, "only %d of the %d freed blocks came back first", same, 2 * HALF);

    /* every block back: the count returns to its start */
    for (int i = 0; i < 2 * HALF; i++)
        free(again[i]);
    for (int i = 0; i < n; i++)
        free(objs[i]);
    for (int i = 0; i < nfill; i++)
        free(fill[i]);
    uint64_t blocks = live_not_dense();
    CHECK(blocks == blocks0, "live blocks %llu outside the dense heap, %llu at the start",
          (unsigned long long)blocks, (unsigned long long)blocks0);
    puts("ok");
    return 0;
}
