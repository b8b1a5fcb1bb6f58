/* test_handoff: pages handed from one CPU to another through folio's page
 * API, the pattern the kernel's free_high rule is for (seed 003, patch 3).
 * A thread pinned to one CPU takes 2,000 blocks of 2, 4 or 8 pages
 * (folio_alloc_pages), a thread pinned to another CPU frees them
 * (folio_free_pages); 20 rounds per order.  With PCPF_FREE_HIGH_BATCH (the
 * CPU's share of the last-level cache holds more than 3 batches) a free_high
 * drain waits until the freeing CPU's pageset holds a batch, then drains all
 * of it: one drain per batch of frees, so drains per free stay at most 1/8,
 * 1/4 and 1/2 for orders 1, 2 and 3 (the kernel's rule gives about 1/16,
 * 1/8, 1/4).  The figures, from folio's report, are printed for the notes. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's own calls need folio");
}
#else

enum { BLOCKS = 2000, ROUNDS = 20 };

static void *blocks[BLOCKS];
static size_t block_pages;
static pthread_barrier_t bar;
static int cpu_a, cpu_b;

static char json[1 << 20];

static long long report_value(const char *key)
{
    folio_report_json(json, sizeof json);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *k = strstr(json, pat);
    if (!k)
        return -1;
    return strtoll(k + strlen(pat), NULL, 10);
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    CHECK(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0, "pin to CPU %d", cpu);
}

/* The freeing side: one round's 2,000 blocks, between two barriers. */
static void *consumer(void *arg)
{
    (void)arg;
    pin(cpu_b);
    for (;;) {
        pthread_barrier_wait(&bar);
        if (!block_pages)
            return NULL;
        for (int i = 0; i < BLOCKS; i++)
            folio_free_pages(blocks[i], block_pages);
        pthread_barrier_wait(&bar);
    }
}

int main(void)
{
    cpu_set_t allowed;
    CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0, "sched_getaffinity");
    cpu_a = cpu_b = -1;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &allowed))
            continue;
        if (cpu_a < 0)
            cpu_a = c;
        else if (cpu_b < 0)
            cpu_b = c;
    }
    if (cpu_b < 0)
        SKIP("one CPU: no hand-off between CPUs");
    /* folio's pagesets keep a batch before a free_high drain only with a
     * large enough cache share, as the kernel does; without it the kernel's
     * rule drains on every free and the bounds below do not apply */
    if (report_value("pcp_free_high_batch") == 0)
        SKIP("PCPF_FREE_HIGH_BATCH is off here (small last-level cache share)");

    pin(cpu_a);
    pthread_t t;
    CHECK(pthread_barrier_init(&bar, NULL, 2) == 0, "barrier");
    block_pages = 1;
    CHECK(pthread_create(&t, NULL, consumer, NULL) == 0, "pthread_create");

    const double bound[4] = {0, 1.0 / 8, 1.0 / 4, 1.0 / 2};
    double per_free[4];
    long long fh[4];
    for (unsigned order = 1; order <= 3; order++) {
        block_pages = (size_t)1 << order;
        long long d0 = report_value("pcp_drains"), f0 = report_value("free_high_drains");
        long long z0 = report_value("zone_lock_acquired");
        for (int r = 0; r < ROUNDS; r++) {
            for (int i = 0; i < BLOCKS; i++) {
                blocks[i] = folio_alloc_pages(block_pages, 0);
                CHECK(blocks[i] != NULL, "folio_alloc_pages(%zu)", block_pages);
                *(volatile char *)blocks[i] = 1;
            }
            pthread_barrier_wait(&bar); /* the consumer frees them */
            pthread_barrier_wait(&bar);
        }
        long long drains = report_value("pcp_drains") - d0;
        fh[order] = report_value("free_high_drains") - f0;
        long long zl = report_value("zone_lock_acquired") - z0;
        per_free[order] = (double)drains / (BLOCKS * ROUNDS);
        printf("handoff order %u (%zu pages): %d frees, %lld pageset drains (%.4f per free), "
               "%lld free_high drains, %lld zone-lock acquisitions\n",
               order, block_pages, BLOCKS * ROUNDS, drains, per_free[order], fh[order], zl);
    }
    fflush(stdout);
    block_pages = 0;
    pthread_barrier_wait(&bar);
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    for (unsigned order = 1; order <= 3; order++) {
        CHECK(per_free[order] <= bound[order], "order %u: %.4f drains per free, bound %.4f", order,
              per_free[order], bound[order]);
        CHECK(fh[order] > 0, "order %u: no free_high drain in %d hand-offs", order, BLOCKS * ROUNDS);
    }
    return 0;
}
#endif
