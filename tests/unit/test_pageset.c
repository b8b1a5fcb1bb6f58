/* Unit test: the PCP high auto-tuning rules (seed 003), driven through one
 * pageset directly so that every step is deterministic: growth on refill
 * misses, growth to hold a free burst, free_high drains of orders 1..3 (and
 * none for orders 4..6),
 * decay by 1/8 toward high_min (at once when idle), shrinking under memory pressure, and the
 * manual mode (fixed high) in which none of that happens; the
 * reclaim-active cap (fixed and tuned); whole chunks counted in count and
 * decayed; high_max for forced CPU counts and heaps (2..256 CPUs, 16 MiB
 * and 1 GiB), and for a zone larger than one arena; then the counters in
 * the JSON report; spans of other sizes kept whole on the exact lists. */
#define _GNU_SOURCE
#include <sched.h>
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
    pageset_force_sizing(2, 0); /* high_max split as on 2 CPUs, whatever this machine has */
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
    EXPECT(a.high_max == (long)(zone_pages / 8 / 2), "high_max %ld is not max(zone, FOLIO_PCP_ZONE_MIN_MIB)/8/2",
           a.high_max);
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

    /* 6b. reclaim active caps a fixed high at 4 x batch (the kernel's
     * ZONE_RECLAIM_ACTIVE), and a tuned one at high_min */
    opt.pcp_high = 10 * batch;
    EXPECT(take(1, 0) == 0, "alloc");
    give_back(0);
    EXPECT(take((int)(9 * batch), 0) == 0, "alloc");
    give_back(0);
    EXPECT(st().count > 4 * batch, "fixed high 10 x batch kept only %ld pages", st().count);
    pageset_force_pressure(PRESSURE_BELOW_HIGH | PRESSURE_RECLAIM);
    uint64_t caps = st().reclaim_caps;
    EXPECT(take((int)(9 * batch), 0) == 0, "alloc");
    give_back(0);
    struct pageset_stats r = st();
    EXPECT(r.count <= 4 * batch, "reclaim active: fixed pageset kept %ld pages (cap %ld)", r.count, 4 * batch);
    EXPECT(r.reclaim_caps > caps, "reclaim cap not counted");
    opt.pcp_high = 0;
    pageset_force_pressure(0);
    EXPECT(take((int)(8 * st().high_min), 0) == 0, "alloc");
    give_back(0);
    EXPECT(st().high > st().high_min, "no growth before reclaim");
    pageset_force_pressure(PRESSURE_BELOW_HIGH | PRESSURE_RECLAIM);
    /* the kernel's rule: each free lowers high by max(free_count, batch)
     * and drains to the cap; a few hundred frees reach high_min */
    long h0 = st().high;
    EXPECT(take(40, 0) == 0, "alloc");
    give_back(0);
    EXPECT(st().high <= h0 - 40 * batch, "40 frees under reclaim: high %ld from %ld", st().high, h0);
    EXPECT(take(1000, 0) == 0, "alloc");
    give_back(0);
    r = st();
    EXPECT(r.high == r.high_min && r.count <= r.high_min, "reclaim active: tuned high %ld count %ld (high_min %ld)",
           r.high, r.count, r.high_min);
    pageset_force_pressure(0);

    /* 6c. whole chunks count against high and decay like the rest: freed
     * on this CPU's pageset (the test runs on pageset 0's CPU) */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0 && os_cpu() == 0 && opt.pcp_chunks >= 1) {
        EXPECT(take((int)(20 * batch), 0) == 0, "alloc");
        give_back(0); /* a burst: high grows */
        EXPECT(take((int)(st().count - 2 * batch), 0) == 0, "alloc"); /* count falls, high stays */
        EXPECT(st().count + (long)CHUNK_PAGES < st().high, "count %ld high %ld: no room for a chunk", st().count,
               st().high);
        struct span *ch[2];
        for (int i = 0; i < 2; i++) EXPECT(ch[i] = page_alloc(CHUNK_PAGES, 1), "chunk");
        struct pageset_stats c0 = st();
        page_free(ch[0]);
        struct pageset_stats c1 = st();
        EXPECT(c1.chunks == 1 && c1.count == c0.count + (long)CHUNK_PAGES,
               "a chunk freed below high: %ld kept, count %ld -> %ld (high %ld)", c1.chunks, c0.count, c1.count,
               c1.high);
        give_back(0);
        for (int t = 0; t < 40 && (st().chunks || st().high > st().high_min); t++) pageset_decay_on(0);
        struct pageset_stats c2 = st();
        EXPECT(c2.chunks == 0 && c2.chunks_drained == c1.chunks_drained + 1,
               "decay kept %ld chunks (drained %llu)", c2.chunks, (unsigned long long)c2.chunks_drained);
        EXPECT(c2.high == c2.high_min && c2.count <= c2.high, "decay left high %ld count %ld", c2.high, c2.count);
        /* at high_min a freed chunk overflows high: the drain starts with the
         * list just freed into */
        page_free(ch[1]);
        struct pageset_stats c3 = st();
        EXPECT(c3.chunks == 0 && c3.chunks_drained == c2.chunks_drained + 1 && c3.count <= c3.high,
               "a chunk freed at high_min: %ld kept, count %ld, high %ld", c3.chunks, c3.count, c3.high);
    } else {
        puts("SKIP chunk decay: cannot run on pageset 0's CPU");
    }

    /* 6e. spans of other sizes (odd page counts, 128 pages) are kept whole
     * on the exact lists, within a bound that starts at a batch: the frees
     * of a size never asked for again keep a batch at most, the rest goes to
     * the zone; a miss for a size that was drained grows the bound (by a
     * batch at least), and from then on a free keeps the span for the next
     * request of its size (and only of its size), and a drain gives them
     * back to the zone whole */
    if (os_cpu() == 0) {
        for (int t = 0; t < 40 && st().high > st().high_min; t++) pageset_decay_on(0);
        pageset_drain_all();
        struct pageset_stats x0 = st();
        struct span *odd[6], *again[3];
        for (int i = 0; i < 6; i++) EXPECT(odd[i] = page_alloc(9, 1), "9 pages");
        struct pageset_stats x1 = st();
        EXPECT(x1.exact_misses == x0.exact_misses + 6 && x1.high == x0.high,
               "6 misses of a size never held: misses %llu -> %llu, high %ld -> %ld (must not grow)",
               (unsigned long long)x0.exact_misses, (unsigned long long)x1.exact_misses, x0.high, x1.high);
        for (int i = 0; i < 6; i++) {
            EXPECT(odd[i]->npages == 9, "a 9-page span has %u pages", odd[i]->npages);
            page_free(odd[i]);
        }
        EXPECT(st().count <= x1.count + x1.batch,
               "6 freed 9-page spans of a size not asked for again: count %ld -> %ld (a batch %ld at most)",
               x1.count, st().count, x1.batch);
        EXPECT(pageset_check() == 0 && zone_check() == 0, "invariants after exact frees");
        pageset_decay_on(0); /* a new window: the misses above are forgotten */
        for (int i = 0; i < 3; i++) EXPECT(odd[i] = page_alloc(9, 1), "9 pages, the size back");
        for (int i = 0; i < 3; i++) page_free(odd[i]);
        struct pageset_stats x2 = st();
        EXPECT(x2.count >= x1.count + 27, "3 freed 9-page spans of a size that came back: count %ld -> %ld",
               x1.count, x2.count);
        EXPECT(pageset_check() == 0, "pageset invariants with exact spans");
        struct span *ten = page_alloc(10, 1);
        EXPECT(ten && ten->npages == 10 && st().exact_hits == x2.exact_hits, "a 10-page request took a 9-page span");
        for (int i = 0; i < 3; i++) EXPECT(again[i] = page_alloc(9, 1), "9 pages again");
        struct pageset_stats x3 = st();
        EXPECT(x3.exact_hits == x2.exact_hits + 3, "3 requests of a kept size: %llu hits",
               (unsigned long long)(x3.exact_hits - x2.exact_hits));
        EXPECT(again[0] == odd[2] && again[2] == odd[0], "the last freed span is not taken first");
        struct span *b = page_alloc(48, 1);
        EXPECT(b && b->npages == 48, "48 pages");
        page_free(b); /* above the lists' bound: drained */
        EXPECT(b = page_alloc(48, 1), "48 pages"); /* a miss for a drained size grows the bound */
        x3 = st();
        char *start = b->start;
        page_free(b);
        b = page_alloc(48, 1);
        EXPECT(b && b->start == start && st().exact_hits == x3.exact_hits + 1, "a 48-page span not kept");
        /* above 64 pages too, while the lists hit */
        page_free(b);
        b = page_alloc(128, 1);
        EXPECT(b && b->npages == 128, "128 pages");
        page_free(b); /* above the lists' bound: drained */
        EXPECT(b = page_alloc(128, 1), "128 pages"); /* a miss for a drained size grows the bound */
        x3 = st();
        start = b->start;
        page_free(b);
        b = page_alloc(128, 1);
        EXPECT(b && b->start == start && st().exact_hits == x3.exact_hits + 1, "a 128-page span not kept");
        struct span *eight = page_alloc(8, 1);
        EXPECT(eight && (eight->page_idx & 7) == 0, "an 8-page span from the order lists is aligned");
        page_free(eight);
        page_free(b);
        page_free(ten);
        for (int i = 0; i < 3; i++) page_free(again[i]);
        EXPECT(pageset_check() == 0 && zone_check() == 0, "invariants before the drain");
        pageset_drain_all();
        EXPECT(st().count == 0 && pageset_check() == 0 && zone_check() == 0, "drain left count %ld", st().count);
        /* a miss for a size the pageset drained grows high */
        long h9 = st().high;
        struct span *nine = page_alloc(9, 1);
        EXPECT(nine && st().high >= h9 + 9, "a miss after 9-page spans were drained: high %ld -> %ld", h9, st().high);
        page_free(nine);
        pageset_drain_all();
        /* the near fit: a request of an odd size takes a kept span up to a
         * quarter larger (the smallest such), never more, never for a power
         * of two (a slab's) */
        struct pageset_stats y0 = st();
        struct span *eleven = page_alloc(11, 1), *twelve = page_alloc(12, 1), *forty = page_alloc(40, 1);
        EXPECT(eleven && twelve && forty, "11, 12 and 40 pages");
        char *at11 = eleven->start, *at12 = twelve->start;
        page_free(eleven);
        page_free(twelve);
        page_free(forty);
        struct span *n9 = page_alloc(9, 1);
        EXPECT(n9 && n9->start == at11 && n9->npages == 11 && st().exact_near_hits == y0.exact_near_hits + 1,
               "a 9-page request did not take the kept 11-page span (%u pages)", n9 ? n9->npages : 0);
        struct span *n9b = page_alloc(9, 1);
        EXPECT(n9b && n9b->npages == 9, "a 9-page request took a %u-page span (more than a quarter larger)",
               n9b ? n9b->npages : 0);
        struct span *n10 = page_alloc(10, 1);
        EXPECT(n10 && n10->start == at12 && n10->npages == 12, "a 10-page request did not take the 12-page span");
        struct span *p32 = page_alloc(32, 1);
        EXPECT(p32 && p32->npages == 32, "a 32-page request (a power of two) took a %u-page span",
               p32 ? p32->npages : 0);
        EXPECT(st().exact_near_hits == y0.exact_near_hits + 2, "near hits %llu, not 2",
               (unsigned long long)(st().exact_near_hits - y0.exact_near_hits));
        page_free(n9);
        page_free(n9b);
        page_free(n10);
        page_free(p32);
        EXPECT(pageset_check() == 0 && zone_check() == 0, "invariants after near fits");
        pageset_drain_all();
        /* the lists' bound never falls below what they hold on a miss: a
         * miss for a drained size raises it (by a batch, up to high_max),
         * and when high_max has fallen since (a smaller zone, more
         * pagesets in use) it stays where it is, to decay as usual; set to
         * high_max, it was below the pages the lists held, which a debug
         * build's invariant check reports (a stress run of session 25
         * failed on that check once, in 540 runs; this is the one way to
         * it found) */
        pageset_force_sizing(2, 1l << 22);
        static struct span *sp[2][60];
        for (int r = 0; r < 12; r++) {
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < 60; i++) EXPECT(sp[k][i] = page_alloc(k ? 13 : 9, 1), "%d pages", k ? 13 : 9);
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < 60; i++) page_free(sp[k][i]);
        }
        struct pageset_stats z0 = st();
        EXPECT(z0.count > 4 * z0.batch, "the exact lists hold %ld pages, not above 4 batches", z0.count);
        pageset_decay_on(0); /* a new window, in which a miss may grow the bound */
        pageset_force_sizing(256, 1); /* a small zone split 256 ways: high_max falls to high_min */
        struct span *one = pageset_alloc_on(0, 0); /* a refill, which applies it */
        EXPECT(one && st().high_max == st().high_min, "high_max %ld after the zone shrank (high_min %ld)",
               st().high_max, st().high_min);
        int taken9 = 0;
        struct pageset_stats z1 = st();
        while (taken9 < 60 && st().exact_misses == z1.exact_misses) EXPECT(sp[0][taken9++] = page_alloc(9, 1), "9 pages");
        struct pageset_stats z2 = st();
        EXPECT(pageset_check() == 0, "pageset invariants after a miss with high_max fallen (held %ld pages, "
               "then %ld; high_max %ld -> %ld; %d spans of 9 pages taken)", z0.count, z2.count, z0.high_max,
               z2.high_max, taken9);
        while (taken9) page_free(sp[0][--taken9]);
        pageset_free_on(0, one, 0);
        EXPECT(pageset_check() == 0 && zone_check() == 0, "invariants after the frees");
        pageset_drain_all();
        pageset_force_sizing(2, 0);
        /* but not while the lists miss more than they hit: with a bound
         * grown to hold it, a freed span above 64 pages goes to the zone
         * after the window's fifth miss and no hit (sizes that do not come
         * back); one of 64 pages or less is still kept */
        {
            pageset_decay_on(0); /* a new window */
            struct span *hundred = page_alloc(100, 1);
            EXPECT(hundred && hundred->npages == 100, "100 pages");
            page_free(hundred); /* above the bound: drained */
            EXPECT(hundred = page_alloc(100, 1), "100 pages"); /* a miss for a drained size: the bound grows */
            struct span *m[4];
            for (int i = 0; i < 4; i++) EXPECT(m[i] = page_alloc(70 + 5 * (uint32_t)i, 1), "%d pages", 70 + 5 * i);
            struct span *small9 = page_alloc(9, 1);
            EXPECT(small9, "9 pages");
            struct pageset_stats w0 = st();
            EXPECT(w0.exact_high >= 100, "the bound %ld did not grow to hold 100 pages", w0.exact_high);
            page_free(hundred);
            for (int i = 0; i < 4; i++) page_free(m[i]);
            struct pageset_stats w1 = st();
            EXPECT(w1.count == w0.count, "spans of 70-100 pages freed after 7 misses and no hit: count %ld -> %ld",
                   w0.count, w1.count);
            page_free(small9);
            EXPECT(st().count == w1.count + 9, "a 9-page span not kept: count %ld -> %ld", w1.count, st().count);
            EXPECT(pageset_check() == 0 && zone_check() == 0, "invariants after the misses");
            pageset_drain_all();
        }
    } else {
        puts("SKIP exact lists: cannot run on pageset 0's CPU");
    }

    /* 6d. a pageset idle for a whole decay interval leaves the pagesets in
     * use (high_max's split); one that serves again is back in */
    pageset_mark_used(0);
    EXPECT(st().in_use == 1, "pageset 0 not in use after use");
    pageset_decay_on(0);
    pageset_decay_on(0);
    EXPECT(st().in_use == 0, "pageset 0 still in use after an idle decay");
    pageset_mark_used(0);
    EXPECT(st().in_use == 1, "pageset 0 not back in use");

    /* 8. high_max by CPU count and heap: zone pages / 8 / pagesets in use
     * (at least high_min), the zone at least FOLIO_PCP_ZONE_MIN_MIB */
    const int cpus[] = {2, 16, 64, 256};
    const long heaps_mib[] = {16, 1024};
    long floor_p = (long)(((size_t)opt.pcp_zone_min_mib << 20) >> PAGE_SHIFT);
    for (int h = 0; h < 2; h++) {
        for (int k = 0; k < 4; k++) {
            long heap = (heaps_mib[h] << 20) >> PAGE_SHIFT;
            pageset_force_sizing(cpus[k], heap);
            EXPECT(take((int)(2 * st().high + 4 * batch), 0) == 0, "alloc"); /* at least one refill */
            give_back(0);
            struct pageset_stats m = st();
            long zone = heap > floor_p ? heap : floor_p, want = zone / 8 / cpus[k];
            if (want < m.high_min) want = m.high_min;
            printf("high_max: %3d CPUs, heap %4ld MiB: %6ld pages (%.2f MiB), high_min %ld\n", cpus[k],
                   heaps_mib[h], m.high_max, m.high_max * 4096.0 / (1 << 20), m.high_min);
            EXPECT_ALL(m.high_max == want, "%d CPUs, %ld MiB: high_max %ld, expected %ld", cpus[k],
                       heaps_mib[h], m.high_max, want);
            if (heaps_mib[h] == 1024)
                EXPECT_ALL(m.high_max > m.high_min, "%d CPUs, 1 GiB: no tuning range", cpus[k]);
            if (cpus[k] <= 16) /* the range a 2-CPU machine had, up to 16 CPUs on 1 GiB */
                EXPECT_ALL(heaps_mib[h] == 16 || m.high_max >= 8 * m.high_min, "%d CPUs, 1 GiB: high_max %ld",
                           cpus[k], m.high_max);
        }
    }
    if (unit_failures) return 1;

    /* 8b. the measured zone is not capped at one arena: chunks past
     * FOLIO_ARENA_MIB (reserved, never touched) all count */
    pageset_force_sizing(2, 0);
    size_t arena_chunks = ((size_t)opt.arena_mib << 20) / CHUNK_SIZE, extra = arena_chunks + 8;
    struct span **big = calloc(extra, sizeof *big);
    EXPECT(big, "calloc");
    for (size_t i = 0; i < extra; i++) EXPECT(big[i] = zone_alloc_pages(CHUNK_PAGES, 1), "chunk %zu", i);
    EXPECT(zone_managed_pages() >= extra * CHUNK_PAGES, "zone %zu pages, %zu chunks taken", zone_managed_pages(),
           extra);
    EXPECT(take((int)(2 * st().high + 4 * batch), 0) == 0, "alloc");
    give_back(0);
    EXPECT(st().high_max == (long)(zone_managed_pages() / 8 / 2), "high_max %ld from a zone of %zu pages",
           st().high_max, zone_managed_pages());
    for (size_t i = 0; i < extra; i++) zone_free_span(big[i]);
    free(big);

    /* 7. the counters reach the report */
    static char json[65536];
    folio_report_json(json, sizeof json);
    const char *keys[] = {"\"pcp_refills\"", "\"pcp_drains\"", "\"free_high_drains\"", "\"pcp_decays\"",
                          "\"pagesets\"", "\"high_lowest\"", "\"high_highest\"", "\"zone_lock_contended\"",
                          "\"pcp_in_use\"", "\"pcp_reclaim_caps\"", "\"pcp_chunks_drained\"", "\"pcp_held_chunks\"", "\"pcp_exact_hits\"", "\"pcp_exact_misses\"", "\"pcp_exact_near_hits\"",
                          "\"pressure_reclaim_periods\"", "\"pressure_below_high_periods\"", "\"pcp_free_high_batch\""};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        EXPECT(strstr(json, keys[i]), "report lacks %s", keys[i]);
    puts("pageset: ok");
    return 0;
}
