/* meta: memory for folio's own descriptors (chunk metas, span descriptors,
 * heaps, pageset arrays).
 *
 * Invariant: metadata is carved from OS reservations and never freed, so a
 * pointer to a descriptor stays a pointer to a descriptor of the same type
 * (type-stable) for the life of the process: lockless readers may see a
 * stale descriptor, never foreign memory. */
#include <string.h>

#include "meta.h"

#define META_RESERVE (4u << 20)

static FORK_STATE lock_t meta_lock = LOCK_INIT(LOCK_RANK_META);
static char *meta_cur, *meta_end;

/* page_start: the block starts on a page (a thread's heap, whose creation
 * writes its first 7 KiB: from mid-page that is three pages, not two).
 * Not for what is written whole (descriptor batches): the gap before each
 * would be a part of a page more per block. */
static void *meta_carve(size_t size, bool page_start) {
    size = (size + CACHELINE - 1) & ~(size_t)(CACHELINE - 1);
    if (size >= META_RESERVE / 4) return os_reserve((size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1), PAGE_SIZE);
    lock_acquire(&meta_lock);
    if (page_start && meta_cur)
        meta_cur = (char *)(((uintptr_t)meta_cur + PAGE_SIZE - 1) & ~(uintptr_t)(PAGE_SIZE - 1));
    if ((size_t)(meta_end - meta_cur) < size) {
        /* under an address space limit, a smaller reservation may still fit */
        size_t want = META_RESERVE;
        char *p = os_reserve(want, PAGE_SIZE);
        if (!p) {
            want = size > META_RESERVE / 16 ? (size + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1) : META_RESERVE / 16;
            p = os_reserve(want, PAGE_SIZE);
        }
        if (!p) {
            lock_release(&meta_lock);
            return NULL;
        }
        meta_cur = p;
        meta_end = p + want;
    }
    void *r = meta_cur;
    meta_cur += size;
    lock_release(&meta_lock);
    return r;
}
void *meta_alloc(size_t size) { return meta_carve(size, false); }
void *meta_alloc_page(size_t size) { return meta_carve(size, true); }

void meta_visit_locks(lock_visit_fn *fn, void *ctx) { fn(ctx, "meta", -1, &meta_lock); }

void meta_lock_all(void) { lock_acquire(&meta_lock); }
void meta_unlock_all(bool child) {
    if (child) lock_reset(&meta_lock);
    else lock_release(&meta_lock);
}
