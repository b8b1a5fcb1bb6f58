/* test_dirty_bound: freed pieces that the next requests cannot use do not
 * stay resident while the heap grows past them (FOLIO_PURGE_DIRTY_RATIO).
 *
 * 128 blocks of 512 KiB are written, and every other one is freed: 32 MiB
 * of dirty free pieces whose buddies are live, so they cannot merge into
 * the 1 MiB blocks asked for next.  The purge delay is ten minutes, so no
 * piece expires.  Sixteen 1 MiB blocks then grow the heap.  With
 * FOLIO_PURGE_DIRTY_RATIO=8, the zone's dirty free pages must be back within the
 * bound (1/8 of the pages in use, at least 256) and the purge counted; the
 * same program re-executed with FOLIO_PURGE_DIRTY_RATIO=0 (the default)
 * must keep them (the scenario does leave pieces that only the bound
 * purges). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's dirty bound needs folio");
}
#else

#define KIB ((size_t)1 << 10)
#define PIECES 128
#define GROW 16

static void scenario(int ratio)
{
    static char *piece[PIECES], *grow[GROW];
    for (int i = 0; i < PIECES; i++) {
        piece[i] = malloc(512 * KIB);
        CHECK(piece[i] != NULL, "malloc(512 KiB)");
        memset(piece[i], i, 512 * KIB);
    }
    for (int i = 1; i < PIECES; i += 2)
        free(piece[i]);
    for (int i = 0; i < GROW; i++) {
        grow[i] = malloc(1024 * KIB);
        CHECK(grow[i] != NULL, "malloc(1 MiB)");
        memset(grow[i], i, 1024 * KIB);
    }
    uint64_t chunks = report_u64("zone_chunks"), free_pages = report_u64("zone_free_pages");
    uint64_t dirty = report_u64("zone_dirty_pages"), purged = report_u64("zone_bound_purged_bytes");
    uint64_t in_use = chunks * 512 > free_pages ? chunks * 512 - free_pages : 0;
    uint64_t bound = in_use / 8 > 256 ? in_use / 8 : 256;
    printf("ratio %d: %llu chunks, %llu pages in use, %llu dirty free (bound %llu), %llu bytes purged by the bound\n",
           ratio, (unsigned long long)chunks, (unsigned long long)in_use, (unsigned long long)dirty,
           (unsigned long long)bound, (unsigned long long)purged);
    if (ratio) {
        CHECK(purged > 0, "the bound purged nothing");
        CHECK(dirty <= bound, "%llu dirty free pages, bound %llu", (unsigned long long)dirty,
              (unsigned long long)bound);
    } else {
        CHECK(purged == 0, "%llu bytes purged by a bound that is off", (unsigned long long)purged);
        CHECK(dirty > bound + 1024, "only %llu dirty free pages without the bound (bound %llu): the "
              "scenario tests nothing", (unsigned long long)dirty, (unsigned long long)bound);
    }
    for (int i = 0; i < PIECES; i += 2)
        free(piece[i]);
    for (int i = 0; i < GROW; i++)
        free(grow[i]);
}

int main(int argc, char **argv)
{
    (void)argc;
    reexec_with_env(argv, "FOLIO_PURGE_DELAY_MS", "600000");
    const char *r = getenv("FOLIO_PURGE_DIRTY_RATIO");
    if (r) { /* a re-executed run: 0 (the default) or 8 */
        scenario(atoi(r));
        if (atoi(r))
            printf("test_dirty_bound: ok\n");
        return 0;
    }
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        setenv("FOLIO_PURGE_DIRTY_RATIO", "0", 1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the run with FOLIO_PURGE_DIRTY_RATIO=0 failed (status %d)", st);
    reexec_with_env(argv, "FOLIO_PURGE_DIRTY_RATIO", "8"); /* options are read once: a new image */
    FAIL("not reached");
}
#endif
