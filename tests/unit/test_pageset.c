/* Unit test: the PCP high auto-tuning rules (seed 003), driven through one
 * pageset directly so that every step is deterministic: growth on refill
 * misses, growth to hold a free burst, free_high drains of orders 1..3 (and
 * none for orders 4..6),
 * decay by 1/8 toward high_min (at once when idle), shrinking under memory pressure, and the
 * manual mode (fixed high) in which none of that happens; then the
 * counters in the JSON report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obj.h"
#include "unit.h"


#define MAXP 20000
static struct span *held[MAXP];
static int nheld;

static struct pageset_stats st(void) {
    struct pageset_stats s;
    pageset_stats(0, &s);
    return s;
}

static int take(int n, unsigned order) {
    for (int i = 0; i < n && nheld < MAXP; i++) {
        struct span *s = pageset_alloc_on(0, order);
        if (!s) return -1;
        held[nheld++] = s;
    }
    return 0;
}

static void give_back(unsigned order) {
    while (nheld) pageset_free_on(0, held[--nheld], order);
}

int main(void) {
    opt.purge_thread = 0;
    pageset_hold_decay();
    pageset_force_pressure(0);
    EXPECT(opt.pcp_autotune == 1 && opt.pcp_high == 0, "run without FOLIO_PCP_* overrides");

    /* give the zone a size: 64 chunks, so high_max = 64*512/8/cpus */
    static struct span *chunks[64];
    for (int i = 0; i < 64; i++) EXPECT(chunks[i] = zone_alloc_pages(CHUNK_PAGES, 1), "chunk %d", i);
    for (int i = 0; i < 64; i++) zone_free_span(chunks[i]);

    /* 1. misses grow high by a (scaled) batch, up to high_max */
    EXPECT(take(1, 0) == 0, "alloc");
    struct pageset_stats a = st();
    long batch = a.batch;
    EXPECT(a.high_max > a.high_min, "no tuning range: [%ld, %ld]", a.high_min, a.high_max);
    size_t zone_pages = zone_managed_pages(), floor_pages = ((size_t)opt.pcp_zone_min_mib << 20) >> PAGE_SHIFT;
    if (zone_pages < floor_pages) zone_pages = floor_pages;
    int split = os_cpu_allowance() < pageset_count() ? os_cpu_allowance() : pageset_count();
    EXPECT(a.high_max == (long)(zone_pages / 8 / (size_t)split) || a.high_max == a.high_min,
           "high_max %ld is not max(zone, FOLIO_PCP_ZONE_MIN_MIB)/8/allowed cpus", a.high_max);
    long prev = a.high;
    uint64_t refills = a.refills;
    int grew = 0;
    for (int i = 0; i < 40; i++) {
        EXPECT(take((int)batch, 0) == 0, "alloc");
        struct pageset_stats b = st();
        EXPECT(b.high >= prev && b.high <= b.high_max, "high %ld after %ld (max %ld)", b.high, prev,
               b.high_max);
        if (b.refills > refills && b.high > prev) grew++;
        prev = b.high;
        refills = b.refills;
    }
    EXPECT(grew > 0, "refill misses never grew high");
    give_back(0);
    struct pageset_stats c = st();
    EXPECT(c.count <= c.high_max, "count %ld above high_max %ld", c.count, c.high_max);

    /* 2. a free burst larger than high grows high to hold it */
    while (st().high > st().high_min) pageset_decay_on(0);
    long before = st().high;
    EXPECT(take((int)(4 * before), 0) == 0, "alloc");
    give_back(0);
    struct pageset_stats d = st();
    EXPECT(d.high_highest > before, "burst did not grow high (%ld)", before);
    EXPECT(d.drains > c.drains, "a burst of 4 x high frees never drained");
    EXPECT(d.high <= d.high_max && d.count <= d.high, "count %ld high %ld", d.count, d.high);

    /* 3. decay: -1/8 per tick (or count - 32 batches), down to high_min */
    int ticks = 0;
    while (st().high > st().high_min && ticks < 100) {
        struct pageset_stats e = st();
        pageset_mark_used(0); /* in use: the kernel's 1/8 step */
        pageset_decay_on(0);
        struct pageset_stats f = st();
        long want = e.high - e.high / 8;
        if (e.count - (batch << 5) > want) want = e.count - (batch << 5);
        if (want < e.high_min) want = e.high_min;
        EXPECT(f.high == want, "decay from %ld gave %ld, expected %ld", e.high, f.high, want);
        EXPECT(f.count <= f.high, "decay left count %ld above high %ld", f.count, f.high);
        EXPECT(f.decays == e.decays + 1, "decay not counted");
        ticks++;
    }
    EXPECT(st().high == st().high_min, "decay did not reach high_min in %d ticks", ticks);

    /* 3b. idle: a pageset that served nothing for a whole interval drops to
     * high_min at once (the first tick after the burst is still a 1/8 step) */
    EXPECT(take((int)(4 * st().high_min), 0) == 0, "alloc");
    give_back(0);
    struct pageset_stats i0 = st();
    EXPECT(i0.high > i0.high_min + i0.high_min / 4, "burst did not grow high (%ld)", i0.high);
    pageset_decay_on(0);
    struct pageset_stats i1 = st();
    EXPECT(i1.high > i1.high_min && i1.high < i0.high, "busy decay from %ld gave %ld", i0.high, i1.high);
    pageset_decay_on(0);
    struct pageset_stats i2 = st();
    EXPECT(i2.high == i2.high_min && i2.count <= i2.high_min,
           "idle decay from %ld gave high %ld count %ld (high_min %ld)", i1.high, i2.high, i2.count,
           i2.high_min);

    /* 4. pressure: every free shrinks high toward high_min and drains */
    EXPECT(take((int)(4 * st().high_min), 0) == 0, "alloc");
    give_back(0); /* grows high again */
    EXPECT(take((int)(2 * st().high_min), 0) == 0, "alloc");
    EXPECT(take(1, 0) == 0, "alloc");
    long grown = st().high;
    pageset_force_pressure(1);
    give_back(0);
    struct pageset_stats g = st();
    EXPECT(g.high == g.high_min, "under pressure high stayed %ld (was %ld, min %ld)", g.high, grown,
           g.high_min);
    EXPECT(g.count <= g.high_min + batch, "under pressure count %ld > high_min %ld + batch", g.count,
           g.high_min);
    pageset_force_pressure(0);

    /* 5. free_high: consecutive order-2 frees drain at once and cut high */
    uint64_t fh = st().free_high_drains;
    EXPECT(take(200, 2) == 0, "alloc order 2");
    give_back(2);
    EXPECT(st().free_high_drains > fh, "consecutive order-2 frees never took the free_high path");

    /* 5b. orders 4..6 (folio's larger slabs) are cached as the kernel caches
     * its pageblock-order pages: no free_high, and a burst grows high */
    fh = st().free_high_drains;
    long min5 = st().high_min;
    EXPECT(take(40, 5) == 0, "alloc order 5");
    give_back(5);
    struct pageset_stats h5 = st();
    EXPECT(h5.free_high_drains == fh, "order-5 frees took the free_high path");
    EXPECT(h5.count > min5 && h5.count <= h5.high, "order-5 burst: count %ld, high %ld, high_min %ld",
           h5.count, h5.high, min5);

    /* 6. manual mode: high fixed, no growth on misses or bursts, no decay */
    opt.pcp_high = 3 * batch;
    EXPECT(take(1, 0) == 0, "alloc"); /* the refill applies the manual limits */
    give_back(0);
    for (int r = 0; r < 3; r++) {
        EXPECT(take((int)(10 * batch), 0) == 0, "alloc");
        give_back(0);
        struct pageset_stats m = st();
        EXPECT(m.high == 3 * batch && m.high_min == m.high_max && m.high_max == 3 * batch,
               "manual high %ld [%ld, %ld]", m.high, m.high_min, m.high_max);
        EXPECT(m.count < m.high, "manual count %ld >= high %ld", m.count, m.high);
    }
    pageset_decay_on(0);
    EXPECT(st().high == 3 * batch, "decay changed a manual high");
    opt.pcp_high = 0;

    /* 7. the counters reach the report */
    static char json[65536];
    folio_report_json(json, sizeof json);
    const char *keys[] = {"\"pcp_refills\"", "\"pcp_drains\"", "\"free_high_drains\"", "\"pcp_decays\"",
                          "\"pagesets\"", "\"high_lowest\"", "\"high_highest\"", "\"zone_lock_contended\""};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        EXPECT(strstr(json, keys[i]), "report lacks %s", keys[i]);
    puts("pageset: ok");
    return 0;
}
