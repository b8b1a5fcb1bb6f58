/* test_badinput: invalid frees, double frees, reallocs and
 * malloc_usable_size of invalid or freed pointers abort with folio's
 * message, for small, large (100 KiB, 1 MiB) and huge (8 MiB) blocks.  Each
 * case runs in a forked child whose stderr comes back through a pipe; the
 * parent checks the child died of SIGABRT and that its stderr holds the
 * message naming the call and the fault with the exact pointer, e.g.
 * "folio: free(): invalid pointer 0x55d0c0ffee10",
 * "folio: realloc(): freed pointer 0x7f3c00200000".
 *
 * It runs in the sanitizer mode too (folio_free & co., built with
 * ASan+UBSan): folio's abort is a plain SIGABRT there as well.
 *
 * Built with FOLIO_TEST_GLIBC it checks only the SIGABRT of the cases glibc
 * also refuses (glibc's messages differ). */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

enum op {
    OP_FREE,          /* free(ptr) */
    OP_DOUBLE_FREE,   /* free(ptr) twice */
    OP_REALLOC,       /* realloc(ptr, 200) */
    OP_FREED_REALLOC, /* free(ptr), then realloc(ptr, 200) */
    OP_USABLE,        /* malloc_usable_size(ptr) */
    OP_FREED_USABLE,  /* free(ptr), then malloc_usable_size(ptr) */
    OP_VALID,
    OP_RETIRED_FREE,
    OP_FREE_NEW_THREAD, /* free(ptr) in a thread that has not allocated */
};

/* OP_RETIRED_FREE: several slabs of objects, all but the last freed (the
 * first slabs go back to the heap's cache of empty slabs), then the first
 * one freed again. */
#define RETIRED_SIZE 20000
#define RETIRED_N 40 /* several slabs of the 20 KiB class (12 objects each) */
static void *retired[RETIRED_N];

struct bad_case {
    const char *name;
    enum op op;
    void *ptr;            /* the pointer handed to free/realloc */
    const char *message;  /* expected text before the pointer */
};

static void *free_in_thread(void *p)
{
    free(OPAQUE(p));
    return NULL;
}

/* An address in the last page of the .bss of the object that holds folio's
 * free (the library, or this program when folio is linked in): a thread
 * with no slab looked an address up to 256 MiB past its no-arena objmap
 * (an all-zero table among the big ones at the end of the .bss) before it
 * refused it; the hint is a non-canonical constant now (obj.h,
 * ARENA_HINT_NONE), and the case stays.  NULL: not found. */
static char *bss_last_page(void)
{
    Dl_info info;
    char want[PATH_MAX], line[PATH_MAX + 128], path[PATH_MAX];
    if (!dladdr((void *)free, &info) || !info.dli_fname || !realpath(info.dli_fname, want))
        return NULL;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return NULL;
    unsigned long end = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        path[0] = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &lo, &hi, path) < 2)
            continue;
        if (strcmp(path, want) == 0)
            end = hi;
        else if (end && lo == end && path[0] == 0)
            end = hi; /* the .bss past the file's last page */
    }
    fclose(f);
    return end ? (char *)end - 4096 + 16 : NULL;
}

static void do_op(const struct bad_case *c)
{
    void *p = OPAQUE(c->ptr);
    switch (c->op) {
    case OP_FREE:
        free(p);
        break;
    case OP_DOUBLE_FREE: {
        void *again = OPAQUE(c->ptr);
        free(p);
        free(again);
        break;
    }
    case OP_REALLOC: {
        void *q = realloc(p, 200);
        (void)OPAQUE(q);
        break;
    }
    case OP_FREED_REALLOC: {
        void *again = OPAQUE(c->ptr);
        free(p);
        void *q = realloc(again, 200);
        (void)OPAQUE(q);
        break;
    }
    case OP_USABLE:
        (void)OPAQUE(malloc_usable_size(p));
        break;
    case OP_FREED_USABLE: {
        void *again = OPAQUE(c->ptr);
        free(p);
        (void)OPAQUE(malloc_usable_size(again));
        break;
    }
    case OP_RETIRED_FREE:
        for (int i = 0; i < RETIRED_N - 1; i++)
            free(OPAQUE(retired[i]));
        free(p);
        break;
    case OP_FREE_NEW_THREAD: {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, free_in_thread, p) == 0, "pthread_create");
        pthread_join(t, NULL);
        break;
    }
    case OP_VALID: {
        void *q = realloc(p, 5000);
        CHECK(q != NULL, "valid realloc in the control child failed");
        free(q);
        q = malloc(OPAQUE((size_t)33));
        free(q);
        break;
    }
    }
}

/* Run one case in a child; return its stderr (malloc'd) and wait status. */
static void run_op(const void *c) { do_op(c); }
static char *run_case(const struct bad_case *c, int *status)
{
    return run_in_child(run_op, c, 20, status);
}

static void expect_abort(const struct bad_case *c)
{
    int st = 0;
    char *err = run_case(c, &st);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT)) {
        fprintf(stderr, "case '%s': child stderr:\n%s\n", c->name, err);
        if (WIFEXITED(st))
            FAIL("case '%s': child exited with status %d instead of aborting", c->name,
                 WEXITSTATUS(st));
        FAIL("case '%s': child killed by signal %d, want SIGABRT (%d)", c->name, WTERMSIG(st),
             SIGABRT);
    }
#ifndef FOLIO_TEST_GLIBC
    char want[160];
    snprintf(want, sizeof want, "%s %p", c->message, c->ptr);
    if (!find_message(err, want)) {
        fprintf(stderr, "case '%s': child stderr:\n%s\n", c->name, err);
        FAIL("case '%s': stderr lacks \"%s\"", c->name, want);
    }
#endif
    NOTE("%-40s aborted: %.*s", c->name, (int)strcspn(err, "\n"), err);
    free(err);
}

/* Misuse of small, large and huge blocks: double free, realloc and
 * malloc_usable_size of a freed block, interior pointers.  The blocks stay
 * live in the parent (each child frees its own copy). */
static void large_and_huge(char *small)
{
    static const struct { const char *what; size_t size; } blocks[] = {
        {"malloc(64)", 64},
        {"malloc(100 KiB)", 100u << 10},    /* large, from a pageset */
        {"malloc(1 MiB)", 1u << 20},        /* large, from the zone */
        {"malloc(8 MiB)", 8u << 20},        /* huge */
    };
    enum { NB = sizeof blocks / sizeof blocks[0] };
    char *b[NB];
    for (int i = 0; i < NB; i++) {
        b[i] = malloc(OPAQUE(blocks[i].size));
        CHECK(b[i] != NULL, "%s", blocks[i].what);
        memset(b[i], 0x5c, blocks[i].size);
    }
    char name[128];
    for (int i = 1; i < NB; i++) {
#ifdef FOLIO_TEST_GLIBC
        if (blocks[i].size > (128u << 10))
            continue; /* glibc unmapped it at the first free: the second faults */
#endif
        snprintf(name, sizeof name, "double free of %s", blocks[i].what);
        struct bad_case dbl = {name, OP_DOUBLE_FREE, b[i], "free(): double free"};
        expect_abort(&dbl);
    }
    /* (glibc lets a freed block pass realloc and malloc_usable_size, and
     * reads a header before an interior pointer: a segfault) */
#ifndef FOLIO_TEST_GLIBC
    for (int i = 0; i < NB; i++) {
        snprintf(name, sizeof name, "realloc of a freed %s", blocks[i].what);
        struct bad_case re = {name, OP_FREED_REALLOC, b[i], "realloc(): freed pointer"};
        expect_abort(&re);
        snprintf(name, sizeof name, "malloc_usable_size of a freed %s", blocks[i].what);
        struct bad_case us = {name, OP_FREED_USABLE, b[i], "malloc_usable_size(): freed pointer"};
        expect_abort(&us);
    }
    struct bad_case us_mid = {"malloc_usable_size of malloc(64)+16", OP_USABLE, small + 16,
                              "malloc_usable_size(): invalid pointer"};
    expect_abort(&us_mid);

    /* interior pointers of large and huge blocks: page-aligned ones (which
     * look like a block's start), one past the head page, another chunk of
     * a huge extent */
    static const struct { int block; size_t off; } inner[] = {
        {1, 4096}, {1, 8192 + 48}, {2, 4096}, {2, 512u << 10}, {3, 4096}, {3, 2u << 20},
        {3, (2u << 20) + 160},
    };
    for (size_t i = 0; i < sizeof inner / sizeof inner[0]; i++) {
        char *p = b[inner[i].block] + inner[i].off;
        snprintf(name, sizeof name, "free of %s+%zu", blocks[inner[i].block].what, inner[i].off);
        struct bad_case fr = {name, OP_FREE, p, "free(): invalid pointer"};
        expect_abort(&fr);
        snprintf(name, sizeof name, "realloc of %s+%zu", blocks[inner[i].block].what,
                 inner[i].off);
        struct bad_case re = {name, OP_REALLOC, p, "realloc(): invalid pointer"};
        expect_abort(&re);
    }
#else
    (void)small;
#endif
    for (int i = 0; i < NB; i++) {
        CHECK(first_not(b[i], blocks[i].size, 0x5c) == (size_t)-1, "%s damaged", blocks[i].what);
        free(b[i]);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
#ifndef FOLIO_TEST_GLIBC
    /* slabs from the first object (the dense heap's misuse: test_dense) */
    reexec_with_env(argv, "FOLIO_HEAP_DENSE_KIB", "0");
#else
    (void)argv;
#endif
    /* The control: valid calls in a child exit normally and say nothing. */
    {
        void *p = malloc(OPAQUE((size_t)64));
        struct bad_case ok = {"valid realloc and free", OP_VALID, p, ""};
        int st;
        char *err = run_case(&ok, &st);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "control child: status %#x, stderr: %s",
              st, err);
        CHECK(err[0] == 0, "control child wrote to stderr: %s", err);
        free(err);
        free(p);
    }

    /* free of a stack address. */
    _Alignas(64) char stack_buf[256];
    memset(stack_buf, 0, sizeof stack_buf);
    struct bad_case stack_free = {"free of a stack address", OP_FREE, stack_buf + 64,
                                  "free(): invalid pointer"};
    expect_abort(&stack_free);

    /* free of a pointer into the middle of a small block. */
    char *small = malloc(OPAQUE((size_t)64));
    CHECK(small != NULL, "malloc(64)");
    struct bad_case mid_small = {"free of malloc(64)+8", OP_FREE, small + 8,
                                 "free(): invalid pointer"};
    expect_abort(&mid_small);
    char *small2 = malloc(OPAQUE((size_t)24));
    struct bad_case mid_small2 = {"free of malloc(24)+16", OP_FREE, small2 + 16,
                                  "free(): invalid pointer"};
    expect_abort(&mid_small2);

    /* free of a heap-looking address that is no block's start: inside a
     * 1 MiB block at offset 4096+16. */
    char *big = malloc(OPAQUE((size_t)1 << 20));
    CHECK(big != NULL, "malloc(1 MiB)");
    memset(big, 0, 1 << 20);
    struct bad_case inside_big = {"free inside a 1 MiB block (+4112)", OP_FREE, big + 4096 + 16,
                                  "free(): invalid pointer"};
    expect_abort(&inside_big);

#ifndef FOLIO_TEST_GLIBC
    /* free of an address in folio's own .bss, by a thread with no slab */
    char *own = bss_last_page();
    if (own) {
        struct bad_case own_free = {"free of folio's .bss in a new thread", OP_FREE_NEW_THREAD, own,
                                    "free(): invalid pointer"};
        expect_abort(&own_free);
    } else {
        NOTE("no .bss found for folio's free in /proc/self/maps: case skipped");
    }
#endif

    /* free of a page mapped by someone else (not the allocator's). */
#ifndef FOLIO_TEST_GLIBC
    char *foreign = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(foreign != MAP_FAILED, "mmap");
    struct bad_case foreign_free = {"free of a foreign mmap'd page", OP_FREE, foreign + 4096,
                                    "free(): invalid pointer"};
    expect_abort(&foreign_free);
    munmap(foreign, 1 << 16);
#endif

    /* double free of small objects in two size classes. */
    void *d32 = malloc(OPAQUE((size_t)32));
    CHECK(d32 != NULL, "malloc(32)");
    struct bad_case dbl32 = {"double free of malloc(32)", OP_DOUBLE_FREE, d32,
                             "free(): double free"};
    expect_abort(&dbl32);
    void *d100 = malloc(OPAQUE((size_t)100));
    CHECK(d100 != NULL, "malloc(100)");
    struct bad_case dbl100 = {"double free of malloc(100)", OP_DOUBLE_FREE, d100,
                              "free(): double free"};
    expect_abort(&dbl100);

#ifndef FOLIO_TEST_GLIBC
    /* a free into a slab that was emptied and retired: objects of one class
     * fill several slabs, all but the last are freed, then the first again
     * (folio keeps a retired slab's pages mapped to it while its heap caches
     * it, so this checks that the lookup still refuses it, and names the
     * fault: the object was freed) */
    for (int i = 0; i < RETIRED_N; i++) {
        retired[i] = malloc(OPAQUE((size_t)RETIRED_SIZE));
        CHECK(retired[i] != NULL, "malloc(%d)", RETIRED_SIZE);
    }
    struct bad_case retired_free = {"free into a retired empty slab", OP_RETIRED_FREE, retired[0],
                                    "free(): double free"};
    expect_abort(&retired_free);
#endif

#ifndef FOLIO_TEST_GLIBC
    /* a free of a slab's slack, the bytes past its last object: a whole
     * slab of the 3 KiB class (10 objects in 32 KiB, 2 KiB of slack), taken
     * fresh, so its last page holds both objects and the slack.  The
     * pointer lies on a multiple of the size from the slab's start, so only
     * the object area's bound refuses it. */
    enum { SLACK_SIZE = 3072, SLACK_N = 10 };
    char *slack_objs[SLACK_N], *lo = NULL, *hi = NULL;
    for (int i = 0; i < SLACK_N; i++) {
        slack_objs[i] = malloc(OPAQUE((size_t)SLACK_SIZE));
        CHECK(slack_objs[i] != NULL, "malloc(%d)", SLACK_SIZE);
        if (!lo || slack_objs[i] < lo) lo = slack_objs[i];
        if (!hi || slack_objs[i] > hi) hi = slack_objs[i];
    }
    CHECK(hi == lo + (SLACK_N - 1) * SLACK_SIZE, "the 3 KiB objects are not one fresh slab");
    struct bad_case slack_free = {"free of a slab's slack", OP_FREE, hi + SLACK_SIZE,
                                  "free(): invalid pointer"};
    expect_abort(&slack_free);
    for (int i = 0; i < SLACK_N; i++)
        free(slack_objs[i]);
#endif

    /* realloc of invalid pointers. */
    struct bad_case stack_realloc = {"realloc of a stack address", OP_REALLOC, stack_buf + 128,
                                     "realloc(): invalid pointer"};
    expect_abort(&stack_realloc);
    struct bad_case mid_realloc = {"realloc of malloc(64)+8", OP_REALLOC, small + 8,
                                   "realloc(): invalid pointer"};
    expect_abort(&mid_realloc);

    large_and_huge(small);

    /* The parent's own copies are intact and free normally. */
    free(small);
    free(small2);
    free(big);
    free(d32);
    free(d100);
#ifndef FOLIO_TEST_GLIBC
    for (int i = 0; i < RETIRED_N; i++)
        free(retired[i]);
#endif
    return 0;
}
