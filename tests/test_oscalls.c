/* test_oscalls: the report counts the mmap family's calls by kind
 * (os_mmap_calls, os_munmap_calls, os_mremap_calls, os_mprotect_calls,
 * os_madvise_calls): a new huge block is a mapping, a huge block freed past
 * the cache is a madvise and no unmapping (its address space stays), a
 * huge realloc grown past what follows it is an mremap, a purge is a
 * madvise; folio makes no mprotect.  Run with a huge cache of 0 and no
 * purge delay, so that every free reaches the kernel. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's counters need folio");
}
#else

#define MIB ((size_t)1 << 20)

int main(int argc, char **argv)
{
    (void)argc;
    setenv("FOLIO_PURGE_DELAY_MS", "0", 1); /* read at start: the re-execution below takes it */
    reexec_with_env(argv, "FOLIO_HUGE_CACHE_MIB", "0");
    uint64_t mmap0 = report_u64("os_mmap_calls"), munmap0 = report_u64("os_munmap_calls");
    char *p = malloc(OPAQUE(8 * MIB));
    CHECK(p != NULL, "malloc(8 MiB)");
    memset(p, 1, 8 * MIB);
    uint64_t mmap1 = report_u64("os_mmap_calls");
    CHECK(mmap1 > mmap0, "a new 8 MiB block made no mmap call (%llu -> %llu)",
          (unsigned long long)mmap0, (unsigned long long)mmap1);
    /* a block right after p holds p in place: growing it past its region moves it */
    char *after = malloc(OPAQUE(8 * MIB));
    CHECK(after != NULL, "malloc(8 MiB)");
    uint64_t mremap0 = report_u64("os_mremap_calls");
    p = realloc(p, OPAQUE(1024 * MIB));
    CHECK(p != NULL && p[8 * MIB - 1] == 1, "realloc to 1 GiB");
    CHECK(report_u64("os_mremap_calls") > mremap0, "moving a huge block made no mremap call");
    CHECK(report_u64("huge_mremaps") > 0, "huge_mremaps did not count the move");
    free(after);
    uint64_t madvise_f = report_u64("os_madvise_calls");
    munmap0 = report_u64("os_munmap_calls");
    free(p);
    CHECK(report_u64("os_munmap_calls") == munmap0, "freeing a huge block made a munmap call");
    CHECK(report_u64("os_madvise_calls") > madvise_f, "freeing a huge block past a cache of 0 made no madvise call");
    /* a large block freed with no purge delay: purged at the next tick */
    uint64_t madvise0 = report_u64("os_madvise_calls");
    for (int i = 0; i < 64; i++) {
        char *q = malloc(OPAQUE(1 * MIB));
        CHECK(q != NULL, "malloc(1 MiB)");
        memset(q, 2, MIB);
        free(q);
        usleep(2000);
    }
    malloc_trim(0);
    CHECK(report_u64("os_madvise_calls") > madvise0, "no madvise after freeing and trimming 1 MiB blocks");
    CHECK(report_u64("os_mprotect_calls") == 0, "folio made an mprotect call");
    NOTE("mmap %llu munmap %llu mremap %llu madvise %llu",
         (unsigned long long)report_u64("os_mmap_calls"), (unsigned long long)report_u64("os_munmap_calls"),
         (unsigned long long)report_u64("os_mremap_calls"), (unsigned long long)report_u64("os_madvise_calls"));
    return 0;
}
#endif
