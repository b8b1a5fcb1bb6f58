/* reclaim: giving address space back when a mapping fails.
 *
 * Address space is a resource like memory: under RLIMIT_AS (ulimit -v), or
 * when the kernel refuses a mapping for any other reason, the free memory
 * folio keeps mapped (the huge-extent cache, the pagesets' and the calling
 * thread's cached blocks, whole free zone chunks, the arena's never-used
 * tail) is what stands between the program and ENOMEM.
 *
 * Invariants:
 *  - a mapping that fails deep inside a tier (zone growth, a huge extent,
 *    metadata) is not retried there: those places hold locks.  The failure
 *    travels up as NULL to the tier's entry point (small_alloc_slow,
 *    large_alloc, huge_alloc, huge_realloc), which holds no folio lock, calls
 *    as_reclaim once and retries once; a second failure is ENOMEM;
 *  - as_reclaim gives back in order of cheapness: every huge range not in
 *    use (unmapped), the calling thread's empty slabs and the abandoned empty ones,
 *    every pageset (drained to the zone, so buddies merge into whole chunks),
 *    then every whole free zone chunk and the arena tail (unmapped);
 *  - it takes each module's lock in turn through that module's own calls and
 *    never two at once from here, so it adds no lock order of its own. */
#include "page.h"

static _Atomic uint64_t reclaims, released_bytes;

void as_reclaim(void) {
    size_t released = huge_release();
    if (obj_hooks->give_back) obj_hooks->give_back(); /* the object layer's empty slabs */
    pageset_drain_all();
    released += zone_release_free();
    atomic_fetch_add_explicit(&reclaims, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&released_bytes, released, memory_order_relaxed);
}

void as_stats(struct as_stats *st) {
    st->reclaims = atomic_load_explicit(&reclaims, memory_order_relaxed);
    st->released_bytes = atomic_load_explicit(&released_bytes, memory_order_relaxed);
}
