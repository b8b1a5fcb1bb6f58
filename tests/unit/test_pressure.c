/* Unit test: memory pressure from FOLIO_MEMORY_LIMIT, measured (not forced):
 * past 7/8 of the limit, frees shrink every pageset's high to high_min and
 * drain toward it.  Re-executes itself with the limit set, since options
 * are read before main. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obj.h"
#include "unit.h"


static struct span *held[4096];

int main(int argc, char **argv) {
    (void)argc;
    if (!getenv("FOLIO_MEMORY_LIMIT")) {
        setenv("FOLIO_MEMORY_LIMIT", "24M", 1);
        setenv("FOLIO_PURGE_THREAD", "0", 1);
        execv("/proc/self/exe", argv);
        perror("execv");
        return 1;
    }
    EXPECT(opt.memory_limit == 24 << 20, "limit not parsed: %ld", opt.memory_limit);
    pageset_hold_decay();

    /* give the zone a size without making it resident: untouched chunks */
    static struct span *chunks[32];
    for (int i = 0; i < 32; i++) EXPECT(chunks[i] = zone_alloc_pages(CHUNK_PAGES, 1), "chunk");
    for (int i = 0; i < 32; i++) zone_free_span(chunks[i]);

    /* well under the limit: a burst grows high */
    int n = 0;
    for (; n < 600; n++) EXPECT(held[n] = pageset_alloc_on(0, 0), "alloc");
    while (n) pageset_free_on(0, held[--n], 0);
    struct pageset_stats a;
    pageset_stats(0, &a);
    EXPECT(a.high > a.high_min, "no growth without pressure: high %ld", a.high);

    /* go past 7/8 of the limit: dirty 30 MiB (resident in folio's estimate) */
    static char *big[15];
    for (int i = 0; i < 15; i++) {
        big[i] = malloc(2 << 20);
        EXPECT(big[i], "malloc");
        memset(big[i], 1, 2 << 20);
    }
    EXPECT(zone_resident_estimate() > (size_t)(21 << 20), "resident estimate %zu", zone_resident_estimate());
    usleep(150 * 1000); /* the pressure check runs at most every 100 ms, on refills */
    for (; n < 2000; n++) EXPECT(held[n] = pageset_alloc_on(0, 0), "alloc"); /* past what is cached */
    while (n) pageset_free_on(0, held[--n], 0);
    struct pageset_stats b;
    pageset_stats(0, &b);
    EXPECT(b.high == b.high_min, "under pressure high %ld, high_min %ld", b.high, b.high_min);
    EXPECT(b.count <= b.high_min + b.batch, "under pressure count %ld", b.count);
    for (int i = 0; i < 15; i++) free(big[i]);
    puts("pressure: ok");
    return 0;
}
