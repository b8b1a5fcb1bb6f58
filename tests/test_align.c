/* test_align: alignment of every allocation call, and the aligned calls'
 * argument checks. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#define MIN_ALIGN 16u

static int aligned(const void *p, size_t a)
{
    return ((uintptr_t)OPAQUE(p) & (a - 1)) == 0;
}

/* Write the first, last and a page-strided sample of bytes of [p, p+n). */
static void touch(void *p, size_t n, unsigned char c)
{
    unsigned char *b = OPAQUE((unsigned char *)p);
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i += 4096)
        b[i] = c;
    b[n - 1] = c;
}

static void check_touch(const void *p, size_t n, unsigned char c)
{
    const unsigned char *b = OPAQUE((const unsigned char *)p);
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i += 4096)
        CHECK(b[i] == c, "byte %zu of %zu-byte block %p changed", i, n, p);
    CHECK(b[n - 1] == c, "last byte of %zu-byte block %p changed", n, p);
}

static void min_alignment(void)
{
    /* Every size 1..4096, several live at once so they are not all the
     * same recycled block. */
    enum { LIVE = 8 };
    void *live[LIVE] = {0};
    for (size_t n = 1; n <= 4096; n++) {
        for (int k = 0; k < LIVE; k++) {
            void *p = malloc(OPAQUE(n));
            CHECK(p != NULL, "malloc(%zu) failed", n);
            CHECK(aligned(p, MIN_ALIGN), "malloc(%zu) = %p not 16-aligned", n, p);
            memset(p, 0x5a, n);
            free(OPAQUE(live[k]));
            live[k] = p;
        }
    }
    for (int k = 0; k < LIVE; k++)
        free(OPAQUE(live[k]));

    /* Larger sizes: around page multiples, medium, large, huge. */
    static const size_t big[] = {
        4097, 5000, 8191, 8192, 8193, 12288, 16384 - 1, 16384 + 1, 32768,
        65535, 65536, 65537, 100000, 131072, 200000, 262144 + 8,
        1 << 20, (1 << 20) + 1, (2 << 20) - 16, 2 << 20, (2 << 20) + 1,
        3 << 20, (4 << 20) + 12345, 8 << 20, (16 << 20) + 1, 40 << 20,
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        size_t n = big[i];
        void *p = malloc(OPAQUE(n));
        CHECK(p != NULL, "malloc(%zu) failed", n);
        CHECK(aligned(p, MIN_ALIGN), "malloc(%zu) = %p not 16-aligned", n, p);
        touch(p, n, 0xa5);
        check_touch(p, n, 0xa5);
        void *q = calloc(1, OPAQUE(n));
        CHECK(q != NULL, "calloc(1, %zu) failed", n);
        CHECK(aligned(q, MIN_ALIGN), "calloc(1,%zu) = %p not 16-aligned", n, q);
        void *r = realloc(OPAQUE(p), n + 100);
        CHECK(r != NULL, "realloc(%zu -> %zu) failed", n, n + 100);
        CHECK(aligned(r, MIN_ALIGN), "realloc to %zu = %p not 16-aligned", n + 100, r);
        free(OPAQUE(q));
        free(OPAQUE(r));
    }

    /* malloc(0) gives a unique, freeable pointer (glibc behaviour). */
    void *z1 = malloc(OPAQUE((size_t)0));
    void *z2 = malloc(OPAQUE((size_t)0));
    CHECK(z1 != NULL && z2 != NULL, "malloc(0) returned NULL");
    CHECK(z1 != z2, "two malloc(0) returned the same pointer %p", z1);
    CHECK(aligned(z1, MIN_ALIGN), "malloc(0) = %p not 16-aligned", z1);
    free(OPAQUE(z1));
    free(OPAQUE(z2));
}

typedef void *(*alloc_fn)(size_t align, size_t size);

static void *via_aligned_alloc(size_t a, size_t n) { return aligned_alloc(a, n); }
static void *via_memalign(size_t a, size_t n) { return memalign(a, n); }
static void *via_posix_memalign(size_t a, size_t n)
{
    void *p = (void *)0x1;
    int rc = posix_memalign(&p, a, n);
    CHECK(rc == 0, "posix_memalign(align %zu, size %zu) returned %d", a, n, rc);
    return p;
}

static void aligned_calls(void)
{
    static const struct { const char *name; alloc_fn fn; } fns[] = {
        {"aligned_alloc", via_aligned_alloc},
        {"memalign", via_memalign},
        {"posix_memalign", via_posix_memalign},
    };
    for (size_t f = 0; f < 3; f++) {
        for (size_t a = 16; a <= (2u << 20); a <<= 1) {
            const size_t sizes[] = {1, 16, a - 1, a, a + 1, 3 * a + 5, 100, 5000};
            enum { NS = sizeof sizes / sizeof sizes[0] };
            void *ps[NS];
            for (size_t s = 0; s < NS; s++) {
                size_t n = sizes[s];
                void *p = fns[f].fn(OPAQUE(a), OPAQUE(n));
                CHECK(p != NULL, "%s(%zu, %zu) failed", fns[f].name, a, n);
                CHECK(aligned(p, a), "%s(%zu, %zu) = %p misaligned", fns[f].name, a, n, p);
                CHECK(malloc_usable_size(p) >= n, "%s(%zu, %zu): usable size %zu too small",
                      fns[f].name, a, n, malloc_usable_size(p));
                touch(p, n, (unsigned char)(s + 1));
                ps[s] = p;
            }
            for (size_t s = 0; s < NS; s++) {
                check_touch(ps[s], sizes[s], (unsigned char)(s + 1));
                free(OPAQUE(ps[s]));
            }
        }
    }

    /* Many live 4 KiB..64 KiB-aligned small blocks at once: distinct,
     * aligned, not overlapping. */
    enum { N = 64 };
    for (size_t a = 4096; a <= 65536; a <<= 1) {
        unsigned char *ps[N];
        for (int i = 0; i < N; i++) {
            ps[i] = aligned_alloc(OPAQUE(a), 48);
            CHECK(ps[i] != NULL, "aligned_alloc(%zu, 48) #%d failed", a, i);
            CHECK(aligned(ps[i], a), "aligned_alloc(%zu, 48) = %p misaligned", a, (void *)ps[i]);
            memset(ps[i], i, 48);
        }
        for (int i = 0; i < N; i++) {
            CHECK(first_not(ps[i], 48, (unsigned char)i) == (size_t)-1,
                  "aligned_alloc(%zu, 48) block %d overwritten", a, i);
            free(OPAQUE(ps[i]));
        }
    }

    /* Aligned blocks can be grown with realloc and keep their contents. */
    for (size_t a = 64; a <= (2u << 20); a <<= 3) {
        unsigned char *p = aligned_alloc(OPAQUE(a), 1000);
        CHECK(p != NULL, "aligned_alloc(%zu, 1000)", a);
        pattern_fill(p, 1000, a);
        p = realloc(OPAQUE(p), 300000);
        CHECK(p != NULL, "realloc of aligned_alloc(%zu) block", a);
        CHECK(pattern_check(p, 1000, a) == (size_t)-1,
              "realloc of aligned_alloc(%zu) block lost its contents", a);
        free(OPAQUE(p));
    }
}

static void page_aligned(void)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const size_t sizes[] = {1, 100, pg - 1, pg, pg + 1, 3 * pg + 7, 1 << 20, (5 << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *p = valloc(OPAQUE(n));
        CHECK(p != NULL, "valloc(%zu) failed", n);
        CHECK(aligned(p, pg), "valloc(%zu) = %p not page aligned", n, p);
        CHECK(malloc_usable_size(p) >= n, "valloc(%zu) usable %zu", n, malloc_usable_size(p));
        touch(p, n, 7);
        void *q = pvalloc(OPAQUE(n));
        CHECK(q != NULL, "pvalloc(%zu) failed", n);
        CHECK(aligned(q, pg), "pvalloc(%zu) = %p not page aligned", n, q);
        size_t rounded = (n + pg - 1) / pg * pg;
        CHECK(malloc_usable_size(q) >= rounded,
              "pvalloc(%zu): usable %zu < %zu (size rounded up to pages)", n,
              malloc_usable_size(q), rounded);
        touch(q, rounded, 9);   /* the whole rounded size is ours */
        check_touch(p, n, 7);
        free(OPAQUE(p));
        free(OPAQUE(q));
    }
}

static void bad_alignments(void)
{
    /* posix_memalign: alignment must be a power of two and a multiple of
     * sizeof(void *); otherwise EINVAL and *out untouched. */
    const size_t bad_pm[] = {0, 1, 2, 3, 4, 12, 24, 48, 100, 4095, 4097, 3u << 20,
                             sizeof(void *) + 1, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad_pm / sizeof bad_pm[0]; i++) {
        void *out = (void *)0x1234;
        int rc = posix_memalign(&out, OPAQUE(bad_pm[i]), 64);
        CHECK(rc == EINVAL, "posix_memalign(align %zu) returned %d, want EINVAL", bad_pm[i], rc);
        CHECK(out == (void *)0x1234, "posix_memalign(align %zu) failed but changed *out to %p",
              bad_pm[i], out);
    }
    /* sizeof(void*) itself is fine. */
    {
        void *out = NULL;
        int rc = posix_memalign(&out, OPAQUE(sizeof(void *)), 24);
        CHECK(rc == 0 && out != NULL, "posix_memalign(sizeof(void*), 24) returned %d", rc);
        free(OPAQUE(out));
    }

    /* aligned_alloc: alignment not a power of two -> NULL with EINVAL (as
     * glibc >= 2.38; glibc 2.36 treats it like memalign and rounds up). */
#ifndef FOLIO_TEST_GLIBC
    const size_t bad_aa[] = {0, 3, 5, 12, 24, 48, 100, 4095, 3u << 20, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad_aa / sizeof bad_aa[0]; i++) {
        errno = 0;
        void *p = aligned_alloc(OPAQUE(bad_aa[i]), 64);
        int e = errno;
        CHECK(p == NULL, "aligned_alloc(%zu, 64) = %p, want NULL", bad_aa[i], p);
        CHECK(e == EINVAL, "aligned_alloc(%zu, 64): errno %d, want EINVAL", bad_aa[i], e);
    }
#endif
    /* Small powers of two are valid alignments for aligned_alloc and memalign. */
    for (size_t a = 1; a <= 8; a <<= 1) {
        void *p = aligned_alloc(OPAQUE(a), 40);
        CHECK(p != NULL, "aligned_alloc(%zu, 40) failed", a);
        CHECK(aligned(p, a), "aligned_alloc(%zu,40) = %p", a, p);
        free(OPAQUE(p));
        p = memalign(OPAQUE(a), 40);
        CHECK(p != NULL, "memalign(%zu, 40) failed", a);
        free(OPAQUE(p));
    }
    /* aligned_alloc's size need not be a multiple of the alignment (C17). */
    void *p = aligned_alloc(OPAQUE((size_t)256), 100);
    CHECK(p != NULL && aligned(p, 256), "aligned_alloc(256, 100) = %p", p);
    free(OPAQUE(p));

    /* An impossible size with a valid alignment: ENOMEM. */
    errno = 0;
    p = aligned_alloc(OPAQUE((size_t)64), OPAQUE(SIZE_MAX - 100));
    CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(64, SIZE_MAX-100) = %p errno %d", p, errno);
    void *out = (void *)0x1234;
    int rc = posix_memalign(&out, OPAQUE((size_t)4096), OPAQUE(SIZE_MAX - 5000));
    CHECK(rc == ENOMEM, "posix_memalign(4096, SIZE_MAX-5000) returned %d, want ENOMEM", rc);
    errno = 0;
    p = memalign(OPAQUE((size_t)1 << 21), OPAQUE(SIZE_MAX / 2));
    CHECK(p == NULL && errno == ENOMEM, "memalign(2 MiB, SIZE_MAX/2) = %p errno %d", p, errno);
    errno = 0;
    p = valloc(OPAQUE(SIZE_MAX - 10));
    CHECK(p == NULL && errno == ENOMEM, "valloc(SIZE_MAX-10) = %p errno %d", p, errno);
    errno = 0;
    p = pvalloc(OPAQUE(SIZE_MAX - 10));
    CHECK(p == NULL && errno == ENOMEM, "pvalloc(SIZE_MAX-10) = %p errno %d", p, errno);
}

int main(void)
{
    min_alignment();
    aligned_calls();
    page_aligned();
    bad_alignments();
    return 0;
}
