/* test_addrspace: under an address space limit (RLIMIT_AS, `ulimit -v`),
 * memory freed in one tier serves the others again, and exhaustion is a
 * clean NULL with errno ENOMEM in every tier, never a crash.
 *
 * Each scenario runs in a forked child whose limit is its own address space
 * at the start (VmSize) plus LIMIT_MIB, so the figure means the same with
 * any allocator and runtime:
 *   small_calloc   small blocks (malloc and calloc) until NULL, all freed,
 *                  then calloc(1, 200 MiB) succeeds and reads zero; a free of
 *                  one of the old, freed blocks ends the process naming free()
 *                  and the pointer ("invalid pointer", or "double free" when
 *                  its chunk came back into the heap meanwhile)
 *   large_huge     large blocks until NULL, all freed, then a 200 MiB block
 *   huge_small     huge blocks until NULL, all freed, then small blocks until
 *                  NULL get as much (within 16 MiB)
 *   aligned        posix_memalign/aligned_alloc until ENOMEM, freed, then
 *                  aligned_alloc(2 MiB, 200 MiB)
 *   realloc        small blocks until NULL and freed, then one block grown
 *                  by realloc to 128 MiB (contents kept), then until NULL (the
 *                  block intact), then 200 MiB again
 *   every_tier     huge, large and small blocks held until each fails: a
 *                  further huge malloc, calloc, realloc, aligned_alloc and
 *                  posix_memalign fail with ENOMEM; all freed, each works
 *   threads        4 threads allocate and free every tier at the limit, with
 *                  cross-thread frees: ENOMEM only, no damage, then 200 MiB
 *
 * ASan reserves terabytes of shadow and its runtime maps memory of its own
 * as it goes: a limit tight enough to bind folio makes the runtime fail
 * ("AddressSanitizer failed to allocate"), so the test skips when the
 * address space is already that large (the sanitizer mode).  Built with FOLIO_TEST_GLIBC it runs the same scenarios on the
 * C library's allocator (for comparison; without folio's counters). */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#define MIB ((size_t)1 << 20)
#define LIMIT_MIB 300
#define BIG (200 * MIB)

/* VmSize of this process in bytes, 0 if unknown. */
static size_t vm_size(void)
{
    char buf[4096];
    FILE *f = fopen("/proc/self/status", "r");
    size_t kb = 0;
    if (!f)
        return 0;
    while (fgets(buf, sizeof buf, f))
        if (sscanf(buf, "VmSize: %zu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

static void set_limit(void)
{
    size_t vm = vm_size();
    CHECK(vm > 0, "no VmSize in /proc/self/status");
    struct rlimit rl = {vm + LIMIT_MIB * MIB, vm + LIMIT_MIB * MIB};
    CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit(RLIMIT_AS, %zu)", (size_t)rl.rlim_cur);
}

/* Blocks are kept on a list linked through their first word, so holding
 * hundreds of thousands needs no array (which would need address space). */
struct hold {
    void *head;
    size_t n, bytes;
};

static void hold_push(struct hold *h, void *p, size_t n)
{
    *(void **)p = h->head;
    h->head = p;
    h->n++;
    h->bytes += n;
}

static void hold_free(struct hold *h)
{
    while (h->head) {
        void *p = h->head;
        h->head = *(void **)p;
        free(p);
    }
    h->n = h->bytes = 0;
}

/* Allocate blocks of `sizes` in turn (every other one with calloc when
 * use_calloc) until one fails; the failure must be ENOMEM. */
static void fill(struct hold *h, const size_t *sizes, size_t nsizes, int use_calloc,
                 const char *what)
{
    for (size_t i = 0;; i++) {
        size_t n = sizes[i % nsizes];
        errno = 0;
        void *p = use_calloc && (i & 1) ? calloc(1, OPAQUE(n)) : malloc(OPAQUE(n));
        if (!p) {
            CHECK(errno == ENOMEM, "%s: %s(%zu) failed with errno %d, want ENOMEM", what,
                  use_calloc && (i & 1) ? "calloc" : "malloc", n, errno);
            break;
        }
        hold_push(h, p, n);
        CHECK(h->bytes < ((size_t)64 << 30), "%s: no limit seen after %zu bytes", what, h->bytes);
    }
    NOTE("%s: %zu blocks, %zu MiB until NULL", what, h->n, h->bytes / MIB);
    CHECK(h->bytes >= 100 * MIB, "%s: only %zu MiB before NULL (limit %d MiB)", what,
          h->bytes / MIB, LIMIT_MIB);
}

static void big_block_works(const char *after)
{
    errno = 0;
    char *p = calloc(1, OPAQUE(BIG));
    CHECK(p != NULL, "calloc(1, 200 MiB) after %s failed (errno %d)", after, errno);
    CHECK(first_not(p, BIG, 0) == (size_t)-1, "calloc(1, 200 MiB) after %s not zero", after);
    memset(p, 0x5a, BIG);
    free(OPAQUE(p));
}

static const size_t small_sizes[] = {24, 64, 200, 1000, 4000, 16000, 32000};
#define NSMALL (sizeof small_sizes / sizeof small_sizes[0])

/* Free of a block after its memory went back to the kernel (folio): stderr
 * goes to the parent, which wants folio's message naming free() and the
 * pointer (run() says which). */
static void *stale;

static void scenario_small_calloc(void)
{
    struct hold h = {0};
    fill(&h, small_sizes, NSMALL, 1, "small blocks");
    /* the latest block not at a 2 MiB boundary (never the base of a huge
     * block) nor in the first 2 MiB of a 256 MiB range (folio's arenas keep
     * their metadata there, and that chunk never goes back; the zone fills
     * the fullest chunk first, so the last small blocks may well be in it) */
    stale = h.head;
    while (stale && (((uintptr_t)stale & (2 * MIB - 1)) == 0 || ((uintptr_t)stale & (256 * MIB - 1)) < 2 * MIB))
        stale = *(void **)stale;
    CHECK(stale != NULL, "no small block outside the arenas' metadata chunks");
    hold_free(&h);
    big_block_works("small blocks");
#ifndef FOLIO_TEST_GLIBC
    CHECK(report_u64("as_released_bytes") > 0, "no address space given back");
    CHECK(report_u64("mmap_failures") > 0, "no mmap failure counted");
#endif
    fill(&h, small_sizes, NSMALL, 0, "small blocks again");
    hold_free(&h);
    big_block_works("small blocks again");
}

static void scenario_large_huge(void)
{
    static const size_t sizes[] = {40 << 10, 100 << 10, 300 << 10, 1 << 20, 1900 << 10};
    struct hold h = {0};
    fill(&h, sizes, 5, 1, "large blocks");
    hold_free(&h);
    errno = 0;
    char *p = malloc(OPAQUE(BIG));
    CHECK(p != NULL, "malloc(200 MiB) after large blocks failed (errno %d)", errno);
    memset(p, 1, BIG);
    free(OPAQUE(p));
    fill(&h, sizes, 5, 0, "large blocks again");
    hold_free(&h);
}

static void scenario_huge_small(void)
{
    /* smaller and smaller blocks, so that little address space is left */
    static const size_t sizes[3][1] = {{24 * MIB}, {8 * MIB}, {2 * MIB + 4096}};
    struct hold h = {0}, s = {0};
    fill(&h, sizes[0], 1, 1, "huge 24 MiB");
    for (int i = 1; i < 3; i++)
        for (void *p; (p = malloc(OPAQUE(sizes[i][0])));)
            hold_push(&h, p, sizes[i][0]);
    size_t held = h.bytes;
    NOTE("huge blocks: %zu MiB in all", held / MIB);
    hold_free(&h);
    /* small blocks take that address space back, all but slab slack */
    fill(&s, small_sizes, NSMALL, 0, "small blocks after huge");
    CHECK(s.bytes + 16 * MIB >= held, "small blocks got %zu MiB after huge blocks held %zu MiB",
          s.bytes / MIB, held / MIB);
    hold_free(&s);
    big_block_works("huge then small blocks");
}

static void scenario_aligned(void)
{
    struct hold h = {0};
    for (;;) {
        void *p = NULL;
        int r = posix_memalign(&p, 64 << 10, OPAQUE((size_t)(64 << 10)));
        if (r) {
            CHECK(r == ENOMEM, "posix_memalign failed with %d, want ENOMEM", r);
            break;
        }
        CHECK(((uintptr_t)p & ((64 << 10) - 1)) == 0, "posix_memalign: %p not aligned", p);
        hold_push(&h, p, 64 << 10);
    }
    NOTE("posix_memalign(64 KiB): %zu MiB until ENOMEM", h.bytes / MIB);
    CHECK(h.bytes >= 100 * MIB, "posix_memalign: only %zu MiB", h.bytes / MIB);
    hold_free(&h);
    for (;;) {
        errno = 0;
        void *p = aligned_alloc(4 * MIB, OPAQUE(6 * MIB));
        if (!p) {
            CHECK(errno == ENOMEM, "aligned_alloc(4 MiB, 6 MiB): errno %d, want ENOMEM", errno);
            break;
        }
        CHECK(((uintptr_t)p & (4 * MIB - 1)) == 0, "aligned_alloc: %p not aligned", p);
        hold_push(&h, p, 6 * MIB);
    }
    NOTE("aligned_alloc(4 MiB, 6 MiB): %zu MiB until NULL", h.bytes / MIB);
    CHECK(h.bytes >= 100 * MIB, "aligned_alloc: only %zu MiB", h.bytes / MIB);
    hold_free(&h);
    errno = 0;
    char *p = aligned_alloc(2 * MIB, OPAQUE(BIG));
    CHECK(p != NULL, "aligned_alloc(2 MiB, 200 MiB) after aligned blocks failed (errno %d)", errno);
    CHECK(((uintptr_t)p & (2 * MIB - 1)) == 0, "aligned_alloc: %p not aligned", (void *)p);
    memset(p, 2, BIG);
    free(OPAQUE(p));
}

static void scenario_realloc(void)
{
    struct hold h = {0};
    fill(&h, small_sizes, NSMALL, 0, "small blocks");
    hold_free(&h);
    size_t size = 1000;
    char *p = malloc(size);
    CHECK(p != NULL, "malloc(1000)");
    pattern_fill(p, size, 7);
    /* growth that needs the freed small blocks' address space */
    while (size < 128 * MIB) {
        size_t next = size * 2;
        errno = 0;
        char *q = realloc(OPAQUE(p), next);
        CHECK(q != NULL, "realloc %zu -> %zu after small blocks failed (errno %d)", size, next, errno);
        CHECK(pattern_check(q, size, 7) == (size_t)-1, "realloc %zu -> %zu lost contents", size, next);
        pattern_fill_from(q, size, next, 7);
        p = q;
        size = next;
    }
    /* then until NULL: the failure leaves the block whole */
    for (;;) {
        size_t next = size + 16 * MIB;
        errno = 0;
        char *q = realloc(OPAQUE(p), next);
        if (!q) {
            CHECK(errno == ENOMEM, "realloc to %zu MiB: errno %d, want ENOMEM", next / MIB, errno);
            break;
        }
        pattern_fill_from(q, size, next, 7);
        p = q;
        size = next;
        CHECK(size < ((size_t)64 << 30), "realloc: no limit seen");
    }
    NOTE("realloc growth: %zu MiB until NULL", size / MIB);
    CHECK(pattern_check(p, size, 7) == (size_t)-1, "growth or the failed realloc damaged the block");
    free(OPAQUE(p));
    big_block_works("realloc growth");
}

/* One call in a state where everything is held: NULL with ENOMEM. */
#define EXPECT_ENOMEM(call, what)                                                        \
    do {                                                                                 \
        errno = 0;                                                                       \
        void *r_ = (call);                                                               \
        CHECK(r_ == NULL && errno == ENOMEM, "%s when exhausted: %p, errno %d", what, r_, \
              errno);                                                                    \
    } while (0)

static void scenario_every_tier(void)
{
    static const size_t huge_sz[] = {16 * MIB}, large_sz[] = {1 * MIB}, small_sz[] = {64};
    struct hold hh = {0}, hl = {0}, hs = {0};
    char *keep = malloc(64); /* a small block a failed realloc must leave intact */
    CHECK(keep != NULL, "malloc(64)");
    memset(keep, 0x77, 64);
    fill(&hh, huge_sz, 1, 0, "huge 16 MiB");
    /* large and small fill what is left: less than 16 MiB */
    for (void *p; (p = malloc(OPAQUE(large_sz[0])));)
        hold_push(&hl, p, large_sz[0]);
    for (void *p; (p = malloc(OPAQUE(small_sz[0])));)
        hold_push(&hs, p, small_sz[0]);
    EXPECT_ENOMEM(malloc(OPAQUE(16 * MIB)), "malloc(16 MiB)");
    EXPECT_ENOMEM(calloc(1, OPAQUE(16 * MIB)), "calloc(1, 16 MiB)");
    EXPECT_ENOMEM(realloc(keep, OPAQUE(16 * MIB)), "realloc(64 B block, 16 MiB)");
    CHECK(first_not(keep, 64, 0x77) == (size_t)-1, "failed realloc damaged the block");
    EXPECT_ENOMEM(aligned_alloc(4 * MIB, OPAQUE(16 * MIB)), "aligned_alloc(4 MiB, 16 MiB)");
    void *out = NULL;
    int r = posix_memalign(&out, 4 * MIB, OPAQUE(16 * MIB));
    CHECK(r == ENOMEM, "posix_memalign when exhausted: %d, want ENOMEM", r);
    hold_free(&hs);
    hold_free(&hl);
    hold_free(&hh);
    free(keep);
    void *ps[5];
    ps[0] = malloc(OPAQUE(16 * MIB));
    ps[1] = calloc(1, OPAQUE(16 * MIB));
    ps[2] = realloc(NULL, OPAQUE(16 * MIB));
    ps[3] = aligned_alloc(4 * MIB, OPAQUE(16 * MIB));
    r = posix_memalign(&ps[4], 4 * MIB, OPAQUE(16 * MIB));
    CHECK(r == 0, "posix_memalign after freeing: %d", r);
    for (int i = 0; i < 5; i++) {
        CHECK(ps[i] != NULL, "tier call %d failed after freeing everything", i);
        memset(ps[i], i, 16 * MIB);
    }
    for (int i = 0; i < 5; i++)
        free(ps[i]);
}

/* Threads allocate and free every tier at the limit, handing blocks to
 * each other through shared slots: NULLs are ENOMEM, contents stay intact
 * (address space given back by one thread never held another's block), and
 * the freed memory serves a 200 MiB block at the end. */
#define SLOTS 4096
#define NTHREADS 4
static _Atomic(void *) slot[SLOTS];
/* A block's first byte holds how many bytes of it carry the pattern (its
 * size, at most 64): a size kept beside the slot could belong to the block
 * another thread is about to store there, not to the one just taken. */
static void slot_mark(unsigned char *p, size_t n, size_t i)
{
    size_t len = n < 64 ? n : 64;
    p[0] = (unsigned char)len;
    pattern_fill(p + 1, len - 1, i);
}
static bool slot_intact(const unsigned char *p, size_t i)
{
    size_t len = p[0];
    return len >= 1 && len <= 64 && pattern_check(p + 1, len - 1, i) == (size_t)-1;
}
static _Atomic long mt_nulls, mt_allocs;
static _Atomic int mt_go; /* every thread exists: their stacks need address space too */
static _Atomic double mt_end;

static void *mt_worker(void *arg)
{
    rng_t r;
    rng_seed(&r, (uintptr_t)arg);
    while (!atomic_load(&mt_go))
        sched_yield();
    while (now_sec() < atomic_load(&mt_end)) {
        size_t i = rng_next(&r) % SLOTS;
        void *old = atomic_exchange(&slot[i], NULL);
        if (old) {
            CHECK(slot_intact(old, i), "block in slot %zu damaged", i);
            free(old);
            continue;
        }
        unsigned k = (unsigned)(rng_next(&r) % 100);
        size_t n = k < 70 ? rng_range(&r, 1, 32768)
                 : k < 95 ? rng_range(&r, 32769, 2 * MIB)
                          : rng_range(&r, 2 * MIB + 1, 64 * MIB);
        errno = 0;
        void *p = k % 7 == 0 ? calloc(1, n) : malloc(n);
        if (!p) {
            CHECK(errno == ENOMEM, "%zu bytes: NULL with errno %d", n, errno);
            mt_nulls++;
            continue;
        }
        mt_allocs++;
        memset(p, 1, n < 4096 ? n : 4096);
        slot_mark(p, n, i);
        void *prev = atomic_exchange(&slot[i], p);
        if (prev)
            free(prev);
    }
    return NULL;
}

static void scenario_threads(void)
{
    pthread_t t[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        CHECK(pthread_create(&t[i], NULL, mt_worker, (void *)(i + 1)) == 0, "pthread_create");
    atomic_store(&mt_end, now_sec() + test_seconds(2));
    atomic_store(&mt_go, 1);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    NOTE("%d threads: %ld allocations, %ld NULL", NTHREADS, (long)mt_allocs, (long)mt_nulls);
    CHECK(mt_nulls > 0, "the limit was never reached");
    for (int i = 0; i < SLOTS; i++)
        free(atomic_load(&slot[i]));
    big_block_works("threads at the limit");
}

/* Run fn in a child under the limit; the child's stderr comes back so that
 * a scenario can end in an expected abort.  Returns whether it passed (every
 * scenario runs, so one failure does not hide the others). */
static int run(const char *name, void (*fn)(void), int expect_abort)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(NULL);
    double t0 = now_sec();
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        set_limit();
        fn();
        if (expect_abort) {
            fprintf(stderr, "  free of a block whose memory went back: %p\n", stale);
            free(stale);
            fprintf(stderr, "  free of a stale pointer returned\n");
            _exit(1);
        }
        _exit(0);
    }
    close(fds[1]);
    char *out = read_all(fds[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    /* the block's memory went back, and may have come back into the heap
     * since (the scenario's second fill maps the same chunks again, and the
     * last reclaim may leave that one mapped): either way a free of it must
     * end the process naming free() and the pointer, as foreign ("invalid
     * pointer") or as a free block's ("double free") */
    char want_invalid[96] = "", want_double[96] = "";
    const char *said = expect_abort ? strstr(out, "went back: ") : NULL;
    if (said) {
        char ptr[40] = "";
        sscanf(said + strlen("went back: "), "%39s", ptr);
        snprintf(want_invalid, sizeof want_invalid, "folio: free(): invalid pointer %s", ptr);
        snprintf(want_double, sizeof want_double, "folio: free(): double free %s", ptr);
    }
    int ok = expect_abort ? WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && said &&
                                (find_message(out, want_invalid) || find_message(out, want_double))
                          : WIFEXITED(st) && WEXITSTATUS(st) == 0;
    fprintf(stderr, "%s %s (%.2fs, status %#x%s):\n%s", ok ? "PASS" : "FAIL", name,
            now_sec() - t0, st, expect_abort ? ", want SIGABRT and folio's message naming free() and the pointer" : "",
            out);
    free(out);
    return ok;
}

int main(void)
{
    size_t vm = vm_size();
    if (vm > ((size_t)1 << 40))
        SKIP("VmSize %zu GiB: ASan's shadow makes RLIMIT_AS unusable (a limit that binds "
             "folio also fails the sanitizer runtime's own mappings)", vm >> 30);
    NOTE("%s: VmSize %zu MiB, each scenario's limit %zu MiB", FOLIO_TEST_MODE, vm / MIB,
         vm / MIB + LIMIT_MIB);
#ifdef FOLIO_TEST_GLIBC
    int abort_case = 0;
#else
    int abort_case = 1;
#endif
    int failed = 0;
    failed += !run("small_calloc", scenario_small_calloc, abort_case);
    failed += !run("large_huge", scenario_large_huge, 0);
    failed += !run("huge_small", scenario_huge_small, 0);
    failed += !run("aligned", scenario_aligned, 0);
    failed += !run("realloc", scenario_realloc, 0);
    failed += !run("every_tier", scenario_every_tier, 0);
    failed += !run("threads", scenario_threads, 0);
    CHECK(failed == 0, "%d of 7 scenarios failed", failed);
    return 0;
}
