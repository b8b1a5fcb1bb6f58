/* test_exact_lists: the pagesets' exact lists serve a mix of large block
 * sizes that repeat, within their bound.
 *
 * One thread keeps 16 blocks of 9-15 pages (odd page counts: the order
 * lists do not take them) and replaces a random one 600 times with a block
 * of a random size among the seven, writing its first and last byte.  The
 * purge delay is ten minutes and the thread's big-block cache is off, so
 * every freed block goes to the pagesets.  A size comes back within a few
 * replacements, so most requests must be served from the lists (hits), and
 * what the pagesets and the depot hold at the end, and the process's
 * resident growth over the loop, must stay within a few spans per size:
 * the lists grow their bound only while they hit, and a decay or an
 * overflow gives the rest back.  The report's per-pageset exact_pages and
 * exact_high must agree with the total held.
 *
 * Then blocks of 65-127 pages of random sizes (four sizes once rounded,
 * 80-128 pages, which come back often enough for the lists to serve them;
 * above 256 KiB they keep a span only while they hit at least every other
 * time): the pagesets' holdings must grow by four such spans at most.  And
 * one 512 KiB buffer taken and freed in turns must be served from the
 * lists, so that neither its malloc nor its free takes the zone lock (a
 * build that gave every span above 256 KiB to the zone served none). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's pagesets need folio");
}
#else

#define PAGE 4096u
#define BLOCKS 600
#define LIVE 16

static long resident_pages(void)
{
    long size, res;
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL, "/proc/self/statm");
    CHECK(fscanf(f, "%ld %ld", &size, &res) == 2, "statm");
    fclose(f);
    return res;
}

int main(int argc, char **argv)
{
    (void)argc;
    reexec_with_env(argv, "FOLIO_PURGE_DELAY_MS", "600000");
    reexec_with_env(argv, "FOLIO_HEAP_BIG_CACHE_KIB", "0");
    reexec_with_env(argv, "FOLIO_THP", "never");
    /* a heap past the small-heap rules, held to the end */
    static char *base[8];
    for (int i = 0; i < 8; i++) {
        base[i] = malloc(2u << 20);
        CHECK(base[i] != NULL, "malloc(2 MiB)");
        memset(base[i], 1, 2u << 20);
    }
    uint64_t misses0 = report_u64("pcp_exact_misses");
    long res0 = resident_pages();
    unsigned long check = 0;
    static unsigned char *live[LIVE];
    uint64_t rng = 88172645463325252ull;
    for (int i = 0; i < BLOCKS; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned k = (unsigned)(rng % LIVE);
        size_t n = (9 + (size_t)((rng >> 20) % 7)) * PAGE - 64; /* 9-15 pages with the header */
        if (live[k])
            check += live[k][0];
        free(live[k]);
        live[k] = malloc(n);
        CHECK(live[k] != NULL, "malloc(%zu)", n);
        live[k][0] = (unsigned char)i;
        live[k][n - 1] = 1;
    }
    long grown = resident_pages() - res0;
    uint64_t misses = report_u64("pcp_exact_misses") - misses0;
    uint64_t held = report_u64("pcp_held_pages"), depot = report_u64("zone_depot_pages");
    static char rep[1 << 16];
    folio_report_json(rep, sizeof rep);
    long exact_pages = 0;
    for (char *q = strstr(rep, "\"exact_pages\": "); q; q = strstr(q + 1, "\"exact_pages\": ")) {
        long v = strtol(q + strlen("\"exact_pages\": "), NULL, 10);
        char *h = strstr(q, "\"exact_high\": ");
        CHECK(h != NULL, "a pageset row without exact_high");
        long bound = strtol(h + strlen("\"exact_high\": "), NULL, 10);
        CHECK(v >= 0 && v <= bound, "a pageset's exact lists hold %ld pages, their bound is %ld", v, bound);
        exact_pages += v;
    }
    printf("%d blocks of 9-15 pages, %d live: %llu exact-list misses, resident +%ld pages, pagesets hold %llu "
           "pages (%ld on the exact lists), the depot %llu (check %lu)\n",
           BLOCKS, LIVE, (unsigned long long)misses, grown, (unsigned long long)held, exact_pages,
           (unsigned long long)depot, check);
    CHECK((uint64_t)exact_pages <= held, "exact lists %ld pages, pagesets %llu", exact_pages,
          (unsigned long long)held);
    CHECK(misses <= BLOCKS / 4, "%llu misses of %d: the lists did not serve sizes that repeat",
          (unsigned long long)misses, BLOCKS);
    /* the largest span is 15 pages: a few of each of the seven sizes */
    CHECK(held + depot <= 7 * 4 * 16, "the pagesets and the depot hold %llu pages",
          (unsigned long long)(held + depot));
    CHECK(grown <= 7 * 4 * 16, "resident memory grew by %ld pages for %d live blocks of at most 15", grown, LIVE);
    for (int k = 0; k < LIVE; k++) {
        free(live[k]);
        live[k] = NULL;
    }

    uint64_t held1 = report_u64("pcp_held_pages"), misses1 = report_u64("pcp_exact_misses");
    for (int i = 0; i < BLOCKS; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned k = (unsigned)(rng % 4);
        size_t n = (65 + (size_t)((rng >> 20) % 63)) * PAGE - 64;
        free(live[k]);
        live[k] = malloc(n);
        CHECK(live[k] != NULL, "malloc(%zu)", n);
        live[k][0] = (unsigned char)i;
        live[k][n - 1] = 1;
    }
    uint64_t held2 = report_u64("pcp_held_pages"), misses2 = report_u64("pcp_exact_misses");
    printf("%d blocks of 65-127 pages, 4 live: pagesets hold %llu pages (%llu before), exact-list misses +%llu\n",
           BLOCKS, (unsigned long long)held2, (unsigned long long)held1, (unsigned long long)(misses2 - misses1));
    CHECK(held2 <= held1 + 4 * 128, "the pagesets hold %llu pages after blocks of sizes that do not come back "
          "(%llu before)", (unsigned long long)held2, (unsigned long long)held1);
    for (int k = 0; k < 4; k++)
        free(live[k]);

    /* one 512 KiB buffer taken and freed in turns (ebizzy's pattern): the
     * lists keep it, so neither its malloc nor its free takes the zone lock */
    uint64_t hits1 = report_u64("pcp_exact_hits");
    for (int i = 0; i < BLOCKS; i++) {
        unsigned char *p = malloc(512 * 1024);
        CHECK(p != NULL, "malloc(512 KiB)");
        p[0] = (unsigned char)i;
        p[512 * 1024 - 1] = 1;
        check += p[0];
        free(p);
    }
    uint64_t hits = report_u64("pcp_exact_hits") - hits1;
    printf("%d mallocs of 512 KiB, each freed before the next: %llu exact-list hits\n", BLOCKS,
           (unsigned long long)hits);
    CHECK(hits >= BLOCKS - 10, "only %llu of %d served from the exact lists", (unsigned long long)hits, BLOCKS);
    for (int i = 0; i < 8; i++)
        free(base[i]);
    printf("test_exact_lists: ok\n");
    return 0;
}
#endif
