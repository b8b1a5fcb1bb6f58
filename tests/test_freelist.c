// folio-test: tsan
/* test_freelist: a write after free into a small block's link word never
 * makes malloc hand out a forged pointer.  For several size classes, on the
 * owner's own free list and on a slab's remote (cross-thread) free list, a
 * freed block's first word is overwritten with the address of a static
 * buffer, with a garbage value and with zero; then the owner mallocs the
 * block's size class (its usable size: a new thread's first blocks of a
 * small size come from a larger class) again and again.  Each case runs in a forked child: it must die of
 * SIGABRT with "folio: malloc(): corrupted free list at 0x<block>", naming the
 * block that was written to, and every pointer malloc returned before that
 * must be a block of the heap (neither the forged value nor the buffer).
 *
 * Built with FOLIO_TEST_GLIBC it only runs the control (glibc's checks and
 * messages differ). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

static char target[4096] __attribute__((aligned(4096))); /* where a forged link points */

enum where { LOCAL, REMOTE };
enum what { STATIC_BUF, GARBAGE, ZERO, NOTHING };
static const char *where_name[] = {"local", "remote"};
static const char *what_name[] = {"static buffer", "garbage", "zero", "nothing (control)"};

static uintptr_t forged_value(enum what w)
{
    switch (w) {
    case STATIC_BUF: return (uintptr_t)(target + 64);
    case GARBAGE: return 0x4141414141414141ull;
    default: return 0;
    }
}

/* A returned pointer must be a heap block: not the forged value, not inside
 * the static buffer.  Says which in the child's exit status. */
static void check_returned(void *q, enum what w)
{
    uintptr_t a = (uintptr_t)q;
    if (q == NULL) _exit(2);
    if (a >= (uintptr_t)target && a < (uintptr_t)target + sizeof target) _exit(3);
    if (w != NOTHING && a == forged_value(w)) _exit(3);
}

#define NBLOCKS 3 /* freed blocks: the middle one is written to */
static void *blocks[NBLOCKS];

static void *remote_free(void *arg)
{
    (void)arg;
    for (int i = 0; i < NBLOCKS; i++)
        free(blocks[i]);
    return NULL;
}

/* The child: free NBLOCKS blocks (locally, or from another thread), write
 * into the middle one's first word, then malloc the size until the list
 * holding it is popped (a remote list is taken when the local one runs dry:
 * at most a slab's worth of mallocs).  Returns only for the control. */
static void child(enum where where, enum what what, size_t n)
{
    for (int i = 0; i < NBLOCKS; i++) {
        blocks[i] = malloc(OPAQUE(n));
        CHECK(blocks[i] != NULL, "malloc(%zu)", n);
    }
    size_t m = malloc_usable_size(blocks[1]); /* the class mallocs take below */
    if (where == LOCAL) {
        for (int i = 0; i < NBLOCKS; i++)
            free(OPAQUE(blocks[i]));
    } else {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, remote_free, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    }
    if (what != NOTHING) {
        char line[64];
        int len = snprintf(line, sizeof line, "writing into %p\n", blocks[1]);
        CHECK(write(2, line, (size_t)len) == len, "write");
        *(volatile uintptr_t *)OPAQUE(blocks[1]) = forged_value(what);
    }
    /* 1 MiB of blocks of the block's class: more than a slab of any class
     * (256 KiB at most), so the list holding the written block is popped.
     * Its usable size, not n: a thread's first blocks of a small class come
     * from a larger class's slabs (young bins), and n is served from its
     * own class once they are spent */
    size_t rounds = 2 * (512 * 1024 / m) + 64;
    for (size_t i = 0; i < rounds; i++) {
        void *q = malloc(OPAQUE(m));
        check_returned(q, what);
        memset(q, 0x5a, m); /* used as a program would */
    }
}

struct case_args {
    enum where where;
    enum what what;
    size_t n;
};
static void run_child(const void *arg)
{
    const struct case_args *c = arg;
    child(c->where, c->what, c->n);
}

/* Run one case in a forked child; returns its stderr (malloc'd) and status. */
static char *run_case(enum where where, enum what what, size_t n, int *status)
{
    struct case_args c = {where, what, n};
    return run_in_child(run_child, &c, 30, status);
}

__attribute__((unused)) static void expect_refused(enum where where, enum what what, size_t n)
{
    int st = 0;
    char *err = run_case(where, what, n, &st);
    char name[96];
    snprintf(name, sizeof name, "%s list, %zu B, %s", where_name[where], n, what_name[what]);
    void *block = NULL;
    const char *at = strstr(err, "writing into ");
    CHECK(at && sscanf(at, "writing into %p", &block) == 1, "%s: the child did not say which "
          "block it wrote to; stderr:\n%s", name, err);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT)) {
        fprintf(stderr, "case '%s': child stderr:\n%s\n", name, err);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 3)
            FAIL("case '%s': malloc returned the forged pointer", name);
        if (WIFEXITED(st))
            FAIL("case '%s': child exited with status %d instead of aborting", name,
                 WEXITSTATUS(st));
        FAIL("case '%s': child killed by signal %d, want SIGABRT (%d)", name, WTERMSIG(st),
             SIGABRT);
    }
    char want[160];
    snprintf(want, sizeof want, "folio: malloc(): corrupted free list at %p", block);
    const char *m = find_message(err, want);
    if (!m) {
        fprintf(stderr, "case '%s': child stderr:\n%s\n", name, err);
        FAIL("case '%s': stderr lacks \"%s\"", name, want);
    }
    NOTE("%-44s aborted: %.*s", name, (int)strcspn(m, "\n"), m);
    free(err);
}

int main(int argc, char **argv)
{
#ifdef FOLIO_PREFIX
    /* Sanitizer builds: no background purger.  The cases fork, and a
     * child whose parent already runs folio's purger may not start threads
     * under TSan ("starting new threads after multi-threaded fork is not
     * supported"): whether it runs by then depends on when the purger
     * starts, which is not what this test is about.  Options are read at
     * start: re-execute. */
    reexec_with_env(argv, "FOLIO_PURGE_THREAD", "0");
#endif
#ifndef FOLIO_TEST_GLIBC
    reexec_with_env(argv, "FOLIO_HEAP_DENSE_KIB", "0"); /* the slabs' free lists from the first object */
#endif
    (void)argc;
    (void)argv;
    static const size_t sizes[] = {16, 48, 128, 1000, 4096, 20000};
    size_t nsizes = sizeof sizes / sizeof sizes[0];

    /* The control: the same steps without the write end normally, in both
     * lists and every size (also under glibc). */
    for (int where = LOCAL; where <= REMOTE; where++)
        for (size_t i = 0; i < nsizes; i++) {
            int st = 0;
            char *err = run_case(where, NOTHING, sizes[i], &st);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "control (%s list, %zu B): status %#x, stderr:\n%s", where_name[where],
                  sizes[i], st, err);
            free(err);
        }
#ifdef FOLIO_TEST_GLIBC
    SKIP("glibc: only the control runs");
#else
    for (int where = LOCAL; where <= REMOTE; where++)
        for (int what = STATIC_BUF; what <= ZERO; what++)
            for (size_t i = 0; i < nsizes; i++)
                expect_refused(where, what, sizes[i]);
#endif
    return 0;
}
