// folio-test: tsan
/* test_big_returns: large blocks of random sizes, several threads, and the
 * way out while they still allocate.
 *
 * Two threads each keep up to 40 blocks of 32 KiB-1 MiB, replacing a random
 * one per step: every block is filled with a pattern over its first and last
 * KiB and checked when it is freed, so a block handed out twice (a kept
 * block given back to the buddy lists while its thread still held it, a run
 * of free pages taken across buddies that overlapped a live block) fails.
 * The heap passes 8 MiB, so a thread's kept 32-256 KiB blocks go back to the
 * buddy lists when its next large block would start a chunk: the report
 * must count such returns (heap_big_cache_returns).  Then main returns while
 * both threads are still allocating: the process must exit, not hang. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's counters need folio");
}
#else

enum { THREADS = 2, KEEP = 40, EDGE = 1024 };

static _Atomic uint64_t steps_done;

struct block {
    unsigned char *p;
    size_t n;
    uint64_t seed;
};

static void fill(const struct block *b)
{
    pattern_fill(b->p, EDGE, b->seed);
    pattern_fill(b->p + b->n - EDGE, EDGE, b->seed + 1);
}

static void check_and_free(struct block *b)
{
    if (!b->p)
        return;
    CHECK(pattern_check(b->p, EDGE, b->seed) == (size_t)-1, "block %p (%zu bytes) lost its first KiB", (void *)b->p, b->n);
    CHECK(pattern_check(b->p + b->n - EDGE, EDGE, b->seed + 1) == (size_t)-1, "block %p (%zu bytes) lost its last KiB",
          (void *)b->p, b->n);
    free(b->p);
    b->p = NULL;
}

static void *worker(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    struct block kept[KEEP] = {{0}};
    for (uint64_t step = 1;; step++) {
        struct block *b = &kept[rng_range(&r, 0, KEEP - 1)];
        check_and_free(b);
        b->n = rng_range(&r, 32 << 10, 1 << 20);
        b->seed = rng_next(&r);
        b->p = malloc(b->n);
        CHECK(b->p != NULL, "malloc(%zu)", b->n);
        fill(b);
        atomic_fetch_add_explicit(&steps_done, 1, memory_order_relaxed);
    }
    return NULL;
}

int main(void)
{
    uint64_t returns0 = report_u64("heap_big_cache_returns");
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "pthread_create");
    double end = now_sec() + test_seconds(20.0);
    uint64_t returns = returns0;
    while (now_sec() < end && (returns == returns0 || atomic_load(&steps_done) < 20000)) {
        usleep(20000);
        returns = report_u64("heap_big_cache_returns");
    }
    CHECK(returns > returns0, "no kept block went back to the buddy lists in %llu steps",
          (unsigned long long)atomic_load(&steps_done));
    printf("test_big_returns: %llu steps, %llu returns; main returns while the threads allocate\n",
           (unsigned long long)atomic_load(&steps_done), (unsigned long long)(returns - returns0));
    return 0; /* the workers are still running: exit must not wait for them or crash */
}
#endif
