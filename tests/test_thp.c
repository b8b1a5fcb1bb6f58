// folio-test: no-sanitize
/* test_thp: end to end, a 256 MiB heap of small objects written once
 * shows AnonHugePages in /proc/self/smaps_rollup under FOLIO_THP=auto
 * where the system allows transparent huge pages for madvised memory, and
 * is skipped with the reason where it does not; re-executed with
 * FOLIO_THP=never, the same heap gets no MADV_HUGEPAGE call, and a calloc
 * of fresh pages there is populated, its request's pages only.  A 64 MiB
 * block's region is advised under auto, not under never.  (No
 * sanitizers: their shadow memory would be in the counts.) */
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
    SKIP("folio's huge-page policy needs folio");
}
#else

#define MIB ((size_t)1 << 20)
#define OBJ 1000
#define HEAP (256 * MIB)

/* The bracketed word of a sysfs choice file, or "" */
static void sysfs_choice(const char *path, char *out, size_t n)
{
    char buf[128] = "";
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    char *a = strchr(buf, '['), *b = a ? strchr(a, ']') : NULL;
    if (a && b && (size_t)(b - a) < n) {
        memcpy(out, a + 1, (size_t)(b - a - 1));
        out[b - a - 1] = 0;
    }
}

static uint64_t smaps_kb(const char *key)
{
    char line[256];
    uint64_t v = 0;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)))
            v = strtoull(line + strlen(key), NULL, 10);
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    (void)argc;
    const char *mode = getenv("FOLIO_THP");
    bool never = mode && !strcmp(mode, "never");
    char enabled[32], pmd[32];
    sysfs_choice("/sys/kernel/mm/transparent_hugepage/enabled", enabled, sizeof enabled);
    sysfs_choice("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled", pmd, sizeof pmd);
    if (!strcmp(pmd, "inherit") || !pmd[0])
        strcpy(pmd, enabled);
    size_t n = HEAP / OBJ;
    char **objs = malloc(n * sizeof *objs);
    CHECK(objs != NULL, "malloc of the table");
    uint64_t calls0 = report_u64("os_madvise_hugepage_calls");
    for (size_t i = 0; i < n; i++) {
        objs[i] = malloc(OPAQUE(OBJ));
        CHECK(objs[i] != NULL, "malloc %zu", i);
        memset(objs[i], (int)i, OBJ);
    }
    uint64_t huge_kb = smaps_kb("AnonHugePages:"), rss_kb = smaps_kb("Rss:");
    uint64_t calls = report_u64("os_madvise_hugepage_calls") - calls0;
    uint64_t advised = report_u64("thp_chunks_advised");
    NOTE("FOLIO_THP=%s, system enabled=%s, 2 MiB pages %s: AnonHugePages %llu KiB of Rss %llu KiB, "
         "%llu chunks advised, %llu MADV_HUGEPAGE calls",
         never ? "never" : "auto", enabled, pmd, (unsigned long long)huge_kb, (unsigned long long)rss_kb,
         (unsigned long long)advised, (unsigned long long)calls);
    if (never) {
        CHECK(calls == 0 && advised == 0, "FOLIO_THP=never: %llu MADV_HUGEPAGE calls, %llu chunks advised",
              (unsigned long long)calls, (unsigned long long)advised);
    } else if (!strcmp(pmd, "madvise") || !strcmp(pmd, "always")) {
        CHECK(advised > 0, "a 256 MiB heap had no chunk advised");
        CHECK(huge_kb > 0, "a 256 MiB heap under FOLIO_THP=auto has no AnonHugePages (%s)", pmd);
    }
    /* under never, with a heap past 32 MiB, a calloc of fresh pages is
     * faulted in in one call (FOLIO_POPULATE): the request's pages, not the
     * pages of the class it is rounded to (65 pages take 80) */
    if (never) {
        enum { K = 8 };
        size_t req = 64 * 4096 + 1, req_pages = 65 * 4096;
        void *c[K];
        uint64_t any = 0;
        for (int k = 0; k < K; k++) {
            uint64_t p0 = report_u64("populated_bytes");
            c[k] = calloc(1, OPAQUE(req));
            CHECK(c[k] != NULL, "calloc %zu", req);
            uint64_t got = report_u64("populated_bytes") - p0;
            CHECK(got == 0 || got == req_pages, "calloc(%zu) populated %llu bytes (its pages: %zu)", req,
                  (unsigned long long)got, req_pages);
            any += got;
        }
        NOTE("populated by %d callocs of %zu B: %llu bytes", K, req, (unsigned long long)any);
        CHECK(any > 0, "no calloc of fresh pages was populated in a heap of 256 MiB");
        for (int k = 0; k < K; k++)
            free(c[k]);
    }
    /* a huge block (above 2 MiB) comes from a region advised whole, except
     * under FOLIO_THP=never */
    char *big = malloc(OPAQUE(64 * MIB));
    CHECK(big != NULL, "malloc of 64 MiB");
    memset(big, 1, 64 * MIB);
    uint64_t regions = report_u64("thp_huge_regions_advised");
    NOTE("regions of huge blocks advised: %llu", (unsigned long long)regions);
    if (never)
        CHECK(regions == 0, "FOLIO_THP=never: %llu regions advised", (unsigned long long)regions);
    else if (!strcmp(pmd, "madvise"))
        CHECK(regions > 0, "a 64 MiB block under FOLIO_THP=auto: no region advised");
    free(big);
    for (size_t i = 0; i < n; i++)
        free(objs[i]);
    free(objs);
    if (!never && strcmp(pmd, "madvise") && strcmp(pmd, "always"))
        SKIP("the system allows no 2 MiB transparent huge pages (enabled=%s, hugepages-2048kB %s)",
             enabled, pmd);
    if (!never)
        reexec_with_env(argv, "FOLIO_THP", "never");
    return 0;
}
#endif
