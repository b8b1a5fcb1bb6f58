/* test_realloc: realloc's edge cases (glibc behaviour) and that growing and
 * shrinking keeps the contents across every size regime: small -> medium ->
 * large -> huge -> small. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

static unsigned char *resize(unsigned char *p, size_t old, size_t n, uint64_t seed,
                             const char *ctx)
{
    unsigned char *q = realloc(OPAQUE(p), OPAQUE(n));
    CHECK(q != NULL, "%s: realloc(%zu -> %zu) failed", ctx, old, n);
    CHECK(((uintptr_t)OPAQUE(q) & 15) == 0, "%s: realloc(%zu -> %zu) = %p not 16-aligned",
          ctx, old, n, (void *)q);
    size_t keep = MIN(old, n);
    size_t bad = pattern_check(q, keep, seed);
    CHECK(bad == (size_t)-1, "%s: realloc(%zu -> %zu) lost byte %zu (%p -> %p)", ctx, old,
          n, bad, (void *)p, (void *)q);
    CHECK(malloc_usable_size(q) >= n, "%s: usable size %zu < %zu after realloc", ctx,
          malloc_usable_size(q), n);
    /* Extend the pattern over the new size (the pattern depends only on the
     * offset, so the kept prefix already holds it). */
    if (n > keep)
        pattern_fill_from(q, keep, n, seed);
    return q;
}

static void transitions(void)
{
    /* Each row is a walk through the size regimes. */
    static const size_t walks[][16] = {
        {1, 24, 100, 1000, 5000, 70000, 300000, 3u << 20, 20u << 20, 1u << 20,
         50000, 500, 20, 8u << 20, 16, 0},
        {7, 7000, 7, 700000, 7, 7u << 20, 7, 0},
        {64 << 20, 32 << 20, 33 << 20, 4 << 20, 2 << 20, (2 << 20) + 1, 65536, 4096, 0},
        {4096, 8192, 12288, 4096 * 31, 4096 * 32, 4096 * 33, 4096 * 2, 0},
        {1000, 1001, 1500, 1024, 1023, 2049, 4000, 4097, 3999, 0},
        {100000, 200000, 150000, 149999, 1 << 20, (1 << 20) - 1, 3 << 19, 0},
    };
    for (size_t w = 0; w < sizeof walks / sizeof walks[0]; w++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "walk %zu", w);
        uint64_t seed = 0x1000 + w;
        size_t cur = walks[w][0];
        unsigned char *p = malloc(OPAQUE(cur));
        CHECK(p != NULL, "%s: malloc(%zu)", ctx, cur);
        pattern_fill(p, cur, seed);
        for (size_t i = 1; i < 16 && walks[w][i]; i++) {
            p = resize(p, cur, walks[w][i], seed, ctx);
            cur = walks[w][i];
        }
        free(OPAQUE(p));
    }

    /* Grow one byte at a time through the small classes. */
    {
        unsigned char *p = malloc(OPAQUE((size_t)1));
        pattern_fill(p, 1, 42);
        for (size_t n = 2; n <= 6000; n++)
            p = resize(p, n - 1, n, 42, "grow by 1");
        for (size_t n = 5999; n >= 1; n -= 7)
            p = resize(p, n + 7 > 6000 ? 6000 : n + 7, n, 42, "shrink by 7");
        free(OPAQUE(p));
    }
    /* Grow a page at a time through the large range, and a megabyte at a
     * time through the huge range (the mremap path). */
    {
        size_t cur = 4096;
        unsigned char *p = malloc(OPAQUE(cur));
        pattern_fill(p, cur, 43);
        for (; cur < (3u << 20); cur += 4096 * 13)
            p = resize(p, cur, cur + 4096 * 13, 43, "grow by 13 pages");
        for (size_t n = cur + (1u << 20); n <= (40u << 20); n += (1u << 20) + 4096) {
            p = resize(p, cur, n, 43, "grow by 1 MiB");
            cur = n;
        }
        while (cur > 4096) {
            size_t n = cur / 3;
            p = resize(p, cur, n, 43, "shrink by thirds");
            cur = n;
        }
        free(OPAQUE(p));
    }

    /* Two blocks growing alternately (they cannot both grow in place). */
    {
        size_t ca = 16, cb = 16;
        unsigned char *a = malloc(OPAQUE(ca)), *b = malloc(OPAQUE(cb));
        pattern_fill(a, ca, 1);
        pattern_fill(b, cb, 2);
        while (ca < (6u << 20)) {
            a = resize(a, ca, ca * 2 + 3, 1, "alternate a");
            ca = ca * 2 + 3;
            b = resize(b, cb, cb * 2 + 5, 2, "alternate b");
            cb = cb * 2 + 5;
        }
        CHECK(pattern_check(a, ca, 1) == (size_t)-1, "alternate: a damaged");
        CHECK(pattern_check(b, cb, 2) == (size_t)-1, "alternate: b damaged");
        free(OPAQUE(a));
        free(OPAQUE(b));
    }
}

static void edge_cases(void)
{
    /* realloc(NULL, n) is malloc(n). */
    const size_t sizes[] = {0, 1, 16, 1000, 100000, 3u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = realloc(OPAQUE((void *)NULL), OPAQUE(n));
        CHECK(p != NULL, "realloc(NULL, %zu) returned NULL", n);
        CHECK(malloc_usable_size(p) >= n, "realloc(NULL, %zu): usable %zu", n,
              malloc_usable_size(p));
        if (n)
            memset(p, 0x11, n);
        free(OPAQUE(p));
    }

    /* realloc(p, 0) frees p and returns NULL (glibc). */
#ifndef FOLIO_TEST_GLIBC
    uint64_t blocks0 = report_u64("live_blocks"), bytes0 = report_u64("live_bytes");
#endif
    const size_t olds[] = {1, 64, 5000, 200000, 8u << 20};
    for (size_t i = 0; i < sizeof olds / sizeof olds[0]; i++) {
        void *p = malloc(OPAQUE(olds[i]));
        CHECK(p != NULL, "malloc(%zu)", olds[i]);
        memset(p, 1, olds[i]);
        void *q = realloc(OPAQUE(p), OPAQUE((size_t)0));
        CHECK(q == NULL, "realloc(%zu-byte block, 0) returned %p, want NULL (block freed)",
              olds[i], q);
    }
    for (int i = 0; i < 200; i++) {
        void *p = malloc(OPAQUE((size_t)1 << 20));
        CHECK(p != NULL, "malloc(1 MiB) #%d failed", i);
        ((volatile char *)p)[0] = 1;
        CHECK(realloc(OPAQUE(p), OPAQUE((size_t)0)) == NULL, "realloc(p,0) != NULL");
    }
#ifndef FOLIO_TEST_GLIBC
    /* ...and really freed it: folio's live counts are back where they were */
    uint64_t blocks = report_u64("live_blocks"), bytes = report_u64("live_bytes");
    CHECK(blocks == blocks0 && bytes == bytes0,
          "after realloc(p, 0): %lld live blocks and %lld live bytes more than before",
          (long long)(blocks - blocks0), (long long)(bytes - bytes0));
#endif

    /* Same-size and within-usable-size reallocs keep the contents. */
    for (size_t n = 1; n < (8u << 20); n = n * 5 + 3) {
        unsigned char *p = malloc(OPAQUE(n));
        pattern_fill(p, n, n);
        p = resize(p, n, n, n, "same size");
        size_t u = malloc_usable_size(p);
        p = resize(p, n, u, n, "to usable size");
        p = resize(p, u, n, n, "back from usable size");
        free(OPAQUE(p));
    }

    /* reallocarray: a product that fits works like realloc. */
    unsigned char *p = reallocarray(NULL, OPAQUE((size_t)10), 10);
    CHECK(p != NULL, "reallocarray(NULL, 10, 10)");
    pattern_fill(p, 100, 5);
    p = reallocarray(OPAQUE(p), 1000, 100);
    CHECK(p != NULL, "reallocarray(p, 1000, 100)");
    CHECK(pattern_check(p, 100, 5) == (size_t)-1, "reallocarray lost contents");
    free(OPAQUE(p));
}

int main(void)
{
    edge_cases();
    transitions();
    return 0;
}
