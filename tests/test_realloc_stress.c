// folio-test: tsan
/* test_realloc_stress: threads keep blocks that they grow and shrink with
 * realloc across every size regime (in place and moving; huge ones by
 * mremap), checking that the kept prefix survives each step.  Blocks
 * migrate between threads through shared slots, so most reallocs are of
 * blocks another thread allocated (and may have reallocated before).
 *
 * FOLIO_TEST_SCALE scales the run time (default 2.5 s). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

#define NTHREADS 6
#define NSLOTS 256
#define OWN 16

typedef struct {
    uint64_t size;   /* bytes of pattern after the header */
    uint64_t seed;   /* the pattern's seed: fixed for the block's life */
} blk_t;

static _Atomic(blk_t *) slots[NSLOTS];
static atomic_long reallocs_done, moved;

static size_t pick(rng_t *r, size_t cur)
{
    uint64_t x = rng_next(r) % 100;
    if (x < 30) {   /* a small step up or down from the current size */
        size_t d = rng_range(r, 0, 64);
        return cur + d > 96 ? cur + d - 32 : 64;
    }
    if (x < 60)
        return rng_range(r, 16, 2048);
    if (x < 85)
        return rng_range(r, 2048, 256 * 1024);
    if (x < 98)
        return rng_range(r, 256 * 1024, 3u << 20);
    return rng_range(r, 3u << 20, 24u << 20);
}

static void verify(const blk_t *b, const char *where)
{
    size_t bad = pattern_check(b + 1, (size_t)b->size, b->seed);
    CHECK(bad == (size_t)-1, "%s: block %p (size %llu): byte %zu damaged", where,
          (const void *)b, (unsigned long long)b->size, bad);
}

static blk_t *step(blk_t *b, rng_t *r)
{
    size_t old = (size_t)b->size;
    size_t n = pick(r, old);
    uint64_t seed = b->seed;
    uintptr_t was = OPAQUE((uintptr_t)b);
    blk_t *q = realloc(b, sizeof *q + n);
    CHECK(q != NULL, "realloc(%zu -> %zu)", old, n);
    CHECK(q->seed == seed, "realloc(%p -> %p, %zu -> %zu) lost the header", (void *)was,
          (void *)q, old, n);
    size_t keep = old < n ? old : n;
    size_t bad = pattern_check(q + 1, keep, seed);
    CHECK(bad == (size_t)-1, "realloc(%p -> %p, %zu -> %zu): byte %zu of the kept prefix damaged",
          (void *)was, (void *)q, old, n, bad);
    if (n > keep)
        pattern_fill_from(q + 1, keep, n, seed);
    q->size = n;
    if ((uintptr_t)q != was)
        atomic_fetch_add_explicit(&moved, 1, memory_order_relaxed);
    return q;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    rng_t r;
    rng_seed(&r, (uint64_t)id * 104729 + 7);
    double until = now_sec() + test_seconds(2.5);
    blk_t *own[OWN] = {0};
    long n = 0;
    for (long it = 0;; it++) {
        if ((it & 15) == 0 && now_sec() > until)
            break;
        size_t i = rng_next(&r) % OWN;
        if (!own[i]) {
            size_t sz = rng_range(&r, 16, 4096);
            own[i] = malloc(sizeof(blk_t) + sz);
            CHECK(own[i] != NULL, "malloc");
            own[i]->size = sz;
            own[i]->seed = rng_next(&r);
            pattern_fill(own[i] + 1, sz, own[i]->seed);
        }
        own[i] = step(own[i], &r);
        n++;
        uint64_t x = rng_next(&r) % 10;
        if (x < 3) {
            /* Swap with a shared slot: the block continues its life in
             * another thread. */
            blk_t *other = atomic_exchange(&slots[rng_next(&r) % NSLOTS], own[i]);
            if (other)
                verify(other, "taken from a slot");
            own[i] = other;
        } else if (x == 3) {
            verify(own[i], "before free");
            free(own[i]);
            own[i] = NULL;
        } else if (x == 4) {
            /* realloc to a tiny size and back up. */
            size_t old = (size_t)own[i]->size;
            uint64_t seed = own[i]->seed;
            size_t tiny = old < 8 ? old : 8;
            blk_t *q = realloc(own[i], sizeof *q + tiny);
            CHECK(q != NULL && q->seed == seed, "realloc to tiny");
            CHECK(pattern_check(q + 1, tiny, seed) == (size_t)-1, "realloc to tiny lost data");
            q->size = tiny;
            own[i] = q;
        }
    }
    for (int i = 0; i < OWN; i++)
        if (own[i]) {
            verify(own[i], "at thread exit");
            free(own[i]);
        }
    atomic_fetch_add(&reallocs_done, n);
    return NULL;
}

int main(void)
{
    pthread_t th[NTHREADS];
    double t0 = now_sec();
    for (int i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    long left = 0;
    for (int s = 0; s < NSLOTS; s++) {
        blk_t *b = atomic_exchange(&slots[s], NULL);
        if (b) {
            verify(b, "drain");
            free(b);
            left++;
        }
    }
    NOTE("%.1fs: %ld reallocs (%ld moved), %ld blocks outlived their threads",
         now_sec() - t0, atomic_load(&reallocs_done), atomic_load(&moved), left);
    CHECK(atomic_load(&reallocs_done) > 100, "too few reallocs ran");
    return 0;
}
