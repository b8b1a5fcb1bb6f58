// folio-test: tsan
/* test_thread_churn: short-lived threads leave nothing behind.
 *
 * Threads are created one after another (then 16 at a time), each allocating
 * 100 blocks (90 % 16 B..1 KiB, 10 % 1..32 KiB, written whole), freeing half
 * of them and handing the other half to the next thread (the same slot of
 * the next batch), which frees them.  RSS (/proc/self/statm; the median over
 * nine batches) is taken after a warm-up of 1,000 threads and again after
 * 10,000 and 100,000: it may grow by at most 1.5 MiB one at a time and 8 MiB
 * 16 at a time (a phase past its bound runs once more, and fails if that run
 * is past it too: below).
 *
 * The bounds: over the 99,000 threads after the warm-up they allow 16 and 85
 * bytes per thread, where the defect this test guards against kept about
 * 1.4 KiB per dead thread (a 5 MiB bound 16 at a time failed once, at +5.1,
 * on a loaded machine).  The freed memory a process keeps for reuse
 * depends on how much the threads of a batch happen to overlap, so 16 at a
 * time RSS wanders by a few MiB (up to +4 MiB seen between two checkpoints,
 * back down later); glibc on this program (-DFOLIO_TEST_GLIBC) stays within
 * 0.2 MiB one at a time and 1 MiB 16 at a time.
 *
 * FOLIO_TEST_SCALE scales the thread counts; the sanitizer builds run
 * 10,000 threads and bound folio's footprint instead of RSS (below). */
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#define OBJS 100
#define KEEP (OBJS / 2)
#define BATCH 16

struct slot {
    unsigned char *p[KEEP];
    size_t n[KEEP];
};
static struct slot slots[2][BATCH]; /* [generation parity][thread of the batch] */

struct job {
    struct slot *in, *out;
    uint64_t seed;
};

static size_t pick_size(rng_t *r)
{
    if (rng_next(r) % 100 < 90)
        return rng_range(r, 16, 1024);
    return rng_range(r, 1025, 32768);
}

static void *worker(void *arg)
{
    struct job *j = arg;
    rng_t r;
    rng_seed(&r, j->seed);
    unsigned char *mine[OBJS];
    size_t size[OBJS];
    for (int i = 0; i < OBJS; i++) {
        size[i] = pick_size(&r);
        mine[i] = malloc(size[i]);
        CHECK(mine[i] != NULL, "malloc(%zu)", size[i]);
        memset(mine[i], (int)(j->seed + (uint64_t)i) | 1, size[i]);
    }
    /* the blocks the previous thread handed over: intact, then freed */
    for (int i = 0; i < KEEP; i++) {
        unsigned char *p = j->in->p[i];
        if (!p)
            continue;
        size_t n = j->in->n[i];
        CHECK(p[0] == p[n - 1] && p[0] != 0, "handed-over block %p (%zu B) damaged", (void *)p, n);
        free(p);
        j->in->p[i] = NULL;
    }
    for (int i = 0; i < OBJS; i++) {
        if (i % 2) {
            free(mine[i]);
        } else {
            j->out->p[i / 2] = mine[i];
            j->out->n[i / 2] = size[i];
        }
    }
    return NULL;
}

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL, "open /proc/self/statm");
    long size = 0, res = 0;
    CHECK(fscanf(f, "%ld %ld", &size, &res) == 2, "read /proc/self/statm");
    fclose(f);
    return (double)res * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* folio's own footprint: the pages its zone does not hold as clean free
 * pages (handed out, cached by the pagesets or the slab layer, or free but
 * not yet purged).  Unlike RSS it leaves out the sanitizers' bookkeeping. */
static double footprint_mib(void)
{
#ifdef FOLIO_TEST_GLIBC
    return 0;
#else
    uint64_t held = report_u64("zone_chunks") * 512 - report_u64("zone_free_pages") - report_u64("zone_meta_pages") +
                    report_u64("zone_dirty_pages");
    return (double)held * 4096 / (1024.0 * 1024.0);
#endif
}

static long generation;

/* Run threads until `upto` have run in all, conc at a time. */
static void churn(long *done, long upto, int conc)
{
    pthread_t t[BATCH];
    struct job jobs[BATCH];
    while (*done < upto) {
        int par = (int)(generation & 1);
        for (int i = 0; i < conc; i++) {
            jobs[i] = (struct job){&slots[par][i], &slots[!par][i],
                                   (uint64_t)(*done + i) * 0x9E3779B97F4A7C15ull + 1};
            CHECK(pthread_create(&t[i], NULL, worker, &jobs[i]) == 0, "pthread_create");
        }
        for (int i = 0; i < conc; i++)
            CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
        *done += conc;
        generation++;
    }
}

/* In the sanitizer builds RSS holds the sanitizers' records of every thread
 * (and ASan's quarantine of libc's own blocks), tens of MiB over 10,000
 * threads: there the bound applies to folio's footprint. */
#ifdef FOLIO_PREFIX
#define MEASURE "footprint"
#define measure footprint_mib
#else
#define MEASURE "RSS"
#define measure rss_mib
#endif

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Run threads until `upto` have run, and return the median of the measure
 * taken after each of the last SAMPLES batches: one sample depends on how
 * much the threads of the batch before it overlapped. */
#define SAMPLES 9
static double churn_measure(long *done, long upto, int conc)
{
    double v[SAMPLES];
    churn(done, upto - (long)SAMPLES * conc, conc);
    for (int i = 0; i < SAMPLES; i++) {
        churn(done, *done + conc, conc);
        v[i] = measure();
    }
    qsort(v, SAMPLES, sizeof v[0], cmp_double);
    return v[SAMPLES / 2];
}

/* Free what the last batch handed over, so the next phase starts clean. */
static void drain_slots(void)
{
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < BATCH; i++)
            for (int k = 0; k < KEEP; k++) {
                free(slots[g][i].p[k]);
                slots[g][i].p[k] = NULL;
            }
}

/* One phase: the growth from the warm-up to each checkpoint, or -1 if it
 * stayed within the bound. */
static double phase_growth(const char *name, int conc, long warm, long mid, long end, double bound_mib)
{
    long done = 0;
    double m0 = churn_measure(&done, warm, conc);
    double m1 = churn_measure(&done, mid, conc);
    double m2 = churn_measure(&done, end, conc);
    NOTE("%s: %s %.1f MiB after %ld threads, %.1f after %ld, %.1f after %ld (%s; at the end "
         "RSS %.1f MiB, footprint %.1f MiB)", name, MEASURE, m0, warm, m1, mid, m2, end,
         FOLIO_TEST_MODE, rss_mib(), footprint_mib());
    drain_slots();
    double grew = m1 - m0 > m2 - m0 ? m1 - m0 : m2 - m0;
    return grew <= bound_mib ? -1 : grew;
}

/* A phase that goes past its bound runs once more, in a new process (this
 * program again, told to run that phase only), and fails if that run goes
 * past it too.  On a loaded machine (other programs' tests, load average
 * 10-40) the purger and the batches run late, and one run in ten or so went
 * to +8.3..+12.1 MiB 16 at a time where the next run stayed within; a defect
 * that keeps memory grows in every run from a fresh start (the one this test
 * was written for: +6.7 MiB one at a time, +7.5 16 at a time, over 100,000
 * threads, in every run).  A new process, not a second phase in this one:
 * growth that levels off would hide in a second phase that starts from the
 * first one's level. */
#define ONLY_ENV "FOLIO_TEST_CHURN_ONLY"
static void phase(const char *name, int conc, long warm, long mid, long end, double bound_mib)
{
    const char *only = getenv(ONLY_ENV);
    if (only && atoi(only) != conc)
        return;
    double grew = phase_growth(name, conc, warm, mid, end, bound_mib);
    if (grew < 0)
        return;
    CHECK(!only, "%s: %s grew by %.1f MiB over %ld to %ld threads in a second process too (bound %.1f)",
          name, MEASURE, grew, warm, end, bound_mib);
    NOTE("%s: %s grew by %.1f MiB (bound %.1f): once more, in a new process", name, MEASURE, grew,
         bound_mib);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        char n[16];
        snprintf(n, sizeof n, "%d", conc);
        setenv(ONLY_ENV, n, 1);
        execl("/proc/self/exe", "test_thread_churn", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "%s: %s grew by %.1f MiB (bound %.1f), and the second run failed too (status %#x)", name,
          MEASURE, grew, bound_mib, status);
}

int main(void)
{
    double scale = test_seconds(1.0);
    long warm = 1000, mid = 10000, end = 100000;
#ifdef FOLIO_PREFIX
    mid = 3000; /* sanitizer builds: thread creation is much slower */
    end = 10000;
#endif
    end = (long)((double)end * scale);
    if (end < 2 * warm)
        end = 2 * warm;
    if (mid > end)
        mid = end;
    phase("one at a time", 1, warm, mid, end, 1.5);
    phase("16 at a time", BATCH, warm, mid, end, 8.0);
    return 0;
}
