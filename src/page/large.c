/* large: blocks of whole pages up to 2 MiB, from this CPU's pageset or the
 * zone.
 *
 * Invariants:
 *  - a live large block is a span of kind SPAN_LARGE whose head page (only)
 *    maps to it, so a lookup of any other page of it finds no span;
 *  - the caller (api) counts the block and runs the maintenance tick: this
 *    file calls nothing above the page layer. */
#include <errno.h>

#include "page.h"

/* growable: the block is being moved by a growing realloc, which will
 * likely grow it again; it comes from the zone, where the pages after it
 * stay free for zone_resize, not from a pageset (whose carved tail would
 * sit on the pageset's lists and force a copy on every growth). */
struct span *large_alloc(size_t n, size_t align, bool zero, bool growable) {
    size_t npages = growable ? (n + PAGE_SIZE - 1) >> PAGE_SHIFT : large_pages(n);
    size_t align_pages = align > PAGE_SIZE ? align >> PAGE_SHIFT : 1;
    struct span *s = growable ? zone_alloc_growable(npages ? npages : 1, align_pages)
                              : page_alloc(npages ? npages : 1, align_pages);
    if (unlikely(!s)) { /* a mapping failed: give address space back, retry once */
        as_reclaim();
        s = zone_alloc_pages(npages ? npages : 1, align_pages);
        if (!s) {
            errno = ENOMEM;
            return NULL;
        }
    }
    if (zero) { /* calloc: the caller uses the block next; a recycled block is taken as hot */
        if (s->flags & SPAN_ZEROED) {
            clear_zero_skipped(n);
            /* the request's pages only: a class's pages past n may never be touched */
            thp_populate(s->start, (n + PAGE_SIZE - 1) & ~(size_t)(PAGE_SIZE - 1), zone_chunk_huge(s));
        }
        else clear_hint(s->start, n, FOLIO_CLEAR_TOUCH);
    }
    s->flags = 0;
    span_set_kind(s, SPAN_LARGE);
    span_map_pages(s, s, s->page_idx, 1);
    return s;
}

void large_unmap(struct span *s, void *p) {
    if (unlikely(p != s->start)) os_fatal_ptr("free(): invalid pointer", p);
    span_map_pages(s, NULL, s->page_idx, 1);
    span_set_kind(s, SPAN_TAKEN);
    s->flags = 0;
}

void large_free(struct span *s, void *p) {
    large_unmap(s, p);
    page_free(s);
}

/* The block a growing realloc moved away from goes to the buddy lists, not
 * to a pageset or a thread's cache: there it merges with its free
 * neighbours at once, so that the blocks around it can grow into its pages
 * in place and larger blocks can be carved from them, where a cached copy
 * would stay resident, unmerged, in the way of both, while every buffer in
 * the program is larger than it. */
void large_free_merged(struct span *s, void *p) {
    large_unmap(s, p);
    zone_free_span(s);
}

void large_reuse(struct span *s, size_t n, bool zero) {
    if (zero) clear_hint(s->start, n, FOLIO_CLEAR_TOUCH);
    s->flags = 0;
    span_set_kind(s, SPAN_LARGE);
    span_map_pages(s, s, s->page_idx, 1);
}

bool large_resize(struct span *s, size_t npages) { return zone_resize(s, npages); }
