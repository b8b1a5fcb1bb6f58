/* locks: the page layer's locks, all at once, for fork.
 * Invariant: taken in rank order (huge < each pageset < zone) and released
 * in reverse, so the fork handler adds no order of its own. */
#include "page.h"

void page_lock_all(void) {
    huge_lock_all();
    pageset_lock_all();
    zone_lock_all();
}

void page_unlock_all(bool child) {
    zone_unlock_all(child);
    pageset_unlock_all(child);
    huge_unlock_all(child);
}

/* every lock of the page layer, for the report */
void page_visit_locks(lock_visit_fn *fn, void *ctx) {
    huge_visit_locks(fn, ctx);
    pageset_visit_locks(fn, ctx);
    zone_visit_locks(fn, ctx);
}

/* malloc_trim: every free page back to the kernel (the pagesets drained
 * first, so their pages merge and purge with the zone's). */
size_t page_trim(void) {
    pageset_drain_all();
    return zone_purge(true, 0) + huge_purge(true);
}
