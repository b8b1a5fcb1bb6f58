/* test_cancel: a thread with a cancellation pending is never cancelled inside
 * malloc, calloc or free.
 *
 * A fresh process's first large heap makes folio read files (the system's
 * huge-page settings from sysfs, under the zone lock; the memory cgroup's
 * limit; NUMA nodes and cache sizes for huge blocks and clearing).  Through
 * libc's open/read/close those are cancellation points: a thread cancelled
 * there unwinds out of malloc with folio's lock held, and the next malloc of
 * any thread waits forever.  Here a thread cancels itself (deferred: acted
 * on at the next cancellation point), then grows a 64 MiB heap of small
 * objects, callocs and mallocs huge blocks and frees it all; it must reach
 * its own pthread_testcancel, and the main thread must allocate afterwards. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#define MIB ((size_t)1 << 20)
#define OBJ 1000
#define HEAP (64 * MIB)

static volatile int reached;

static void grow_and_free(void)
{
    size_t n = HEAP / OBJ;
    char **objs = malloc(n * sizeof *objs);
    CHECK(objs != NULL, "malloc of the table");
    for (size_t i = 0; i < n; i++) {
        objs[i] = malloc(OPAQUE(OBJ));
        CHECK(objs[i] != NULL, "malloc %zu", i);
        memset(objs[i], 1, OBJ);
    }
    char *z = calloc(1, OPAQUE(8 * MIB));
    CHECK(z != NULL && z[8 * MIB - 1] == 0, "calloc of 8 MiB");
    char *big = malloc(OPAQUE(64 * MIB));
    CHECK(big != NULL, "malloc of 64 MiB");
    memset(big, 2, 64 * MIB);
    free(big);
    free(z);
    for (size_t i = 0; i < n; i++)
        free(objs[i]);
    free(objs);
}

static void *cancelled(void *arg)
{
    (void)arg;
    CHECK(pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL) == 0, "deferred");
    CHECK(pthread_cancel(pthread_self()) == 0, "pthread_cancel(self)");
    grow_and_free();
    malloc_trim(0);
    reached = 1;
    pthread_testcancel();
    return NULL; /* not reached: the pending cancel acts at pthread_testcancel */
}

int main(void)
{
    pthread_t t;
    void *ret = NULL;
    CHECK(pthread_create(&t, NULL, cancelled, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, &ret) == 0, "pthread_join");
    CHECK(reached, "the thread was cancelled inside the allocator (it did not reach its pthread_testcancel)");
    CHECK(ret == PTHREAD_CANCELED, "the thread was not cancelled at its pthread_testcancel (%p)", ret);
    grow_and_free(); /* a lock left held would hang here (run.sh's timeout fails it) */
    return 0;
}
