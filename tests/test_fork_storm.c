/* test_fork_storm: hundreds of forks while 8 threads allocate and free in
 * every tier (every size class, large blocks, huge blocks, calloc, realloc,
 * frees across threads), with a short purge delay so that purging, decay
 * and reclaim run all the time.  Every child allocates and frees in every
 * tier, also from a new thread, and exits; a child or a parent stuck in a
 * lock (the fork handler's lock order against a purge run under a pageset
 * lock, say) is killed by alarm() and fails the test.
 *
 * Runs re-executed with FOLIO_PURGE_DELAY_MS=5 (options are read once, at
 * start).  FOLIO_TEST_SCALE scales the number of forks. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#define THREADS 8
#define SLOTS 256
#define FORKS 200

/* One size from every tier, in turn: each small class boundary region,
 * large blocks, and now and then a huge one. */
static size_t size_for(rng_t *r, uint64_t i)
{
    switch (i % 16) {
    case 0: return rng_range(r, 32769, 2u << 20);         /* large */
    case 1: return i % 256 == 1 ? rng_range(r, 3u << 20, 9u << 20) : 100; /* huge, rarely */
    case 2: case 3: return rng_range(r, 1025, 32768);     /* upper small classes */
    default: return rng_range(r, 1, 1024);                /* lower small classes */
    }
}

/* Blocks handed between threads: a thread frees what another allocated. */
static _Atomic(unsigned char *) shared[SLOTS];
static atomic_int stop, running;

static unsigned char *make(rng_t *r, size_t n)
{
    unsigned char *p;
    switch (rng_next(r) % 4) {
    case 0: p = calloc(1, n); break;
    case 1: p = realloc(NULL, n); break;
    default: p = malloc(n);
    }
    CHECK(p != NULL, "allocation of %zu bytes", n);
    memset(p, (int)(n & 0xff), n < 64 ? n : 64);
    return p;
}

static void *worker(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    uint64_t i = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        unsigned char *p = make(&r, size_for(&r, i++));
        if (i % 7 == 0) {
            size_t m = size_for(&r, i);
            unsigned char *q = realloc(p, m);
            CHECK(q != NULL, "realloc to %zu", m);
            p = q;
        }
        unsigned char *old = atomic_exchange(&shared[rng_next(&r) % SLOTS], p);
        free(old);
        if (i == 1)
            atomic_fetch_add(&running, 1);
    }
    return NULL;
}

/* The child: every tier, on its main thread and on a new one. */
static void *child_work(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    void *keep[64];
    for (int k = 0; k < 64; k++) {
        keep[k] = make(&r, k < 48 ? (size_t)k * 700 + 1 : size_for(&r, (uint64_t)k * 16 % 32));
    }
    void *h = calloc(1, 5u << 20);
    CHECK(h != NULL, "child: calloc(5 MiB)");
    h = realloc(h, 7u << 20);
    CHECK(h != NULL, "child: realloc(7 MiB)");
    free(h);
    for (int k = 0; k < 64; k++)
        free(keep[k]);
    return NULL;
}

static double fork_secs;

/* Wait for the child of fork f; one still running after CHILD_LIMIT seconds
 * is hung: print its threads' stacks (gdb, when there is one), kill it and
 * fail. */
#define CHILD_LIMIT 20.0
static int wait_child(pid_t pid, int f)
{
    double t0 = now_sec();
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        CHECK(w >= 0, "waitpid");
        if (w == pid)
            return st;
        if (now_sec() - t0 > CHILD_LIMIT)
            break;
        usleep(1000);
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd,
             "gdb -p %d -batch -nx -ex 'thread apply all bt' 2>&1 | grep -E '^(#|Thread)' >&2",
             (int)pid);
    NOTE("fork %d: child %d still running after %.0f s: its stacks", f, (int)pid, CHILD_LIMIT);
    if (system(cmd) != 0)
        NOTE("(no stacks: gdb failed or is missing)");
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    FAIL("fork %d: the child hung", f);
}

static void run_storm(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0,
              "pthread_create");
    /* Fork once every thread runs its loop and folio's purger has started
     * (the process then has THREADS + 2 threads): a thread still starting up
     * holds locks of the sanitizer runtimes, which are not fork-safe (ASan's
     * own allocator, used by glibc's thread start-up, deadlocks the child). */
    double ready_by = now_sec() + 5;
    int want = THREADS + 1 + (getenv("FOLIO_PURGE_THREAD") ? 0 : 1);
    while ((atomic_load(&running) < THREADS || proc_threads() < want) && now_sec() < ready_by)
        usleep(1000);
    usleep(20 * 1000); /* and the last of them is past its start-up */
    CHECK(atomic_load(&running) == THREADS, "the worker threads did not start");
    int forks = (int)(FORKS * test_seconds(1.0));
    if (forks < 20)
        forks = 20;
    double t0 = now_sec();
    for (int f = 0; f < forks; f++) {
        alarm(30); /* the parent's fork itself must not hang */
        double tf = now_sec();
        pid_t pid = fork();
        fork_secs += now_sec() - tf;
        CHECK(pid >= 0, "fork");
        if (pid == 0) {
            alarm(60); /* a last resort: the parent diagnoses a hang first */
            child_work((void *)(uintptr_t)(f + 100));
            pthread_t c;
            CHECK(pthread_create(&c, NULL, child_work, (void *)(uintptr_t)(f + 7)) == 0,
                  "child: pthread_create");
            pthread_join(c, NULL);
            /* a block the parent's threads allocated, freed in the child */
            free(atomic_exchange(&shared[f % SLOTS], NULL));
            _exit(0);
        }
        int st = wait_child(pid, f);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork %d: child %s %d", f,
              WIFEXITED(st) ? "exited with status" : "killed by signal",
              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    alarm(0);
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < SLOTS; i++)
        free(atomic_exchange(&shared[i], NULL));
    NOTE("%d forks while %d threads allocated in every tier: %.2f s (%.2f s in fork)", forks,
         THREADS, now_sec() - t0, fork_secs);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "storm")) {
        run_storm();
        return 0;
    }
    setenv("FOLIO_PURGE_DELAY_MS", "5", 1);
#ifdef FOLIO_PREFIX
    /* Sanitizer builds: no background purger (purging still runs from the
     * allocation paths).  A thread that starts up calls glibc's calloc,
     * which ASan serves under a lock it does not take around fork: a fork
     * during the purger's start-up leaves the child's sanitizer allocator
     * locked for good (seen: both threads of a child stuck in ASan's
     * SizeClassAllocator64 mutex).  folio's own allocator is fork-safe;
     * ASan's is not. */
    setenv("FOLIO_PURGE_THREAD", "0", 1);
#endif
    execl("/proc/self/exe", "test_fork_storm", "storm", (char *)NULL);
    FAIL("exec /proc/self/exe");
}
