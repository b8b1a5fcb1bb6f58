// folio-test: tsan
/* test_preempt: 64 threads on 2 CPUs, so that lock holders are preempted
 * all the time (issue 15): every thread allocates in every tier (small,
 * large, huge 2..32 MiB, calloc, realloc), hands about half of its blocks to
 * others through shared slots, and checks a pattern in every block before it
 * frees it; one thread calls malloc_trim now and then (every page lock at
 * once) while the purger runs with a 5 ms delay.  At the end every block is
 * checked and freed, and folio's live_blocks is back to its start (but
 * for glibc's blocks of threads started meanwhile).
 *
 * The threads are pinned to the first two CPUs this process may use (fewer
 * when it may use fewer).  FOLIO_TEST_SCALE scales the run time (3 s). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

#define NTHREADS 64
#define NSLOTS 1024
#define LOCAL 16

typedef struct {
    uint64_t size, magic; /* magic: MAGIC ^ size ^ address */
} hdr_t;
#define MAGIC 0x507265656d707421ull
#define CHECKED 4096 /* bytes of pattern checked at each end of a block */

static _Atomic(hdr_t *) slots[NSLOTS];
static atomic_long total_ops, cross_frees, trims;
static double until;

static uint64_t seed_of(const void *p, size_t n) { return (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ n; }

static size_t pick_size(rng_t *r)
{
    uint64_t x = rng_next(r) % 1000;
    if (x < 700)
        return rng_range(r, sizeof(hdr_t), 2048);
    if (x < 950)
        return rng_range(r, 2048, 256 << 10);
    if (x < 995)
        return rng_range(r, 256 << 10, 2 << 20);
    return rng_range(r, 2 << 20, 32 << 20);
}

/* the pattern covers the first and the last CHECKED bytes after the header */
static void ends(hdr_t *h, size_t *head, size_t *tail_off)
{
    size_t body = (size_t)h->size - sizeof *h;
    *head = body < CHECKED ? body : CHECKED;
    *tail_off = body > 2 * CHECKED ? body - CHECKED : *head;
}

static void fill(hdr_t *h, size_t n)
{
    h->size = n;
    h->magic = MAGIC ^ n ^ (uint64_t)(uintptr_t)h;
    size_t head, tail;
    ends(h, &head, &tail);
    pattern_fill(h + 1, head, seed_of(h, n));
    pattern_fill((char *)(h + 1) + tail, n - sizeof *h - tail, seed_of(h, n) + 1);
}

static void verify(hdr_t *h, const char *where)
{
    CHECK(h->magic == (MAGIC ^ h->size ^ (uint64_t)(uintptr_t)h), "%s: block %p header damaged", where, (void *)h);
    size_t head, tail, n = (size_t)h->size;
    ends(h, &head, &tail);
    CHECK(pattern_check(h + 1, head, seed_of(h, n)) == (size_t)-1 &&
              pattern_check((char *)(h + 1) + tail, n - sizeof *h - tail, seed_of(h, n) + 1) == (size_t)-1,
          "%s: block %p of %zu bytes damaged", where, (void *)h, n);
}

static hdr_t *new_block(rng_t *r)
{
    size_t n = pick_size(r);
    hdr_t *h;
    if (rng_next(r) % 8 == 0) {
        h = calloc(1, n);
        CHECK(h != NULL, "calloc(1, %zu)", n);
        CHECK(first_not(h, n < 8192 ? n : 8192, 0) == (size_t)-1, "calloc(1, %zu): not zero", n);
    } else {
        h = malloc(n);
        CHECK(h != NULL, "malloc(%zu)", n);
    }
    fill(h, n);
    return h;
}

static void *worker(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(intptr_t)arg * 7919 + 3);
    hdr_t *local[LOCAL] = {0};
    long ops = 0, xf = 0;
    while ((ops & 15) != 0 || now_sec() < until) {
        ops++;
        uint64_t op = rng_next(&r) % 100;
        if (op < 45) { /* publish; free what was there (another thread's, usually) */
            hdr_t *old = atomic_exchange(&slots[rng_next(&r) % NSLOTS], new_block(&r));
            if (old) {
                verify(old, "cross-thread free");
                free(old);
                xf++;
            }
        } else if (op < 90) {
            size_t i = rng_next(&r) % LOCAL;
            if (local[i]) {
                verify(local[i], "local free");
                free(local[i]);
            }
            local[i] = new_block(&r);
        } else if (op < 99) { /* realloc a block of another thread, put it back */
            size_t s = rng_next(&r) % NSLOTS;
            hdr_t *h = atomic_exchange(&slots[s], NULL);
            if (!h)
                continue;
            verify(h, "before realloc");
            size_t n = pick_size(&r);
            if (n < 2 * CHECKED + sizeof *h)
                n = 2 * CHECKED + sizeof *h;
            size_t old = (size_t)h->size;
            h = realloc(h, n);
            CHECK(h != NULL, "realloc(%zu -> %zu)", old, n);
            fill(h, n);
            hdr_t *prev = atomic_exchange(&slots[s], h);
            if (prev) {
                verify(prev, "free after realloc");
                free(prev);
            }
        } else if ((intptr_t)arg == 0) {
            malloc_trim(0);
            trims++;
        }
    }
    for (int i = 0; i < LOCAL; i++)
        if (local[i]) {
            verify(local[i], "local free at the end");
            free(local[i]);
        }
    atomic_fetch_add(&total_ops, ops);
    atomic_fetch_add(&cross_frees, xf);
    return NULL;
}

int main(int argc, char **argv)
{
    (void)argc;
    reexec_with_env(argv, "FOLIO_PURGE_DELAY_MS", "5");
    cpu_set_t allowed, two;
    CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0, "sched_getaffinity");
    CPU_ZERO(&two);
    for (int c = 0, n = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed)) {
            CPU_SET(c, &two);
            n++;
        }
    CHECK(sched_setaffinity(0, sizeof two, &two) == 0, "sched_setaffinity"); /* threads inherit it */
    pthread_t th[NTHREADS];
    /* glibc keeps the DTVs (malloc'd) of exited threads with their cached
     * stacks: a first round of idle threads fills that cache, so the count
     * below is what the same threads leave behind */
    until = 0;
    for (intptr_t i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(i + NTHREADS)) == 0, "pthread_create");
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
#ifndef FOLIO_TEST_GLIBC
    uint64_t live0 = report_u64("live_blocks");
#endif
    double t0 = now_sec();
    until = t0 + test_seconds(3.0);
    for (intptr_t i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)i) == 0, "pthread_create #%d", (int)i);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    for (int s = 0; s < NSLOTS; s++) {
        hdr_t *h = atomic_exchange(&slots[s], NULL);
        if (h) {
            verify(h, "drain");
            free(h);
        }
    }
    NOTE("%.1fs: %d threads on %d CPUs, %ld ops, %ld cross-thread frees, %ld trims", now_sec() - t0, NTHREADS,
         CPU_COUNT(&two), atomic_load(&total_ops), atomic_load(&cross_frees), atomic_load(&trims));
    CHECK(atomic_load(&cross_frees) > 0, "no cross-thread frees happened");
#ifndef FOLIO_TEST_GLIBC
    /* glibc's own blocks for threads started meanwhile (folio's purger: its
     * DTV) stay live: measured 1..5; a lost block of this test's 1,024
     * slots or 64 x 16 local ones would be more */
    uint64_t live = report_u64("live_blocks");
    CHECK(live <= live0 + 8, "live_blocks %llu after every block was freed, %llu at the start",
          (unsigned long long)live, (unsigned long long)live0);
#endif
    return 0;
}
