/* test_huge_regions: a shard's new huge region is sized from what the whole
 * process has reserved, not from what that shard has (issue 15).  Shards
 * take each other's free ranges before they reserve, so a shard that runs
 * out has run out for the process: its region doubles the process's
 * reservation.  Sized from its own (none yet), a second CPU's shard grew
 * by 256 MiB, 256, 512, ...: one mapping after another while the heap was
 * growing, and late ones (32 threads of malloc1 on 2 CPUs: a reservation
 * in the measured window in about 1 run of 18).
 *
 * On CPU 0 the test holds 16 blocks of 128 MiB at once (2 GiB reserved),
 * then on CPU 1 holds 32 at once: the 16 beyond what CPU 0's shard
 * reserved come from one region of CPU 1's shard (before: four).  Skipped
 * where the process may not run on CPUs 0 and 1. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's counters need folio");
}
#else

#define MIB ((size_t)1 << 20)
#define BLOCK (128 * MIB)

static bool on_cpu(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 && sched_getcpu() == cpu;
}

/* hold n blocks at once (touched at both ends), then free them */
static void hold(int n)
{
    unsigned char *b[64];
    for (int i = 0; i < n; i++) {
        b[i] = malloc(BLOCK);
        CHECK(b[i] != NULL, "malloc(%zu) #%d", BLOCK, i);
        b[i][0] = b[i][BLOCK - 1] = (unsigned char)i;
    }
    for (int i = 0; i < n; i++) {
        CHECK(b[i][0] == (unsigned char)i && b[i][BLOCK - 1] == (unsigned char)i, "block %d damaged", i);
        free(b[i]);
    }
}

int main(void)
{
    if (!on_cpu(0) || !on_cpu(1))
        SKIP("this process may not run on CPUs 0 and 1");
    on_cpu(0);
    hold(16);
    uint64_t m0 = report_u64("os_mmap_calls"), r0 = report_u64("huge_reserved_bytes");
    on_cpu(1);
    hold(32);
    uint64_t m1 = report_u64("os_mmap_calls"), r1 = report_u64("huge_reserved_bytes");
    NOTE("CPU 0, 16 blocks: %llu MiB reserved; CPU 1, 32 blocks: %llu MiB reserved in %llu mmap calls",
         (unsigned long long)(r0 >> 20), (unsigned long long)(r1 >> 20), (unsigned long long)(m1 - m0));
    CHECK(r1 >= 32 * BLOCK, "32 blocks of 128 MiB in %llu MiB reserved", (unsigned long long)(r1 >> 20));
    /* one region, and at most one mapping for metadata (pagemap leaves,
     * descriptors) */
    CHECK(m1 - m0 <= 2, "%llu mmap calls on CPU 1 for 2 GiB more (one region sized from the process's 2 GiB)",
          (unsigned long long)(m1 - m0));
    return 0;
}
#endif
