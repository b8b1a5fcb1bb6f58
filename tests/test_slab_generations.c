// folio-test: tsan
/* test_slab_generations: a thread's slabs go to the next thread by class.
 *
 * An exiting thread's empty slabs wait for the threads to come.  A slab's
 * resident pages are what its classes touched: handed to another class of
 * the same slab size, it ends up resident whole while each class uses part
 * of it, so generations of threads grow the process's RSS (issue 13's
 * mstress).  Generation 1 makes a slab of a small class A (one object) and
 * one of a class B of the same slab size (every object: all its pages),
 * frees everything and exits; generation 2's first object of A must be A's
 * old slab's first object, not one in B's slab (which, pushed last, was the
 * first to be taken before). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's spare slabs need folio");
}
#else

#define SIZE_A 208   /* classes of one slab size (8 pages) */
#define SIZE_B 240
#define B_OBJECTS 136 /* 32 KiB / 240: the whole slab */

static void *a_first;

static void *gen1(void *arg)
{
    (void)arg;
    void *a = malloc(SIZE_A);
    CHECK(a != NULL, "malloc");
    memset(a, 1, SIZE_A);
    a_first = a;
    void *b[B_OBJECTS];
    for (int i = 0; i < B_OBJECTS; i++) {
        b[i] = malloc(SIZE_B);
        CHECK(b[i] != NULL, "malloc");
        memset(b[i], 2, SIZE_B);
    }
    for (int i = 0; i < B_OBJECTS; i++)
        free(b[i]);
    free(a);
    return NULL;
}

static void *gen2(void *arg)
{
    void *a = malloc(SIZE_A);
    CHECK(a != NULL, "malloc");
    *(void **)arg = a;
    free(a);
    return NULL;
}

static void class_case(void)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, gen1, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    void *got = NULL;
    CHECK(pthread_create(&t, NULL, gen2, &got) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(got == a_first, "the next thread's first %d-byte object is %p, not %p (its class's old slab)",
          SIZE_A, got, a_first);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* spare slabs are not given back by age while the test runs */
    reexec_with_env(argv, "FOLIO_PURGE_DELAY_MS", "600000");
    class_case();
    return 0;
}
#endif
