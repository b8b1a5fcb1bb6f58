// folio-test: tsan
/* test_remote_bursts: the counters behind issue 13's mechanisms.
 *
 * 1. Remote frees come back in lists: a producer allocates 20 rounds of
 *    4,000 objects of 48 bytes, a consumer frees each round; the producer's
 *    next allocations take the freed objects back.  Every remote free is
 *    counted (remote_frees); what the owner takes back it takes in far
 *    fewer exchanges than objects (remote_collected / remote_collects >=
 *    8); slabs whose every object came back while the owner waited go to
 *    the spare lists (floating_slabs_spared); either way the objects are
 *    reused: over the last 10 rounds the producer takes less than half a
 *    round's slab pages from the page heap per round.
 * 2. A burst deeper than a thread's slab cache raises its high: 30 bursts
 *    of 300 blocks of 8 KiB, each freed whole, make the cache's high grow
 *    past FOLIO_HEAP_EMPTY_SLABS but not past FOLIO_HEAP_EMPTY_MAX, and
 *    later bursts take their slabs from the cache (heap_slab_cache_hits).
 * 3. The same for large blocks: 30 bursts of 40 blocks of 48 KiB, each
 *    freed whole, are served from the thread's own cache of freed large
 *    blocks (heap_big_cache_hits) once its high has grown; a block kept
 *    there reads back what the next malloc wrote, and calloc zeroes it.
 * 4. A thread that only frees hands other threads' objects over in runs,
 *    one per class: objects of three classes, allocated in turn, freed in
 *    the same order by a new thread that never allocates, go over in at
 *    most one push per 8 objects (remote_batches; one push per object
 *    before session 26: a thread with no heap pushed each at once, and one
 *    with a heap batched only frees onto the same slab in a row), and the
 *    main thread's next allocations of the three classes take them back.
 * 5. A thread whose heap was torn down at its exit gets no other: frees of
 *    another thread's objects from a thread-specific-data destructor that
 *    runs after folio's (a key made later) are pushed one by one, each a
 *    batch, and no heap is made there (one made in the last destructor
 *    round would never be torn down, and the runs it held never pushed). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's counters need folio");
}
#else

enum { ROUNDS = 20, OBJECTS = 4000, BURSTS = 30, BURST = 300 };

static void *objs[OBJECTS];

static void *consume(void *arg)
{
    (void)arg;
    for (int i = 0; i < OBJECTS; i++)
        free(objs[i]);
    return NULL;
}

static void remote_lists(void)
{
    uint64_t frees0 = report_u64("remote_frees"), collects0 = report_u64("remote_collects");
    uint64_t collected0 = report_u64("remote_collected"), spared0 = report_u64("floating_slabs_spared");
    uint64_t zone_pages_mid = 0;
    for (int r = 0; r < ROUNDS; r++) {
        if (r == ROUNDS - 10) zone_pages_mid = report_u64("pages_from_zone");
        for (int i = 0; i < OBJECTS; i++) {
            objs[i] = malloc(48);
            CHECK(objs[i] != NULL, "malloc");
            memset(objs[i], r, 48);
        }
        pthread_t t;
        CHECK(pthread_create(&t, NULL, consume, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    }
    uint64_t frees = report_u64("remote_frees") - frees0;
    uint64_t collects = report_u64("remote_collects") - collects0;
    uint64_t collected = report_u64("remote_collected") - collected0;
    uint64_t spared = report_u64("floating_slabs_spared") - spared0;
    uint64_t zone_pages = report_u64("pages_from_zone") - zone_pages_mid;
    printf("remote frees %llu, collected %llu in %llu exchanges, %llu slabs spared; last 10 rounds: "
           "%llu pages from the page heap\n", (unsigned long long)frees, (unsigned long long)collected,
           (unsigned long long)collects, (unsigned long long)spared, (unsigned long long)zone_pages);
    CHECK(frees >= (uint64_t)ROUNDS * OBJECTS, "remote_frees %llu < %d", (unsigned long long)frees,
          ROUNDS * OBJECTS);
    /* every round but the last is taken back by the next round's
     * allocations: as objects, or as whole slabs from the spare lists */
    uint64_t round_pages = (uint64_t)OBJECTS * 48 / 4096;
    CHECK(zone_pages < 10 * round_pages / 2, "%llu pages from the page heap in 10 rounds of %llu pages each",
          (unsigned long long)zone_pages, (unsigned long long)round_pages);
    CHECK(collects > 0 && collected / collects >= 8, "%llu objects in %llu exchanges",
          (unsigned long long)collected, (unsigned long long)collects);
}

static void bursts(void)
{
    static void *b[BURST];
    uint64_t hits0 = report_u64("heap_slab_cache_hits");
    for (int k = 0; k < BURSTS; k++) {
        for (int i = 0; i < BURST; i++) {
            b[i] = malloc(8192);
            CHECK(b[i] != NULL, "malloc");
            ((char *)b[i])[0] = (char)k;
        }
        for (int i = 0; i < BURST; i++)
            free(b[i]);
    }
    uint64_t hits = report_u64("heap_slab_cache_hits") - hits0;
    uint64_t peak = report_u64("heap_slab_cache_high_peak");
    long floor = strtol(getenv("FOLIO_HEAP_EMPTY_SLABS"), NULL, 10);
    long max = strtol(getenv("FOLIO_HEAP_EMPTY_MAX"), NULL, 10);
    printf("bursts: cache hits %llu, high peak %llu (floor %ld, max %ld), raises %llu\n",
           (unsigned long long)hits, (unsigned long long)peak, floor, max,
           (unsigned long long)report_u64("heap_slab_cache_raises"));
    CHECK(peak > (uint64_t)floor && peak <= (uint64_t)max, "high peak %llu outside (%ld, %ld]",
          (unsigned long long)peak, floor, max);
    /* a burst of 300 blocks spans dozens of slabs: once the high holds
     * them, each later burst takes most of its slabs from the cache */
    CHECK(hits >= (uint64_t)(BURSTS / 2) * (uint64_t)floor, "only %llu cache hits", (unsigned long long)hits);
}

static void big_bursts(void)
{
    static char *b[40];
    uint64_t hits0 = report_u64("heap_big_cache_hits");
    for (int k = 0; k < BURSTS; k++) {
        for (int i = 0; i < 40; i++) {
            b[i] = k % 2 ? calloc(1, 48 << 10) : malloc(48 << 10);
            CHECK(b[i] != NULL, "malloc");
            if (k % 2)
                for (size_t j = 0; j < (48 << 10); j += 4096)
                    CHECK(b[i][j] == 0, "calloc'd block of burst %d not zero at %zu", k, j);
            memset(b[i], k + 1, 48 << 10);
        }
        for (int i = 0; i < 40; i++) {
            CHECK(b[i][0] == (char)(k + 1) && b[i][(48 << 10) - 1] == (char)(k + 1), "block changed");
            free(b[i]);
        }
    }
    uint64_t hits = report_u64("heap_big_cache_hits") - hits0;
    printf("big bursts: cache hits %llu of %d blocks\n", (unsigned long long)hits, BURSTS * 40);
    CHECK(hits >= (uint64_t)(BURSTS / 2) * 40, "only %llu big cache hits", (unsigned long long)hits);
}

/* Run fn in a new thread to its end (its exit included): the pushes of the
 * remote frees it made, which must be want */
static uint64_t pushes_of_thread(void *(*fn)(void *), const char *what, uint64_t want)
{
    uint64_t frees0 = report_u64("remote_frees"), batches0 = report_u64("remote_batches");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    uint64_t frees = report_u64("remote_frees") - frees0, batches = report_u64("remote_batches") - batches0;
    printf("%s: %llu remote frees in %llu pushes\n", what, (unsigned long long)frees,
           (unsigned long long)batches);
    CHECK(frees == want, "remote_frees %llu, not %llu", (unsigned long long)frees, (unsigned long long)want);
    return batches;
}

static const size_t mixed_sizes[3] = {48, 200, 700};

static void *consume_mixed(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3 * OBJECTS / 4; i++)
        free(objs[i]);
    return NULL;
}

static void class_runs(void)
{
    enum { N = 3 * OBJECTS / 4 };
    for (int i = 0; i < N; i++) {
        objs[i] = malloc(mixed_sizes[i % 3]);
        CHECK(objs[i] != NULL, "malloc");
        memset(objs[i], i, mixed_sizes[i % 3]);
    }
    uint64_t batches = pushes_of_thread(consume_mixed, "class runs", N);
    CHECK(batches * 8 <= N, "%llu pushes for %d remote frees", (unsigned long long)batches, N);
    /* the pushed objects come back: no new slab for a round as large */
    uint64_t zone0 = report_u64("pages_from_zone");
    for (int i = 0; i < N; i++) {
        objs[i] = malloc(mixed_sizes[i % 3]);
        CHECK(objs[i] != NULL, "malloc");
    }
    uint64_t pages = report_u64("pages_from_zone") - zone0;
    CHECK(pages < (uint64_t)N / 3 * (48 + 200 + 700) / 4096 / 2, "%llu pages from the page heap for objects freed back",
          (unsigned long long)pages);
    for (int i = 0; i < N; i++)
        free(objs[i]);
}

enum { LATE = 100 };
static void *late_objs[LATE];
static pthread_key_t late_key;

static void late_frees(void *arg)
{
    (void)arg;
    for (int i = 0; i < LATE; i++)
        free(late_objs[i]);
}

static void *exits_then_frees(void *arg)
{
    (void)arg;
    void *volatile own = malloc(64); /* this thread has a heap, torn down at its exit */
    CHECK(own != NULL, "malloc");
    free(own);
    CHECK(pthread_setspecific(late_key, late_objs) == 0, "pthread_setspecific");
    return NULL;
}

static void frees_after_exit(void)
{
    /* folio's key was made at its first malloc, before main: this one's
     * destructor runs after folio's in each round */
    CHECK(pthread_key_create(&late_key, late_frees) == 0, "pthread_key_create");
    for (int i = 0; i < LATE; i++) {
        late_objs[i] = malloc(48);
        CHECK(late_objs[i] != NULL, "malloc");
    }
    uint64_t batches = pushes_of_thread(exits_then_frees, "frees after the heap's teardown", LATE);
    CHECK(batches >= LATE, "%llu pushes for %d frees after the thread's heap was torn down",
          (unsigned long long)batches, LATE);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* fixed bounds, whatever the environment says */
    reexec_with_env(argv, "FOLIO_HEAP_DENSE_KIB", "0"); /* every object from slabs */
    reexec_with_env(argv, "FOLIO_HEAP_EMPTY_SLABS", "4");
    reexec_with_env(argv, "FOLIO_HEAP_EMPTY_MAX", "16");
    reexec_with_env(argv, "FOLIO_HEAP_BIG_CACHE_KIB", "4096"); /* holds a burst of 40 x 48 KiB */
    remote_lists();
    bursts();
    big_bursts();
    class_runs();
    frees_after_exit();
    return 0;
}
#endif
