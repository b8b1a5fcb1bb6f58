/* test_calloc: calloc returns zeroed memory on every path: fresh and
 * recycled small blocks, recycled large (64 KiB..1.5 MiB) and huge
 * (8..64 MiB) blocks, blocks that realloc grew or shrank before they were
 * freed, blocks freed by another thread, and the edge cases. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

static void expect_zero(const void *p, size_t n, const char *ctx, size_t a, size_t b)
{
    size_t bad = first_not(OPAQUE(p), n, 0);
    CHECK(bad == (size_t)-1,
          "%s: calloc(%zu, %zu) = %p has byte %zu = %#x (not zero)", ctx, a, b, p, bad,
          ((const unsigned char *)p)[bad]);
}

/* Dirty `k` blocks of size n (their whole usable size), free them, then
 * calloc the same size k times and check every one is zero. */
static void recycle(size_t n, int k, unsigned char dirt, const char *ctx)
{
    enum { KMAX = 64 };
    void *ps[KMAX];
    if (k > KMAX)
        k = KMAX;
    for (int i = 0; i < k; i++) {
        ps[i] = malloc(OPAQUE(n));
        CHECK(ps[i] != NULL, "%s: malloc(%zu)", ctx, n);
        memset(ps[i], dirt, malloc_usable_size(ps[i]));
    }
    for (int i = 0; i < k; i++)
        free(OPAQUE(ps[i]));
    for (int i = 0; i < k; i++) {
        ps[i] = calloc(1, OPAQUE(n));
        CHECK(ps[i] != NULL, "%s: calloc(1, %zu)", ctx, n);
        expect_zero(ps[i], n, ctx, 1, n);
        memset(ps[i], dirt ^ 0xff, n);   /* dirty again for the next round */
    }
    for (int i = 0; i < k; i++)
        free(OPAQUE(ps[i]));
}

static void small_paths(void)
{
    /* Fresh small blocks of every size 1..2048 (several so a slab fills). */
    for (size_t n = 1; n <= 2048; n++) {
        void *ps[4];
        for (int i = 0; i < 4; i++) {
            ps[i] = calloc(1, OPAQUE(n));
            CHECK(ps[i] != NULL, "calloc(1, %zu)", n);
            expect_zero(ps[i], n, "fresh small", 1, n);
            memset(ps[i], 0xee, n);
        }
        for (int i = 0; i < 4; i++)
            free(OPAQUE(ps[i]));
    }
    /* Recycled small blocks: the same size, and (by the class rounding) the
     * neighbouring sizes, after dirty blocks of that class were freed. */
    for (size_t n = 1; n <= 4096; n += (n < 256 ? 1 : 37)) {
        recycle(n, 16, 0xa5, "recycled small");
        /* A different request size landing in the same class as the dirty
         * blocks: dirty n+1..n+8 sized blocks, calloc n. */
        void *d = malloc(OPAQUE(n + 5));
        memset(d, 0x77, malloc_usable_size(d));
        free(OPAQUE(d));
        void *z = calloc(OPAQUE(n), 1);
        CHECK(z != NULL, "calloc(%zu, 1)", n);
        expect_zero(z, n, "small after neighbour size", n, 1);
        free(OPAQUE(z));
    }
    /* Element count x size combinations. */
    for (size_t a = 1; a <= 64; a *= 3)
        for (size_t b = 1; b <= 300; b = b * 2 + 1) {
            unsigned char *p = calloc(OPAQUE(a), OPAQUE(b));
            CHECK(p != NULL, "calloc(%zu, %zu)", a, b);
            expect_zero(p, a * b, "n x size", a, b);
            memset(p, 0xcc, a * b);
            free(OPAQUE(p));
        }
}

static void large_paths(void)
{
    /* 64 KiB .. 1.5 MiB, fresh then recycled. */
    static const size_t sizes[] = {
        65536, 65536 + 1, 70000, 98304, 131072 - 16, 131072 + 4096, 200000,
        262144, 500000, 524288 + 100, 1 << 20, (1 << 20) + 3, 1200000, 3 << 19,
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *p = calloc(OPAQUE(n), 1);
        CHECK(p != NULL, "calloc(%zu, 1)", n);
        expect_zero(p, n, "fresh large", n, 1);
        free(OPAQUE(p));
        recycle(n, 6, 0x5b, "recycled large");
    }
    /* Recycle a big dirty block as calloc of a smaller large size (the span
     * may be split) and of a slightly larger one (may be merged with
     * neighbours). */
    for (size_t n = 65536; n <= (3u << 19); n += 65536 + 4096) {
        void *d = malloc(OPAQUE(n * 2));
        memset(d, 0x99, n * 2);
        free(OPAQUE(d));
        void *z = calloc(1, OPAQUE(n));
        CHECK(z != NULL, "calloc(1, %zu)", n);
        expect_zero(z, n, "large after a bigger dirty block", 1, n);
        void *z2 = calloc(1, OPAQUE(n + n / 2));
        CHECK(z2 != NULL, "calloc(1, %zu)", n + n / 2);
        expect_zero(z2, n + n / 2, "large after a bigger dirty block (2)", 1, n + n / 2);
        memset(z, 0x98, n);
        memset(z2, 0x97, n + n / 2);
        free(OPAQUE(z));
        free(OPAQUE(z2));
    }
}

static void huge_paths(void)
{
    static const size_t sizes[] = {8u << 20, (8u << 20) + 1, 12u << 20, (16u << 20) + 4095,
                                   32u << 20, 64u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *p = calloc(1, OPAQUE(n));
        CHECK(p != NULL, "calloc(1, %zu)", n);
        expect_zero(p, n, "fresh huge", 1, n);
        free(OPAQUE(p));
        recycle(n, 2, 0x3d, "recycled huge");
    }
    /* calloc counts of elements totalling a huge size. */
    unsigned char *p = calloc(OPAQUE((size_t)4096), OPAQUE((size_t)4096));
    CHECK(p != NULL, "calloc(4096, 4096)");
    expect_zero(p, 4096 * 4096, "huge n x size", 4096, 4096);
    memset(p, 0x12, 4096 * 4096);
    free(OPAQUE(p));
    p = calloc(OPAQUE((size_t)4096), OPAQUE((size_t)4096));
    CHECK(p != NULL, "calloc(4096, 4096) again");
    expect_zero(p, 4096 * 4096, "huge n x size, recycled", 4096, 4096);
    free(OPAQUE(p));
}

static void realloc_then_calloc(void)
{
    /* Blocks grown (or shrunk) by realloc, dirtied over their whole usable
     * size, freed; calloc of the final size and of the original size. */
    static const size_t walks[][2] = {
        {100, 1u << 20},   {100, 10u << 20},  {5000, 100000},  {70000, 3u << 20},
        {1u << 20, 200},   {20u << 20, 100000}, {30000, 9u << 20}, {9u << 20, 40u << 20},
    };
    for (size_t w = 0; w < sizeof walks / sizeof walks[0]; w++) {
        size_t a = walks[w][0], b = walks[w][1];
        unsigned char *p = malloc(OPAQUE(a));
        memset(p, 0xab, a);
        p = realloc(OPAQUE(p), OPAQUE(b));
        CHECK(p != NULL, "realloc(%zu -> %zu)", a, b);
        memset(p, 0xcd, malloc_usable_size(p));
        free(OPAQUE(p));
        void *z = calloc(1, OPAQUE(b));
        CHECK(z != NULL, "calloc(1, %zu)", b);
        expect_zero(z, b, "after realloc-grown/shrunk block", 1, b);
        void *z2 = calloc(OPAQUE(a), 1);
        CHECK(z2 != NULL, "calloc(%zu, 1)", a);
        expect_zero(z2, a, "after realloc-grown/shrunk block (orig size)", a, 1);
        memset(z, 0xef, b);
        free(OPAQUE(z));
        free(OPAQUE(z2));
        void *z3 = calloc(1, OPAQUE(b));
        expect_zero(z3, b, "after realloc-grown/shrunk block (again)", 1, b);
        free(OPAQUE(z3));
    }
}

/* Blocks dirtied and freed by another thread, then calloc'd here. */
struct remote_arg { void **ps; size_t n; int k; };

static void *remote_free(void *arg)
{
    struct remote_arg *ra = arg;
    for (int i = 0; i < ra->k; i++) {
        memset(ra->ps[i], 0x66, ra->n);
        free(OPAQUE(ra->ps[i]));
    }
    return NULL;
}

static void cross_thread(void)
{
    static const size_t sizes[] = {16, 48, 200, 1000, 3000, 20000, 100000, 1u << 20, 9u << 20};
    enum { K = 32 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        int k = n >= (1u << 20) ? 3 : K;
        void *ps[K];
        for (int round = 0; round < 3; round++) {
            for (int i = 0; i < k; i++) {
                ps[i] = malloc(OPAQUE(n));
                CHECK(ps[i] != NULL, "malloc(%zu)", n);
            }
            struct remote_arg ra = {ps, n, k};
            pthread_t t;
            CHECK(pthread_create(&t, NULL, remote_free, &ra) == 0, "pthread_create");
            pthread_join(t, NULL);
            for (int i = 0; i < k; i++) {
                ps[i] = calloc(1, OPAQUE(n));
                CHECK(ps[i] != NULL, "calloc(1, %zu)", n);
                expect_zero(ps[i], n, "after remote free", 1, n);
            }
            for (int i = 0; i < k; i++)
                free(OPAQUE(ps[i]));
        }
    }
}

static void edge_cases(void)
{
    /* calloc(0, n) and calloc(n, 0) return unique freeable pointers (glibc). */
    void *a = calloc(OPAQUE((size_t)0), 10);
    void *b = calloc(10, OPAQUE((size_t)0));
    void *c = calloc(OPAQUE((size_t)0), OPAQUE((size_t)0));
    CHECK(a != NULL && b != NULL && c != NULL, "calloc with a zero factor returned NULL");
    CHECK(a != b && b != c && a != c, "calloc with a zero factor: pointers not distinct");
    free(OPAQUE(a));
    free(OPAQUE(b));
    free(OPAQUE(c));
}

int main(void)
{
    edge_cases();
    small_paths();
    large_paths();
    huge_paths();
    realloc_then_calloc();
    cross_thread();
    return 0;
}
