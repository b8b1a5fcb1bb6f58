// folio-test: tsan
/* test_leak: folio's own counts come back exactly to where they started
 * after every way a block can be freed.
 *
 * The counts, from folio_report_json:
 *   live_blocks  allocations minus frees;
 *   live_bytes   the usable size (malloc_usable_size) of every live block;
 *   used pages   the zone's pages that are neither free in the zone nor held
 *                by a pageset (zone_chunks x 512 - zone_free_pages - zone_meta_pages -
 *                pcp_held_pages), compared after malloc_trim, which drains
 *                the pagesets, the calling thread's cache of empty slabs
 *                and the abandoned slabs whose objects were all freed;
 *   huge_mapped_bytes, after malloc_trim (which unmaps the huge cache).
 *
 * Every scenario allocates in threads of its own, which exit before the
 * check: a dead thread's slabs go back to the page heap when empty, so what
 * is exactly restorable is the state before the scenario.  The main thread
 * only frees (blocks of live and dead threads) and trims, so its own slabs do
 * not change.  While blocks are live, live_bytes must be the start plus the
 * sum of their usable sizes, exactly.
 *
 * Scenarios: cross-thread frees (two live threads free each other's blocks),
 * free_sized, free_aligned_sized, C++ sized delete (the Itanium operator
 * symbols folio exports; normal mode only), thread exit (blocks freed by
 * main after their thread exited), malloc_trim with live blocks, realloc
 * through every tier and in-place resizes.
 *
 * The process runs with FOLIO_PURGE_THREAD=0 (it re-executes itself): the
 * background purger takes free blocks off the zone's lists while it purges
 * them, and creating it allocates (the new thread's TLS vector), both at
 * times the test does not choose. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's counts need folio");
}
#else

#define CHUNK_PAGES 512 /* a zone chunk: 2 MiB of 4 KiB pages */

struct counts {
    uint64_t blocks, bytes, used_pages, huge_mapped;
};

static struct counts counts_now(void)
{
    struct counts c;
    c.blocks = report_u64("live_blocks");
    c.bytes = report_u64("live_bytes");
    c.used_pages = report_u64("zone_chunks") * CHUNK_PAGES - report_u64("zone_free_pages") -
                   report_u64("zone_meta_pages") -
                   report_u64("pcp_held_pages");
    c.huge_mapped = report_u64("huge_mapped_bytes");
    return c;
}

/* live_blocks and live_bytes are the start plus (blocks, bytes), exactly. */
static void expect_live(const char *when, struct counts start, uint64_t blocks, uint64_t bytes)
{
    struct counts now = counts_now();
    CHECK(now.blocks == start.blocks + blocks && now.bytes == start.bytes + bytes,
          "%s: live_blocks %lld and live_bytes %lld from the start, want %llu and %llu", when,
          (long long)(now.blocks - start.blocks), (long long)(now.bytes - start.bytes),
          (unsigned long long)blocks, (unsigned long long)bytes);
}

/* After a scenario (its threads joined): everything is back, and after
 * malloc_trim so are the pages. */
static void expect_back(const char *what, struct counts start)
{
    expect_live(what, start, 0, 0);
    malloc_trim(0);
    struct counts now = counts_now();
    CHECK(now.blocks == start.blocks && now.bytes == start.bytes,
          "%s: malloc_trim changed the live counts", what);
    CHECK(now.used_pages == start.used_pages,
          "%s: after malloc_trim %lld zone pages more are in use than at the start", what,
          (long long)(now.used_pages - start.used_pages));
    CHECK(now.huge_mapped == start.huge_mapped,
          "%s: after malloc_trim huge_mapped_bytes is %llu, was %llu", what,
          (unsigned long long)now.huge_mapped, (unsigned long long)start.huge_mapped);
    NOTE("%-28s counts back: %llu live blocks, %llu live bytes, %llu zone pages in use", what,
         (unsigned long long)now.blocks, (unsigned long long)now.bytes,
         (unsigned long long)now.used_pages);
}

/* Block i of a set: mostly small (every regime of classes), 1 in 50 large,
 * 1 in 500 huge. */
static size_t pick_size(int i)
{
    static const size_t small[] = {16, 24, 48, 100, 256, 1000, 3000, 9000, 20000, 32768};
    static const size_t large[] = {40000, 100000, 300000, 1u << 20, 2u << 20};
    static const size_t huge[] = {3u << 20, 9u << 20};
    if (i % 500 == 499)
        return huge[(i / 500) % 2];
    if (i % 50 == 49)
        return large[(i / 50) % 5];
    return small[i % 10] - (size_t)(i % 7);
}

struct set {
    int n;
    void **p;
    size_t *size;
    uint64_t usable; /* sum of malloc_usable_size */
};

static void set_alloc(struct set *s, int n, uint64_t seed)
{
    s->n = n;
    s->p = calloc((size_t)n, sizeof *s->p);
    s->size = calloc((size_t)n, sizeof *s->size);
    CHECK(s->p && s->size, "calloc");
    s->usable = 0;
    for (int i = 0; i < n; i++) {
        size_t sz = pick_size(i + (int)seed);
        unsigned char *b = malloc(OPAQUE(sz));
        CHECK(b != NULL, "malloc(%zu)", sz);
        b[0] = (unsigned char)i;
        b[sz - 1] = (unsigned char)(i + 1);
        s->p[i] = b;
        s->size[i] = sz;
        s->usable += malloc_usable_size(b);
    }
}

static void set_free(struct set *s)
{
    for (int i = 0; i < s->n; i++) {
        unsigned char *b = s->p[i];
        CHECK(b[0] == (unsigned char)i && b[s->size[i] - 1] == (unsigned char)(i + 1),
              "block %d (%zu bytes) damaged", i, s->size[i]);
        free(OPAQUE(b));
    }
}

/* The bookkeeping arrays of a set count too: freed by the thread that
 * made them. */
static void set_release(struct set *s)
{
    free(s->p);
    free(s->size);
    s->p = NULL;
    s->size = NULL;
}

static void run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, arg) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
}

/* ---- cross-thread frees: two live threads free each other's blocks ---- */

#define CROSS_N 3000
static struct set cross[2];
static pthread_barrier_t cross_bar;

static void *cross_thread(void *arg)
{
    int me = (int)(intptr_t)arg;
    struct set mine;
    set_alloc(&mine, CROSS_N, (uint64_t)me * 7);
    cross[me] = mine;
    pthread_barrier_wait(&cross_bar); /* both sets made; main checks */
    pthread_barrier_wait(&cross_bar);
    set_free(&cross[1 - me]);         /* the other thread's blocks */
    pthread_barrier_wait(&cross_bar); /* main checks again, owners alive */
    pthread_barrier_wait(&cross_bar);
    set_release(&mine);
    return NULL;
}

static void cross_thread_frees(struct counts start)
{
    pthread_t t[2];
    CHECK(pthread_barrier_init(&cross_bar, NULL, 3) == 0, "pthread_barrier_init");
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, cross_thread, (void *)(intptr_t)i) == 0,
              "pthread_create");
    pthread_barrier_wait(&cross_bar);
    /* the sets' own arrays (2 x CROSS_N pointers and sizes) are live too */
    uint64_t arrays = 2 * (malloc_usable_size(cross[0].p) + malloc_usable_size(cross[0].size));
    expect_live("cross-thread: allocated", start, 2 * CROSS_N + 4,
                cross[0].usable + cross[1].usable + arrays);
    pthread_barrier_wait(&cross_bar);
    pthread_barrier_wait(&cross_bar);
    expect_live("cross-thread: freed, owners alive", start, 4, arrays);
    pthread_barrier_wait(&cross_bar);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
    pthread_barrier_destroy(&cross_bar);
    expect_back("cross-thread frees", start);
}

/* ---- free_sized and free_aligned_sized ---- */

static void *sized_thread(void *arg)
{
    struct counts start = *(struct counts *)arg;
    enum { N = 600 };
    static void *p[N];
    static size_t n[N], al[N];
    uint64_t usable = 0;
    for (int i = 0; i < N; i++) {
        n[i] = pick_size(i);
        al[i] = (size_t)16 << (i % 12); /* 16 B .. 32 KiB */
        if (i % 3 == 0) {
            p[i] = malloc(OPAQUE(n[i]));
        } else if (i % 3 == 1) {
            p[i] = calloc(OPAQUE(n[i]), 1);
        } else {
            size_t sz = (n[i] + al[i] - 1) / al[i] * al[i];
            n[i] = sz;
            p[i] = aligned_alloc(OPAQUE(al[i]), sz);
        }
        CHECK(p[i] != NULL, "allocation %d of %zu", i, n[i]);
        usable += malloc_usable_size(p[i]);
    }
    expect_live("sized: allocated", start, N, usable);
    for (int i = 0; i < N; i++) {
        if (i % 3 == 2)
            free_aligned_sized(OPAQUE(p[i]), al[i], n[i]);
        else
            free_sized(OPAQUE(p[i]), n[i]);
    }
    expect_live("sized: after free_sized / free_aligned_sized", start, 0, 0);
    return NULL;
}

/* ---- C++ sized delete (normal mode: folio exports the operators) ---- */

#ifndef FOLIO_PREFIX
void *_Znwm(size_t n);
void *_Znam(size_t n);
void *_ZnwmSt11align_val_t(size_t n, size_t al);
void *_ZnamSt11align_val_t(size_t n, size_t al);
void _ZdlPvm(void *p, size_t n);
void _ZdaPvm(void *p, size_t n);
void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al);
void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al);

static void *cxx_thread(void *arg)
{
    struct counts start = *(struct counts *)arg;
    enum { N = 400 };
    static void *p[N];
    static size_t n[N], al[N];
    uint64_t usable = 0;
    for (int i = 0; i < N; i++) {
        n[i] = pick_size(i);
        al[i] = (size_t)32 << (i % 8); /* 32 B .. 4 KiB */
        switch (i % 4) {
        case 0: p[i] = _Znwm(OPAQUE(n[i])); break;
        case 1: p[i] = _Znam(OPAQUE(n[i])); break;
        case 2: p[i] = _ZnwmSt11align_val_t(OPAQUE(n[i]), al[i]); break;
        default: p[i] = _ZnamSt11align_val_t(OPAQUE(n[i]), al[i]); break;
        }
        CHECK(p[i] != NULL, "operator new %d", i);
        usable += malloc_usable_size(p[i]);
    }
    expect_live("C++: allocated", start, N, usable);
    for (int i = 0; i < N; i++) {
        switch (i % 4) {
        case 0: _ZdlPvm(OPAQUE(p[i]), n[i]); break;
        case 1: _ZdaPvm(OPAQUE(p[i]), n[i]); break;
        case 2: _ZdlPvmSt11align_val_t(OPAQUE(p[i]), n[i], al[i]); break;
        default: _ZdaPvmSt11align_val_t(OPAQUE(p[i]), n[i], al[i]); break;
        }
    }
    expect_live("C++: after sized delete", start, 0, 0);
    return NULL;
}
#endif

/* ---- thread exit: blocks freed by main after their thread exited ---- */

static struct set orphans;

static void *orphan_thread(void *arg)
{
    set_alloc(&orphans, (int)(intptr_t)arg, 3);
    return NULL;
}

static void thread_exit_then_free(struct counts start, int n, int trim_between)
{
    run_thread(orphan_thread, (void *)(intptr_t)n);
    uint64_t arrays = malloc_usable_size(orphans.p) + malloc_usable_size(orphans.size);
    expect_live("thread exit: owner gone", start, (uint64_t)n + 2, orphans.usable + arrays);
    if (trim_between) {
        /* malloc_trim with live blocks of a dead thread: nothing live goes */
        malloc_trim(0);
        expect_live("thread exit: trimmed while live", start, (uint64_t)n + 2,
                    orphans.usable + arrays);
    }
    set_free(&orphans);
    set_release(&orphans);
    expect_back(trim_between ? "malloc_trim with live blocks" : "thread exit, freed later",
                start);
}

/* ---- realloc through the tiers, in place and moving ---- */

static void *realloc_thread(void *arg)
{
    struct counts start = *(struct counts *)arg;
    static const size_t steps[] = {10,        100,       1000,      30000,    40000,
                                   70000,     200000,    150000,    1u << 20, (2u << 20) - 4096,
                                   3u << 20,  5u << 20,  12u << 20, 4u << 20, 600000,
                                   50000,     33000,     5000,      24,       (9u << 20) + 1};
    unsigned char *p = NULL;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        p = realloc(OPAQUE(p), steps[i]);
        CHECK(p != NULL, "realloc to %zu", steps[i]);
        p[steps[i] - 1] = 1;
        char when[64];
        snprintf(when, sizeof when, "realloc to %zu", steps[i]);
        expect_live(when, start, 1, malloc_usable_size(p));
    }
    free(OPAQUE(p));
    expect_live("realloc: freed", start, 0, 0);
    return NULL;
}

static void *idle_thread(void *arg)
{
    return arg;
}

static void warm_up(void)
{
    /* the first thread creations allocate what the C library keeps for
     * later threads (stacks and their TLS vectors, reused): two at once,
     * as many as the scenarios run */
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, idle_thread, NULL) == 0, "pthread_create");
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
}

int main(int argc, char **argv)
{
    (void)argc;
    reexec_with_env(argv, "FOLIO_PURGE_THREAD", "0");
    warm_up();
    malloc_trim(0);
    struct counts start = counts_now();
    NOTE("start: %llu live blocks, %llu live bytes, %llu zone pages in use",
         (unsigned long long)start.blocks, (unsigned long long)start.bytes,
         (unsigned long long)start.used_pages);

    cross_thread_frees(start);

    run_thread(sized_thread, &start);
    expect_back("free_sized, free_aligned_sized", start);

#ifndef FOLIO_PREFIX
    run_thread(cxx_thread, &start);
    expect_back("C++ sized delete", start);
#endif

    thread_exit_then_free(start, 2000, 0);
    thread_exit_then_free(start, 2000, 1);

    run_thread(realloc_thread, &start);
    expect_back("realloc", start);

    /* all of it again: the counts do not drift */
    cross_thread_frees(start);
    thread_exit_then_free(start, 500, 0);
    return 0;
}
#endif
