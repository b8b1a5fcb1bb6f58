/* Unit test: the invariant checks of the zone, the pagesets, the calling
 * thread's slabs and the dense heap (zone_check, pageset_check,
 * slab_check_current, dense_check) find
 * nothing wrong after random sequences of operations (malloc/free of every
 * tier, frees by other threads, short threads that exit with blocks still
 * live, malloc_trim, pageset blocks taken and given back directly), checked
 * every K operations while another thread frees into this thread's slabs;
 * and each check does report a deliberate corruption (a check that cannot
 * fail checks nothing). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "api_layer.h"
#include "unit.h"

#define SLOTS 2048
#define OPS 30000
#define K 50
#define HANDOFF 256

static void *slot[SLOTS];
static struct span *pspan[64];

static unsigned rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* sizes of every tier: small, medium slabs, large blocks, now and then huge */
static size_t rnd_size(unsigned *s) {
    unsigned t = rnd(s) % 100;
    if (t < 70) return 1 + rnd(s) % 1024;
    if (t < 90) return 1025 + rnd(s) % (32 << 10);
    if (t < 99) return (32 << 10) + rnd(s) % (512 << 10);
    return (1u << 20) + rnd(s) % (4u << 20);
}

/* a thread that frees blocks the main thread allocated (remote frees) */
struct handoff {
    pthread_t t;
    void *p[HANDOFF];
    int n;
};
static void *free_them(void *arg) {
    struct handoff *h = arg;
    for (int i = 0; i < h->n; i++) free(h->p[i]);
    return NULL;
}

/* a short thread: allocates, frees some, checks its own heap, exits with the
 * rest live (the main thread frees them into abandoned slabs) */
struct shortlived {
    unsigned seed;
    void *p[HANDOFF];
    int n;
    size_t bad;
};
static void *live_and_exit(void *arg) {
    struct shortlived *sl = arg;
    for (int i = 0; i < HANDOFF; i++) {
        sl->p[i] = malloc(rnd_size(&sl->seed) % 4096 + 1);
        if (sl->p[i]) memset(sl->p[i], 0x5a, 8);
    }
    for (int i = 0; i < HANDOFF; i += 2) {
        free(sl->p[i]);
        sl->p[i] = NULL;
    }
    sl->bad = slab_check_current();
    for (int i = 1; i < HANDOFF; i += 2) sl->p[sl->n++] = sl->p[i];
    return NULL;
}

static int check_all(const char *when, int step) {
    size_t z = zone_check(), p = pageset_check(), s = slab_check_current(), d = dense_check();
    EXPECT(z == 0 && p == 0 && s == 0 && d == 0, "%s, step %d: zone %zu, pageset %zu, slab %zu, dense %zu violations",
           when, step, z, p, s, d);
    return 0;
}

static int random_ops(unsigned seed) {
    struct handoff *ho = NULL;
    for (int step = 0; step < OPS; step++) {
        unsigned r = rnd(&seed) % 1000;
        int i = (int)(rnd(&seed) % SLOTS);
        if (r < 450) {
            free(slot[i]);
            slot[i] = malloc(rnd_size(&seed));
            EXPECT(slot[i], "malloc failed at step %d", step);
            memset(slot[i], 0xa5, 16);
        } else if (r < 880) {
            free(slot[i]);
            slot[i] = NULL;
        } else if (r < 885) {
            malloc_trim(0);
        } else if (r < 940) {
            int j = (int)(rnd(&seed) % 64);
            unsigned o = rnd(&seed) % (PCP_MAX_ORDER + 1);
            if (pspan[j]) {
                pageset_free_on(0, pspan[j], (unsigned)__builtin_ctz(pspan[j]->npages));
                pspan[j] = NULL;
            } else {
                EXPECT(pspan[j] = pageset_alloc_on(0, o), "pageset_alloc_on order %u", o);
                EXPECT(pspan[j]->npages == (1u << o), "order %u: %u pages", o, pspan[j]->npages);
            }
        } else if (r < 985) { /* hand blocks to a thread that frees them while we go on */
            if (ho) {
                pthread_join(ho->t, NULL);
                free(ho);
            }
            ho = calloc(1, sizeof *ho);
            EXPECT(ho, "calloc");
            for (int k = 0; k < SLOTS && ho->n < HANDOFF; k++) {
                int j = (i + k) % SLOTS;
                if (slot[j]) ho->p[ho->n++] = slot[j], slot[j] = NULL;
            }
            EXPECT(pthread_create(&ho->t, NULL, free_them, ho) == 0, "pthread_create");
        } else { /* a thread exits with blocks live; we free them later */
            struct shortlived sl = {.seed = seed + (unsigned)step};
            pthread_t t;
            EXPECT(pthread_create(&t, NULL, live_and_exit, &sl) == 0, "pthread_create");
            pthread_join(t, NULL);
            EXPECT(sl.bad == 0, "step %d: the exiting thread's heap: %zu violations", step, sl.bad);
            /* its slabs went to the abandoned lists: no objmap word names a
             * dead heap, but those of its floating slabs (on no list: they
             * stay its heap's, for the next thread that takes the heap, until
             * other threads' frees take them) */
            for (int k = 0; k < sl.n; k++) {
                uint32_t w = atomic_load(arena_objmap_slot((uintptr_t)sl.p[k]));
                struct span *s = span_lookup((uintptr_t)sl.p[k]);
                bool floating = s && span_kind(s) == SPAN_SLAB &&
                                (atomic_load(&s->thread_free) & SLAB_FLOATING) &&
                                !(atomic_load(&s->thread_free) & SLAB_TAKEN);
                EXPECT(w == 0 || floating, "step %d: a dead thread's object %p has objmap word %#x tf %#lx kind %d owner %p", step,
                       sl.p[k], w, s ? (unsigned long)atomic_load(&s->thread_free) : 0ul, s ? (int)span_kind(s) : -1, s ? (void *)atomic_load(&s->owner) : NULL);
            }
            for (int k = 0; k < sl.n; k++) {
                int j = (int)(rnd(&seed) % SLOTS);
                free(slot[j]);
                slot[j] = sl.p[k];
            }
        }
        if (step % K == K - 1 && check_all("random operations", step)) return 1;
    }
    if (ho) {
        pthread_join(ho->t, NULL);
        free(ho);
    }
    if (check_all("after the last thread", OPS)) return 1;
    for (int i = 0; i < SLOTS; i++) free(slot[i]), slot[i] = NULL;
    for (int j = 0; j < 64; j++)
        if (pspan[j]) pageset_free_on(0, pspan[j], 0), pspan[j] = NULL;
    if (check_all("everything freed", OPS)) return 1;
    malloc_trim(0);
    return check_all("after malloc_trim", OPS);
}

static struct span *span_of_ptr(void *p) { return span_lookup((uintptr_t)p); }

/* Each check reports a deliberate corruption, and nothing once it is undone. */
static int corruptions(void) {
    pageset_corrupt_count(0, 1);
    EXPECT(pageset_check() > 0, "pageset_check missed a count one page too high");
    pageset_corrupt_count(0, -1);
    EXPECT(pageset_check() == 0, "pageset_check after the count was restored");

    void *keep = malloc(48), *q1 = malloc(48), *q2 = malloc(48);
    EXPECT(keep && q1 && q2, "malloc(48)");
    struct span *s = span_of_ptr(keep);
    EXPECT(s && span_kind(s) == SPAN_SLAB && span_of_ptr(q1) == s && span_of_ptr(q2) == s,
           "three 48 B blocks in one slab");
    EXPECT(slab_check_current() == 0, "slab check before corruption");

    s->room++; /* one object counted twice */
    EXPECT(slab_check_current() > 0, "slab_check_current missed used one too high");
    s->room--;
    EXPECT(slab_check_current() == 0, "slab check after used was restored");

    void *f1 = q1, *f2 = q2;
    __asm__ volatile("" : "+r"(f1), "+r"(f2)); /* we write into freed blocks on purpose */
    free(f1);
    free(f2); /* s->free: q2 -> q1 -> ... */
    uintptr_t saved = *(uintptr_t *)q1;
    *(uintptr_t *)q1 = slab_link_encode(slab_tag(q1), q2); /* q1 -> q2: a cycle */
    EXPECT(slab_check_current() > 0, "slab_check_current missed a free-list cycle");
    *(uintptr_t *)q1 = slab_link_encode(slab_tag(q1), keep); /* a live object on the list */
    EXPECT(slab_check_current() > 0, "slab_check_current missed a live object on the free list");
    *(uintptr_t *)q1 = saved;
    EXPECT(slab_check_current() == 0, "slab check after the link was restored");

    _Atomic uint32_t *word = arena_objmap_slot((uintptr_t)keep);
    uint32_t good = atomic_load(word);
    EXPECT((good & 0xffff) == tl_heap->objmap_id, "keep's page names this heap, carved (word %#x)", good);
    atomic_store(word, good ^ OBJMAP_CARVED); /* the page said not carved: frees take the span route */
    EXPECT(slab_check_current() > 0, "slab_check_current missed an objmap word without its carved bit");
    atomic_store(word, good);
    EXPECT(slab_check_current() == 0, "slab check after the objmap word was restored");

    struct heap *h = tl_heap;
    atomic_store(&s->owner, &heap_abandoned);
    EXPECT(slab_check_current() > 0, "slab_check_current missed a slab of another owner");
    atomic_store(&s->owner, h);
    h->nr_empty++;
    EXPECT(slab_check_current() > 0, "slab_check_current missed an empty-slab count one too high");
    h->nr_empty--;
    EXPECT(slab_check_current() == 0, "slab check after the counts were restored");
    free(keep);
    return 0;
}

/* The dense heap's check (while it serves this thread: no other has
 * allocated yet) reports a block whose size was changed, and nothing once
 * it is undone. */
static int dense_corruption(void) {
    char *d = malloc(777), *e = malloc(777);
    EXPECT(d && e, "malloc(777)");
    EXPECT(span_kind(span_of_ptr(d)) == SPAN_DENSE, "the first thread's first block of a size is not dense");
    EXPECT(dense_check() == 0, "dense check before corruption");
    char *hd = d - 16; /* the header, before the block */
    __asm__ volatile("" : "+r"(hd) : : "memory");
    volatile uint64_t *head = (volatile uint64_t *)hd;
    *head ^= 64; /* a block one line longer: it overlaps the next */
    EXPECT(dense_check() > 0, "dense_check missed a block of the wrong size");
    *head ^= 64;
    free(d);
    EXPECT(dense_check() == 0, "dense check after the size was restored and the block freed");
    free(e);
    return 0;
}

int main(void) {
    opt.purge_thread = 0;
    folio_init();
    if (dense_corruption()) return 1;
    if (check_all("start", 0)) return 1;
    if (random_ops(2024) || random_ops(77)) return 1;
    if (corruptions()) return 1;
    printf("invariants held over %d random operations (checked every %d), corruptions detected\n",
           2 * OPS, K);
    return 0;
}
