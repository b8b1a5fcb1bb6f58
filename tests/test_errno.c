/* test_errno: impossible sizes and multiplication overflow fail with NULL and
 * errno = ENOMEM, and leave the caller's block untouched.  Under the
 * kernel's heuristic overcommit (vm.overcommit_memory 0), so does a block
 * larger than RAM and swap together, as glibc's would be refused (folio's
 * address space is MAP_NORESERVE, which the kernel does not check). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <stdio.h>
#include <sys/sysinfo.h>

#include "check.h"
#include "api.h"

#define EXPECT_ENOMEM(call, what)                                              \
    do {                                                                       \
        errno = 0;                                                             \
        void *r_ = (call);                                                     \
        int e_ = errno;                                                        \
        CHECK(r_ == NULL, "%s returned %p, want NULL", what, r_);              \
        CHECK(e_ == ENOMEM, "%s: errno %d, want ENOMEM (%d)", what, e_, ENOMEM); \
    } while (0)

int main(void)
{
    const size_t huge_sizes[] = {
        SIZE_MAX,
        SIZE_MAX - 1,
        SIZE_MAX - 4095,
        SIZE_MAX - (2u << 20),
        (size_t)PTRDIFF_MAX + 1,
        (size_t)PTRDIFF_MAX,
        (size_t)PTRDIFF_MAX - 4096,
        (size_t)1 << 62,
        (size_t)1 << 60,
    };
    char what[128];

    for (size_t i = 0; i < sizeof huge_sizes / sizeof huge_sizes[0]; i++) {
        size_t n = huge_sizes[i];
        snprintf(what, sizeof what, "malloc(%#zx)", n);
        EXPECT_ENOMEM(malloc(OPAQUE(n)), what);
        snprintf(what, sizeof what, "calloc(1, %#zx)", n);
        EXPECT_ENOMEM(calloc(1, OPAQUE(n)), what);
        snprintf(what, sizeof what, "calloc(%#zx, 1)", n);
        EXPECT_ENOMEM(calloc(OPAQUE(n), 1), what);
        snprintf(what, sizeof what, "realloc(NULL, %#zx)", n);
        EXPECT_ENOMEM(realloc(OPAQUE((void *)NULL), OPAQUE(n)), what);

        /* A failed realloc leaves the old block allocated and intact. */
        const size_t old_sizes[] = {24, 3000, 100000, 5u << 20};
        for (size_t k = 0; k < 4; k++) {
            size_t old = old_sizes[k];
            unsigned char *p = malloc(OPAQUE(old));
            CHECK(p != NULL, "malloc(%zu)", old);
            pattern_fill(p, old, old + i);
            snprintf(what, sizeof what, "realloc(%zu-byte block, %#zx)", old, n);
            EXPECT_ENOMEM(realloc(OPAQUE(p), OPAQUE(n)), what);
            CHECK(pattern_check(p, old, old + i) == (size_t)-1,
                  "%s failed but damaged the block", what);
            snprintf(what, sizeof what, "reallocarray(%zu-byte block, 1, %#zx)", old, n);
            EXPECT_ENOMEM(reallocarray(OPAQUE(p), 1, OPAQUE(n)), what);
            CHECK(pattern_check(p, old, old + i) == (size_t)-1,
                  "%s failed but damaged the block", what);
            free(OPAQUE(p));
        }
    }

    /* Multiplication overflow in calloc and reallocarray. */
    const struct { size_t n, m; } ovf[] = {
        {SIZE_MAX / 2, 3},
        {3, SIZE_MAX / 2},
        {SIZE_MAX, SIZE_MAX},
        {(size_t)1 << 32, (size_t)1 << 32},
        {((size_t)1 << 33) + 1, ((size_t)1 << 31)},
        {SIZE_MAX / 16 + 1, 16},
        {2, SIZE_MAX / 2 + 1},
    };
    for (size_t i = 0; i < sizeof ovf / sizeof ovf[0]; i++) {
        size_t n = ovf[i].n, m = ovf[i].m;
        snprintf(what, sizeof what, "calloc(%#zx, %#zx)", n, m);
        EXPECT_ENOMEM(calloc(OPAQUE(n), OPAQUE(m)), what);
        snprintf(what, sizeof what, "reallocarray(NULL, %#zx, %#zx)", n, m);
        EXPECT_ENOMEM(reallocarray(NULL, OPAQUE(n), OPAQUE(m)), what);
        unsigned char *p = malloc(OPAQUE((size_t)77));
        CHECK(p != NULL, "malloc(77)");
        memset(p, 0x3c, 77);
        snprintf(what, sizeof what, "reallocarray(p, %#zx, %#zx)", n, m);
        EXPECT_ENOMEM(reallocarray(OPAQUE(p), OPAQUE(n), OPAQUE(m)), what);
        CHECK(first_not(p, 77, 0x3c) == (size_t)-1, "%s failed but damaged the block", what);
        free(OPAQUE(p));
    }

    /* Products that fit are fine, including ones whose factors are big. */
    {
        unsigned char *p = calloc(OPAQUE((size_t)1 << 20), 3);
        CHECK(p != NULL, "calloc(1<<20, 3) failed");
        CHECK(first_not(OPAQUE(p), 3u << 20, 0) == (size_t)-1, "calloc(1<<20,3) not zero");
        free(OPAQUE(p));
        p = reallocarray(NULL, OPAQUE((size_t)1000), 1000);
        CHECK(p != NULL, "reallocarray(NULL, 1000, 1000) failed");
        memset(p, 1, 1000000);
        p = reallocarray(OPAQUE(p), 3, 1000000);
        CHECK(p != NULL, "reallocarray(p, 3, 1000000) failed");
        CHECK(first_not(p, 1000000, 1) == (size_t)-1, "reallocarray lost contents");
        free(OPAQUE(p));
    }

    /* More than RAM and swap: the kernel's heuristic would refuse it. */
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = -1;
    if (f) {
        if (fscanf(f, "%d", &mode) != 1)
            mode = -1;
        fclose(f);
    }
    struct sysinfo si;
    if (mode == 0 && sysinfo(&si) == 0) {
        unsigned __int128 total = ((unsigned __int128)si.totalram + si.totalswap) * si.mem_unit;
        const size_t over[] = {(size_t)total + ((size_t)1 << 30), (size_t)total * 2, (size_t)1 << 46};
        for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
            size_t n = over[i];
            if (n <= total)
                continue;
            snprintf(what, sizeof what, "malloc(%zu GiB, more than RAM + swap)", n >> 30);
            EXPECT_ENOMEM(malloc(OPAQUE(n)), what);
            snprintf(what, sizeof what, "calloc(1, %zu GiB)", n >> 30);
            EXPECT_ENOMEM(calloc(1, OPAQUE(n)), what);
            snprintf(what, sizeof what, "aligned_alloc(1 MiB, %zu GiB)", n >> 30);
            EXPECT_ENOMEM(aligned_alloc((size_t)1 << 20, OPAQUE(n) & ~(((size_t)1 << 20) - 1)), what);
            unsigned char *p = malloc(OPAQUE((size_t)40 << 20)); /* a huge block, grown in place or moved */
            CHECK(p != NULL, "malloc(40 MiB)");
            memset(p, 0x5a, (size_t)40 << 20);
            snprintf(what, sizeof what, "realloc(40 MiB block, %zu GiB)", n >> 30);
            EXPECT_ENOMEM(realloc(OPAQUE(p), OPAQUE(n)), what);
            CHECK(first_not(p, (size_t)40 << 20, 0x5a) == (size_t)-1, "%s failed but damaged the block", what);
            free(OPAQUE(p));
        }
        /* a quarter of RAM still maps (untouched) */
        void *q = malloc(OPAQUE((size_t)(si.totalram * si.mem_unit / 4)));
        CHECK(q != NULL, "malloc(RAM / 4) failed");
        free(q);
    } else {
        printf("SKIP over-RAM sizes: vm.overcommit_memory is %d, not 0\n", mode);
    }

    /* After all those failures the allocator still works normally. */
    for (size_t n = 1; n < (64u << 20); n = n * 3 + 1) {
        unsigned char *p = malloc(OPAQUE(n));
        CHECK(p != NULL, "malloc(%zu) failed after the ENOMEM cases", n);
        p[0] = 1;
        p[n - 1] = 2;
        free(OPAQUE(p));
    }
    return 0;
}
