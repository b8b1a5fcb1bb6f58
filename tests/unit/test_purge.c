/* Unit test: a program that frees a large working set sees its RSS fall
 * after the purge delay, with no further calls into the allocator; the
 * report counts the purge. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api_layer.h"
#include "unit.h"


#define NSMALL 200000
#define NLARGE 1200
static void *small[NSMALL], *large[NLARGE], *huge[8];

static size_t os_rss_bytes(void) {
    uint64_t minflt, majflt, peak, rss;
    os_rusage(&minflt, &majflt, &peak, &rss);
    return (size_t)rss;
}

int main(void) {
    folio_init();
    size_t rss0 = os_rss_bytes();
    for (int i = 0; i < NSMALL; i++) memset(small[i] = malloc(512), 1, 512);      /* ~100 MiB */
    for (int i = 0; i < NLARGE; i++) memset(large[i] = malloc(100000), 2, 100000); /* ~115 MiB */
    for (int i = 0; i < 8; i++) memset(huge[i] = malloc(6 << 20), 3, 6 << 20);       /* 48 MiB */
    size_t rss_full = os_rss_bytes();
    EXPECT(rss_full > rss0 + (200u << 20), "working set not resident: %zu -> %zu", rss0, rss_full);
    for (int i = 0; i < NSMALL; i++) free(small[i]);
    for (int i = 0; i < NLARGE; i++) free(large[i]);
    for (int i = 0; i < 8; i++) free(huge[i]);
    /* no allocator calls from here: the purge must happen on its own */
    size_t rss_after = rss_full;
    for (int waited = 0; waited < 40 && rss_after > rss0 + (40u << 20); waited++) {
        usleep(100000);
        rss_after = os_rss_bytes();
    }
    printf("rss: start %zu MiB, full %zu MiB, after free+delay %zu MiB\n", rss0 >> 20,
           rss_full >> 20, rss_after >> 20);
    EXPECT(rss_after < rss0 + (40u << 20), "RSS did not fall: %zu MiB", rss_after >> 20);
    struct zone_stats zs;
    zone_stats(&zs);
    EXPECT(zs.purged_bytes > (100u << 20), "purged only %llu bytes", (unsigned long long)zs.purged_bytes);
    puts("purge: ok");
    return 0;
}
