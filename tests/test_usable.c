/* test_usable: malloc_usable_size (>= the request, all of it writable and
 * not shared with a neighbour), free_sized / free_aligned_sized (every
 * block comes back: folio's live_blocks and live_bytes return to their
 * start), malloc_trim (1 when it released memory, 0 when there was none to
 * release) and mallinfo2. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

/* Allocate `k` blocks of size n, fill each one's whole usable size with its
 * own byte, then check none was overwritten by a neighbour. */
static void usable_writable(size_t n, int k)
{
    enum { KMAX = 32 };
    unsigned char *ps[KMAX];
    size_t us[KMAX];
    for (int i = 0; i < k; i++) {
        ps[i] = malloc(OPAQUE(n));
        CHECK(ps[i] != NULL, "malloc(%zu)", n);
        us[i] = malloc_usable_size(ps[i]);
        CHECK(us[i] >= n, "malloc_usable_size(malloc(%zu)) = %zu < request", n, us[i]);
        /* A sane upper bound: no more than 2x + a page of slack for small
         * and large, a 2 MiB chunk for huge. */
        size_t limit = n < (1u << 20) ? 2 * n + 4096 : n + (2u << 20);
        CHECK(us[i] <= limit, "malloc_usable_size(malloc(%zu)) = %zu is implausibly big", n,
              us[i]);
        memset(ps[i], (unsigned char)(i + 1), us[i]);
    }
    for (int i = 0; i < k; i++) {
        size_t bad = first_not(ps[i], us[i], (unsigned char)(i + 1));
        CHECK(bad == (size_t)-1,
              "block %d of size %zu (usable %zu) at %p: byte %zu overwritten by a neighbour",
              i, n, us[i], (void *)ps[i], bad);
        CHECK(malloc_usable_size(ps[i]) == us[i], "usable size of a live block changed");
    }
    for (int i = 0; i < k; i++)
        free(OPAQUE(ps[i]));
}

static void usable_sizes(void)
{
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu",
          malloc_usable_size(NULL));
    for (size_t n = 1; n <= 4096; n++)
        usable_writable(n, 6);
    for (size_t n = 4097; n <= (4u << 20); n = n * 9 / 8 + 1)
        usable_writable(n, n < 100000 ? 16 : 4);
    usable_writable(9u << 20, 2);
    usable_writable(33u << 20, 2);

    /* Usable size of the other allocation calls. */
    void *p = calloc(OPAQUE((size_t)7), 9);
    CHECK(malloc_usable_size(p) >= 63, "usable(calloc(7,9)) = %zu", malloc_usable_size(p));
    free(OPAQUE(p));
    p = aligned_alloc(OPAQUE((size_t)4096), 5000);
    CHECK(malloc_usable_size(p) >= 5000, "usable(aligned_alloc(4096,5000)) = %zu",
          malloc_usable_size(p));
    memset(p, 1, malloc_usable_size(p));
    free(OPAQUE(p));
    p = realloc(NULL, OPAQUE((size_t)300));
    p = realloc(OPAQUE(p), 90000);
    CHECK(malloc_usable_size(p) >= 90000, "usable after realloc = %zu", malloc_usable_size(p));
    memset(p, 1, malloc_usable_size(p));
    free(OPAQUE(p));
}

static void sized_frees(void)
{
#ifndef FOLIO_TEST_GLIBC
    uint64_t blocks0 = report_u64("live_blocks"), bytes0 = report_u64("live_bytes");
#endif
    /* free_sized with the requested size, for every regime. */
    for (size_t n = 1; n <= (20u << 20); n = n < 4096 ? n + 1 : n * 3 / 2) {
        void *p = malloc(OPAQUE(n));
        CHECK(p != NULL, "malloc(%zu)", n);
        memset(p, 0x42, n);
        free_sized(OPAQUE(p), n);
    }
    /* free_sized with calloc's n*size. */
    void *p = calloc(OPAQUE((size_t)12), 100);
    free_sized(p, 1200);
    /* free_sized(NULL, 0) is a no-op. */
    free_sized(NULL, 0);

    /* free_aligned_sized with the alignment and size given to aligned_alloc. */
    for (size_t a = 16; a <= (2u << 20); a <<= 1) {
        const size_t sizes[] = {a, 2 * a, a + 16, 100, 4096, 70000};
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            void *q = aligned_alloc(OPAQUE(a), OPAQUE(sizes[s]));
            CHECK(q != NULL, "aligned_alloc(%zu, %zu)", a, sizes[s]);
            memset(q, 0x24, sizes[s]);
            free_aligned_sized(OPAQUE(q), a, sizes[s]);
        }
    }
    free_aligned_sized(NULL, 64, 0);

    /* Repeated sized frees of large and huge blocks (reuse of what they
     * freed). */
    for (int i = 0; i < 200; i++) {
        void *q = malloc(OPAQUE((size_t)4 << 20 >> 2));
        CHECK(q != NULL, "malloc(1 MiB) #%d after free_sized (leak?)", i);
        ((volatile char *)q)[100] = 1;
        free_sized(OPAQUE(q), (size_t)4 << 20 >> 2);
        void *r = aligned_alloc(OPAQUE((size_t)65536), (size_t)3 << 20);
        CHECK(r != NULL, "aligned_alloc(64K, 3 MiB) #%d after free_aligned_sized (leak?)", i);
        ((volatile char *)r)[100] = 1;
        free_aligned_sized(OPAQUE(r), 65536, (size_t)3 << 20);
    }
#ifndef FOLIO_TEST_GLIBC
    /* Every block came back. */
    uint64_t blocks = report_u64("live_blocks"), bytes = report_u64("live_bytes");
    CHECK(blocks == blocks0 && bytes == bytes0,
          "after free_sized/free_aligned_sized: %lld live blocks and %lld live bytes more than "
          "before",
          (long long)(blocks - blocks0), (long long)(bytes - bytes0));
#endif
}

static void trim_and_info(void)
{
    enum { N = 2000 };
    void *ps[N];
    for (int i = 0; i < N; i++) {
        ps[i] = malloc(OPAQUE((size_t)100 + (size_t)i % 300));
        CHECK(ps[i] != NULL, "malloc");
        memset(ps[i], 1, 100);
    }
    void *big = malloc(OPAQUE((size_t)5 << 20));
    memset(big, 2, 5u << 20);
    void *mid = malloc(OPAQUE((size_t)1 << 20));
    memset(mid, 3, 1u << 20);
    struct mallinfo2 mi = mallinfo2();
    CHECK(mi.uordblks > 0, "mallinfo2().uordblks = %zu with %d blocks live", mi.uordblks, N);
    CHECK(mi.uordblks >= (size_t)N * 100 || mi.hblkhd >= (5u << 20),
          "mallinfo2: uordblks %zu hblkhd %zu: less than what is live", mi.uordblks, mi.hblkhd);
    CHECK(mi.uordblks < ((size_t)1 << 40), "mallinfo2().uordblks = %zu implausible",
          mi.uordblks);
    CHECK(mi.fordblks < ((size_t)1 << 40), "mallinfo2().fordblks = %zu implausible",
          mi.fordblks);
    CHECK(mi.arena < ((size_t)1 << 46), "mallinfo2().arena = %zu implausible", mi.arena);

    for (int i = 0; i < N; i += 2)
        free(OPAQUE(ps[i]));
    free(OPAQUE(big));
    /* Freed, dirty memory (the 5 MiB block) is there to release: 1.  Then
     * nothing was freed since: 0 (glibc's results depend on its heap). */
    int r = malloc_trim(0);
#ifndef FOLIO_TEST_GLIBC
    CHECK(r == 1, "malloc_trim(0) after freeing a dirty 5 MiB block returned %d, want 1", r);
#endif
    r = malloc_trim(1u << 20);
#ifndef FOLIO_TEST_GLIBC
    CHECK(r == 0, "malloc_trim(1 MiB) with nothing freed since the last trim returned %d, want 0",
          r);
#endif
    /* Surviving blocks are intact after the trim. */
    for (int i = 1; i < N; i += 2) {
        CHECK(first_not(ps[i], 100, 1) == (size_t)-1, "block %d damaged by malloc_trim", i);
        free(OPAQUE(ps[i]));
    }
    CHECK(first_not(mid, 1u << 20, 3) == (size_t)-1, "1 MiB block damaged by malloc_trim");
    free(OPAQUE(mid));
    r = malloc_trim(0);
#ifndef FOLIO_TEST_GLIBC
    CHECK(r == 1, "malloc_trim(0) after freeing a dirty 1 MiB block returned %d, want 1", r);
#else
    (void)r;
#endif
    /* And the allocator works after trimming. */
    for (size_t n = 8; n < (16u << 20); n = n * 4 + 1) {
        void *p = calloc(1, OPAQUE(n));
        CHECK(p != NULL, "calloc(1, %zu) after malloc_trim", n);
        CHECK(first_not(OPAQUE(p), n, 0) == (size_t)-1, "calloc after trim not zero");
        free(OPAQUE(p));
    }
    mi = mallinfo2();
    CHECK(mi.uordblks < ((size_t)1 << 40), "mallinfo2 after trim: uordblks %zu", mi.uordblks);
}

int main(void)
{
    usable_sizes();
    sized_frees();
    trim_and_info();
    return 0;
}
