/* test_pressure_lazy: a small heap reads no memory-cgroup file.
 *
 * Memory pressure (the kernel's below-high and reclaim-active states, which
 * cap the pagesets) is measured against the memory cgroup's limit only once
 * the zone holds 8 MiB: below that the pagesets hold too little to matter,
 * and a short program (a shell, a compiler's driver) would pay a /proc and
 * a /sys file read at start for nothing.  So after a megabyte of small
 * objects the report's pressure_limit_reads is 0; after a heap of 24 MiB it
 * is at least 1 where this process has a memory cgroup with a limit file
 * (v1 memory.limit_in_bytes or v2 memory.max), and 0 where it has none. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
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

/* Whether the memory cgroup's limit file can be read, found as folio
 * finds it (a v1 memory line first, else the v2 line). */
static int cgroup_limit_readable(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[512], path[600], v2[512] = "";
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        if (strcmp(c1 + 1, "") == 0 && line[0] == '0') {
            snprintf(v2, sizeof v2, "%s", strcmp(c2 + 1, "/") ? c2 + 1 : "");
            continue;
        }
        for (char *m = strstr(c1 + 1, "memory"); m; m = strstr(m + 1, "memory"))
            if ((m == c1 + 1 || m[-1] == ',') && (m[6] == 0 || m[6] == ',')) {
                snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", c2 + 1);
                found = access(path, R_OK) == 0;
            }
    }
    fclose(f);
    if (!found && v2[0] != 0) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", v2);
        found = access(path, R_OK) == 0;
    }
    if (!found && strcmp(v2, "") == 0)
        found = access("/sys/fs/cgroup/memory.max", R_OK) == 0;
    return found;
}

int main(int argc, char **argv)
{
    (void)argc;
    reexec_with_env(argv, "FOLIO_MEMORY_LIMIT", "0");

    /* 1. a small heap: 1 MiB of small objects, half freed */
    enum { SMALL = 8192 };
    static void *p[SMALL];
    for (int i = 0; i < SMALL; i++) {
        p[i] = malloc(128);
        CHECK(p[i] != NULL, "malloc(128)");
        memset(p[i], i, 128);
    }
    for (int i = 0; i < SMALL; i += 2)
        free(p[i]);
    uint64_t reads = report_u64("pressure_limit_reads");
    CHECK(reads == 0, "a heap of 1 MiB read the cgroup's limit %llu times", (unsigned long long)reads);

    /* 2. a heap of 24 MiB (blocks of 64 KiB, from the zone), then freed:
     * the refills and frees past 8 MiB measure */
    enum { BIG = 384 };
    static void *b[BIG];
    for (int i = 0; i < BIG; i++) {
        b[i] = malloc(64 << 10);
        CHECK(b[i] != NULL, "malloc(64 KiB)");
        memset(b[i], i, 64 << 10);
    }
    for (int i = 0; i < BIG; i++)
        free(b[i]);
    for (int i = 1; i < SMALL; i += 2)
        free(p[i]);
    reads = report_u64("pressure_limit_reads");
    int readable = cgroup_limit_readable();
    if (readable)
        CHECK(reads >= 1, "a heap of 24 MiB never read the cgroup's limit");
    else
        CHECK(reads == 0, "no cgroup limit file, yet %llu reads", (unsigned long long)reads);
    printf("limit file %s; limit reads after 24 MiB: %llu\n", readable ? "found" : "absent",
           (unsigned long long)reads);
    return 0;
}
#endif
