// folio-test: tsan
/* test_stress: many threads (8 on 2 cores) allocate blocks of random sizes
 * across all regimes (small 8..1024, medium 1..64 KiB, large 64 KiB..2 MiB,
 * occasionally huge 4..16 MiB), fill each block with a pattern derived from
 * its address and size, and check the pattern before the block is freed.
 * Blocks are handed through shared slots so about half are freed by another
 * thread than the one that allocated them; threads are short-lived (churn):
 * they exit while their blocks are still live in the slots, and new threads
 * start.  Also calloc (checked zero), aligned_alloc and realloc on blocks
 * taken from other threads.
 *
 * FOLIO_TEST_SCALE scales the run time (default 3 s). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

#define NTHREADS 8
#define NSLOTS 4096
#define LOCAL 64

/* A block starts with its header; the rest holds the pattern. */
typedef struct {
    uint64_t size;    /* the requested size */
    uint64_t magic;   /* MAGIC ^ size ^ address */
} hdr_t;
#define MAGIC 0x466f6c696f546573ull

static _Atomic(hdr_t *) slots[NSLOTS];
static atomic_long total_ops, cross_frees, local_frees, threads_started;
static atomic_int stop;

static uint64_t seed_of(const void *p, size_t n)
{
    return (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull ^ n;
}

static size_t pick_size(rng_t *r)
{
    uint64_t x = rng_next(r) % 10000;
    if (x < 7500)
        return rng_range(r, 16, 1024);   /* 16: room for the header */
    if (x < 9500)
        return rng_range(r, 1024, 65536);
    if (x < 9995)
        return rng_range(r, 65536, 2u << 20);
    return rng_range(r, 4u << 20, 16u << 20);
}

static void fill(hdr_t *h, size_t n)
{
    h->size = n;
    h->magic = MAGIC ^ n ^ (uint64_t)(uintptr_t)h;
    pattern_fill(h + 1, n - sizeof *h, seed_of(h, n));
}

static void verify(hdr_t *h, const char *where)
{
    CHECK(h->magic == (MAGIC ^ h->size ^ (uint64_t)(uintptr_t)h),
          "%s: block %p header damaged (size %#llx magic %#llx)", where, (void *)h,
          (unsigned long long)h->size, (unsigned long long)h->magic);
    size_t n = (size_t)h->size;
    size_t bad = pattern_check(h + 1, n - sizeof *h, seed_of(h, n));
    CHECK(bad == (size_t)-1, "%s: block %p size %zu: byte %zu of the pattern damaged", where,
          (void *)h, n, bad + sizeof *h);
}

static hdr_t *new_block(rng_t *r)
{
    size_t n = pick_size(r);
    hdr_t *h;
    uint64_t kind = rng_next(r) % 16;
    if (kind == 0) {
        h = calloc(1, n);
        CHECK(h != NULL, "calloc(1, %zu)", n);
        size_t bad = first_not(h, n, 0);
        CHECK(bad == (size_t)-1, "calloc(1, %zu) = %p: byte %zu not zero", n, (void *)h, bad);
    } else if (kind == 1) {
        size_t a = (size_t)16 << rng_range(r, 0, 8);   /* 16 .. 4096 */
        n = (n + a - 1) & ~(a - 1);   /* C11's rule, which sanitizers enforce */
        h = aligned_alloc(a, n);
        CHECK(h != NULL, "aligned_alloc(%zu, %zu)", a, n);
        CHECK(((uintptr_t)h & (a - 1)) == 0, "aligned_alloc(%zu, %zu) = %p", a, n, (void *)h);
    } else {
        h = malloc(n);
        CHECK(h != NULL, "malloc(%zu)", n);
        CHECK(((uintptr_t)h & 15) == 0, "malloc(%zu) = %p not 16-aligned", n, (void *)h);
    }
    if (kind == 2) {
        /* Sometimes write the whole usable size. */
        size_t u = malloc_usable_size(h);
        CHECK(u >= n, "malloc_usable_size = %zu < %zu", u, n);
        memset(h, 0xfe, u);
    }
    fill(h, n);
    return h;
}

static void release(hdr_t *h, rng_t *r, const char *where)
{
    verify(h, where);
    if (rng_next(r) % 8 == 0)
        free_sized(h, (size_t)h->size);
    else
        free(h);
}

struct worker { int id; double until; };

static void *worker(void *arg)
{
    struct worker *w = arg;
    rng_t r;
    rng_seed(&r, (uint64_t)w->id * 7919 + 1);
    hdr_t *local[LOCAL] = {0};
    long ops = 0, xf = 0, lf = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        if ((ops & 15) == 0 && now_sec() > w->until)
            break;
        ops++;
        uint64_t op = rng_next(&r) % 100;
        if (op < 45) {
            /* Publish a new block; free whatever was in the slot (usually
             * another thread's block). */
            hdr_t *h = new_block(&r);
            size_t s = rng_next(&r) % NSLOTS;
            hdr_t *old = atomic_exchange(&slots[s], h);
            if (old) {
                release(old, &r, "cross-thread free");
                xf++;
            }
        } else if (op < 90) {
            /* A thread-local block: allocate, later check and free here. */
            size_t i = rng_next(&r) % LOCAL;
            if (local[i]) {
                release(local[i], &r, "local free");
                lf++;
            }
            local[i] = new_block(&r);
        } else if (op < 97) {
            /* Take a block from a slot and realloc it (a block owned by some
             * other thread, usually), then put it back. */
            size_t s = rng_next(&r) % NSLOTS;
            hdr_t *h = atomic_exchange(&slots[s], NULL);
            if (!h)
                continue;
            verify(h, "before realloc");
            size_t old = (size_t)h->size, n = pick_size(&r);
            uint64_t old_seed = seed_of(h, old);
            uintptr_t old_addr = OPAQUE((uintptr_t)h);
            hdr_t *q = realloc(h, n);
            CHECK(q != NULL, "realloc(%zu -> %zu)", old, n);
            size_t keep = (old < n ? old : n) - sizeof *q;
            size_t bad = pattern_check(q + 1, keep, old_seed);
            CHECK(bad == (size_t)-1, "realloc(%p %zu -> %p %zu) lost byte %zu", (void *)old_addr, old,
                  (void *)q, n, bad + sizeof *q);
            fill(q, n);
            hdr_t *prev = atomic_exchange(&slots[s], q);
            if (prev) {
                release(prev, &r, "cross-thread free after realloc");
                xf++;
            }
        } else {
            /* Take a block from a slot and free it here. */
            size_t s = rng_next(&r) % NSLOTS;
            hdr_t *h = atomic_exchange(&slots[s], NULL);
            if (h) {
                release(h, &r, "cross-thread take");
                xf++;
            }
        }
    }
    /* Exit leaving roughly half of the local blocks live in the slots for
     * other (future) threads to free; free the rest here. */
    for (int i = 0; i < LOCAL; i++) {
        if (!local[i])
            continue;
        if (i % 2) {
            hdr_t *old = atomic_exchange(&slots[rng_next(&r) % NSLOTS], local[i]);
            if (old) {
                release(old, &r, "free at thread exit");
                xf++;
            }
        } else {
            release(local[i], &r, "local free at thread exit");
            lf++;
        }
    }
    atomic_fetch_add(&total_ops, ops);
    atomic_fetch_add(&cross_frees, xf);
    atomic_fetch_add(&local_frees, lf);
    free(w);
    return NULL;
}

int main(void)
{
    double t0 = now_sec();
    double end = t0 + test_seconds(3.0);
    rng_t r;
    rng_seed(&r, 12345);
    pthread_t th[NTHREADS];
    double ends[NTHREADS];
    int next_id = 0;
    /* Keep NTHREADS alive; each lives 50..400 ms (the last ones until the
     * end), then a fresh thread takes its place. */
    for (int i = 0; i < NTHREADS; i++)
        ends[i] = 0;
    for (int i = 0; i < NTHREADS; i++) {
        struct worker *w = malloc(sizeof *w);
        CHECK(w != NULL, "malloc");
        w->id = next_id++;
        w->until = now_sec() + 0.05 + (double)rng_range(&r, 0, 350) / 1000.0;
        if (w->until > end)
            w->until = end;
        ends[i] = w->until;
        CHECK(pthread_create(&th[i], NULL, worker, w) == 0, "pthread_create");
        atomic_fetch_add(&threads_started, 1);
    }
    while (now_sec() < end) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double now = now_sec();
        for (int i = 0; i < NTHREADS; i++) {
            if (ends[i] > now || now >= end)
                continue;
            pthread_join(th[i], NULL);
            struct worker *w = malloc(sizeof *w);
            CHECK(w != NULL, "malloc");
            w->id = next_id++;
            w->until = now + 0.05 + (double)rng_range(&r, 0, 350) / 1000.0;
            if (w->until > end)
                w->until = end;
            ends[i] = w->until;
            CHECK(pthread_create(&th[i], NULL, worker, w) == 0, "pthread_create #%d", next_id);
            atomic_fetch_add(&threads_started, 1);
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    /* Drain: every block still in a slot outlived the thread that made it. */
    long drained = 0;
    for (int s = 0; s < NSLOTS; s++) {
        hdr_t *h = atomic_exchange(&slots[s], NULL);
        if (h) {
            verify(h, "drain");
            free(h);
            drained++;
        }
    }
    NOTE("%.1fs: %ld threads, %ld ops, %ld cross-thread frees, %ld local frees, %ld drained",
         now_sec() - t0, atomic_load(&threads_started), atomic_load(&total_ops),
         atomic_load(&cross_frees), atomic_load(&local_frees), drained);
    CHECK(atomic_load(&threads_started) > NTHREADS, "no thread churn happened");
    CHECK(atomic_load(&cross_frees) > 0, "no cross-thread frees happened");
    return 0;
}
