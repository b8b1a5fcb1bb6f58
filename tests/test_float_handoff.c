// folio-test: tsan
/* test_float_handoff: slabs whose objects other threads free come back
 * without their owner (issue 13, item 1).
 *
 * 1. A busy owner: thread O mallocs 4,096 objects of 64 bytes (8 slabs, 7
 *    of them left with no free object), hands them to thread F and waits
 *    on a barrier, calling nothing of folio's, while F frees every one and
 *    then mallocs 4,096 objects of the same size.  F's frees alone give
 *    the slabs they emptied to the spare lists (floating_slabs_spared grows
 *    by at least 6), and F's mallocs take at least half of their objects
 *    at addresses O's objects had: the memory came back while O slept.
 * 2. An owner that exited: thread D mallocs 4,096 objects of 96 bytes and
 *    exits with all of them live; the main thread frees them, then mallocs
 *    as many of that size, and again at least half land where D's were.
 * 3. The counts stay exact: the live bytes after 2 are those before it
 *    (D's objects freed, as many allocated). */
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
    SKIP("folio's slab handoff needs folio");
}
#else

enum { N = 4096 };

static void *objs[N], *again[N];
static pthread_barrier_t handed, done;

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* how many of again[] lie at an address some objs[] had (objs sorted) */
static int reused(void)
{
    int n = 0;
    for (int i = 0; i < N; i++)
        n += bsearch(&again[i], objs, N, sizeof objs[0], cmp_ptr) != NULL;
    return n;
}

static void *owner(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        objs[i] = malloc(64);
        CHECK(objs[i] != NULL, "malloc");
        memset(objs[i], 1, 64);
    }
    pthread_barrier_wait(&handed);
    pthread_barrier_wait(&done); /* busy elsewhere: no malloc, no free */
    return NULL;
}

static void *freer(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&handed);
    uint64_t spared0 = report_u64("floating_slabs_spared");
    for (int i = 0; i < N; i++)
        free(objs[i]);
    uint64_t spared = report_u64("floating_slabs_spared") - spared0;
    for (int i = 0; i < N; i++) {
        again[i] = malloc(64);
        CHECK(again[i] != NULL, "malloc");
    }
    qsort(objs, N, sizeof objs[0], cmp_ptr);
    int n = reused();
    printf("busy owner: %llu slabs spared by the freeing thread, %d of %d new objects where the owner's were\n",
           (unsigned long long)spared, n, N);
    CHECK(spared >= 6, "only %llu slabs spared", (unsigned long long)spared);
    CHECK(n >= N / 2, "only %d of %d objects reused while the owner waited", n, N);
    for (int i = 0; i < N; i++)
        free(again[i]);
    pthread_barrier_wait(&done);
    return NULL;
}

static void *exits(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        objs[i] = malloc(96);
        CHECK(objs[i] != NULL, "malloc");
        memset(objs[i], 2, 96);
    }
    return NULL;
}

int main(void)
{
    pthread_t o, f, d;
    CHECK(pthread_barrier_init(&handed, NULL, 2) == 0 && pthread_barrier_init(&done, NULL, 2) == 0,
          "pthread_barrier_init");
    CHECK(pthread_create(&o, NULL, owner, NULL) == 0 && pthread_create(&f, NULL, freer, NULL) == 0,
          "pthread_create");
    CHECK(pthread_join(o, NULL) == 0 && pthread_join(f, NULL) == 0, "pthread_join");

    CHECK(pthread_create(&d, NULL, exits, NULL) == 0 && pthread_join(d, NULL) == 0, "thread");
    uint64_t live0 = report_u64("live_bytes"); /* D's objects are live */
    for (int i = 0; i < N; i++)
        free(objs[i]);
    for (int i = 0; i < N; i++) {
        again[i] = malloc(96);
        CHECK(again[i] != NULL, "malloc");
    }
    qsort(objs, N, sizeof objs[0], cmp_ptr);
    int n = reused();
    printf("exited owner: %d of %d new objects where its objects were\n", n, N);
    CHECK(n >= N / 2, "only %d of %d objects reused after the owner exited", n, N);
    uint64_t live = report_u64("live_bytes");
    CHECK(live == live0, "live bytes %llu, want %llu (as many objects as the dead thread left)",
          (unsigned long long)live, (unsigned long long)live0);
    for (int i = 0; i < N; i++)
        free(again[i]);
    puts("ok");
    return 0;
}
#endif
