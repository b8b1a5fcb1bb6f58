/* Unit test: the lookup free() uses (span_lookup).  With arenas of 8 MiB
 * (the test runs itself again with FOLIO_ARENA_MIB=8, so that an arena is
 * smaller than its aligned range): a small and a large block resolve to
 * their span, whose chunk meta is at the address computed from the
 * pointer; the arena's head lies in the objmap words of the metadata
 * pages, none of which reads as a slab page's; the arena's metadata pages, the address just past the arena's
 * reservation (also once something else is mapped there), a huge extent, a
 * stack and a static address, NULL and addresses beyond 48 bits resolve to
 * no span; the huge extent is found in the pagemap instead. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "api_layer.h"
#include "unit.h"

static int some_static;

static bool covers(const struct span *s, const void *p) {
    return s && (const char *)p >= s->start && (const char *)p < s->start + ((size_t)s->npages << PAGE_SHIFT);
}

int main(int argc, char **argv) {
    (void)argc;
    const char *mib = getenv("FOLIO_ARENA_MIB");
    if (!mib || strcmp(mib, "8") != 0) { /* options are read once: run again with the option set */
        setenv("FOLIO_ARENA_MIB", "8", 1);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "FAIL: execv /proc/self/exe: %s\n", strerror(errno));
        return 1;
    }
    folio_init();
    EXPECT(opt.arena_mib == 8, "FOLIO_ARENA_MIB is %ld, want 8", opt.arena_mib);
    opt.heap_dense_kib = 0; /* slabs and the page heap from the first block (no dense heap) */

    /* arena pointers: a slab object and a large block */
    char *small = malloc(100), *large = malloc(100000);
    EXPECT(small && large, "malloc");
    struct span *s = span_lookup((uintptr_t)small), *l = span_lookup((uintptr_t)large);
    EXPECT(arena_owns((uintptr_t)small) && covers(s, small) && span_kind(s) == SPAN_SLAB, "small block's span");
    EXPECT(covers(l, large) && span_kind(l) == SPAN_LARGE && l->start == large, "large block's span");
    EXPECT(span_lookup((uintptr_t)small + 50) == s, "interior pointer: another span");
    EXPECT(chunk_of((uintptr_t)small) == s->chunk && chunk_base(s->chunk) ==
               (char *)((uintptr_t)small & ~(uintptr_t)(CHUNK_SIZE - 1)),
           "chunk meta of the small block not at its computed address");
    EXPECT(arena_slot((uintptr_t)small) == &s->chunk->span_of[((uintptr_t)small >> PAGE_SHIFT) % CHUNK_PAGES],
           "the slot is not the chunk meta's entry");
    EXPECT(pagemap_get((uintptr_t)small) == 0 && pagemap_get((uintptr_t)large) == 0, "arena block in the pagemap");

    /* the arena's metadata: no span covers it */
    uintptr_t base = arena_base((uintptr_t)small);
    for (size_t pg = 0; pg < ARENA_META_PAGES; pg += 16)
        EXPECT(span_lookup(base + (pg << PAGE_SHIFT)) == NULL, "metadata page %zu has a span", pg);
    EXPECT(span_lookup(base + ((size_t)ARENA_META_PAGES << PAGE_SHIFT) - 1) == NULL, "last metadata byte");
    /* the head is the objmap words of the metadata pages (one page fewer):
     * none may read as a word of a heap's slab page (OBJMAP_CARVED set),
     * or free() would take a pointer into the metadata for an object */
    EXPECT((void *)arena_head_of(base) == (void *)arena_objmap_slot(base), "head not at the objmap's start");
    EXPECT(arena_head_of(base)->state[0] == CHUNK_IN_ZONE, "the first chunk's state");
    for (size_t pg = 0; pg < ARENA_META_PAGES; pg++)
        EXPECT(!(atomic_load(arena_objmap_slot(base + (pg << PAGE_SHIFT))) & OBJMAP_CARVED),
               "metadata page %zu's objmap word (the head) has the carved bit", pg);
    uint32_t sw = atomic_load(arena_objmap_slot((uintptr_t)small));
    EXPECT((sw & OBJMAP_CARVED) && ((sw >> 16) & 0xff) == s->cls, "the small block's objmap word %#x", sw);

    /* just past the 8 MiB reservation, inside the aligned range: an arena
     * address without a span, and still none once something is mapped there */
    uintptr_t past = base + ((size_t)8 << 20);
    EXPECT(arena_owns(past) && span_lookup(past) == NULL, "just past the arena: owned %d, span %p",
           arena_owns(past), (void *)span_lookup(past));
    char *foreign = mmap((void *)past, PAGE_SIZE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (foreign == (char *)past) {
        foreign[0] = 1;
        EXPECT(span_lookup(past) == NULL && pagemap_get(past) == 0, "foreign mapping past the arena");
        munmap(foreign, PAGE_SIZE);
    } else if (foreign != MAP_FAILED) {
        munmap(foreign, PAGE_SIZE); /* an old kernel took it as a hint: nothing to test */
    }
    EXPECT(span_lookup(base + ARENA_ALIGN - 1) == NULL, "last byte of the aligned range");

    /* a huge extent: not in an arena's table, in the pagemap */
    char *huge = malloc(5 << 20);
    EXPECT(huge, "malloc 5 MiB");
    EXPECT(span_lookup((uintptr_t)huge) == NULL && span_lookup((uintptr_t)huge + (4 << 20)) == NULL,
           "huge extent found in an arena");
    EXPECT(pagemap_get((uintptr_t)huge) & PAGEMAP_HUGE_TAG, "huge extent not in the pagemap");

    /* addresses folio never owns */
    int on_stack;
    EXPECT(!arena_owns((uintptr_t)&on_stack) && span_lookup((uintptr_t)&on_stack) == NULL, "stack address");
    EXPECT(span_lookup((uintptr_t)&some_static) == NULL, "static address");
    EXPECT(!arena_owns(0) && span_lookup(0) == NULL, "NULL");
    EXPECT(span_lookup((uintptr_t)1 << 48) == NULL && span_lookup(~(uintptr_t)0) == NULL,
           "address beyond 48 bits");
    EXPECT(span_lookup(((uintptr_t)1 << 48) + ((uintptr_t)small & (((uintptr_t)1 << 48) - 1))) == NULL,
           "a small block's address plus 2^48");

    free(small);
    free(large);
    free(huge);
    EXPECT(zone_check() == 0, "zone inconsistent");
    puts("lookup: ok");
    return 0;
}
