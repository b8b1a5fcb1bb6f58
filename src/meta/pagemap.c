/* pagemap: address -> huge extent descriptor, for pointers outside arenas;
 * arena_map: which ARENA_ALIGN-aligned ranges are arenas.
 *
 * Invariant: a leaf, once installed in pagemap_top, is never removed or
 * moved, and entries are published with release stores before any pointer
 * into their range is handed out; free() and realloc() therefore look up
 * metadata with two acquire loads and no lock.  arena_map is static (zero
 * pages until an arena is entered, 1 MiB of address space): free()'s test
 * is one load at a fixed address, no pointer to load first. */
#include "meta.h"

_Atomic uint8_t arena_map[(size_t)1 << (ARENA_MAP_BITS - ARENA_SHIFT)];
/* The first arena's index + 1 (0: none yet), kept apart from arena_map:
 * its entry would be a page of the table of its own (the address space's
 * top, where the kernel maps), written and read by every process; most
 * processes never have a second arena. */
_Atomic uintptr_t arena_first;

_Atomic(_Atomic uintptr_t *) pagemap_top[1u << PAGEMAP_TOP_BITS];

/* Spare leaves (pagemap_spare_ensure) for when meta_alloc fails: a mapping
 * already made (a huge extent the kernel moved) can then always be entered.
 * Two cover any extent of up to one leaf's span. */
static _Atomic(_Atomic uintptr_t *) spare[2];

static _Atomic uintptr_t *leaf_fresh(void) {
    _Atomic uintptr_t *fresh = meta_alloc(sizeof(uintptr_t) << PAGEMAP_LEAF_BITS);
    for (int i = 0; !fresh && i < 2; i++) fresh = atomic_exchange(&spare[i], NULL);
    return fresh;
}

bool pagemap_spare_ensure(void) {
    for (int i = 0; i < 2; i++) {
        if (atomic_load(&spare[i])) continue;
        _Atomic uintptr_t *fresh = meta_alloc(sizeof(uintptr_t) << PAGEMAP_LEAF_BITS), *none = NULL;
        if (!fresh) return false;
        if (!atomic_compare_exchange_strong(&spare[i], &none, fresh))
            return true; /* another thread filled it: fresh is wasted (rare, bounded) */
    }
    return true;
}

/* The leaf covering a; create: allocate it when missing (else NULL). */
static _Atomic uintptr_t *leaf_for(uintptr_t a, bool create) {
    _Atomic(_Atomic uintptr_t *) *slot = &pagemap_top[a >> (CHUNK_SHIFT + PAGEMAP_LEAF_BITS)];
    _Atomic uintptr_t *leaf = atomic_load_explicit(slot, memory_order_acquire);
    if (leaf || !create) return leaf;
    _Atomic uintptr_t *fresh = leaf_fresh();
    if (!fresh) return NULL;
    if (atomic_compare_exchange_strong_explicit(slot, &leaf, fresh, memory_order_acq_rel,
                                                memory_order_acquire))
        return fresh;
    return leaf; /* lost the race: the fresh leaf is wasted (rare, bounded) */
}

/* Clearing an entry never allocates (a missing leaf reads as 0), so it
 * cannot fail. */
bool pagemap_set(uintptr_t addr, uintptr_t entry) {
    if (addr >> PAGEMAP_BITS) return false;
    _Atomic uintptr_t *leaf = leaf_for(addr, entry != 0);
    if (!leaf) return entry == 0;
    atomic_store_explicit(&leaf[(addr >> CHUNK_SHIFT) & ((1u << PAGEMAP_LEAF_BITS) - 1)], entry,
                          memory_order_release);
    return true;
}

void span_map_pages(struct span *s, struct span *v, uint32_t first, uint32_t n) {
    struct chunk *c = s->chunk;
    for (uint32_t i = 0; i < n; i++)
        atomic_store_explicit(&c->span_of[first + i], v, memory_order_release);
}
