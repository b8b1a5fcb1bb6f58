/* Unit test: memory pressure, measured (not forced).  First a fake memory
 * cgroup (its limit and usage files, given through the test hook): no
 * limit ("max", v1's unlimited), under 7/8, below high past 7/8, reclaim
 * active past 15/16 and kept down to 7/8, a limit changed on disk seen
 * within a second without any hook, and the reclaim cap on a pageset.
 * Then FOLIO_MEMORY_LIMIT: past 7/8 of the limit, frees shrink every
 * pageset's high to high_min and drain toward it.  Re-executes itself with
 * the limit set, since options are read before main. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obj.h"
#include "unit.h"


static struct span *held[4096];
static char limit_path[64], usage_path[64];

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The state after writing the usage, measured now. */
static int state_at(const char *usage) {
    put(usage_path, usage);
    pressure_measure_now();
    return pressure_state();
}

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

    /* a fake cgroup; FOLIO_MEMORY_LIMIT's usage (folio's resident
     * estimate) is far under its 24 MiB here */
    char dir[] = "/tmp/folio-cgroup-XXXXXX";
    EXPECT(mkdtemp(dir), "mkdtemp");
    snprintf(limit_path, sizeof limit_path, "%s/memory.max", dir);
    snprintf(usage_path, sizeof usage_path, "%s/memory.current", dir);
    put(limit_path, "max\n");
    put(usage_path, "50000000\n");
    pressure_set_cgroup_files(limit_path, usage_path);
    struct pressure_stats ps0;
    pressure_stats(&ps0);
    EXPECT(state_at("99000000\n") == 0, "no limit (\"max\"), yet pressure");
    put(limit_path, "9223372036854771712\n"); /* v1's unlimited */
    EXPECT(state_at("99000000\n") == 0, "v1 unlimited, yet pressure");
    put(limit_path, "100000000\n");
    EXPECT(state_at("50000000\n") == 0, "half the limit, yet pressure");
    EXPECT(state_at("90000000\n") == PRESSURE_BELOW_HIGH, "90%%: state %d", pressure_state());
    EXPECT(state_at("95000000\n") == (PRESSURE_BELOW_HIGH | PRESSURE_RECLAIM), "95%%: state %d", pressure_state());
    EXPECT(state_at("90000000\n") == (PRESSURE_BELOW_HIGH | PRESSURE_RECLAIM), "back to 90%%: reclaim ended early");

    /* reclaim active caps pageset 0 at high_min on its frees */
    int k = 0;
    for (; k < 1000; k++) EXPECT(held[k] = pageset_alloc_on(0, 0), "alloc");
    while (k) pageset_free_on(0, held[--k], 0);
    struct pageset_stats r;
    pageset_stats(0, &r);
    EXPECT(r.high == r.high_min && r.count <= r.high_min, "reclaim active: high %ld count %ld", r.high, r.count);

    EXPECT(state_at("80000000\n") == 0, "80%%: state %d", pressure_state());
    struct pressure_stats ps1;
    pressure_stats(&ps1);
    EXPECT(ps1.below_high_periods == ps0.below_high_periods + 1 && ps1.reclaim_periods == ps0.reclaim_periods + 1,
           "periods: below high %llu, reclaim %llu", (unsigned long long)ps1.below_high_periods,
           (unsigned long long)ps1.reclaim_periods);
    EXPECT(ps1.cgroup_limit == 100000000, "cgroup limit read as %zu", ps1.cgroup_limit);

    /* the limit lowered on disk is seen within a second, with no hook: the
     * next measurement (100 ms) after the next re-read (1 s) */
    put(limit_path, "84000000\n");
    int seen = 0;
    for (int i = 0; i < 30 && !seen; i++) {
        usleep(100 * 1000);
        seen = (pressure_state() & PRESSURE_RECLAIM) != 0;
    }
    EXPECT(seen, "a lowered memory.max never seen");
    pressure_stats(&ps1);
    EXPECT(ps1.cgroup_limit == 84000000, "cgroup limit read as %zu", ps1.cgroup_limit);
    pressure_set_cgroup_files("", "");
    unlink(limit_path);
    unlink(usage_path);
    rmdir(dir);
    pressure_measure_now();
    EXPECT(pressure_state() == 0, "no cgroup, yet pressure %d", pressure_state());

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
    struct pressure_stats ps2;
    pressure_stats(&ps2);
    EXPECT(ps2.reclaim_periods > ps1.reclaim_periods, "30 MiB resident of a 24 MiB limit: no reclaim period");
    for (int i = 0; i < 15; i++) free(big[i]);
    puts("pressure: ok");
    return 0;
}
