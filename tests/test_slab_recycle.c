/* test_slab_recycle: a slab recycled for another class is carved only on the
 * pages its earlier classes wrote; past them, as a slab fresh from the
 * kernel, up to the end of the pages its first object covers.
 *
 * A thread writes a few 16-byte objects (its slab of 8 pages is written on
 * its first page only), frees them and exits: its empty slab is spared.  The
 * main thread's first object of 3 KiB (a class of 8-page slabs too) comes
 * from that slab.  Of the slab's 8 pages at most 2 may then be resident:
 * carving 8 objects of 3 KiB for the recycled slab, as for resident pages,
 * would write 6. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's slabs");
}
#else

enum { PAGE = 4096, SLAB_PAGES = 8 };
static uintptr_t first_page; /* the page of the thread's first object */

static void *few_small(void *arg)
{
    (void)arg;
    enum { N = 64 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(16);
        CHECK(p[i] != NULL, "malloc(16)");
        memset(p[i], i, 16);
    }
    first_page = (uintptr_t)p[0] & ~(uintptr_t)(PAGE - 1);
    for (int i = 0; i < N; i++)
        free(OPAQUE(p[i]));
    return NULL;
}

int main(void)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, few_small, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    char *q = malloc(3000);
    CHECK(q != NULL, "malloc(3000)");
    CHECK(malloc_usable_size(q) == 3072, "malloc(3000): usable %zu", malloc_usable_size(q));
    memset(q, 1, 3000);
    uintptr_t slab = (uintptr_t)q;
    CHECK(slab % PAGE == 0, "a new slab's first object %p is page-aligned", (void *)q);
    unsigned char vec[SLAB_PAGES];
    CHECK(mincore((void *)slab, SLAB_PAGES * PAGE, vec) == 0, "mincore");
    int resident = 0;
    for (int i = 0; i < SLAB_PAGES; i++)
        resident += vec[i] & 1;
    printf("3 KiB object %s the exited thread's slab: %d of its %d pages resident\n",
           slab == first_page ? "in" : "not in", resident, SLAB_PAGES);
    CHECK(slab == first_page, "the 3 KiB object is not in the spared slab (%p, thread's %p)",
          (void *)slab, (void *)first_page);
    CHECK(resident <= 2, "%d pages of a recycled slab resident for one 3 KiB object", resident);
    free(q);
    return 0;
}
#endif
