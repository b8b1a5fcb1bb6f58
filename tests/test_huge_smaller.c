/* test_huge_smaller: smaller huge blocks are cut from a larger cached one,
 * resident, before a fresh range is touched.
 *
 * sort(1) frees its 64 MiB buffer and then allocates three merge buffers of
 * about 21 MiB: had they come from fresh ranges while the freed buffer
 * waited out the purge delay in the cache, the process's peak RSS would be
 * both (1.8x glibc's, which unmaps the buffer).  Here a touched 64 MiB block
 * is freed, and three 20 MiB blocks (the last one by calloc) must lie inside
 * it, fault no page when written (but under the sanitizers, whose shadow
 * memory faults too), reserve no more address space, and calloc's must read
 * as zero although the cached pages were written. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's huge cache needs folio");
}
#else

#define MIB ((size_t)1 << 20)

int main(int argc, char **argv)
{
    (void)argc;
    /* no purge by age while the test runs: the cached block must be there */
    reexec_with_env(argv, "FOLIO_PURGE_DELAY_MS", "600000");
    char *big = malloc(OPAQUE(64 * MIB));
    CHECK(big, "malloc(64 MiB)");
    touch_pages(big, 64 * MIB, 1);
    uint64_t reserved = report_u64("huge_reserved_bytes");
    uintptr_t lo = (uintptr_t)big, hi = lo + 64 * MIB;
    free(big);

    char *part[3];
    long faults[3];
    for (int k = 0; k < 3; k++) {
        part[k] = k < 2 ? malloc(OPAQUE(20 * MIB)) : calloc(1, OPAQUE(20 * MIB));
        CHECK(part[k], "block %d of 20 MiB", k);
        CHECK((uintptr_t)part[k] >= lo && (uintptr_t)part[k] + 20 * MIB <= hi,
              "block %d of 20 MiB at %p, outside the freed 64 MiB block at %#lx (a fresh range while it was cached)",
              k, (void *)part[k], (unsigned long)lo);
        if (k == 2)
            for (size_t i = 0; i < 20 * MIB; i += 512)
                CHECK(part[k][i] == 0, "calloc's block cut from a cached one is not zero at %zu", i);
        long f0 = thread_minflt();
        touch_pages(part[k], 20 * MIB, (char)(2 + k));
        faults[k] = thread_minflt() - f0;
#ifndef FOLIO_PREFIX
        CHECK(faults[k] == 0, "writing block %d, cut from a resident block, faulted %ld times", k, faults[k]);
#endif
    }
    CHECK(report_u64("huge_reserved_bytes") == reserved, "address space reserved for blocks that fit in a cached one");
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < k; j++)
            CHECK(part[k] + 20 * MIB <= part[j] || part[j] + 20 * MIB <= part[k], "blocks %d and %d overlap", j, k);
    for (int k = 0; k < 3; k++)
        free(part[k]);
    NOTE("three 20 MiB blocks in a freed 64 MiB one; faults %ld, %ld, %ld", faults[0], faults[1], faults[2]);
    return 0;
}
#endif
