// folio-test: tsan
/* test_thread_exit: threads that allocate and exit while their blocks live
 * on and are freed later by other threads.
 *
 *   rounds      producers fill blocks and exit; consumers free them after
 *               (the memory of dead threads must be reused: RSS stays
 *               bounded over hundreds of thread lifetimes)
 *   pipeline    producers start, allocate and exit continuously while
 *               consumers free their blocks concurrently
 *   early       another thread frees an owner's blocks while the owner is
 *               alive, then the owner exits, and its memory is reused
 *   destructors pthread key destructors that malloc/free during thread
 *               teardown (after the allocator may have seen the thread
 *               leave), re-arming themselves; pthread_exit; detached threads
 *   slabs       deterministic, by folio's counts (in a re-executed child
 *               without the background purger, which would move free pages
 *               while the counts are read): a thread allocates several
 *               slabs of one class and exits, main frees the objects, and
 *               after malloc_trim the zone's pages in use are exactly what
 *               they were; also with the owner freeing half itself, and
 *               with main freeing everything (full slabs) while the owner
 *               still lives
 *
 * FOLIO_TEST_SCALE scales the time-boxed parts. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

typedef struct {
    uint64_t size;
    uint64_t seed;
} blk_t;

static blk_t *make(rng_t *r)
{
    uint64_t x = rng_next(r) % 100;
    size_t n;
    if (x < 80)
        n = rng_range(r, 16, 1024);
    else if (x < 97)
        n = rng_range(r, 1024, 32768);
    else
        n = rng_range(r, 32768, 600000);
    blk_t *b = malloc(n);
    CHECK(b != NULL, "malloc(%zu)", n);
    b->size = n;
    b->seed = rng_next(r);
    pattern_fill(b + 1, n - sizeof *b, b->seed);
    return b;
}

static void check_free(blk_t *b, const char *where)
{
    size_t n = (size_t)b->size;
    CHECK(n >= sizeof *b && n <= 600000, "%s: block %p header damaged (size %zu)", where,
          (void *)b, n);
    size_t bad = pattern_check(b + 1, n - sizeof *b, b->seed);
    CHECK(bad == (size_t)-1, "%s: block %p size %zu: byte %zu damaged", where, (void *)b, n,
          bad + sizeof *b);
    free(b);
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ---- rounds ---------------------------------------------------------- */

#define PER_PRODUCER 400
#define PRODUCERS 4

struct prod { blk_t **out; uint64_t seed; };

static void *producer(void *arg)
{
    struct prod *p = arg;
    rng_t r;
    rng_seed(&r, p->seed);
    for (int i = 0; i < PER_PRODUCER; i++)
        p->out[i] = make(&r);
    /* Also free a few of its own, so the dying heap is partly used. */
    for (int i = 0; i < PER_PRODUCER; i += 5) {
        check_free(p->out[i], "producer's own free");
        p->out[i] = NULL;
    }
    return NULL;
}

struct cons { blk_t **in; int from, to; };

static void *consumer(void *arg)
{
    struct cons *c = arg;
    for (int i = c->from; i < c->to; i++)
        if (c->in[i]) {
            check_free(c->in[i], "consumer free of a dead thread's block");
            c->in[i] = NULL;
        }
    return NULL;
}

static void rounds(void)
{
    static blk_t *blocks[PRODUCERS * PER_PRODUCER];
    double until = now_sec() + test_seconds(1.5);
    long rss0 = -1, rss_max = 0;
    int round;
    for (round = 0; round < 2000 && (round < 5 || now_sec() < until); round++) {
        pthread_t t[PRODUCERS];
        struct prod p[PRODUCERS];
        for (int i = 0; i < PRODUCERS; i++) {
            p[i].out = blocks + i * PER_PRODUCER;
            p[i].seed = (uint64_t)round * 131 + (uint64_t)i;
            CHECK(pthread_create(&t[i], NULL, producer, &p[i]) == 0, "pthread_create");
        }
        for (int i = 0; i < PRODUCERS; i++)
            pthread_join(t[i], NULL);
        /* All producers are gone; two consumers and main free the blocks. */
        int total = PRODUCERS * PER_PRODUCER, third = total / 3;
        struct cons c1 = {blocks, 0, third}, c2 = {blocks, third, 2 * third};
        pthread_t a, b;
        CHECK(pthread_create(&a, NULL, consumer, &c1) == 0, "pthread_create");
        CHECK(pthread_create(&b, NULL, consumer, &c2) == 0, "pthread_create");
        struct cons c3 = {blocks, 2 * third, total};
        consumer(&c3);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        long rss = rss_kib();
        if (round == 10)
            rss0 = rss;
        if (rss > rss_max)
            rss_max = rss;
    }
    NOTE("rounds: %d rounds (%d thread lifetimes), RSS %ld KiB after 10 rounds, max %ld KiB",
         round, round * (PRODUCERS + 2), rss0, rss_max);
#ifndef FOLIO_PREFIX
    /* Each round allocates ~10 MiB in threads that die; if dead threads'
     * memory were never reused RSS would grow by that much per round. */
    if (rss0 > 0 && round > 40)
        CHECK(rss_max - rss0 < 256 * 1024,
              "RSS grew from %ld KiB to %ld KiB over %d rounds: dead threads' memory not reused",
              rss0, rss_max, round);
#endif
}

/* ---- pipeline -------------------------------------------------------- */

#define PIPE_SLOTS 8192
static _Atomic(blk_t *) pipe_slots[PIPE_SLOTS];
static atomic_int pipe_stop;
static atomic_long pipe_freed, pipe_made;

static void *pipe_producer(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    int n = 50 + (int)(rng_next(&r) % 500);
    for (int i = 0; i < n; i++) {
        blk_t *b = make(&r);
        blk_t *old = atomic_exchange(&pipe_slots[rng_next(&r) % PIPE_SLOTS], b);
        if (old)
            check_free(old, "producer replacing a slot");
    }
    atomic_fetch_add(&pipe_made, n);
    return NULL;   /* exits while its blocks are live in the slots */
}

static void *pipe_consumer(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    long freed = 0;
    while (!atomic_load(&pipe_stop)) {
        for (int k = 0; k < 64; k++) {
            blk_t *b = atomic_exchange(&pipe_slots[rng_next(&r) % PIPE_SLOTS], NULL);
            if (b) {
                check_free(b, "consumer in the pipeline");
                freed++;
            }
        }
        sched_yield();
    }
    atomic_fetch_add(&pipe_freed, freed);
    return NULL;
}

static void pipeline(void)
{
    pthread_t c[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&c[i], NULL, pipe_consumer, (void *)(uintptr_t)(1000 + i)) == 0,
              "pthread_create");
    double until = now_sec() + test_seconds(1.5);
    long spawned = 0;
    while (now_sec() < until) {
        pthread_t p[3];
        for (int i = 0; i < 3; i++)
            CHECK(pthread_create(&p[i], NULL, pipe_producer, (void *)(uintptr_t)(spawned++)) == 0,
                  "pthread_create");
        for (int i = 0; i < 3; i++)
            pthread_join(p[i], NULL);
    }
    atomic_store(&pipe_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(c[i], NULL);
    long left = 0;
    for (int s = 0; s < PIPE_SLOTS; s++) {
        blk_t *b = atomic_exchange(&pipe_slots[s], NULL);
        if (b) {
            check_free(b, "final drain");
            left++;
        }
    }
    NOTE("pipeline: %ld producer threads, %ld blocks made, %ld freed by consumers, %ld drained",
         spawned, atomic_load(&pipe_made), atomic_load(&pipe_freed), left);
}

/* ---- early: remote frees while the owner lives, then owner exits ------- */

struct early {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage;
    blk_t *blocks[2000];
};

static void wait_stage(struct early *e, int s)
{
    pthread_mutex_lock(&e->mu);
    while (e->stage < s)
        pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

static void set_stage(struct early *e, int s)
{
    pthread_mutex_lock(&e->mu);
    e->stage = s;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void *early_owner(void *arg)
{
    struct early *e = arg;
    rng_t r;
    rng_seed(&r, 99);
    for (int i = 0; i < 2000; i++)
        e->blocks[i] = make(&r);
    set_stage(e, 1);
    wait_stage(e, 2);   /* the other thread has freed most of them */
    /* Allocate again: should be able to reuse what was freed remotely. */
    for (int i = 0; i < 500; i++)
        check_free(make(&r), "owner's re-allocation after remote frees");
    return NULL;   /* exit with 100 blocks still live */
}

static void early(void)
{
    double until = now_sec() + test_seconds(0.5);
    for (int rep = 0; rep < 3 || (rep < 20 && now_sec() < until); rep++) {
        struct early *e = malloc(sizeof *e);
        CHECK(e != NULL, "malloc");
        pthread_mutex_init(&e->mu, NULL);
        pthread_cond_init(&e->cv, NULL);
        e->stage = 0;
        pthread_t t;
        CHECK(pthread_create(&t, NULL, early_owner, e) == 0, "pthread_create");
        wait_stage(e, 1);
        for (int i = 100; i < 2000; i++)
            check_free(e->blocks[i], "remote free while the owner lives");
        set_stage(e, 2);
        pthread_join(t, NULL);
        for (int i = 0; i < 100; i++)
            check_free(e->blocks[i], "free after the owner exited");
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        free(e);
    }
}

/* ---- destructors ------------------------------------------------------ */

static pthread_key_t key;
static _Atomic(blk_t *) dtor_leftovers[4096];
static atomic_int dtor_calls, dtor_done;

static void key_dtor(void *v)
{
    blk_t *b = v;
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)v);
    int n = atomic_fetch_add(&dtor_calls, 1);
    /* Allocate and free during thread teardown. */
    for (int i = 0; i < 50; i++)
        check_free(make(&r), "malloc/free in a key destructor");
    /* Leave one block for the main thread to free later. */
    blk_t *left = make(&r);
    blk_t *old = atomic_exchange(&dtor_leftovers[(unsigned)n % 4096], left);
    if (old)
        check_free(old, "replacing a destructor leftover");
    /* Re-arm once: glibc calls destructors again (up to 4 iterations). */
    if (b->seed % 2 == 0) {
        blk_t *again = make(&r);
        again->seed |= 1;
        pattern_fill(again + 1, (size_t)again->size - sizeof *again, again->seed);
        pthread_setspecific(key, again);
    }
    int last = b->seed % 2 == 1;
    check_free(b, "key destructor freeing the thread's value");
    if (last)
        atomic_fetch_add(&dtor_done, 1);   /* this thread's final call */
}

static void *dtor_thread(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    blk_t *b = make(&r);
    b->seed &= ~(uint64_t)1;
    pattern_fill(b + 1, (size_t)b->size - sizeof *b, b->seed);
    pthread_setspecific(key, b);
    for (int i = 0; i < 100; i++)
        check_free(make(&r), "thread body");
    if ((uintptr_t)arg % 3 == 0)
        pthread_exit(NULL);
    return NULL;
}

static void destructors(void)
{
    CHECK(pthread_key_create(&key, key_dtor) == 0, "pthread_key_create");
    double until = now_sec() + test_seconds(1.0);
    int joined = 0;
    for (int i = 0; i < 300 && (i < 20 || now_sec() < until); i++, joined++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, dtor_thread, (void *)(uintptr_t)i) == 0,
              "pthread_create");
        pthread_join(t, NULL);
    }
    /* Detached threads too: wait until all their destructors ran. */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    enum { DETACHED = 40 };
    for (int i = 0; i < DETACHED; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, &at, dtor_thread, (void *)(uintptr_t)(1000 + i)) == 0,
              "pthread_create detached");
    }
    pthread_attr_destroy(&at);
    double deadline = now_sec() + 60;
    int threads = joined + DETACHED;
    while (atomic_load(&dtor_done) < threads && now_sec() < deadline)
        usleep(1000);
    CHECK(atomic_load(&dtor_done) == threads, "%d of %d threads finished their destructors",
          atomic_load(&dtor_done), threads);
    CHECK(atomic_load(&dtor_calls) == 2 * threads, "%d destructor calls, want %d (2 per thread)",
          atomic_load(&dtor_calls), 2 * threads);
    usleep(100 * 1000);   /* let the last detached threads finish exiting */
    for (int i = 0; i < 4096; i++) {
        blk_t *b = atomic_exchange(&dtor_leftovers[i], NULL);
        if (b)
            check_free(b, "freeing a block made in a key destructor");
    }
    NOTE("destructors: %d threads, %d destructor calls", threads, atomic_load(&dtor_calls));
}

/* ---- slabs: a dead thread's slabs come back ----------------------------- */

#define SLAB_OBJ 256 /* one size class */
#define SLAB_N 1024  /* several of its slabs */
#define CHUNK_PAGES 512
static void *slab_objs[SLAB_N];
static pthread_barrier_t slab_bar;

enum slab_case { OWNER_EXITS, OWNER_FREES_HALF, FREED_WHILE_OWNER_LIVES };

static uint64_t used_pages(void)
{
    return report_u64("zone_chunks") * CHUNK_PAGES - report_u64("zone_free_pages") - report_u64("zone_meta_pages") -
           report_u64("pcp_held_pages");
}

static void *slab_owner(void *arg)
{
    enum slab_case c = (enum slab_case)(intptr_t)arg;
    for (int i = 0; i < SLAB_N; i++) {
        slab_objs[i] = malloc(OPAQUE((size_t)SLAB_OBJ));
        CHECK(slab_objs[i] != NULL, "malloc(%d)", SLAB_OBJ);
        memset(slab_objs[i], i & 0xff, SLAB_OBJ);
    }
    if (c == OWNER_FREES_HALF)
        for (int i = 0; i < SLAB_N; i += 2) {
            free(OPAQUE(slab_objs[i]));
            slab_objs[i] = NULL;
        }
    if (c == FREED_WHILE_OWNER_LIVES) {
        pthread_barrier_wait(&slab_bar); /* main frees them all */
        pthread_barrier_wait(&slab_bar);
    }
    return NULL;
}

static void slab_case(enum slab_case c, const char *what)
{
    malloc_trim(0);
    uint64_t blocks0 = report_u64("live_blocks"), bytes0 = report_u64("live_bytes");
    uint64_t used0 = used_pages();
    pthread_t t;
    CHECK(pthread_barrier_init(&slab_bar, NULL, 2) == 0, "pthread_barrier_init");
    CHECK(pthread_create(&t, NULL, slab_owner, (void *)(intptr_t)c) == 0, "pthread_create");
    int live = c == OWNER_FREES_HALF ? SLAB_N / 2 : SLAB_N;
    uint64_t held = 0;
    if (c == FREED_WHILE_OWNER_LIVES)
        pthread_barrier_wait(&slab_bar);
    else
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(report_u64("live_blocks") == blocks0 + (uint64_t)live &&
              report_u64("live_bytes") == bytes0 + (uint64_t)live * SLAB_OBJ,
          "%s: live_blocks/live_bytes are not the start plus %d objects of %d bytes", what, live,
          SLAB_OBJ);
    if (c != FREED_WHILE_OWNER_LIVES) {
        malloc_trim(0);
        /* 256 B objects fill their slabs with no room left, and a fresh
         * heap fills one slab after the other: the pages held are exactly
         * those of SLAB_N objects (halving them frees no slab) */
        held = used_pages() - used0;
        CHECK(held == SLAB_N * SLAB_OBJ / 4096,
              "%s: the dead thread's %d live objects hold %lld pages, want %d", what, live,
              (long long)held, SLAB_N * SLAB_OBJ / 4096);
    }
    for (int i = 0; i < SLAB_N; i++) {
        if (!slab_objs[i])
            continue;
        CHECK(first_not(slab_objs[i], SLAB_OBJ, (unsigned char)(i & 0xff)) == (size_t)-1,
              "%s: object %d damaged", what, i);
        free(OPAQUE(slab_objs[i]));
        slab_objs[i] = NULL;
    }
    if (c == FREED_WHILE_OWNER_LIVES) {
        pthread_barrier_wait(&slab_bar);
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    }
    pthread_barrier_destroy(&slab_bar);
    CHECK(report_u64("live_blocks") == blocks0 && report_u64("live_bytes") == bytes0,
          "%s: live counts not back after the frees", what);
    malloc_trim(0);
    uint64_t used = used_pages();
    CHECK(used == used0, "%s: after malloc_trim %lld zone pages more are in use than before: the "
          "dead thread's slabs did not come back", what, (long long)(used - used0));
    if (c == FREED_WHILE_OWNER_LIVES)
        NOTE("slabs: %-34s all pages back", what);
    else
        NOTE("slabs: %-34s %llu pages held while live, all back", what, (unsigned long long)held);
}

static void *idle(void *arg)
{
    return arg;
}

static int slabs(void)
{
    const char *pt = getenv("FOLIO_PURGE_THREAD");
    CHECK(pt && strcmp(pt, "0") == 0, "the slabs part runs with FOLIO_PURGE_THREAD=0");
    /* the first thread creation allocates what the C library keeps for
     * later threads */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, idle, NULL) == 0 && pthread_join(t, NULL) == 0, "idle thread");
    slab_case(OWNER_EXITS, "owner exits, main frees all");
    slab_case(OWNER_FREES_HALF, "owner frees half and exits");
    slab_case(FREED_WHILE_OWNER_LIVES, "main frees all, then owner exits");
    slab_case(OWNER_EXITS, "owner exits (again)");
    return 0;
}

/* Run the slabs part in a fresh process without the background purger. */
static void slabs_in_child(char *self)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        setenv("FOLIO_PURGE_THREAD", "0", 1);
        char *args[] = {self, "slabs", NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "slabs child failed (status %#x)", st);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "slabs") == 0)
        return slabs();
    slabs_in_child(argv[0]);
    double t = now_sec();
    rounds();
    NOTE("rounds took %.2fs", now_sec() - t);
    t = now_sec();
    pipeline();
    NOTE("pipeline took %.2fs", now_sec() - t);
    t = now_sec();
    early();
    NOTE("early took %.2fs", now_sec() - t);
    t = now_sec();
    destructors();
    NOTE("destructors took %.2fs", now_sec() - t);
    return 0;
}
