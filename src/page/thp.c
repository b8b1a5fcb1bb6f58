/* thp: which of the zone's 2 MiB chunks the kernel should back with huge
 * pages, and what may be faulted in ahead of use (issue 14, seed 001).
 *
 * A chunk is the kernel's PMD unit: backed by one huge page it takes one
 * fault instead of 512, but all of it is resident from the first touch.
 * So only a chunk that will be dense is advised (MADV_HUGEPAGE):
 *  - FOLIO_THP=auto: a chunk the zone starts to use untouched, once the
 *    heap holds THP_HEAP_PAGES (the zone places blocks in the fullest
 *    chunk first, so a chunk is opened only when the others are full, and
 *    a heap that large keeps filling it; below that, the chunks partly
 *    used cost too large a share of the heap: docs/notes/startup.md has
 *    the trade-off), or from THP_DENSE_HEAP_PAGES, when the chunks started
 *    before it were written as densely as they were handed out (below:
 *    the dense run), or when the zone's chunks hold resident at least
 *    THP_WRITTEN_NUM/DEN (3/4) of the pages handed out (the written rule:
 *    a heap that writes what it is given, and keeps what it freed for
 *    reuse, ends up with its chunks resident whole; one whose blocks are
 *    written in part, or whose slabs are carved as objects go out, shows
 *    much less; below 3/4, a heap that settles with a fifth of its chunks
 *    untouched would pay that fifth: docs/notes/startup.md, session 33); a
 *    chunk that filled up before,
 *    as 4 KiB pages, is collapsed later by the purger (MADV_COLLAPSE) once
 *    at most 1/16 of it is free at two of its passes, a purge delay apart
 *    (thp_collapse_pass);
 *  - always: every chunk the zone starts to use; never: none (and, where
 *    the system backs everything, each arena is advised MADV_NOHUGEPAGE);
 *  - the system's settings bound all of it: where no size is allowed
 *    (PMD size and every smaller size "never") nothing is advised or
 *    collapsed.  Read once, when first needed: a small program under auto
 *    never reads them.
 * An advised chunk stays whole: the purger leaves its partly free blocks
 * (counted) while more than half of it is in use, unless memory pressure
 * or malloc_trim says otherwise; a chunk purged in part is first advised
 * MADV_NOHUGEPAGE (SPLIT), so that khugepaged does not fill it back up.
 * Batched faulting (MADV_POPULATE_WRITE) is for memory certain to be
 * written soon, in a heap of THP_HEAP_PAGES, outside huge chunks (one
 * huge fault covers those); a kernel without it turns it off silently.
 * State changes of a chunk happen under the zone lock (zone.c calls in). */
#include "page.h"

static struct os_thp sys;
static _Atomic int sys_state; /* 0 unread, 1 reading, 2 read */
static _Atomic uint64_t advised, collapsed, split, skipped, populated_bytes, regions_advised;
static _Atomic int populate_off; /* the kernel refused MADV_POPULATE_WRITE */

const struct os_thp *thp_system(void) {
    int s = atomic_load_explicit(&sys_state, memory_order_acquire);
    if (s == 2) return &sys;
    int expected = 0;
    if (s == 0 && atomic_compare_exchange_strong(&sys_state, &expected, 1)) {
        os_thp_read(&sys);
        atomic_store_explicit(&sys_state, 2, memory_order_release);
        return &sys;
    }
    while (atomic_load_explicit(&sys_state, memory_order_acquire) != 2) {
    }
    return &sys;
}

/* A fork child: a thread that was reading the settings is not there. */
void thp_after_fork_child(void) {
    int reading = 1; /* a locked cmpxchg writes even when it fails: a copied page per fork */
    if (atomic_load_explicit(&sys_state, memory_order_relaxed) == reading)
        atomic_compare_exchange_strong(&sys_state, &reading, 0);
}

/* Some page size above 4 KiB may back an advised range. */
static bool system_allows(const struct os_thp *t) {
    for (int i = 0; i < OS_THP_SIZES; i++)
        if (t->size_mode[i] == OS_THP_MADVISE || t->size_mode[i] == OS_THP_ALWAYS) return true;
    return t->pmd == OS_THP_MADVISE || t->pmd == OS_THP_ALWAYS;
}

static bool huge(uint8_t state) { return state == CHUNK_HUGE_ADVISED || state == CHUNK_HUGE_COLLAPSED; }
/* a chunk's state, read with an atomic load: a chunk may change zones (zone.c), so its
 * state is written under one zone's lock and read under another's */
static uint8_t state_of(const uint8_t *state) { return __atomic_load_n(state, __ATOMIC_RELAXED); }

/* auto, in a heap of THP_DENSE_HEAP_PAGES up to THP_HEAP_PAGES: a new chunk
 * is advised when the last two chunks of its type the zone started before
 * it (each the one it was filling then: fullest first) were found dense
 * when their successors were started: handed out (at most 1/16 of the chunk
 * free in the zone) and written (13/16 of its pages resident, mincore).  A
 * heap that grows that way fills the next chunk too.  A heap whose pages
 * are handed out but written slowly (slabs carved as objects are handed
 * out, pagesets' cached blocks, threads that come and go) showed from a few
 * to 3/4 of them resident, the first-touch heaps 86 % and more (docs/notes/
 * startup.md, session 9).  Where the system allows no huge page nothing is
 * read.  Checked from THP_DENSE_WATCH_PAGES, so that the
 * run can be there when the heap reaches THP_DENSE_HEAP_PAGES. */
#define THP_DENSE_RESIDENT (CHUNK_PAGES * 13 / 16)
#define THP_DENSE_RUN 2
static char *last_started[2];    /* by chunk type; under the zone lock */
static unsigned dense_run[2];    /* chunks of the type found dense in a row */

static uint32_t chunk_idx(const char *base) { return (uint32_t)(((uintptr_t)base >> CHUNK_SHIFT) & (ARENA_CHUNKS - 1)); }

/* the pages of chunk base resident now: a huge one whole (the zone's count
 * is all there is), else by mincore */
size_t thp_chunk_resident(char *base) {
    struct arena_head *h = arena_head_of((uintptr_t)base);
    if (huge(__atomic_load_n(&h->huge[chunk_idx(base)], __ATOMIC_RELAXED))) return CHUNK_PAGES;
    long n = os_resident_pages(base, CHUNK_SIZE);
    return n > 0 ? (size_t)n : 0;
}

/* base is the chunk the zone fills now (started whole, of its type):
 * true if this and the chunks started before it make a dense run. */
static bool dense_run_at(char *base, bool check) {
    struct arena_head *h = arena_head_of((uintptr_t)base);
    unsigned type = __atomic_load_n(&h->type[chunk_idx(base)], __ATOMIC_RELAXED) & 1;
    char *prev = last_started[type];
    last_started[type] = base;
    if (!check || !prev || prev == base) return false;
    struct arena_head *ph = arena_head_of((uintptr_t)prev);
    uint32_t i = chunk_idx(prev);
    /* prev may be another zone's chunk (zone.c): its counts are read as they are */
    bool dense = ph->state[i] == CHUNK_IN_ZONE && __atomic_load_n(&ph->free_pages[i], __ATOMIC_RELAXED) <= CHUNK_PAGES / 16 &&
                 thp_chunk_resident(prev) >= THP_DENSE_RESIDENT;
    dense_run[type] = dense ? dense_run[type] + 1 : 0;
    return dense_run[type] >= THP_DENSE_RUN;
}

/* Advice decided under the zone lock is given once it is released
 * (thp_advise_flush, from zone_unlock): MADV_HUGEPAGE takes the process's
 * mmap lock for writing, so it waits for every page fault in progress,
 * and under the zone lock that wait stalled every thread that needed pages
 * meanwhile.  The chunk is marked advised at once (the zone's decisions
 * read the mark); advice the kernel refuses takes the mark back, unless
 * the zone changed it meanwhile.  The taker advises before it touches the
 * chunk; another thread that takes a block of it in between and writes it
 * first leaves it in 4 KiB pages (khugepaged may collapse it later).  A
 * hold of the zone lock starts one or two chunks; past ADVISE_PENDING_MAX
 * a chunk is not advised (a few: the library's TLS is small, for dlopen). */
#define ADVISE_PENDING_MAX 4
__thread unsigned thp_advise_pending_n; /* tl_advise's count (page.h reads it inline) */
static __thread struct {
    struct {
        char *base;
        uint8_t *state; /* the chunk's huge-page state */
    } chunk[ADVISE_PENDING_MAX];
    uint8_t before[ADVISE_PENDING_MAX]; /* the state it had */
} tl_advise __attribute__((tls_model("initial-exec")));

static void advise_now(char *base, uint8_t *state, uint8_t before) {
    if (os_advise_huge(base, CHUNK_SIZE, true)) return;
    uint8_t marked = CHUNK_HUGE_ADVISED;
    if (__atomic_compare_exchange_n(state, &marked, before, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        atomic_fetch_sub_explicit(&advised, 1, memory_order_relaxed);
}

void thp_advise_flush(void) {
    unsigned n = thp_advise_pending_n;
    thp_advise_pending_n = 0;
    for (unsigned i = 0; i < n; i++)
        advise_now(tl_advise.chunk[i].base, tl_advise.chunk[i].state, tl_advise.before[i]);
}

void thp_chunk_used(char *base, uint8_t *state, bool untouched, size_t heap_pages) {
    if (opt.thp == FOLIO_THP_NEVER) return;
    bool check = opt.thp == FOLIO_THP_AUTO && untouched && heap_pages >= THP_DENSE_WATCH_PAGES &&
                 heap_pages < THP_HEAP_PAGES && system_allows(thp_system());
    bool dense = dense_run_at(base, check) && heap_pages >= THP_DENSE_HEAP_PAGES;
    if (huge(state_of(state))) return;
    if (check && !dense && heap_pages >= THP_DENSE_HEAP_PAGES) /* the written rule (mincore per chunk) */
        dense = zone_chunks_resident() * THP_WRITTEN_DEN >= heap_pages * THP_WRITTEN_NUM;
    if (opt.thp == FOLIO_THP_AUTO && (!untouched || (heap_pages < THP_HEAP_PAGES && !dense))) return;
    const struct os_thp *t = thp_system();
    if (!system_allows(t)) return;
    /* under enabled=always the kernel backs the chunk anyway; a SPLIT chunk
     * carries MADV_NOHUGEPAGE, which only MADV_HUGEPAGE lifts */
    uint8_t before = state_of(state);
    bool advise = t->pmd != OS_THP_ALWAYS || before == CHUNK_HUGE_SPLIT;
    if (advise && thp_advise_pending_n == ADVISE_PENDING_MAX) return; /* not advised (not seen: a hold starts one or two) */
    __atomic_store_n(state, (uint8_t)CHUNK_HUGE_ADVISED, __ATOMIC_RELAXED); /* zone_chunk_huge reads it unlocked */
    atomic_fetch_add_explicit(&advised, 1, memory_order_relaxed);
    if (!advise) return;
    unsigned n = thp_advise_pending_n;
    tl_advise.chunk[n].base = base;
    tl_advise.chunk[n].state = state;
    tl_advise.before[n] = before;
    thp_advise_pending_n = n + 1;
}

void thp_arena_reserved(void *p, size_t size) {
    if (opt.thp != FOLIO_THP_NEVER) return;
    if (thp_system()->pmd == OS_THP_ALWAYS) os_advise_huge(p, size, false);
}

/* A region of huge blocks (above 2 MiB): a program asked for that much at
 * once, so it is advised whole unless FOLIO_THP=never or the system says
 * never (a block only partly written then costs at most 2 MiB more per
 * touched huge page; its purges split a huge page only at its ends). */
void thp_huge_region(void *p, size_t size) {
    if (opt.thp == FOLIO_THP_NEVER) return;
    const struct os_thp *t = thp_system();
    if (!system_allows(t) || t->pmd == OS_THP_ALWAYS) return; /* always: backed without advice */
    if (os_advise_huge(p, size, true)) atomic_fetch_add_explicit(&regions_advised, 1, memory_order_relaxed);
}

bool thp_keep_whole(uint8_t state, uint32_t chunk_free_pages, bool all) {
    /* the last measured pressure: this runs under the zone lock, which a
     * measurement (file reads) should not hold up */
    if (!huge(state) || all || chunk_free_pages * 2 >= CHUNK_PAGES || pressure_peek() != 0) return false;
    atomic_fetch_add_explicit(&skipped, 1, memory_order_relaxed);
    return true;
}

bool thp_split(uint8_t *state) {
    if (!huge(state_of(state))) return false;
    __atomic_store_n(state, (uint8_t)CHUNK_HUGE_SPLIT, __ATOMIC_RELAXED);
    atomic_fetch_add_explicit(&split, 1, memory_order_relaxed);
    return true;
}

bool thp_collapse_wanted(uint8_t state, uint32_t chunk_free_pages, size_t heap_pages) {
    if (opt.thp == FOLIO_THP_NEVER || state != CHUNK_HUGE_NONE) return false;
    if (chunk_free_pages > CHUNK_PAGES / 16 || heap_pages < THP_HEAP_PAGES) return false;
    return system_allows(thp_system());
}

/* A collapse copies the chunk into a fresh huge page (2 MiB, and the kernel
 * may compact memory to find one): worth it for a chunk that stays dense,
 * not for one a churning heap is about to free, nor in a program that ends
 * within a second.  So, as khugepaged waits for a range to stay, a chunk is
 * collapsed only when it was dense at the pass before too. */
bool thp_collapse_pass(uint8_t *state, uint32_t chunk_free_pages, size_t heap_pages) {
    uint8_t s = state_of(state);
    if (s != CHUNK_HUGE_NONE && s != CHUNK_HUGE_DENSE) return false;
    bool dense = thp_collapse_wanted(CHUNK_HUGE_NONE, chunk_free_pages, heap_pages);
    if (dense && s == CHUNK_HUGE_DENSE) return true;
    __atomic_store_n(state, (uint8_t)(dense ? CHUNK_HUGE_DENSE : CHUNK_HUGE_NONE), __ATOMIC_RELAXED);
    return false;
}

void thp_collapsed(uint8_t *state, bool ok) {
    __atomic_store_n(state, (uint8_t)(ok ? CHUNK_HUGE_COLLAPSED : CHUNK_HUGE_REFUSED), __ATOMIC_RELAXED);
    if (ok) atomic_fetch_add_explicit(&collapsed, 1, memory_order_relaxed);
}

bool thp_populate(void *p, size_t bytes, uint8_t chunk_state) {
    /* the heap's size first: a small heap reads nothing of thp.c's own
     * (populate_off's page, a fault of its own in a small program) */
    if (!opt.populate || huge(chunk_state) || zone_in_use_pages() < THP_HEAP_PAGES ||
        atomic_load_explicit(&populate_off, memory_order_relaxed))
        return false;
    if (os_populate_write(p, bytes)) {
        atomic_fetch_add_explicit(&populated_bytes, bytes, memory_order_relaxed);
        return true;
    }
    atomic_store_explicit(&populate_off, 1, memory_order_relaxed); /* an old kernel: EINVAL */
    return false;
}

void thp_stats(struct thp_stats *st) {
    st->advised = atomic_load_explicit(&advised, memory_order_relaxed);
    st->collapsed = atomic_load_explicit(&collapsed, memory_order_relaxed);
    st->split = atomic_load_explicit(&split, memory_order_relaxed);
    st->purges_skipped = atomic_load_explicit(&skipped, memory_order_relaxed);
    st->populated_bytes = atomic_load_explicit(&populated_bytes, memory_order_relaxed);
    st->regions_advised = atomic_load_explicit(&regions_advised, memory_order_relaxed);
}
