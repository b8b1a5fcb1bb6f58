// folio-test: no-sanitize
/* test_text_window: what a process runs of libfolio.so lies in its text's
 * first 64 KiB.
 *
 * The kernel maps a file's cached pages 64 KiB around a fault
 * (fault_around_bytes), in windows aligned in the address space, and
 * libfolio.so is linked with 64 KiB segment alignment, so the text's first
 * window is one fault and at most 16 pages of RSS in every process; a
 * function of the common paths placed anywhere else costs every process a
 * second fault and up to 64 KiB more.  mk/layout.ld lists those functions
 * first; a function renamed or added to a common path without a line there
 * lands later, which this test catches (it did: session 18's zone run
 * functions had drifted into the third window).
 *
 * The program does what most do: small and medium mallocs, frees, reallocs
 * of a block growing to 1 MiB, callocs, aligned blocks, two threads whose
 * objects the main thread frees and which exit, a fork.  Then it reads its
 * own page table (/proc/self/pagemap): no page of libfolio.so's text past
 * the first 64 KiB may be present.  It runs itself again with the FOLIO_*
 * variables cleared and a long purge delay (the report and the purges of a
 * process that lives past the delay are not the common paths), with the
 * live file on, as every process has it: its first tick (which only notes
 * the pid) is a common path, its first publish, a second later, is not
 * (session 23 made that tick call the publisher's code, a second window in
 * every process: this test ran with FOLIO_LIVE=0 then, and missed it); a
 * run past 900 ms (a loaded machine) is skipped.  Skipped where folio is
 * linked statically (sanitizer and debug modes) or the page table cannot
 * be read. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api.h"
#include "support/rerun_clean.h"

#define WINDOW (64u * 1024u)
#define OBJECTS 2000

static void *handed[2][OBJECTS];

static void *thread_main(void *arg)
{
    void **out = arg;
    for (int i = 0; i < OBJECTS; i++) {
        out[i] = malloc((size_t)(8 + (i * 37) % 1500));
        CHECK(out[i] != NULL, "thread malloc %d", i);
        memset(out[i], 0x5a, 8);
    }
    void *mine[64];
    for (int i = 0; i < 64; i++)
        mine[i] = malloc((size_t)(16 * (i + 1)));
    for (int i = 0; i < 64; i++)
        free(mine[i]);
    return NULL;
}

static void common_paths(void)
{
    static void *p[OBJECTS];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < OBJECTS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = 1 + (size_t)(x % 4096);
        if (i % 97 == 0)
            n = 8192 + (size_t)(x % (120 * 1024));
        p[i] = malloc(n);
        CHECK(p[i] != NULL, "malloc(%zu)", n);
        memset(p[i], 1, n < 64 ? n : 64);
    }
    /* callocs before the frees: a calloc of recycled pages runs the clearing
     * engine (clear_hint and its calibration: text of its own, as huge
     * blocks have), which whether the pages are recycled depends on where
     * the heap put them */
    void *c = calloc(1000, 8), *cbig = calloc(1, 256 * 1024), *a = NULL;
    CHECK(c && cbig, "calloc");
    for (int i = 0; i < OBJECTS; i += 2) {
        free(p[i]);
        p[i] = NULL;
    }
    void *g = NULL;
    for (size_t n = 1024; n <= 1024 * 1024; n += n / 8) {
        g = realloc(g, n);
        CHECK(g != NULL, "realloc(%zu)", n);
        ((char *)g)[n - 1] = 1;
    }
    free(g);
    CHECK(posix_memalign(&a, 64, 1000) == 0, "posix_memalign");
    void *al = aligned_alloc(4096, 8192);
    CHECK(al != NULL, "aligned_alloc");
    free(c), free(cbig), free(a), free(al);

    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, thread_main, handed[i]) == 0, "pthread_create");
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < OBJECTS; j++)
            free(handed[i][j]);

    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        void *q = malloc(100);
        free(q);
        _exit(q ? 0 : 1);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
    for (int i = 1; i < OBJECTS; i += 2)
        free(p[i]);
}

/* Runs itself with a purge delay it never reaches: the live file and the
 * purger's passes are a process's second second, not its common paths
 * (mk/layout.ld leaves them out); a slow machine's run past a second
 * purges nothing. */
static const char *const clean_settings[] = {"FOLIO_PURGE_DELAY_MS=600000", "FOLIO_LIVE=1", NULL};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!getenv("TEST_TEXT_WINDOW_CLEAN"))
        rerun_clean(argv, "TEST_TEXT_WINDOW_CLEAN=1", clean_settings);
    double t0 = now_ms();
    common_paths();
    double ran = now_ms() - t0;
    if (ran > 900)
        SKIP("the common paths took %.0f ms: the live file's first publish may have run", ran);

    FILE *maps = fopen("/proc/self/maps", "r");
    CHECK(maps != NULL, "open /proc/self/maps");
    char line[512];
    unsigned long start = 0, end = 0, off = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long a, b, o;
        char perm[8], path[400] = "";
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %399s", &a, &b, perm, &o, path) < 4)
            continue;
        const char *base = strrchr(path, '/');
        if (perm[2] == 'x' && base && strncmp(base + 1, "libfolio.so", 11) == 0)
            start = a, end = b, off = o;
    }
    fclose(maps);
    if (!start)
        SKIP("folio is not libfolio.so in this build (linked statically)");
    CHECK(start % WINDOW == 0, "libfolio.so's text at %#lx, not 64 KiB aligned (-z max-page-size)", start);

    int pm = open("/proc/self/pagemap", O_RDONLY);
    if (pm < 0)
        SKIP("cannot read /proc/self/pagemap");
    unsigned present = 0, late = 0;
    char ranges[600] = "";
    size_t used = 0;
    for (unsigned long a = start; a < end; a += 4096) {
        uint64_t e = 0;
        CHECK(pread(pm, &e, sizeof e, (off_t)(a / 4096 * 8)) == (ssize_t)sizeof e, "pagemap");
        if (!(e >> 63))
            continue;
        present++;
        if (a - start >= WINDOW) {
            late++;
            if (used + 24 < sizeof ranges)
                used += (size_t)snprintf(ranges + used, sizeof ranges - used, " %#lx", a - start + off);
        }
    }
    close(pm);
    NOTE("libfolio.so text: %lu KiB, %u pages present, %u past the first 64 KiB", (end - start) / 1024,
         present, late);
    CHECK(present > 0, "no page of libfolio.so's text present: is pagemap telling the truth?");
    CHECK(late == 0,
          "%u pages of libfolio.so's text past its first 64 KiB are mapped (file offsets%s): a function "
          "of the common paths is not in mk/layout.ld's list (`addr2line -f -e build/libfolio.so OFFSET` "
          "names what is there; callgrind on this test lists what ran)",
          late, ranges);
    return 0;
}
