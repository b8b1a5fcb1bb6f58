// folio-test: tsan
/* test_dense: the dense heap (obj/dense.c), which serves a program's first
 * thread the blocks of the sizes it has used little so far.
 *
 * 0. A thread that only frees (16 MiB of the first thread's large blocks,
 *    which starts folio's purger from it: glibc allocates the new thread's
 *    dtv there) does not close it: the first thread's next block is dense.
 * 1. One block of each of 120 sizes from 1 B to 128 KiB: each comes from
 *    the dense heap (the report's dense_allocs), its data 16-byte aligned,
 *    malloc_usable_size at least the request, every usable byte writable
 *    without touching a neighbour; they lie in a few regions.
 * 2. Freed blocks merge with their free neighbours and serve any size:
 *    three neighbours freed, a block of their summed size lands where the
 *    first was; freed again, it serves a request of another size.
 * 3. realloc keeps the contents: shrinking stays in place, growing into a
 *    free neighbour stays in place, growing past one moves; calloc of
 *    reused (written) memory is zero.
 * 4. Misuse ends the process with folio's message, the call and the
 *    pointer: free of an interior pointer, a double free, realloc and
 *    malloc_usable_size of a freed block (in forked children).
 * 5. A size used much leaves: FOLIO_HEAP_DENSE_LIVE (64) live blocks of one
 *    size, then the next comes from a slab (dense_allocs stops; the report
 *    counts the size graduated).
 * 6. Another thread that only frees the first thread's blocks, while the
 *    first allocates and frees its own; then a second thread that
 *    allocates closes it: its blocks come from its own
 *    heap, the first thread's next ones too; the dense blocks are freed by
 *    either thread, and once all are, its regions are back in the page
 *    heap (when no other block of the program's is left in them).
 * 7. Full, then freed: with FOLIO_HEAP_DENSE_KIB=256 (one region) blocks
 *    of 1000 B until one comes from a slab; then a hole left by every
 *    other block freed serves a smaller block, and once all are freed the
 *    region serves another size (it used to wait for a region to go back, which the one
 *    region kept empty never does).
 *    Then blocks of 8 B (the smallest block, 48 bytes) fill the emptied
 *    region up to its fence: the last one's data lies in the region's last
 *    line, and every one of them is freed without a complaint (free's
 *    bound on a block start once stopped a line short of the fence).
 * 8. FOLIO_HEAP_DENSE_KIB=0: no block from it (runs 7 and 8 re-execute the
 *    program).
 * 9. First, a new region's last page stays untouched until blocks reach it:
 *    its fence (the line after its last block) is never written, so a small
 *    program's region costs the pages its blocks use (the fence and the
 *    free block's footer there were one more fault in every process). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's dense heap");
}
#else

static size_t size_of(int i) /* 120 sizes, 1 B .. 128 KiB, about 10 % apart */
{
    double s = 1.0;
    for (int k = 0; k < i; k++)
        s *= 1.105;
    size_t n = (size_t)s;
    return n > 131072 ? 131072 : n;
}

/* 9: the region of a small program's block, its last page not resident */
static void region_end_untouched(void)
{
    char *p = malloc(OPAQUE(200));
    CHECK(p != NULL, "malloc");
    CHECK(report_u64("dense_allocs") > 0, "a small program's block is not a dense one");
    uintptr_t region = (uintptr_t)p & ~(uintptr_t)(256 * 1024 - 1), last = region + 256 * 1024 - 4096;
    unsigned char vec = 1;
    CHECK(mincore((void *)last, 4096, &vec) == 0, "mincore");
    CHECK(!(vec & 1), "the last page of the dense region at %#lx is resident with its first blocks",
          (unsigned long)region);
    free(p);
    printf("a new region's last page: not resident\n");
}

static void *big_blocks[16];
static void *free_big(void *arg)
{
    for (int i = 0; i < 16; i++)
        free(big_blocks[i]);
    return arg;
}
static void free_only_thread(void)
{
    for (int i = 0; i < 16; i++) {
        big_blocks[i] = malloc(OPAQUE((size_t)1 << 20));
        CHECK(big_blocks[i] != NULL, "malloc(1 MiB)");
        memset(big_blocks[i], 1, (size_t)1 << 20);
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_big, NULL) == 0, "pthread_create");
    pthread_join(t, NULL);
    uint64_t before = report_u64("dense_allocs");
    void *p = OPAQUE(malloc(OPAQUE((size_t)1234)));
    CHECK(report_u64("dense_closed") == 0 && report_u64("dense_allocs") == before + 1,
          "a thread that only freed closed the dense heap (closed %llu, dense_allocs %llu -> %llu)",
          (unsigned long long)report_u64("dense_closed"), (unsigned long long)before,
          (unsigned long long)report_u64("dense_allocs"));
    free(p);
    printf("a thread that only frees: the dense heap stays open\n");
}

static void many_sizes(void)
{
    enum { N = 120 };
    static unsigned char *p[N];
    static size_t u[N];
    uint64_t before = report_u64("dense_allocs");
    for (int i = 0; i < N; i++) {
        size_t n = size_of(i);
        p[i] = malloc(OPAQUE(n));
        CHECK(p[i] != NULL, "malloc(%zu)", n);
        CHECK(((uintptr_t)p[i] & 15) == 0, "malloc(%zu) = %p: not 16-byte aligned", n, (void *)p[i]);
        u[i] = malloc_usable_size(p[i]);
        CHECK(u[i] >= n && u[i] < n + 128, "malloc_usable_size(malloc(%zu)) = %zu", n, u[i]);
        memset(p[i], (unsigned char)i, u[i]);
    }
    uint64_t served = report_u64("dense_allocs") - before;
    CHECK(served >= N - 8, "%llu of %d blocks of new sizes from the dense heap", (unsigned long long)served, N);
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < u[i]; k += 61)
            CHECK(p[i][k] == (unsigned char)i, "block %d byte %zu overwritten", i, k);
    uint64_t regions = report_u64("dense_regions");
    printf("120 sizes: %llu dense blocks in %llu regions\n", (unsigned long long)served, (unsigned long long)regions);
    CHECK(regions >= 1 && regions <= 8, "%llu regions for about 1.5 MiB of blocks", (unsigned long long)regions);
    for (int i = 0; i < N; i++)
        free(p[i]);
}

/* Three neighbouring blocks of 1000 B (1024-byte blocks) among eight in a
 * row, the block before them live: p[i .. i + 2]; false if none. */
static int neighbours(char **p, int n, size_t block)
{
    for (int i = 1; i + 2 < n; i++)
        if (p[i + 1] == p[i] + block && p[i + 2] == p[i + 1] + block)
            return i;
    return -1;
}

static void merge_and_reuse(void)
{
    enum { N = 8 };
    char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = malloc(OPAQUE(1000));
        CHECK(p[i] != NULL, "malloc(1000)");
    }
    int i = neighbours(p, N, 1024);
    CHECK(i > 0, "no three neighbouring blocks among eight: %p %p %p %p", (void *)p[0], (void *)p[1], (void *)p[2],
          (void *)p[3]);
    uintptr_t a = OPAQUE((uintptr_t)p[i]);
    free(p[i + 1]);
    free(p[i]);
    free(p[i + 2]);
    char *d = malloc(OPAQUE(3 * 1024 - 16)); /* exactly the merged block */
    CHECK(OPAQUE((uintptr_t)d) == a, "the merged block of three at %p, got %p", (void *)a, (void *)d);
    memset(d, 7, 3 * 1024 - 16);
    free(d);
    uintptr_t ud = OPAQUE((uintptr_t)d);
    char *e = malloc(OPAQUE(3000)); /* another size, the same block */
    CHECK((uintptr_t)e == ud && ud == a, "malloc(3000) after the free: %p, want %p", (void *)e, (void *)a);
    free(e);
    for (int k = 0; k < N; k++)
        if (k < i || k > i + 2)
            free(p[k]);
}

static void realloc_and_calloc(void)
{
    char *a = malloc(OPAQUE(3000)), *next = malloc(OPAQUE(3000)), *guard = malloc(OPAQUE(3000));
    uintptr_t ua = OPAQUE((uintptr_t)a);
    CHECK(a && next && guard, "malloc");
    size_t block = 3024; /* 3000 B and the 16-byte header, in 16-byte grains */
    CHECK(next == a + block && guard == next + block, "three blocks in a row: %p %p %p", (void *)a, (void *)next,
          (void *)guard);
    for (int i = 0; i < 3000; i++)
        a[i] = (char)(i * 7);
    char *s = realloc(a, 1000); /* shrink: in place */
    CHECK((uintptr_t)s == ua, "shrinking realloc moved");
    for (int i = 0; i < 1000; i++)
        CHECK(s[i] == (char)(i * 7), "byte %d lost shrinking", i);
    free(next);
    char *g = realloc(s, 5000); /* into the free neighbour: in place */
    CHECK((uintptr_t)g == ua, "growing realloc into a free neighbour moved");
    for (int i = 0; i < 1000; i++)
        CHECK(g[i] == (char)(i * 7), "byte %d lost growing", i);
    memset(g, 0x3c, 5000);
    char *m = realloc(g, 12000); /* past the guard: moves */
    CHECK(m != NULL && (uintptr_t)m != ua, "realloc to 12000");
    for (int i = 0; i < 5000; i++)
        CHECK(m[i] == 0x3c, "byte %d lost moving", i);
    /* the moved-from block was written: calloc of it is zero */
    unsigned char *z = calloc(1, OPAQUE(4000));
    CHECK(z != NULL, "calloc");
    for (int i = 0; i < 4000; i++)
        CHECK(z[i] == 0, "calloc byte %d is %d", i, z[i]);
    free(z);
    free(m);
    free(guard);
}

/* ---- misuse, each in a child ---- */
enum misuse { INTERIOR_FREE, DOUBLE_FREE, FREED_REALLOC, FREED_USABLE };
struct misuse_case {
    enum misuse op;
    char *p;
    const char *message;
};
static void misuse_op(const void *arg)
{
    const struct misuse_case *c = arg;
    switch (c->op) {
    case INTERIOR_FREE: free(OPAQUE(c->p)); break;
    case DOUBLE_FREE: free(OPAQUE(c->p)); free(OPAQUE(c->p)); break;
    case FREED_REALLOC: free(OPAQUE(c->p)); (void)!realloc(OPAQUE(c->p), 100); break;
    case FREED_USABLE: free(OPAQUE(c->p)); (void)!malloc_usable_size(OPAQUE(c->p)); break;
    }
}
static void misuse(void)
{
    char *p = malloc(OPAQUE(777));
    CHECK(p != NULL, "malloc(777)");
    memset(p, 0, 777);
    const struct misuse_case cases[] = {
        {INTERIOR_FREE, p + 64, "free(): invalid pointer"},
        {INTERIOR_FREE, p + 16, "free(): invalid pointer"},
        {DOUBLE_FREE, p, "free(): double free"},
        {FREED_REALLOC, p, "realloc(): freed pointer"},
        {FREED_USABLE, p, "malloc_usable_size(): freed pointer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = 0;
        char *err = run_in_child(misuse_op, &cases[i], 20, &st);
        char want[160];
        snprintf(want, sizeof want, "%s %p", cases[i].message, (void *)cases[i].p);
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "case %zu: status %#x, stderr: %s", i, st, err);
        CHECK(find_message(err, want), "case %zu: stderr lacks \"%s\": %s", i, want, err);
        free(err);
    }
    free(p);
}

static void graduation(void)
{
    enum { LIVE = 64 };
    static void *p[LIVE + 8];
    uint64_t before = report_u64("dense_allocs"), grads = report_u64("dense_sizes_graduated");
    for (int i = 0; i < LIVE + 8; i++) {
        p[i] = malloc(OPAQUE(200)); /* a size not used much before (64 x 208 B: under 128 KiB) */
        CHECK(p[i] != NULL, "malloc(200)");
        memset(p[i], 1, 200);
    }
    uint64_t served = report_u64("dense_allocs") - before;
    CHECK(served == LIVE, "%llu of %d blocks of one size from the dense heap, want %d",
          (unsigned long long)served, LIVE + 8, LIVE);
    CHECK(report_u64("dense_sizes_graduated") == grads + 1, "the size did not graduate");
    for (int i = 0; i < LIVE + 8; i++)
        free(p[i]);
}

/* 6a. Another thread that only frees: the first thread's blocks, freed
 * there while this one goes on allocating and freeing its own (the lock,
 * the merges, the purges with the lock released). */
enum { FREED_ELSEWHERE = 512 };
static void *freeing_thread(void *arg)
{
    unsigned char **blocks = arg;
    for (int i = 0; i < FREED_ELSEWHERE; i++) {
        CHECK(blocks[i][0] == (unsigned char)i, "block %d changed before its free", i);
        free(blocks[i]);
    }
    return NULL;
}

static void frees_elsewhere(void)
{
    static unsigned char *blocks[FREED_ELSEWHERE];
    for (int i = 0; i < FREED_ELSEWHERE; i++) {
        blocks[i] = malloc(OPAQUE(16 + (size_t)(i * 97) % 20000));
        CHECK(blocks[i] != NULL, "malloc");
        blocks[i][0] = (unsigned char)i;
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, freeing_thread, blocks) == 0, "pthread_create");
    for (int i = 0; i < 4000; i++) { /* meanwhile, this thread's own */
        size_t n = 16 + (size_t)(i * 131) % 30000;
        unsigned char *q = malloc(OPAQUE(n));
        CHECK(q != NULL, "malloc");
        memset(q, 0x77, n);
        CHECK(q[n - 1] == 0x77, "own block");
        free(q);
    }
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
}

static void *other_thread(void *arg)
{
    void **blocks = arg;
    void *mine = malloc(OPAQUE(4321)); /* a second thread allocates: the dense heap closes */
    CHECK(mine != NULL, "malloc in the second thread");
    for (int i = 0; i < 8; i++)
        free(blocks[i]); /* the first thread's dense blocks, freed here */
    free(mine);
    return NULL;
}

static void second_thread(void)
{
    static void *blocks[16];
    uint64_t live0 = report_u64("dense_live_bytes");
    for (int i = 0; i < 16; i++) {
        blocks[i] = malloc(OPAQUE(5000 + 64 * (size_t)i)); /* new sizes: dense */
        CHECK(blocks[i] != NULL, "malloc");
        memset(blocks[i], 9, 5000);
    }
    CHECK(report_u64("dense_live_bytes") > live0, "the blocks are not dense");
    CHECK(report_u64("dense_closed") == 0, "closed before a second thread allocated");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, blocks) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(report_u64("dense_closed") == 1, "still open after a second thread allocated");
    uint64_t before = report_u64("dense_allocs");
    void *q = malloc(OPAQUE(6543)); /* a new size: no longer dense */
    CHECK(q != NULL, "malloc");
    CHECK(report_u64("dense_allocs") == before, "a dense block after the heap closed");
    free(q);
    for (int i = 8; i < 16; i++)
        free(blocks[i]);
    uint64_t live = report_u64("dense_live_bytes"), regions = report_u64("dense_regions");
    /* (pthread_create's own small blocks, from this thread before the
     * other one allocated, may stay) */
    CHECK(live <= live0 + 4096, "%llu dense bytes live, %llu before the blocks", (unsigned long long)live,
          (unsigned long long)live0);
    printf("closed: %llu bytes of other blocks left in %llu regions\n", (unsigned long long)live,
           (unsigned long long)regions);
    if (live == 0)
        CHECK(regions == 0, "%llu regions kept by a closed, empty dense heap", (unsigned long long)regions);
}

static void full_then_freed(void)
{
    enum { N = 1000 };
    static unsigned char *p[N];
    int dense = 0;
    unsigned char *spill = NULL;
    for (int i = 0; i < N; i++) {
        uint64_t before = report_u64("dense_allocs");
        p[i] = malloc(OPAQUE((size_t)1000));
        CHECK(p[i] != NULL, "malloc(1000)");
        memset(p[i], i & 0xff, 1000);
        if (report_u64("dense_allocs") == before) {
            spill = p[i]; /* the first from a slab: the region is full */
            break;
        }
        dense++;
    }
    CHECK(spill != NULL && dense > 100, "%d blocks of 1000 B before one came from a slab", dense);
    for (int i = 0; i < dense; i += 2) {
        free(p[i]);
        p[i] = NULL;
    }
    uint64_t before = report_u64("dense_allocs");
    unsigned char *hole = OPAQUE(malloc(OPAQUE((size_t)900)));
    CHECK(hole != NULL && report_u64("dense_allocs") == before + 1,
          "a freed hole of the full dense heap did not serve malloc(900)");
    free(hole);
    for (int i = 0; i < dense; i++) {
        if (!p[i])
            continue;
        for (int k = 0; k < 1000; k += 97)
            CHECK(p[i][k] == (unsigned char)(i & 0xff), "block %d byte %d overwritten", i, k);
        free(p[i]);
    }
    /* (another size: 1000 B's list now holds the spilled block's slab) */
    before = report_u64("dense_allocs");
    unsigned char *again = OPAQUE(malloc(OPAQUE((size_t)3000)));
    CHECK(again != NULL && report_u64("dense_allocs") == before + 1,
          "the emptied region did not serve malloc(3000)");
    free(again);
    free(spill);
    printf("full at %d blocks of 1000 B in 256 KiB; a hole, then the emptied region, served again\n", dense);
}

/* 7, continued: the emptied region filled to its fence with the smallest blocks */
static void fill_to_fence(void)
{
    enum { N = 6000 };
    static char *p[N];
    int dense = 0;
    uintptr_t highest = 0;
    for (int i = 0; i < N; i++) {
        uint64_t before = report_u64("dense_allocs");
        p[i] = malloc(OPAQUE((size_t)8));
        CHECK(p[i] != NULL, "malloc(8)");
        memset(p[i], 0x5a, 8);
        dense = i + 1;
        if (report_u64("dense_allocs") == before)
            break; /* from a slab: the region is full */
        if ((uintptr_t)p[i] > highest)
            highest = (uintptr_t)p[i];
    }
    uintptr_t end = (highest | (256 * 1024 - 1)) + 1;
    CHECK(end - highest <= 64, "the highest of %d blocks of 8 B is %lu bytes before its region's end", dense,
          (unsigned long)(end - highest));
    for (int i = 0; i < dense; i++)
        free(p[i]);
    printf("%d blocks of 8 B up to the fence (the last %lu bytes before the region's end), all freed\n", dense,
           (unsigned long)(end - highest));
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *kib = getenv("FOLIO_HEAP_DENSE_KIB");
    if (!kib) {
        setenv("FOLIO_HEAP_DENSE_LIVE", "64", 1);
        reexec_with_env(argv, "FOLIO_HEAP_DENSE_KIB", "16384");
    }
    if (strcmp(kib, "256") == 0) {
        setvbuf(stdout, NULL, _IONBF, 0);
        full_then_freed();
        fill_to_fence();
        reexec_with_env(argv, "FOLIO_HEAP_DENSE_KIB", "0");
    }
    if (strcmp(kib, "0") == 0) {
        void *p = malloc(OPAQUE(1234));
        CHECK(p != NULL, "malloc");
        free(p);
        CHECK(report_u64("dense_allocs") == 0, "FOLIO_HEAP_DENSE_KIB=0: a block from the dense heap");
        printf("FOLIO_HEAP_DENSE_KIB=0: none from it\n");
        return 0;
    }
    setvbuf(stdout, NULL, _IONBF, 0); /* no stdio buffer among the blocks */
    region_end_untouched();
    free_only_thread();
    many_sizes();
    merge_and_reuse();
    realloc_and_calloc();
    misuse();
    graduation();
    frees_elsewhere();
    second_thread();
    printf("dense heap: ok\n");
    fflush(stdout);
    setenv("FOLIO_HEAP_DENSE_LIVE", "100000", 1); /* no size leaves */
    reexec_with_env(argv, "FOLIO_HEAP_DENSE_KIB", "256");
    return 0;
}
#endif
