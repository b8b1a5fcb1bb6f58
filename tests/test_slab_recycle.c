/* test_slab_recycle: a slab's pages that nothing wrote yet stay untouched
 * while other memory of its class can serve.
 *
 * 1. A slab recycled for another class is carved only on the pages its
 *    earlier classes wrote; past them, as a slab fresh from the kernel, up
 *    to the end of the pages its first object covers.  A thread writes a
 *    few 16-byte objects (its slab of 8 pages is written on its first page
 *    only), frees them and exits: its empty slab is spared.  The main
 *    thread's first object of 3 KiB (a class of 8-page slabs too) comes from
 *    that slab.  Of the slab's 8 pages at most 2 may then be resident:
 *    carving 8 objects of 3 KiB for the recycled slab, as for resident
 *    pages, would write 6.
 * 2. A current slab whose bump pointer reached pages nothing wrote waits
 *    while another slab of its class has free objects.  128 objects of
 *    256 B fill a slab (A), the 129th starts the next (B, its first page
 *    carved); A's objects are freed (the thread's list keeps some, the rest
 *    go back to A) and 128 are allocated again: A's and B's first page serve
 *    them all, and B's other pages stay untouched (carving B before taking
 *    A's free objects would write its second page). */
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

    enum { N = 128 };
    static char *a[N];
    for (int i = 0; i < N; i++) {
        a[i] = malloc(256);
        CHECK(a[i] != NULL, "malloc(256)");
        memset(a[i], 2, 256);
    }
    CHECK(malloc_usable_size(a[0]) == 256, "malloc(256): usable %zu", malloc_usable_size(a[0]));
    char *b = malloc(256); /* the first object of the next slab */
    CHECK(b != NULL, "malloc(256)");
    memset(b, 3, 256);
    CHECK((uintptr_t)b % PAGE == 0 && (b < a[0] || b >= a[N - 1] + 256),
          "the 129th object %p does not start a new slab (first %p, last %p)", (void *)b, (void *)a[0],
          (void *)a[N - 1]);
    for (int i = 0; i < N; i++)
        free(OPAQUE(a[i]));
    for (int i = 0; i < N; i++) {
        a[i] = malloc(256);
        CHECK(a[i] != NULL, "malloc(256)");
        memset(a[i], 4, 256);
    }
    CHECK(mincore(b, SLAB_PAGES * PAGE, vec) == 0, "mincore");
    resident = 0;
    for (int i = 1; i < SLAB_PAGES; i++)
        resident += vec[i] & 1;
    printf("after 128 objects freed and 128 allocated: %d of the new slab's pages 2..%d resident\n",
           resident, SLAB_PAGES);
    CHECK(resident == 0, "%d pages of a slab carved while another slab of its class had free objects",
          resident);
    for (int i = 0; i < N; i++)
        free(a[i]);
    free(b);
    return 0;
}
#endif
