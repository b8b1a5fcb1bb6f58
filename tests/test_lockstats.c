// folio-test: tsan
/* test_lockstats: the report's "locks" array names every folio lock (init,
 * clear-init, clear-mt, heaps, huge, one per pageset, zone,
 * meta) with its acquisitions, contended acquisitions and hold time.  With
 * FOLIO_LOCK_STATS=1, 4 threads that take 64 KiB and 4 MiB blocks make the
 * zone's, the huge tier's and some pageset's counts grow and their hold
 * times positive; waits are counted whether or not holds are timed.  Huge
 * blocks have one lock per CPU shard: threads pinned to two CPUs take two
 * different ones, and one pinned thread's malloc/free loop of one size
 * is served by its shard's slot without the lock. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
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

#define THREADS 4
#define ROUNDS 300

static char rep[1 << 16];

/* the counts of the lock `name` (pagesets: summed), from a fresh report */
struct counts {
    int found;
    uint64_t acquired, contended, held_ns;
};
static struct counts lock_counts(const char *name)
{
    struct counts c = {0, 0, 0, 0};
    folio_report_json(rep, sizeof rep);
    char *s = strstr(rep, "\"locks\": [");
    CHECK(s != NULL, "report has no locks array");
    char pat[64];
    snprintf(pat, sizeof pat, "{\"name\": \"%s\", ", name);
    while ((s = strstr(s, pat)) != NULL) {
        unsigned long long a, w, h;
        char *f = strstr(s, "\"acquired\": ");
        CHECK(f && sscanf(f, "\"acquired\": %llu, \"contended\": %llu, \"held_ns\": %llu", &a, &w, &h) == 3,
              "lock entry of %s unreadable", name);
        c.found++;
        c.acquired += a;
        c.contended += w;
        c.held_ns += h;
        s += strlen(pat);
    }
    return c;
}

static void *work(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        char *a = malloc(OPAQUE(64 << 10)), *b = malloc(OPAQUE((size_t)4 << 20));
        CHECK(a && b, "malloc");
        a[0] = b[0] = 1;
        free(OPAQUE(a));
        free(OPAQUE(b));
    }
    return NULL;
}

/* a huge malloc and free on the CPU given */
/* pin the calling thread to one CPU: false if it may not run there */
static bool pin_to(int cpu)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof one, &one) == 0;
}

static void *on_cpu(void *arg)
{
    if (!pin_to((int)(intptr_t)arg))
        return NULL;
    free(OPAQUE(malloc(OPAQUE((size_t)8 << 20))));
    return arg;
}

/* a loop of one huge size on the CPU given: its shard's slot serves it */
static void *slot_loop(void *arg)
{
    if (!pin_to((int)(intptr_t)arg))
        return NULL;
    for (int i = 0; i < 1000; i++) {
        char *p = malloc(OPAQUE((size_t)8 << 20));
        CHECK(p, "malloc");
        p[0] = 1;
        free(OPAQUE(p));
    }
    return arg;
}

/* acquisitions of huge shard idx's lock (0 when the report omits it) */
static unsigned long long huge_shard_acquired(int idx)
{
    char pat[64];
    snprintf(pat, sizeof pat, "{\"name\": \"huge\", \"index\": %d, \"acquired\": ", idx);
    folio_report_json(rep, sizeof rep);
    char *s = strstr(rep, pat);
    return s ? strtoull(s + strlen(pat), NULL, 10) : 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    reexec_with_env(argv, "FOLIO_LOCK_STATS", "1");
    CHECK(report_u64("lock_stats_timed") == 1, "FOLIO_LOCK_STATS=1 but holds are not timed");
    static const char *const names[] = {"init", "clear-init", "clear-mt", "heaps",
                                        "huge", "pageset", "zone", "meta"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        CHECK(lock_counts(names[i]).found >= 1, "no lock named %s in the report", names[i]);
    struct counts z0 = lock_counts("zone"), h0 = lock_counts("huge"), p0 = lock_counts("pageset");
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, work, NULL) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    struct counts z = lock_counts("zone"), h = lock_counts("huge"), p = lock_counts("pageset");
    CHECK(h.acquired > h0.acquired, "huge lock never taken for %d huge mallocs and frees", 2 * THREADS * ROUNDS);
    CHECK(p.acquired > p0.acquired, "no pageset lock taken");
    CHECK(z.acquired > z0.acquired, "zone lock not taken");
    CHECK(h.held_ns > h0.held_ns && p.held_ns > p0.held_ns && z.held_ns > z0.held_ns,
          "hold times did not grow: huge %llu, pagesets %llu, zone %llu ns",
          (unsigned long long)h.held_ns, (unsigned long long)p.held_ns, (unsigned long long)z.held_ns);
    /* the zone's own counters and its lock's agree on acquisitions */
    CHECK(report_u64("zone_lock_acquired") >= z.acquired, "zone_lock_acquired below the zone lock's count");
    cpu_set_t allowed;
    int cpus[2], n = 0;
    CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0, "sched_getaffinity");
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &allowed) && (n == 0 || (c & 63) != (cpus[0] & 63)))
            cpus[n++] = c;
    if (n == 2) {
        for (int i = 0; i < 2; i++) {
            unsigned long long before = huge_shard_acquired(cpus[i] & 63);
            pthread_t th;
            void *ok = NULL;
            CHECK(pthread_create(&th, NULL, on_cpu, (void *)(intptr_t)cpus[i]) == 0, "pthread_create");
            pthread_join(th, &ok);
            if (ok)
                CHECK(huge_shard_acquired(cpus[i] & 63) > before, "a huge block on CPU %d did not take shard %d's lock",
                      cpus[i], cpus[i] & 63);
        }
        /* pinned, a malloc/free loop of one size takes its shard's lock only
         * to begin (the slot is lock-free), whatever the CPU count */
        unsigned long long before = huge_shard_acquired(cpus[0] & 63);
        pthread_t th;
        void *ok = NULL;
        CHECK(pthread_create(&th, NULL, slot_loop, (void *)(intptr_t)cpus[0]) == 0, "pthread_create");
        pthread_join(th, &ok);
        if (ok)
            CHECK(huge_shard_acquired(cpus[0] & 63) - before <= 10,
                  "1000 mallocs and frees of 8 MiB on CPU %d took its shard's lock %llu times", cpus[0],
                  huge_shard_acquired(cpus[0] & 63) - before);
    } else {
        printf("SKIP huge shards: fewer than 2 CPUs\n");
    }
    NOTE("huge: %llu taken, %llu contended, %llu ns held; pagesets: %llu, %llu, %llu ns; zone: %llu, %llu, %llu ns",
         (unsigned long long)h.acquired, (unsigned long long)h.contended, (unsigned long long)h.held_ns,
         (unsigned long long)p.acquired, (unsigned long long)p.contended, (unsigned long long)p.held_ns,
         (unsigned long long)z.acquired, (unsigned long long)z.contended, (unsigned long long)z.held_ns);
    return 0;
}
#endif
