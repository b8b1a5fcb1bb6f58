/* bigcache: each thread's cache of the large blocks (32-256 KiB) it freed,
 * by page count (a request takes one of its count or up to 1/8 more), so that a thread whose bursts take and free such
 * blocks takes no lock for them (the pagesets' trylock and the zone lock
 * are shared with every thread of a CPU, or with all).
 *
 * Invariants:
 *  - only the owner thread touches its cache (no atomic instruction);
 *  - a kept block is kind SPAN_TAKEN and no page maps to it (large_unmap),
 *    so a free of it while kept is refused as an invalid pointer;
 *  - big_pages (the pages kept) never exceeds big_high, and big_high stays
 *    within [0, FOLIO_HEAP_BIG_CACHE_KIB]: it grows when a miss is for a
 *    page count the thread gave the page heap for want of room (by the
 *    pages it gave: a burst it could not hold), not on any miss (a mix of
 *    sizes that never repeat would fill the cache for nothing), and halves
 *    each purge delay without such a miss (struct cache_high, decayed with
 *    the slab cache by heap_decay_current);
 *  - except in a small heap (the zone at most SMALL_HEAP_PAGES): there the
 *    cache keeps what it is given up to FOLIO_HEAP_BIG_CACHE_KIB whatever
 *    its high, and a request no kept block of its size serves takes the
 *    smallest larger one, cut to the request (the tail goes back to the
 *    zone, resident).  A small program's buffers of sizes that never repeat
 *    (python's reads of .pyc files: 8-51 pages, each malloc'd, shrunk and
 *    freed) then reuse the pages the last one left resident, as glibc's
 *    heap does, where the page heap would hand each a fresh run while the
 *    freed ones wait out the purge delay; the decay still empties the cache
 *    once per delay, and so does the first put once the heap is no longer
 *    small (a heap that grows by realloc, whose moves bypass the cache,
 *    would otherwise keep a megabyte it never takes back). */
#include "obj.h"

static void heap_big_return(struct heap *h);
static long big_max_pages(void) { return (long)(opt.heap_big_cache_kib >> (PAGE_SHIFT - 10)); }

#define SMALL_HEAP_PAGES (4 * CHUNK_PAGES) /* 8 MiB: small programs, below any huge-page rule */
static bool small_heap(void) { return zone_managed_pages() <= SMALL_HEAP_PAGES; }

struct span *heap_big_get(size_t npages) {
    struct heap *h = heap_current();
    if (!h) return NULL;
    if (h->big_pages && !small_heap() && !zone_large_fits_hint(npages)) {
        /* the page heap would start a chunk for this block while the kept
         * ones sit between free pages they could merge with: they go back
         * to the buddy lists first (the kernel drains its per-CPU lists
         * before it gives up on a high-order block) */
        heap_big_return(h);
        HEAP_COUNT(h->big_cache_returns, 1);
    }
    if (npages > BIG_CACHE_PAGES) return NULL;
    /* a kept block up to 1/8 larger serves too (its tail is the slack a
     * large block may have anyway), so a mix of sizes still hits */
    size_t last = npages + npages / 8;
    for (size_t n = npages; n <= last && n <= BIG_CACHE_PAGES && h->big_pages; n++) {
        struct span *s = h->big[n];
        if (!s) continue;
        h->big[n] = s->next;
        h->big_pages -= (long)n;
        HEAP_COUNT(h->big_cache_hits, 1);
        return s;
    }
    if (h->big_pages && small_heap()) /* the smallest larger block, cut to size */
        for (size_t n = last + 1; n <= BIG_CACHE_PAGES; n++) {
            struct span *s = h->big[n];
            if (!s) continue;
            h->big[n] = s->next;
            h->big_pages -= (long)n;
            HEAP_COUNT(h->big_cache_hits, 1);
            large_resize(s, npages); /* if it fails (no descriptor), s serves whole */
            return s;
        }
    uint64_t want = ((uint64_t)2 << (last < BIG_CACHE_PAGES ? last - 1 : BIG_CACHE_PAGES - 1)) - ((uint64_t)1 << (npages - 1));
    if (h->big_given_sizes & want) { /* it gave away what it now needs: hold it next time */
        cache_high_raise(&h->big_high, big_max_pages());
        h->big_given_sizes = 0;
    }
    return NULL;
}

bool heap_big_put(struct span *s) {
    struct heap *h = heap_current();
    if (!h || s->npages > BIG_CACHE_PAGES) return false;
    long high = h->big_high.high;
    if (small_heap()) high = big_max_pages();
    else if (h->big_pages > high) heap_big_drain(h, high); /* kept while the heap was small */
    if (h->big_pages + (long)s->npages > high) {
        cache_high_give(&h->big_high, (long)s->npages);
        h->big_given_sizes |= (uint64_t)1 << (s->npages - 1);
        return false;
    }
    s->next = h->big[s->npages];
    h->big[s->npages] = s;
    h->big_pages += s->npages;
    return true;
}

/* Kept blocks back, the largest first, until keep_pages remain: to the
 * page heap (the pagesets), or with merge to the buddy lists, all in one
 * zone lock hold. */
static void big_give(struct heap *h, long keep_pages, bool merge) {
    struct span *list = NULL;
    for (unsigned n = BIG_CACHE_PAGES; n > 0 && h->big_pages > keep_pages; n--) {
        while (h->big[n] && h->big_pages > keep_pages) {
            struct span *s = h->big[n];
            h->big[n] = s->next;
            h->big_pages -= n;
            if (merge) {
                s->next = list;
                list = s;
            } else {
                page_free(s);
            }
        }
    }
    if (list) zone_free_bulk(list);
}
static void heap_big_return(struct heap *h) { big_give(h, 0, true); }
void heap_big_drain(struct heap *h, long keep_pages) { big_give(h, keep_pages, false); }
