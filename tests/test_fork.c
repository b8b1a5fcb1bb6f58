/* test_fork: fork while other threads are busy in the allocator.
 *
 *   busy        threads allocate and free (small, large, huge) without
 *               pause while the main thread forks again and again; each
 *               child allocates and frees a lot (also from a new thread),
 *               frees blocks it inherited, forks a grandchild that does the
 *               same, and exits 0
 *   holder      a thread holds thousands of blocks; the child of a fork
 *               (in which that thread does not exist) checks and frees them
 *               all, then allocates again
 *   spawn       posix_spawn of /bin/true while threads allocate
 *   single      in a copy of this program run with FOLIO_PURGE_THREAD=0,
 *               where no thread is ever made before the forks: glibc's
 *               __libc_single_threaded is true and folio takes no lock
 *               around them; the main thread forks with blocks of every
 *               kind live, each child does what busy's children do; and
 *               a child of such a fork finds that folio's handlers wrote
 *               none of libfolio.so's pages (none is its own yet in
 *               /proc/self/pagemap), so that a shell's subshells and a
 *               fork before exec copy none of them
 *
 * A child that deadlocks is killed by alarm() and fails the test. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/single_threaded.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <link.h>

#include "check.h"
#include "api.h"

extern char **environ;

typedef struct {
    uint64_t size;
    uint64_t seed;
} blk_t;

static blk_t *make(rng_t *r, size_t n)
{
    if (n < sizeof(blk_t))
        n = sizeof(blk_t);
    blk_t *b = malloc(n);
    CHECK(b != NULL, "malloc(%zu)", n);
    b->size = n;
    b->seed = rng_next(r);
    pattern_fill(b + 1, n - sizeof *b, b->seed);
    return b;
}

static size_t pick(rng_t *r)
{
    uint64_t x = rng_next(r) % 1000;
    if (x < 850)
        return rng_range(r, 16, 1024);
    if (x < 985)
        return rng_range(r, 1024, 64 * 1024);
    if (x < 999)
        return rng_range(r, 64 * 1024, 2u << 20);
    return rng_range(r, 4u << 20, 12u << 20);
}

static void check_free(blk_t *b, const char *where)
{
    size_t bad = pattern_check(b + 1, (size_t)b->size - sizeof *b, b->seed);
    CHECK(bad == (size_t)-1, "%s: block %p size %llu: byte %zu damaged", where, (void *)b,
          (unsigned long long)b->size, bad + sizeof *b);
    free(b);
}

/* A burst of allocation work: `ops` operations on a window of blocks. */
static void churn(rng_t *r, int ops, const char *where)
{
    enum { W = 128 };
    blk_t *w[W] = {0};
    for (int i = 0; i < ops; i++) {
        size_t k = rng_next(r) % W;
        if (w[k])
            check_free(w[k], where);
        w[k] = make(r, pick(r));
        if (i % 64 == 0) {
            void *z = calloc(1, pick(r));
            CHECK(z != NULL, "%s: calloc", where);
            free(z);
        }
    }
    for (int k = 0; k < W; k++)
        if (w[k])
            check_free(w[k], where);
}

/* ---- background allocating threads ------------------------------------- */

static atomic_int bg_stop;
static atomic_long bg_ops;

static void *bg_thread(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    while (!atomic_load_explicit(&bg_stop, memory_order_relaxed)) {
        churn(&r, 200, "background thread");
        atomic_fetch_add_explicit(&bg_ops, 200, memory_order_relaxed);
    }
    return NULL;
}

static void *child_thread(void *arg)
{
    rng_t r;
    rng_seed(&r, (uint64_t)(uintptr_t)arg);
    churn(&r, 400, "thread in the child");
    return NULL;
}

/* Wait for pid; fail unless it exited 0. */
static void expect_child_ok(pid_t pid, const char *what)
{
    int st;
    pid_t w;
    do
        w = waitpid(pid, &st, 0);
    while (w < 0 && errno == EINTR);
    CHECK(w == pid, "%s: waitpid", what);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: child %s %d", what,
          WIFEXITED(st) ? "exited with status" : "killed by signal",
          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* What a child does: lots of allocation, a thread, inherited frees, and
 * (depth permitting) a grandchild doing the same. */
static void child_work(blk_t **inherited, int n_inherited, int depth, uint64_t seed)
{
    alarm(60);
    rng_t r;
    rng_seed(&r, seed);
    churn(&r, 600, depth == 1 ? "child" : "grandchild");
    for (int i = 0; i < n_inherited; i++)
        if (inherited[i]) {
            check_free(inherited[i], "child freeing an inherited block");
            inherited[i] = NULL;
        }
#ifndef FOLIO_TEST_GLIBC
    /* the parent had other threads: folio starts none of its own here (a
     * thread made from inside malloc in such a child can wait for good on
     * a lock another parent thread held), however much it has to purge */
    void *big[16];
    for (int i = 0; i < 16; i++) {
        big[i] = malloc(OPAQUE((size_t)1 << 20));
        CHECK(big[i] != NULL, "malloc(1 MiB) in the child");
        memset(big[i], 0x5a, (size_t)1 << 20);
    }
    for (int i = 0; i < 16; i++)
        free(OPAQUE(big[i]));
    free(OPAQUE(malloc(OPAQUE((size_t)100))));
    CHECK(proc_threads() == 1, "folio started a thread in the fork child: %d threads", proc_threads());
#endif
    pthread_t t;
    CHECK(pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)(seed + 1)) == 0,
          "pthread_create in the child");
    churn(&r, 400, "child main thread beside its thread");
    pthread_join(t, NULL);
    if (depth < 2) {
        blk_t *mine[64];
        for (int i = 0; i < 64; i++)
            mine[i] = make(&r, pick(&r));
        pid_t gc = fork();
        CHECK(gc >= 0, "fork in the child");
        if (gc == 0) {
            child_work(mine, 64, depth + 1, seed * 31 + 7);
            _exit(0);
        }
        churn(&r, 300, "child while its child runs");
        expect_child_ok(gc, "grandchild");
        for (int i = 0; i < 64; i++)
            check_free(mine[i], "child's own blocks after its child exited");
    }
}

/* Wait until the background threads have done `ops` operations: a thread
 * still in its start-up holds locks of the sanitizer runtimes, which are not
 * fork-safe (ASan's own allocator, which glibc's thread start-up calls,
 * deadlocks the child), so the forks start once they run. */
static void wait_running(long ops)
{
    double until = now_sec() + 10;
    while (atomic_load(&bg_ops) < ops && now_sec() < until)
        usleep(1000);
    CHECK(atomic_load(&bg_ops) >= ops, "background threads did not start");
}

static void busy(void)
{
    enum { BG = 2, INH = 256 };
    pthread_t t[BG];
    for (int i = 0; i < BG; i++)
        CHECK(pthread_create(&t[i], NULL, bg_thread, (void *)(uintptr_t)(i + 1)) == 0,
              "pthread_create");
    wait_running(200L * BG);
    rng_t r;
    rng_seed(&r, 4242);
    double until = now_sec() + test_seconds(1.5);
    int forks = 0;
    while (forks < 4 || (forks < 200 && now_sec() < until)) {
        blk_t *inh[INH];
        for (int i = 0; i < INH; i++)
            inh[i] = make(&r, pick(&r));
        pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0) {
            child_work(inh, INH, 1, (uint64_t)forks * 1000 + 1);
            /* exit() (not _exit): atexit handlers and the allocator's
             * destructors run in the forked child too. */
            exit(0);
        }
        forks++;
        expect_child_ok(pid, "child of a busy parent");
        for (int i = 0; i < INH; i++)
            check_free(inh[i], "parent's copy of a block its child freed");
    }
    atomic_store(&bg_stop, 1);
    for (int i = 0; i < BG; i++)
        pthread_join(t[i], NULL);
    NOTE("busy: %d forks while %d threads did %ld allocation ops", forks, BG,
         atomic_load(&bg_ops));
    atomic_store(&bg_stop, 0);
}

/* ---- holder ----------------------------------------------------------- */

#define HELD 2000
static blk_t *held[HELD];
static pthread_mutex_t hmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hcv = PTHREAD_COND_INITIALIZER;
static int hstage;

static void *holder(void *arg)
{
    (void)arg;
    rng_t r;
    rng_seed(&r, 777);
    for (int i = 0; i < HELD; i++)
        held[i] = make(&r, i % 50 == 0 ? rng_range(&r, 100000, 3u << 20) : pick(&r) % 8192);
    pthread_mutex_lock(&hmu);
    hstage = 1;
    pthread_cond_broadcast(&hcv);
    while (hstage < 2)
        pthread_cond_wait(&hcv, &hmu);
    pthread_mutex_unlock(&hmu);
    for (int i = 0; i < HELD; i++)
        check_free(held[i], "holder freeing its blocks after the forks");
    return NULL;
}

static void holder_test(void)
{
    pthread_t h, bg;
    CHECK(pthread_create(&h, NULL, holder, NULL) == 0, "pthread_create");
    CHECK(pthread_create(&bg, NULL, bg_thread, (void *)(uintptr_t)99) == 0, "pthread_create");
    pthread_mutex_lock(&hmu);
    while (hstage < 1)
        pthread_cond_wait(&hcv, &hmu);
    pthread_mutex_unlock(&hmu);
    wait_running(atomic_load(&bg_ops) + 200);
    for (int k = 0; k < 3; k++) {
        pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0) {
            alarm(60);
            /* The holder thread does not exist here: free all its blocks. */
            for (int i = 0; i < HELD; i++)
                check_free(held[i], "child freeing a block of the parent's holder thread");
            rng_t r;
            rng_seed(&r, (uint64_t)k + 5);
            churn(&r, 1500, "child after freeing the holder's blocks");
            /* Reuse: allocate as much again and check it. */
            blk_t **again = malloc(HELD * sizeof *again);
            CHECK(again != NULL, "malloc");
            for (int i = 0; i < HELD; i++)
                again[i] = make(&r, pick(&r) % 8192);
            for (int i = 0; i < HELD; i++)
                check_free(again[i], "child's re-allocation");
            free(again);
            if (k == 0) {
                pid_t gc = fork();
                CHECK(gc >= 0, "fork in child");
                if (gc == 0) {
                    churn(&r, 1000, "grandchild of the holder test");
                    _exit(0);
                }
                expect_child_ok(gc, "grandchild of the holder test");
            }
            _exit(0);
        }
        expect_child_ok(pid, "child freeing the holder's blocks");
    }
    pthread_mutex_lock(&hmu);
    hstage = 2;
    pthread_cond_broadcast(&hcv);
    pthread_mutex_unlock(&hmu);
    pthread_join(h, NULL);
    atomic_store(&bg_stop, 1);
    pthread_join(bg, NULL);
    atomic_store(&bg_stop, 0);
}

/* ---- spawn ------------------------------------------------------------ */

static void spawn_test(void)
{
    if (access("/bin/true", X_OK) != 0)
        return;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, bg_thread, (void *)(uintptr_t)(200 + i)) == 0,
              "pthread_create");
    for (int i = 0; i < 30; i++) {
        pid_t pid;
        char *argv[] = {"true", NULL};
        int rc = posix_spawn(&pid, "/bin/true", NULL, NULL, argv, environ);
        CHECK(rc == 0, "posix_spawn: %d", rc);
        expect_child_ok(pid, "posix_spawn'd /bin/true");
    }
    atomic_store(&bg_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    atomic_store(&bg_stop, 0);
}
/* libfolio.so's writable segment (data, bss), when folio is that library */
struct span_of_lib {
    uintptr_t lo, hi;
};
static int find_folio_rw(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct span_of_lib *s = arg;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libfolio"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W)) {
            s->lo = info->dlpi_addr + ph->p_vaddr;
            s->hi = s->lo + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}
/* pages of [lo, hi) present and mapped by this process alone (pagemap bits
 * 63 and 56): after a fork, the pages one side wrote since */
static int own_pages(uintptr_t lo, uintptr_t hi)
{
    int fd = open("/proc/self/pagemap", O_RDONLY), n = 0;
    if (fd < 0)
        return -1;
    for (uintptr_t p = lo & ~(uintptr_t)4095; p < hi; p += 4096) {
        uint64_t e;
        if (pread(fd, &e, sizeof e, (off_t)(p / 4096 * sizeof e)) != sizeof e)
            n = -1;
        else if (n >= 0 && (e >> 63 & 1) && (e >> 56 & 1))
            n++;
    }
    close(fd);
    return n;
}
/* The parent waits at once (it writes nothing meanwhile); the child, before
 * it allocates, counts the pages of libfolio.so it has of its own. */
static void quiet_fork_test(void)
{
    struct span_of_lib s = {0, 0};
    if (!dl_iterate_phdr(find_folio_rw, &s)) {
        NOTE("quiet fork: folio is not a shared library here, skipped");
        return;
    }
    void *keep = malloc(100); /* a heap in use, as a shell's */
    CHECK(keep != NULL, "malloc");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork (quiet)");
    if (pid == 0) {
        int n = own_pages(s.lo, s.hi);
        _exit(n == 0 ? 0 : n < 0 ? 3 : 10 + (n > 100 ? 100 : n));
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 3, "quiet fork: the child could not read its pagemap");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "quiet fork: folio's fork handlers wrote %d of libfolio.so's pages in the child", WEXITSTATUS(st) - 10);
    free(keep);
}

static void single_test(void)
{
    quiet_fork_test();
    rng_t r;
    rng_seed(&r, 4242);
    int single = 0;
    for (int k = 0; k < 12; k++) {
        blk_t *mine[64];
        for (int i = 0; i < 64; i++)
            mine[i] = make(&r, pick(&r));
        single += __libc_single_threaded != 0;
        pid_t pid = fork();
        CHECK(pid >= 0, "fork (single-threaded)");
        if (pid == 0) {
            child_work(mine, 64, 1, 1000 + (uint64_t)k);
            _exit(0);
        }
        churn(&r, 200, "parent while its child runs");
        expect_child_ok(pid, "child of a single-threaded parent");
        for (int i = 0; i < 64; i++)
            check_free(mine[i], "parent's blocks after the fork");
    }
    CHECK(single == 12, "only %d of 12 forks were made single-threaded", single);
}

/* single_test in a fresh copy of this program without folio's purger */
static void single_in_copy(char **argv)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        char *args[] = {argv[0], "single", NULL};
        setenv("FOLIO_PURGE_THREAD", "0", 1);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    expect_child_ok(pid, "single-threaded forks");
}

int main(int argc, char **argv)
{
#ifdef FOLIO_PREFIX
    /* Sanitizer builds: no background purger, whose start-up (glibc's
     * calloc, served by ASan under a lock ASan does not take around fork)
     * could leave a child's sanitizer allocator locked; see
     * test_fork_storm.c.  Options are read at start: re-execute. */
    reexec_with_env(argv, "FOLIO_PURGE_THREAD", "0");
#endif
    if (argc > 1 && strcmp(argv[1], "single") == 0) {
        single_test();
        return 0;
    }
    double t = now_sec();
    single_in_copy(argv);
    NOTE("single took %.2fs", now_sec() - t);
    t = now_sec();
    busy();
    NOTE("busy took %.2fs", now_sec() - t);
    t = now_sec();
    holder_test();
    NOTE("holder took %.2fs", now_sec() - t);
    t = now_sec();
    spawn_test();
    NOTE("spawn took %.2fs", now_sec() - t);
    return 0;
}
