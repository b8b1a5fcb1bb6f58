/* test_huge_reuse: a freed huge block is reused, resident, by the next
 * block of its size on another CPU, and the huge cache bound is the
 * process's, not a shard's share of it (issue 15: every fresh range faults
 * on its first touch, a purged one again).
 *
 * Huge ranges are split among shards by CPU, and a block goes back to the
 * shard that owns its range wherever it is freed.  The main thread, pinned
 * first to CPU a then to CPU b (two CPUs of different shards), makes shard a
 * own a full region (240 + 16 MiB: the first region is 256 MiB) and shard b
 * one with free space (a 16 MiB block B), frees a's 16 MiB block A2 and, on
 * CPU b, allocates 16 MiB again: it must get A2 back (resident: touching it
 * faults no page), not a fresh range of shard b's.  Then a 600 MiB block of
 * shard a is freed: with two shards in use its shard's even share of the
 * default 1 GiB bound is 512 MiB, and the block must stay cached (the
 * process caches 600 MiB in all); then one of shard b: 1200 MiB would pass
 * the bound, so shard b purges, and the process never caches more than it,
 * nor after realloc shrinks 600 MiB blocks to 4 MiB (their tails cached). */
#define _GNU_SOURCE
#include <sched.h>
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
    SKIP("folio's huge shards need folio");
}
#else

#define MIB ((size_t)1 << 20)
#define SHARDS 64 /* huge.c's HUGE_SHARDS: a CPU's shard is its number modulo this */

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    CHECK(sched_setaffinity(0, sizeof set, &set) == 0, "pinning to CPU %d", cpu);
    CHECK(sched_getcpu() == cpu, "running on CPU %d, not %d", sched_getcpu(), cpu);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* the bound under test, and no purge by age while the test runs */
    reexec_with_env(argv, "FOLIO_PURGE_DELAY_MS", "600000");
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
    int a = -1, b = -1;
    for (int c = 0; c < CPU_SETSIZE && b < 0; c++) {
        if (!CPU_ISSET(c, &all))
            continue;
        if (a < 0)
            a = c;
        else if (c % SHARDS != a % SHARDS)
            b = c;
    }
    if (b < 0)
        SKIP("needs two CPUs of different huge shards");
    uint64_t res0 = report_u64("huge_reserved_bytes");
    CHECK(res0 == 0, "huge blocks before the test: %llu bytes reserved", (unsigned long long)res0);

    /* shard a: one full region */
    pin(a);
    char *a1 = malloc(OPAQUE(240 * MIB)), *a2 = malloc(OPAQUE(16 * MIB));
    CHECK(a1 && a2, "malloc on CPU %d", a);
    touch_pages(a2, 16 * MIB, 1);
    uint64_t res1 = report_u64("huge_reserved_bytes");
    /* shard b: its own region, 240 MiB of it free */
    pin(b);
    char *bb = malloc(OPAQUE(16 * MIB));
    CHECK(bb, "malloc on CPU %d", b);
    uint64_t res2 = report_u64("huge_reserved_bytes");
    CHECK(res1 == 256 * MIB && res2 > res1,
          "setup: shard %d should own a full 256 MiB region and shard %d one of its own (reserved %llu then %llu MiB)",
          a % SHARDS, b % SHARDS, (unsigned long long)(res1 / MIB), (unsigned long long)(res2 / MIB));

    /* A2 goes back to shard a; the next 16 MiB block on CPU b is A2 */
    uintptr_t a2_at = (uintptr_t)a2;
    free(a2);
    long f0 = thread_minflt();
    char *c = malloc(OPAQUE(16 * MIB));
    CHECK(c, "malloc on CPU %d", b);
    touch_pages(c, 16 * MIB, 2);
    long faults = thread_minflt() - f0;
    CHECK((uintptr_t)c == a2_at, "a fresh range (%p) where the block freed to shard %d (%#lx) was resident",
          (void *)c, a % SHARDS, (unsigned long)a2_at);
#ifndef FOLIO_PREFIX /* the sanitizers' shadow memory faults too */
    CHECK(faults == 0, "reusing a resident block faulted %ld times", faults);
#endif

    /* shard a caches a block larger than its share of the bound; then
     * shard b one that takes the process past the bound */
    pin(a);
    char *x = malloc(OPAQUE(600 * MIB));
    pin(b);
    char *y = malloc(OPAQUE(600 * MIB));
    CHECK(x && y, "malloc(600 MiB)");
    uint64_t purged0 = report_u64("purged_bytes"), cached0 = report_u64("huge_cached_bytes");
    free(x);
    uint64_t purged1 = report_u64("purged_bytes"), cached1 = report_u64("huge_cached_bytes");
    CHECK(cached1 >= cached0 + 600 * MIB,
          "a 600 MiB block purged at once with %llu MiB cached in all (bound 1024 MiB): %llu MiB purged",
          (unsigned long long)(cached0 / MIB), (unsigned long long)((purged1 - purged0) / MIB));
    free(y);
    uint64_t cached2 = report_u64("huge_cached_bytes");
    CHECK(cached2 <= 1024 * MIB && cached2 >= 600 * MIB, "%llu MiB cached after two 600 MiB blocks were freed (bound 1024 MiB)",
          (unsigned long long)(cached2 / MIB));
    free(a1);
    free(bb);
    free(c);
    uint64_t cached3 = report_u64("huge_cached_bytes");
    CHECK(cached3 <= 1024 * MIB, "%llu MiB cached, past the 1024 MiB bound", (unsigned long long)(cached3 / MIB));
    /* a realloc that shrinks a block caches its tail: the bound holds there too */
    for (int k = 0; k < 4; k++) {
        char *r = malloc(OPAQUE(600 * MIB));
        CHECK(r, "malloc(600 MiB)");
        char *q = realloc(r, OPAQUE(4 * MIB));
        CHECK(q == r, "a shrinking realloc moved the block");
        uint64_t cached = report_u64("huge_cached_bytes");
        CHECK(cached <= 1024 * MIB, "%llu MiB cached after %d shrinking reallocs, past the 1024 MiB bound",
              (unsigned long long)(cached / MIB), k + 1);
        free(q);
    }
    NOTE("CPUs %d and %d: block reused across shards with %ld faults; %llu, %llu, %llu MiB cached", a, b, faults,
         (unsigned long long)(cached1 / MIB), (unsigned long long)(cached2 / MIB), (unsigned long long)(cached3 / MIB));
    return 0;
}
#endif
