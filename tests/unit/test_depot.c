/* Unit test: the zone's depot (zone.c).  Spans a pageset gives back for
 * want of room wait there by page count for the next refill of their size,
 * most recently put first, when another pageset asked for that size
 * lately (and as many as were asked for); a put past the bound or past a
 * size's slots goes to the buddy lists, and so does an exact list's span
 * from a pageset whose exact lists miss more than they hit, and a size
 * only the putter asked for; a span put more than the purge delay ago goes
 * to the buddy lists at the next purge and is purged in the same pass;
 * malloc_trim and address-space reclaim empty it; zone_check holds
 * throughout, and two threads on two CPUs that hand blocks over meet
 * there. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "api_layer.h"
#include "unit.h"

#define K 80

static struct span *take12(void) {
    struct span *s = zone_alloc_pages(12, 1);
    if (s) span_set_kind(s, SPAN_PCP_FREE); /* as a pageset holds it */
    return s;
}

static struct zone_stats zs(void) {
    struct zone_stats st;
    zone_stats(&st);
    return st;
}

/* pageset cpu asks the depot for n spans of npages (it has none: one
 * comes from the buddy lists, given back) */
static void ask(int cpu, uint32_t npages, long n) {
    struct span *out[ZONE_REFILL_MAX], *list = NULL;
    bool order = (npages & (npages - 1)) == 0 && npages <= 64;
    long got = zone_refill(cpu, npages, n, out, order ? &list : NULL);
    for (long i = 0; i < got; i++) zone_free_span(out[i]);
    while (list) {
        struct span *s = list;
        list = s->next;
        zone_free_span(s);
    }
}

static struct span *chain(struct span **v, int n) {
    struct span *list = NULL;
    for (int i = n - 1; i >= 0; i--) {
        v[i]->next = list;
        list = v[i];
    }
    return list;
}

#define BURST 400
static struct span *burst[BURST];

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static void *free_burst(void *arg) {
    pin((int)(intptr_t)arg);
    for (int i = 0; i < BURST; i++) page_free(burst[i]);
    return NULL;
}

int main(void) {
    folio_init();
    opt.purge_thread = 0;
    opt.purge_delay_ms = 100;
    static struct span *v[K], *out[ZONE_REFILL_MAX];
    for (int i = 0; i < K; i++) EXPECT(v[i] = take12(), "12 pages");
    /* a put of a size nobody else asked for goes to the buddy lists */
    ask(0, 12, 8);
    struct zone_stats a0 = zs();
    zone_depot_put(0, chain(v, 8), 1 << 20, true);
    EXPECT(zs().depot_pages == a0.depot_pages && zs().depot_bypassed == a0.depot_bypassed + 8,
           "a size only the putter asked for was kept");
    EXPECT(zs().pages_to_zone == a0.pages_to_zone + 96, "pages to zone: a put past the depot not counted");
    for (int i = 0; i < 8; i++) EXPECT(v[i] = take12(), "12 pages");
    ask(1, 12, ZONE_REFILL_MAX); /* another pageset wants 12-page spans */
    struct zone_stats a = zs();

    /* put 8: all kept, counted free and dirty */
    zone_depot_put(0, chain(v, 8), 1 << 20, true);
    struct zone_stats b = zs();
    EXPECT(b.depot_pages == a.depot_pages + 96 && b.depot_puts == a.depot_puts + 8,
           "8 spans of 12 pages put: depot %llu pages, %llu puts", (unsigned long long)b.depot_pages,
           (unsigned long long)(b.depot_puts - a.depot_puts));
    EXPECT(b.free_pages == a.free_pages + 96 && b.dirty_pages == a.dirty_pages + 96,
           "depot pages not counted free and dirty");
    EXPECT(b.pages_to_zone == a.pages_to_zone + 96, "pages to zone: the depot's puts not counted");
    EXPECT(zone_check() == 0, "zone invariants with a depot");

    /* a refill takes the last put first, only of its size */
    EXPECT(zone_refill(1, 13, 4, out, NULL) == 1 && out[0]->npages == 13 && zs().depot_pages == b.depot_pages,
           "a 13-page refill took from the 12-page depot");
    out[0]->flags = 0;
    zone_free_span(out[0]);
    struct zone_stats b2 = zs();
    long n = zone_refill(1, 12, 3, out, NULL);
    EXPECT(n == 3 && out[0] == v[7] && out[1] == v[6] && out[2] == v[5], "refill of 3: got %ld, not the last put", n);
    EXPECT(span_kind(out[0]) == SPAN_PCP_FREE, "a depot span changed kind");
    EXPECT(zs().depot_gets == b.depot_gets + 3 && zs().depot_pages == b.depot_pages - 36, "depot counts after a refill");
    EXPECT(zs().pages_from_zone == b2.pages_from_zone + 36, "pages from zone: the depot's refill not counted");
    zone_depot_put(0, chain(out, 3), 1 << 20, true);

    /* the bound: past it, to the buddy lists in the same hold */
    struct zone_stats c = zs();
    zone_depot_put(0, chain(v + 8, 2), 0, true);
    EXPECT(zs().depot_pages == c.depot_pages && zs().depot_bypassed == c.depot_bypassed + 2,
           "a put with no room kept spans");
    /* not exact (the pageset's exact lists miss): an exact list's size goes
     * to the buddy lists, an order list's aligned block to the depot */
    struct zone_stats c2 = zs();
    ask(1, 8, 1);
    struct span *eight = zone_alloc_pages(8, 8), *twelve = take12(), *list = NULL;
    EXPECT(eight && twelve, "8 and 12 pages");
    span_set_kind(eight, SPAN_PCP_FREE);
    twelve->next = eight;
    eight->next = NULL;
    zone_depot_put(0, twelve, 1 << 20, false);
    EXPECT(zs().depot_pages == c2.depot_pages + 8 && zs().depot_bypassed == c2.depot_bypassed + 1,
           "not exact: depot %llu pages (+8 wanted), full +%llu (1 wanted)",
           (unsigned long long)zs().depot_pages, (unsigned long long)(zs().depot_bypassed - c2.depot_bypassed));
    EXPECT(zone_refill(1, 8, 1, out, &list) == 1 && out[0] == eight && !list, "the 8-page block not taken back");
    zone_free_span(eight);
    /* a size's slots: at most ZONE_REFILL_MAX spans */
    ask(1, 12, ZONE_REFILL_MAX);
    zone_depot_put(0, chain(v + 10, K - 10), 1 << 20, true);
    struct zone_stats d = zs();
    EXPECT(d.depot_pages == (uint64_t)ZONE_REFILL_MAX * 12, "depot holds %llu pages, want %d",
           (unsigned long long)d.depot_pages, ZONE_REFILL_MAX * 12);
    EXPECT(zone_check() == 0, "zone invariants with a full size");

    /* age: kept within the delay, to the buddy lists and purged after it */
    zone_purge(false, 0);
    EXPECT(zs().depot_pages == d.depot_pages, "the depot expired spans put just now");
    struct timespec ts = {0, 150 * 1000 * 1000};
    nanosleep(&ts, NULL);
    uint64_t purged = zs().purged_bytes;
    zone_purge(false, 0);
    struct zone_stats e = zs();
    EXPECT(e.depot_pages == 0 && e.depot_released >= d.depot_released + ZONE_REFILL_MAX,
           "expired spans left in the depot: %llu pages", (unsigned long long)e.depot_pages);
    EXPECT(e.purged_bytes > purged, "expired depot spans were not purged in the same pass");
    EXPECT(zone_check() == 0, "zone invariants after expiry");

    /* malloc_trim empties it at once */
    ask(1, 12, 8);
    for (int i = 0; i < 8; i++) EXPECT(v[i] = take12(), "12 pages");
    zone_depot_put(0, chain(v, 8), 1 << 20, true);
    EXPECT(zs().depot_pages == 96, "8 spans not kept");
    page_trim();
    EXPECT(zs().depot_pages == 0 && zone_check() == 0, "malloc_trim left the depot holding pages");
    /* and so does address-space reclaim */
    ask(1, 12, 8);
    for (int i = 0; i < 8; i++) EXPECT(v[i] = take12(), "12 pages");
    zone_depot_put(0, chain(v, 8), 1 << 20, true);
    as_reclaim();
    EXPECT(zs().depot_pages == 0 && zone_check() == 0, "reclaim left the depot holding pages");

    /* two threads on two CPUs: one allocates bursts of 12-page spans, the
     * other frees them; the freer's overflow waits in the depot for the
     * allocator's misses */
    opt.purge_delay_ms = 100000;
    int cpus[2], nc = 0;
    cpu_set_t allowed;
    EXPECT(sched_getaffinity(0, sizeof allowed, &allowed) == 0, "sched_getaffinity");
    for (int c = 0; c < CPU_SETSIZE && nc < 2; c++)
        if (CPU_ISSET(c, &allowed)) cpus[nc++] = c;
    if (nc == 2) {
        for (int r = 0; r < 6; r++) {
            pin(cpus[0]);
            for (int i = 0; i < BURST; i++) EXPECT(burst[i] = page_alloc(12, 1), "page_alloc(12)");
            pthread_t t;
            EXPECT(pthread_create(&t, NULL, free_burst, (void *)(intptr_t)cpus[1]) == 0, "pthread_create");
            pthread_join(t, NULL);
        }
        struct zone_stats f = zs();
        EXPECT(f.depot_puts > e.depot_puts && f.depot_gets > e.depot_gets,
               "two CPUs handing spans over never met in the depot: %llu puts, %llu gets",
               (unsigned long long)(f.depot_puts - e.depot_puts), (unsigned long long)(f.depot_gets - e.depot_gets));
        EXPECT(zone_check() == 0 && pageset_check() == 0, "invariants after pageset traffic");
    } else {
        puts("SKIP hand-over: fewer than 2 CPUs");
    }
    pageset_drain_all();
    page_trim();
    EXPECT(zs().depot_pages == 0 && zone_check() == 0 && pageset_check() == 0, "drain and trim left pages");
    puts("depot: ok");
    return 0;
}
