// folio-test: tsan
/* test_small_heap: what keeps a small program's memory near glibc's.
 *
 * 1. Young bins: a new thread's first FOLIO_HEAP_YOUNG_BYTES (1024) of a
 *    class below 2 KiB come from the next power-of-two class's slabs
 *    (malloc_usable_size says which), then its own; a class whose size is a
 *    power of two, or of 2 KiB and more, is its own from the start.  One
 *    object of each of 39 classes from 16 B to 2 KiB lands on at most 16
 *    pages (12 when fresh; one per class without young bins); every object stays
 *    writable, is freed (locally and by another thread) and reused.  With
 *    FOLIO_HEAP_YOUNG_BYTES=0 every object comes from its own class.
 * 2. In a small heap, a thread's next large block of another size reuses
 *    the block it freed last, resident: writing it takes no page fault. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's size classes");
}
#else

static int young_on = 1; /* FOLIO_HEAP_YOUNG_BYTES as this run set it (1024 or 0) */

/* the size classes below 2 KiB (16 B apart to 128, then 8 per power of two) */
static size_t class_size(unsigned c)
{
    if (c < 8)
        return (c + 1) * 16;
    unsigned k = 7 + (c - 8) / 8, sub = (c - 8) % 8;
    return ((size_t)1 << k) + (sub + 1) * ((size_t)1 << (k - 3));
}
static size_t pow2_up(size_t n)
{
    size_t p = 16;
    while (p < n)
        p *= 2;
    return p;
}

static void *young_thread(void *arg)
{
    (void)arg;
    /* 48 B: 22 objects (1024 B) of 64, then 48 */
    enum { N = 40 };
    void *p[N];
    int served_64 = 0;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(48);
        CHECK(p[i] != NULL, "malloc(48)");
        memset(p[i], i, 48);
        size_t u = malloc_usable_size(p[i]);
        CHECK(u == 48 || u == 64, "malloc(48): usable %zu", u);
        if (u == 64) {
            CHECK(served_64 == i, "object %d from the young class after one of its own", i);
            served_64++;
        }
    }
    CHECK(served_64 == (young_on ? (1024 + 47) / 48 : 0), "%d objects of 48 B from the 64 B class",
          served_64);
    for (int i = 0; i < N; i++) {
        CHECK(((unsigned char *)p[i])[47] == (unsigned char)i, "object %d changed", i);
        free(p[i]);
    }
    /* freed young objects serve the class again (64 B class's list) */
    void *q = malloc(64);
    CHECK(q && malloc_usable_size(q) == 64, "malloc(64)");
    free(q);
    /* own classes from the start */
    q = malloc(3000);
    CHECK(q && malloc_usable_size(q) == 3072, "malloc(3000): usable %zu", q ? malloc_usable_size(q) : 0);
    free(q);
    q = malloc(256);
    CHECK(q && malloc_usable_size(q) == 256, "malloc(256)");
    free(q);

    /* one object of every class from 16 B to 2 KiB (c 0..39) but 48 */
    static void *one[40];
    uintptr_t pages[40];
    int npages = 0;
    for (unsigned c = 0; c < 40; c++) {
        if (c == 2)
            continue; /* 48: its young bytes are spent */
        size_t n = class_size(c);
        one[c] = malloc(n);
        CHECK(one[c] != NULL, "malloc(%zu)", n);
        memset(one[c], 0x5a, n);
        size_t u = malloc_usable_size(one[c]);
        CHECK(u == (young_on ? pow2_up(n) : n), "malloc(%zu): usable %zu", n, u);
        uintptr_t pg = (uintptr_t)one[c] >> 12;
        int seen = 0;
        for (int k = 0; k < npages; k++)
            seen |= pages[k] == pg;
        if (!seen)
            pages[npages++] = pg;
    }
    printf("young %s: 39 classes on %d pages\n", young_on ? "on" : "off", npages);
    if (young_on)
        CHECK(npages <= 16, "39 classes below 2 KiB on %d pages", npages);
    else
        CHECK(npages >= 39, "39 classes on %d pages without young bins", npages);
    return one;
}

static void *free_all(void *arg)
{
    void **one = arg;
    for (unsigned c = 0; c < 40; c++)
        if (one[c] && c != 2) {
            CHECK(((unsigned char *)one[c])[0] == 0x5a, "class %u object changed", c);
            free(one[c]); /* another thread's objects */
        }
    return NULL;
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void big_reuse(void)
{
    free(OPAQUE(malloc(16))); /* this thread has a heap (a heapless one keeps no block) */
    char *a = malloc(200000);
    CHECK(a != NULL, "malloc(200000)");
    memset(a, 1, 200000);
    free(OPAQUE(a));
    char *b = malloc(100000);
    CHECK(b != NULL, "malloc(100000)");
    size_t u = malloc_usable_size(b);
    long before = minflt();
    memset(b, 2, u);
    long faults = minflt() - before;
    printf("big reuse: %s, %ld faults writing %zu bytes\n", b == a ? "same block" : "another block",
           faults, u);
    CHECK(b == a, "a block of 100000 B is not the 200000 B one freed before (small heap)");
    CHECK(faults == 0, "%ld faults writing a reused block", faults);
    CHECK(u >= 100000 && u < 200000, "usable %zu: the block was not cut to size", u);
    char *c = malloc(90000); /* the cut tail went back to the page heap */
    CHECK(c != NULL, "malloc(90000)");
    memset(c, 3, 90000);
    CHECK(b[u - 1] == 2 && c[0] == 3, "blocks overlap");
    free(c);
    free(b);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* the default (1024), then again with young bins off (0) */
    const char *y = getenv("FOLIO_HEAP_YOUNG_BYTES");
    if (!y || (strcmp(y, "0") != 0 && strcmp(y, "1024") != 0))
        reexec_with_env(argv, "FOLIO_HEAP_YOUNG_BYTES", "1024");
    young_on = strcmp(y, "0") != 0;
    pthread_t t;
    void *one;
    CHECK(pthread_create(&t, NULL, young_thread, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, &one) == 0, "pthread_join");
    CHECK(pthread_create(&t, NULL, free_all, one) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    /* a later thread (a heap reused from the first) is young again */
    CHECK(pthread_create(&t, NULL, young_thread, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, &one) == 0, "pthread_join");
    free_all(one);
    if (young_on) {
        big_reuse();
        fflush(stdout); /* exec drops what stdio holds */
        reexec_with_env(argv, "FOLIO_HEAP_YOUNG_BYTES", "0");
    }
    return 0;
}
#endif
