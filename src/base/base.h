/* base: what every layer stands on.  The OS layer (every syscall goes
 * through os.c), ranked locks, the options table and folio's own threads.
 * Includes nothing of folio's but the public header. */
#ifndef FOLIO_BASE_H
#define FOLIO_BASE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "folio.h"



#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define INTERNAL __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default"))) /* folio's public symbols */
#define CACHELINE 64

#define PAGE_SHIFT 12
#define PAGE_SIZE ((size_t)1 << PAGE_SHIFT)
#define CHUNK_SHIFT 21
#define CHUNK_SIZE ((size_t)1 << CHUNK_SHIFT)
#define CHUNK_PAGES (CHUNK_SIZE >> PAGE_SHIFT) /* 512 */
#define MAX_ORDER 9                            /* a whole chunk */
#define PCP_MAX_ORDER 6                        /* pagesets cache orders 0..6 (every slab) and chunks */
#define ZONE_HOMES_MAX 8                       /* FOLIO_ZONE_HOMES at most: zones of a process */

#define MIN_ALIGN 16
#define SMALL_MAX 32768        /* largest size served from slabs */
#define NCLASSES 72            /* size classes 16 .. 32768 */
#define LARGE_MAX CHUNK_SIZE   /* largest size served by the page heap; above: huge */
#define DENSE_MAX_BYTES 131072       /* largest size the dense heap serves (obj/dense.c) */

/* ---------------------------------------------------------------- os */
/* The only module that makes syscalls.  Memory returned by os_reserve is
 * zero-filled; os_purge leaves the range zero-filled and not resident. */
void *os_reserve(size_t size, size_t align); /* NULL: refused (counted in os_map_failures) */
void *os_reserve_at(void *addr, size_t size); /* exactly at addr, replacing nothing; else NULL */
void *os_reserve_near(void *hint, size_t size, size_t align); /* at hint if free, else anywhere */
bool os_release(void *p, size_t size);       /* false: munmap refused, still mapped */
void os_purge(void *p, size_t size);
void *os_remap(void *old, size_t old_size, size_t new_size, void *fixed_at);
void *os_move(void *old, size_t old_size, size_t new_size); /* mremap anywhere; NULL: refused */
int os_cpu(void);
int os_cpu_count(void);
uint64_t os_now_ms(void);
void os_futex_wait(_Atomic int *addr, int val);
void os_futex_wake(_Atomic int *addr, int n);
void os_write_err(const char *s);
bool os_overcommit_refuses(size_t bytes); /* the kernel's heuristic overcommit would refuse one mapping this large */
void os_write_fd(int fd, const char *s);
_Noreturn void os_fatal_ptr(const char *what, const void *p);
uint64_t os_random_seed(void);
void os_rusage(uint64_t *minflt, uint64_t *majflt, uint64_t *maxrss_bytes, uint64_t *rss_bytes); /* VmHWM, VmRSS */
int os_write_file(const char *path, const char *buf, size_t len);
int os_getpid(void);
void os_sleep_ms(unsigned ms);
uint64_t os_now_ns(void);          /* CLOCK_MONOTONIC */
size_t os_cache_size(int level);   /* data/unified cache of that level (1..3) of CPU 0, 0 if unknown */
int os_cpu_allowance(void);        /* CPUs this process may run on (affinity mask), at least 1 */
size_t os_read_file(const char *path, char *buf, size_t len); /* NUL-terminated; 0 on error */
size_t os_llc_bytes(void);                                    /* last-level cache size, 0 if unknown */
uint64_t os_parse_size(const char *s, const char **end); /* "48K", "2M", "1G", "123" */
int os_gettid(void);
/* 1 if some thread of this process that is not in tids[0..n) is alive (not
 * exited), 0 if none is, -1 if /proc cannot tell */
int os_other_threads_alive(const _Atomic int *tids, int n);
/* like os_futex_wait, but gives up after ms milliseconds */
void os_futex_wait_ms(_Atomic int *addr, int val, unsigned ms);
/* a file others may read (the live statistics), written with pwrite, never
 * mapped; the descriptor is closed before the caller returns to the program */
int os_file_open(const char *path, bool create, size_t size); /* create: new, size bytes; -1: none */
bool os_file_pwrite(int fd, const void *buf, size_t len, size_t off);
void os_file_close(int fd);
/* the file fd refers to (device and inode), and whether it still refers to
 * it: a program may dup2 over a descriptor number folio holds (see live.c) */
struct os_file_id {
    uint64_t dev, ino;
};
bool os_file_id(int fd, struct os_file_id *id);
bool os_file_is(int fd, const struct os_file_id *id);
void os_file_unlink(const char *path);
/* fn(name, ctx) for each entry of dir but . and .., until fn returns false
 * or after max entries (-1: all); false: dir could not be read */
bool os_dir_each(const char *dir, int max, bool (*fn)(const char *name, void *ctx), void *ctx);
bool os_pid_exists(int pid);             /* false only when no process has that pid */
int64_t os_file_age_s(const char *path); /* seconds since it was last written; -1: none */
extern _Atomic size_t os_mapped_bytes, os_peak_mapped_bytes;
extern _Atomic uint64_t os_map_failures;
/* the mmap family's calls, by kind, since start (folio makes no mprotect) */
struct os_calls {
    uint64_t mmap, munmap, mremap, mprotect, madvise;
};
void os_calls(struct os_calls *c);

/* Ask the kernel to take [p, p+size)'s pages from node first (mbind,
 * MPOL_PREFERRED: other nodes when it is full); false: refused. */
bool os_place_on_node(void *p, size_t size, int node);

/* ---------------------------------------------------------------- numa */
/* The NUMA topology (numa.c), read once from sysfs. */
int numa_nodes(void);           /* online nodes; 1 when there is one, or sysfs cannot tell */
int numa_node_of_cpu(int cpu);
int numa_place_node(int cpu);   /* the node to place cpu's memory on; -1: one node, no placement */
#ifdef FOLIO_TEST_HOOKS
void numa_set_root(const char *dir); /* tests: a fake sysfs tree (dir/devices/system/node/...) */
#endif
/* Transparent huge pages (issue 14): the system's settings, read from
 * /sys/kernel/mm/transparent_hugepage, and the advice folio gives.  A mode
 * is one of enum os_thp_mode; a size's "inherit" is resolved to the
 * top-level mode. */
enum os_thp_mode { OS_THP_NEVER, OS_THP_MADVISE, OS_THP_ALWAYS, OS_THP_UNKNOWN };
enum os_thp_defrag { OS_DEFRAG_ALWAYS, OS_DEFRAG_DEFER, OS_DEFRAG_DEFER_MADVISE, OS_DEFRAG_MADVISE,
                     OS_DEFRAG_NEVER, OS_DEFRAG_UNKNOWN };
#define OS_THP_SIZES 10 /* 4 KiB << 1 .. 4 KiB << 10: 8 KiB .. 4 MiB */
struct os_thp {
    int enabled;                /* the top-level mode */
    int defrag;                 /* enum os_thp_defrag */
    int size_mode[OS_THP_SIZES]; /* [o - 1]: the mode of 4 KiB << o, inherit resolved; UNKNOWN: no such size */
    int pmd;                    /* the mode of 2 MiB pages (the chunk size), resolved */
};
void os_thp_read(struct os_thp *t); /* reads sysfs: a few opens */
extern const char *const os_thp_mode_names[];   /* by enum os_thp_mode */
extern const char *const os_thp_defrag_names[]; /* by enum os_thp_defrag */
bool os_advise_huge(void *p, size_t size, bool huge); /* MADV_HUGEPAGE, or MADV_NOHUGEPAGE */
bool os_collapse(void *p, size_t size);               /* MADV_COLLAPSE; false: refused or unsupported */
bool os_populate_write(void *p, size_t size);         /* MADV_POPULATE_WRITE; false: unsupported */
long os_resident_pages(void *p, size_t size);         /* mincore: pages resident (size <= 2 MiB); -1: refused */
/* the madvise calls above, by advice, since start */
struct os_advice_calls {
    uint64_t hugepage, nohugepage, collapse, populate;
};
void os_advice_calls(struct os_advice_calls *c);
/* AnonHugePages and Rss of /proc/self/smaps_rollup, in bytes (0: unreadable) */
void os_smaps_rollup(uint64_t *anon_huge, uint64_t *rss);

/* text.c: v in decimal, NUL-terminated, somewhere inside buf */
const char *u64_text(char buf[24], uint64_t v);

/* ---------------------------------------------------------------- lock */
/* A small futex mutex: 0 unlocked, 1 locked, 2 locked with waiters.
 * lock_acquire reports whether the lock was contended so that callers can
 * count contention where it matters (the zone lock).
 *
 * Every lock has a rank.  A thread that holds a lock only ever waits for a
 * lock of a higher rank (locks of one rank: at higher addresses, as
 * pageset_lock_all takes the pagesets), and the fork handler takes every
 * lock in rank order, so no cycle of waiters can form.  A trylock never
 * waits and may be taken in any order.  Debug builds (FOLIO_DEBUG) check
 * this at every acquisition and end the process on a violation. */
enum lock_rank {
    LOCK_RANK_NONE = 0, /* a lock nobody ranked: debug builds refuse it */
    LOCK_RANK_INIT,       /* folio_init */
    LOCK_RANK_CLEAR_INIT, /* the clearing engine's start-up */
    LOCK_RANK_CLEAR_MT,   /* one threaded clear at a time (trylock only) */
    LOCK_RANK_HEAPS,      /* the registry of thread heaps */
    LOCK_RANK_DENSE,      /* the dense heap (obj/dense.c) */
    LOCK_RANK_HUGE,       /* each huge shard: its ranges and their cache */
    LOCK_RANK_PAGESET,    /* each per-CPU pageset */
    LOCK_RANK_DEPOT,      /* each shard of the zone's depot (page.h) */
    LOCK_RANK_ZONE,       /* each zone's free lists (a blocking hold of two: in index order) */
    LOCK_RANK_ARENA,      /* the address space the zones grow into (page/zone.c) */
    LOCK_RANK_META,       /* the metadata reserve */
    LOCK_RANK_COUNT
};
/* Each lock counts its own use.  contended (waits, and failed trylocks) is
 * an atomic add off the fast path, always counted.  acquired and
 * held_ticks cost the fast path (two cycle-counter reads per hold, and 4%
 * more instructions for a 64 KiB malloc/free pair even without them), so
 * they are kept only when FOLIO_LOCK_STATS=1 (lock_timing); they change
 * only under the lock, with relaxed stores, so the report reads them
 * without it.  since == 0: the holder took the lock untimed. */
typedef struct {
    _Atomic int v;
    int rank; /* enum lock_rank */
    uint64_t acquired, held_ticks, since;
    _Atomic uint64_t contended;
} lock_t;
/* The rank matters only to the debug build's lock-order checks; elsewhere a
 * lock starts all zero, so a static lock (or a table of them, huge.c's
 * shards) lives in .bss, not in file-backed .data that every process maps. */
#ifdef FOLIO_DEBUG
#define LOCK_INIT(r) {0, (r), 0, 0, 0, 0}
#else
#define LOCK_INIT(r) {0}
#endif
/* Variables a process reads before anything writes their page (each
 * exported call's first test, every lock's): in .data, whose first page the
 * loader has already written (it relocates __dso_handle, the first word of
 * .data), so the read costs no page fault, and the first write no second one
 * (a read of an untouched .bss page maps the zero page, which the write then
 * replaces).  Only base objects, which the link puts first, may use it. */
#define LOADER_WRITTEN __attribute__((section(".data.folio_loader_written")))
extern INTERNAL bool lock_timing; /* FOLIO_LOCK_STATS=1, set once by options_init */
/* set once folio_init (api) has run: every exported call tests it first */
extern _Atomic int folio_ready;
void lock_timing_start(void);

/* State that every fork writes (the locks fork_prepare takes, what the
 * child's handlers reset) lives in one output section ("folio_fork", no
 * leading dot: the linker gathers it whole instead of per object file) that
 * fits a page: each page written after a fork is copied once in the parent
 * and once in the child, and a shell forks for every subshell. */
#define FORK_STATE __attribute__((section("folio_fork")))
/* A fork child's reset of an atomic: a store only where the value is not
 * the wanted one already.  A child of a single-threaded parent (a shell's
 * subshell, a fork before exec) then writes none of folio's pages in its
 * handlers, and copies none unless it allocates. */
#define FORK_RESET(var, val)                                                                        \
    do {                                                                                            \
        if (atomic_load_explicit(&(var), memory_order_relaxed) != (val))                            \
            atomic_store_explicit(&(var), (val), memory_order_relaxed);                             \
    } while (0)
static inline void lock_set_rank(lock_t *l, enum lock_rank r) { l->rank = (int)r; }

#ifdef FOLIO_DEBUG
void lockdep_acquire(lock_t *l, bool trylock); /* checks the order, records l as held */
void lockdep_release(lock_t *l);
void lockdep_forget(lock_t *l); /* fork child: l is reset, not released */
void lockdep_check_syscall(const char *call); /* no zone or arena lock is held */
#else
static inline void lockdep_acquire(lock_t *l, bool trylock) { (void)l, (void)trylock; }
static inline void lockdep_release(lock_t *l) { (void)l; }
static inline void lockdep_forget(lock_t *l) { (void)l; }
static inline void lockdep_check_syscall(const char *call) { (void)call; }
#endif

static inline bool lock_try_raw(lock_t *l) {
    int e = 0;
    return atomic_compare_exchange_strong_explicit(&l->v, &e, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}
void lock_hold_begin(lock_t *l); /* lock_timing: count this hold and note its start */
/* the lock was just taken: count and time it when FOLIO_LOCK_STATS=1 */
static inline void lock_taken(lock_t *l) {
    if (unlikely(__atomic_load_n(&lock_timing, __ATOMIC_RELAXED))) lock_hold_begin(l);
}
static inline bool lock_try(lock_t *l) {
    if (!lock_try_raw(l)) {
        atomic_fetch_add_explicit(&l->contended, 1, memory_order_relaxed);
        return false;
    }
    lockdep_acquire(l, true);
    lock_taken(l);
    return true;
}
void lock_slow(lock_t *l);
void lock_hold_end(lock_t *l); /* lock_timing: add this hold's cycles */
/* Returns true when the lock was taken without waiting. */
static inline bool lock_acquire(lock_t *l) {
    lockdep_acquire(l, false);
    if (likely(lock_try_raw(l))) {
        lock_taken(l);
        return true;
    }
    lock_slow(l);
    lock_taken(l);
    return false;
}
static inline void lock_release(lock_t *l) {
    lockdep_release(l);
    if (unlikely(__atomic_load_n(&lock_timing, __ATOMIC_RELAXED))) lock_hold_end(l);
    if (unlikely(atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2))
        os_futex_wake(&l->v, 1);
}
/* A lock's counts so far (read without it: each value is a recent one). */
struct lock_stat {
    uint64_t acquired, contended, held_ns; /* held_ns: 0 unless lock_timing */
};
void lock_stat_read(lock_t *l, struct lock_stat *st);
/* The report walks every folio lock through one visitor per layer:
 * name is the lock's role, index its pageset (or -1). */
typedef void lock_visit_fn(void *ctx, const char *name, long index, lock_t *l);
/* fork child: the lock was taken by the prepare handler (or by a thread
 * that does not exist here) */
static inline void lock_reset(lock_t *l) {
    lockdep_forget(l);
    atomic_store_explicit(&l->v, 0, memory_order_relaxed);
}

/* ---------------------------------------------------------------- options */
#define FOLIO_OPTIONS(X)                                                                       \
    X(purge_delay_ms, "FOLIO_PURGE_DELAY_MS", 1000,                                            \
      "milliseconds freed memory stays resident before it is purged (MADV_DONTNEED)")          \
    X(purge_thread, "FOLIO_PURGE_THREAD", 1,                                                   \
      "1: a background thread purges expired free memory when enough is waiting; 0: purge "  \
      "only from allocation slow paths")                                                       \
    X(purge_dirty_ratio, "FOLIO_PURGE_DIRTY_RATIO", 0,                                         \
      "N > 0: dirty free memory the zone keeps resident is at most 1/N of the memory in use "  \
      "(and at least 1 MiB): past it, the oldest is purged before its delay, when the heap "   \
      "grows and at each purge tick (lower peak RSS, more page faults); 0: the delay alone decides") \
    X(purge_min_order, "FOLIO_PURGE_MIN_ORDER", 3,                                             \
      "smallest free block purged, as a page order (3 = 32 KiB); whole 2 MiB chunks first")   \
    X(zone_homes, "FOLIO_ZONE_HOMES", 0,                                                       \
      "most page heaps (zones, 1-8), each with its own lock, chunks and free lists: threads "  \
      "share the first until one has waited 64 times for its lock, then take zones of their "  \
      "own in turn (a freed span goes back to its chunk's zone); 0: one per CPU, at most 8; "  \
      "1: one zone for the process")                                                            \
    X(zone_move_waits, "FOLIO_ZONE_MOVE_WAITS", 64,                                            \
      "waits for the first zone's lock after which a thread takes a zone of its own "          \
      "(FOLIO_ZONE_HOMES); 0: every thread takes one at its first page allocation")            \
    X(pcp_batch, "FOLIO_PCP_BATCH", 31, "pages moved between a per-CPU pageset and the zone per refill/drain") \
    X(pcp_high, "FOLIO_PCP_HIGH", 0,                                                           \
      "pages a per-CPU pageset may hold before it drains to the zone; 0 = 4 x batch")          \
    X(pcp_zone_min_mib, "FOLIO_PCP_ZONE_MIN_MIB", 64,                                          \
      "smallest zone size (MiB) pagesets are sized from: high_max = max(heap, this) / 8 / pagesets in use") \
    X(pcp_chunks, "FOLIO_PCP_CHUNKS", 2,                                                       \
      "whole 2 MiB chunks a per-CPU pageset may hold (counted against its high, drained and decayed)")     \
    X(pcp_autotune, "FOLIO_PCP_AUTOTUNE", 1,                                                   \
      "1: pageset high auto-tuned between high_min and high_max (seed 003); 0: high fixed")    \
    X(memory_limit, "FOLIO_MEMORY_LIMIT", 0,                                                   \
      "soft limit in bytes (K/M/G suffix): past 7/8 pagesets shrink toward high_min; past 15/16 all are capped there")  \
    X(arena_mib, "FOLIO_ARENA_MIB", 256, "size of each address range reserved for the zone")  \
    X(huge_cache_mib, "FOLIO_HUGE_CACHE_MIB", 1024,                                            \
      "MiB of freed huge blocks kept resident for reuse (purged after the delay; address space is kept)")           \
    X(heap_empty_slabs, "FOLIO_HEAP_EMPTY_SLABS", 4,                                           \
      "empty slabs a thread keeps for reuse at least (its cache's high never decays below)")  \
    X(heap_big_cache_kib, "FOLIO_HEAP_BIG_CACHE_KIB", 1024,                                    \
      "KiB of freed blocks of 32-256 KiB a thread may keep for its next ones of the same page "  \
      "count: its high starts at 0, grows by what it gave the page heap and took back, and "     \
      "halves each purge delay without a miss; all of it goes back to the zone when "   \
      "the thread's next large block would start a chunk; 0: none")                              \
    X(heap_list_kib, "FOLIO_HEAP_LIST_KIB", 1024,                                              \
      "most KiB of freed objects per size class a thread keeps on its own list for its next "  \
      "mallocs: the list's high starts at a slab's worth, grows by what it gave back and "     \
      "had to take again, halves each purge delay without that; past it, half goes back")     \
    X(heap_young_bytes, "FOLIO_HEAP_YOUNG_BYTES", 1024,                                        \
      "bytes of each size class below 2 KiB a thread serves first from the next power-of-two "  \
      "class's slabs (a program using a class little then touches no page of its own for it); " \
      "0: every object from its exact class")                                                  \
    X(heap_dense_kib, "FOLIO_HEAP_DENSE_KIB", 16384,                                         \
      "most KiB of 256 KiB regions the dense heap may hold: blocks of up to 128 KiB of the "   \
      "sizes the process has used little so far, from its first thread until a second one "  \
      "allocates, best fit and merged with their free neighbours as they are freed (a small " \
      "program's heap stays about the size of what it holds); 0: none")                        \
    X(heap_dense_live, "FOLIO_HEAP_DENSE_LIVE", 64,                                            \
      "blocks of one size (a small class, or a page count above 32 KiB) the dense heap holds " \
      "at once (or that many times 2 KiB of them), or 16 times that served in all, after "    \
      "which that size comes from slabs or the page heap for good (the pages of its freed "   \
      "dense blocks are purged once the dense heap holds 2 MiB, and the empty region it "    \
      "keeps when such a free empties it)")                              \
    X(heap_empty_max, "FOLIO_HEAP_EMPTY_MAX", 64,                                              \
      "empty slabs a thread may keep during bursts: its cache's high grows by the slabs it "  \
      "gave the page heap and had to take back, and halves each purge delay without a miss")  \
    X(clear, "FOLIO_CLEAR", 0,                                                                 \
      "clearing strategy: auto (0: measured per size and cache state), loop, stosb, nt, "     \
      "hybrid, pages, memset (a name or its folio_clear_strategy number)")                     \
    X(clear_threads, "FOLIO_CLEAR_THREADS", 0,                                                 \
      "threads for one very large clear: 0 = the CPUs this process may use (at most 4), "     \
      "1 = never split, N = at most N")                                                        \
    X(clear_mt_mib, "FOLIO_CLEAR_MT_MIB", 128, "smallest clear split across threads, in MiB") \
    X(lock_stats, "FOLIO_LOCK_STATS", 0,                                                       \
      "1: time every folio lock's holds (two cycle-counter reads per hold; the report's "     \
      "locks[].held_ns); acquisitions and waits are always counted")                         \
    X(thp, "FOLIO_THP", 0,                                                                     \
      "huge pages for the heap's 2 MiB chunks: auto (0: chunks that will be dense: from 8 MiB " \
      "of heap those after two chunks handed out and written densely, or while the chunks "   \
      "hold resident 3/4 of the pages handed out; from 32 MiB every new one; and regions of "   \
      "blocks above 2 MiB), never (1), always (2: every chunk); within what the system allows") \
    X(populate, "FOLIO_POPULATE", 1,                                                           \
      "1: memory about to be written (a new slab of a class that filled one, a calloc of fresh " \
      "pages, once the heap holds 32 MiB) is faulted in one call (MADV_POPULATE_WRITE); 0: page by page") \
    X(live, "FOLIO_LIVE", 1,                                                                   \
      "1: publish the counters for `folio top` in /dev/shm/folio.<pid> (from the process's "  \
      "first second on, at most once a second); 0: publish nothing")

struct folio_options {
#define X(name, env, def, doc) long name;
    FOLIO_OPTIONS(X)
#undef X
    const char *report_path; /* FOLIO_REPORT */
};
extern struct folio_options opt;
extern const char *const clear_strategy_names[]; /* FOLIO_CLEAR's names, by strategy number */
enum { FOLIO_THP_AUTO, FOLIO_THP_NEVER, FOLIO_THP_ALWAYS, FOLIO_THP_NMODES };
extern const char *const thp_option_names[]; /* FOLIO_THP's names, by value */
void options_init(void);

/* ---------------------------------------------------------------- bg */
/* folio's own threads (the purger, the clearing helpers).  They block every
 * signal, so a signal meant for the process always reaches a thread of the
 * program, and each leaves once bg_program_gone() says the program's own
 * threads have all exited: then the last of them exits as the program's
 * last thread would have (glibc's exit(0)), so folio never keeps a process
 * alive. */
bool bg_start(void *(*fn)(void *), void *arg); /* detached, 64 KiB stack (the first 4: folio's own, no mmap), all signals blocked */
void bg_enter(void);        /* first thing a background thread does */
void bg_leave(void);        /* last thing it does */
bool bg_program_gone(void); /* no thread of the program is alive, only folio's */
void bg_watch_main_thread(int pid); /* called once by the main thread (tid == pid) */
bool bg_start_in_progress(void); /* the calling thread is in bg_start (pthread_create allocates for folio) */
void bg_after_fork_child(bool parent_had_threads); /* true: the child starts no background thread */


/* ---------------------------------------------------------------- lock-free stacks
 * A stack of nodes (at addresses below 2^48) linked through a pointer at
 * byte offset `off` of each node, for lists that threads share without a
 * lock.  The head word holds the top node's address and, above it, a count
 * of changes, so that a pop that read a stale link fails its exchange
 * (ABA).  Nodes must never be unmapped (folio's descriptors and heaps are
 * not): a pop may read the link of a node another thread has just taken,
 * a benign race hidden from ThreadSanitizer. */
typedef _Atomic uint64_t lf_stack;
#define LF_PTR (((uint64_t)1 << 48) - 1)
static inline void *lf_top(uint64_t w) { return (void *)(uintptr_t)(w & LF_PTR); }
static inline uint64_t lf_word(uint64_t old, const void *top) {
    return (uint64_t)(uintptr_t)top | ((old | LF_PTR) + 1);
}
static inline void **lf_link(void *node, size_t off) { return (void **)((char *)node + off); }
/* push the chain first..last, linked through their links */
static inline void lf_push(lf_stack *st, void *first, void *last, size_t off) {
    uint64_t old = atomic_load_explicit(st, memory_order_relaxed);
    do *lf_link(last, off) = lf_top(old);
    while (!atomic_compare_exchange_weak_explicit(st, &old, lf_word(old, first), memory_order_release,
                                                  memory_order_relaxed));
}
#if defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize("thread"), noinline, unused)) static void *lf_next_racy(void *n, size_t off) {
    return *(void *volatile *)lf_link(n, off);
}
#else
static inline void *lf_next_racy(void *n, size_t off) { return *(void *volatile *)lf_link(n, off); }
#endif
static inline void *lf_pop(lf_stack *st, size_t off) {
    uint64_t old = atomic_load_explicit(st, memory_order_acquire);
    for (;;) {
        void *n = lf_top(old);
        if (!n) return NULL;
        void *next = lf_next_racy(n, off);
        if (atomic_compare_exchange_weak_explicit(st, &old, lf_word(old, next), memory_order_acquire,
                                                  memory_order_acquire))
            return n;
    }
}
static inline bool lf_empty(lf_stack *st) { return !lf_top(atomic_load_explicit(st, memory_order_relaxed)); }

#endif
