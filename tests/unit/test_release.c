/* Unit test: giving address space back.  Whole free zone chunks and the
 * reservation's unused tail are unmapped by zone_release_free, their table
 * entries NULL, their arena's metadata still mapped, the zone stays
 * consistent, and a later growth maps a released chunk again in its arena
 * (no new metadata); a span does not accept a pointer 4 MiB away or past its
 * slab; as_reclaim drains the
 * pagesets so their chunks go back too, and a trim the calling thread's
 * empty current slabs; huge_fit_grid puts an extent the
 * kernel moved off the 2 MiB grid back on it, contents intact. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "api_layer.h"
#include "unit.h"

#define NCH 6

static bool mapped(const void *p) {
    return msync((void *)((uintptr_t)p & ~(uintptr_t)(PAGE_SIZE - 1)), PAGE_SIZE, MS_ASYNC) == 0 ||
           errno != ENOMEM;
}

int main(void) {
    folio_init();
    opt.heap_dense_kib = 0; /* slabs and the page heap from the first block (no dense heap) */
    pageset_hold_decay();
    struct span *s[NCH];
    struct chunk *meta[NCH];
    char *base[NCH];
    for (int i = 0; i < NCH; i++) {
        s[i] = zone_alloc_pages(CHUNK_PAGES, 1);
        EXPECT(s[i] && s[i]->page_idx == 0, "whole chunk %d", i);
        meta[i] = s[i]->chunk;
        base[i] = s[i]->start;
        memset(base[i], 0x5a, CHUNK_SIZE);
        EXPECT(arena_owns((uintptr_t)base[i]) && chunk_of((uintptr_t)base[i]) == meta[i],
               "chunk %d: meta not at its computed address", i);
    }
    for (int i = 0; i < NCH; i++) {
        s[i]->flags = 0;
        zone_free_span(s[i]);
    }
    struct zone_stats before, after;
    zone_stats(&before);
    size_t mapped_before = atomic_load(&os_mapped_bytes);
    size_t released = zone_release_free();
    zone_stats(&after);
    EXPECT(zone_check() == 0, "zone inconsistent after the release");
    EXPECT(released >= NCH * CHUNK_SIZE, "released %zu bytes, want at least %zu", released,
           (size_t)NCH * CHUNK_SIZE);
    EXPECT(atomic_load(&os_mapped_bytes) == mapped_before - released, "mapped bytes %zu, want %zu",
           atomic_load(&os_mapped_bytes), mapped_before - released);
    EXPECT(after.chunks + NCH <= before.chunks, "chunks %llu -> %llu", (unsigned long long)before.chunks,
           (unsigned long long)after.chunks);
    EXPECT(after.free_pages == before.free_pages - (before.chunks - after.chunks) * CHUNK_PAGES,
           "free pages %llu -> %llu", (unsigned long long)before.free_pages,
           (unsigned long long)after.free_pages);
    for (int i = 0; i < NCH; i++) {
        EXPECT(span_lookup((uintptr_t)base[i]) == NULL, "released chunk %d still has a span", i);
        EXPECT(arena_head_of((uintptr_t)base[i])->state[((uintptr_t)base[i] >> CHUNK_SHIFT) % ARENA_CHUNKS] ==
                   CHUNK_RELEASED, "released chunk %d not marked released", i);
        EXPECT(!mapped(base[i]), "released chunk %d still mapped", i);
        EXPECT(mapped(meta[i]) && arena_owns((uintptr_t)base[i]), "released chunk %d: metadata gone", i);
    }

    /* growth maps a released chunk again at its own address: a whole chunk
     * needs growth (none is free), and takes no new metadata */
    struct span *w = zone_alloc_pages(CHUNK_PAGES, 1);
    EXPECT(w && w->page_idx == 0, "whole chunk after the release");
    struct zone_stats grown;
    zone_stats(&grown);
    EXPECT(grown.meta_pages == after.meta_pages, "growth after a release made a new arena");
    EXPECT(chunk_of((uintptr_t)w->start) == w->chunk && mapped(w->start), "regrown chunk");
    EXPECT(zone_check() == 0, "zone inconsistent after growth");
    w->flags = 0;
    zone_free_span(w);
    struct span *t = zone_alloc_pages(1, 1);
    EXPECT(t, "allocation after the release");
    t->obj_size = classes[0].size; /* as a slab of the smallest class */
    t->obj_inv = class_inv(&classes[0]);
    t->capacity = (uint32_t)(PAGE_SIZE / classes[0].size);
    EXPECT(small_is_object_start(t, t->start + 16), "object 1 refused");
    char *stale = t->start + 2 * CHUNK_SIZE + 16; /* same page of a chunk 4 MiB away */
    EXPECT(!small_is_object_start(t, stale), "a pointer 4 MiB away taken as an object");
    EXPECT(!small_is_object_start(t, t->start + PAGE_SIZE), "a pointer past the slab taken");
    t->flags = 0;
    zone_free_span(t);

    /* a bin's current slab, empty, goes back to the page heap on a trim */
    char *obj = malloc(5000);
    EXPECT(obj, "malloc(5000)");
    struct span *slab = span_lookup((uintptr_t)obj);
    EXPECT(slab && span_kind(slab) == SPAN_SLAB, "5000 bytes not from a slab");
    free(obj);
    EXPECT(span_lookup((uintptr_t)obj) == slab, "an empty current slab is kept");
    heap_trim_current();
    EXPECT(span_lookup((uintptr_t)obj) == NULL, "empty current slab kept after a trim");

    /* as_reclaim: chunks held by the pagesets come back too */
    struct span *c = page_alloc(CHUNK_PAGES, 1);
    EXPECT(c, "chunk from the page heap");
    char *cb = c->start;
    c->flags = 0;
    page_free(c); /* to this CPU's pageset (FOLIO_PCP_CHUNKS) or the zone */
    as_reclaim();
    struct pageset_stats sum;
    pageset_totals(&sum);
    EXPECT(sum.count == 0, "pagesets hold %ld pages after as_reclaim", sum.count);
    EXPECT(!mapped(cb), "chunk freed to the page heap still mapped after as_reclaim");
    EXPECT(zone_check() == 0, "zone inconsistent after as_reclaim");
    struct as_stats as;
    as_stats(&as);
    EXPECT(as.reclaims == 1 && as.released_bytes >= CHUNK_SIZE, "as_stats: %llu reclaims, %llu bytes",
           (unsigned long long)as.reclaims, (unsigned long long)as.released_bytes);

    /* huge_fit_grid: an extent moved off the grid is moved onto it */
    size_t old = 3 * CHUNK_SIZE, map = 4 * CHUNK_SIZE, room = map + CHUNK_SIZE;
    char *area = os_reserve(room + CHUNK_SIZE, CHUNK_SIZE);
    EXPECT(area, "reserve");
    char *r = area + 5 * PAGE_SIZE; /* off the grid */
    os_release(area, 5 * PAGE_SIZE);
    os_release(r + room, CHUNK_SIZE - 5 * PAGE_SIZE);
    for (size_t i = 0; i < old; i += 8) *(uint64_t *)(r + i) = i * 0x9e3779b97f4a7c15ull;
    char *a = huge_fit_grid(r, room, old, map);
    EXPECT(a == area + CHUNK_SIZE, "fit at %p, want %p", (void *)a, (void *)(area + CHUNK_SIZE));
    for (size_t i = 0; i < old; i += 8)
        EXPECT(*(uint64_t *)(a + i) == i * 0x9e3779b97f4a7c15ull, "contents lost at %zu", i);
    EXPECT(mapped(a) && mapped(a + map - 1), "the extent is not mapped");
    EXPECT(!mapped(r) && !mapped(a - 1) && !mapped(a + map), "head or tail left mapped");
    os_release(a, map);
    a = huge_fit_grid(r = os_reserve(room, CHUNK_SIZE), room, old, map); /* on the grid already */
    EXPECT(a == r && mapped(a + map - 1) && !mapped(a + map), "aligned case: tail not cut");
    os_release(a, map);
    puts("release: ok");
    return 0;
}
