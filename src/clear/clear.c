/* clear: the clearing engine, the one path every zeroing of recycled memory
 * takes (calloc, FOLIO_ZERO pages, folio_clear): the policy half; the
 * kernels and CPU detection are in clear_kernels.c.
 *
 * Invariants:
 *  - every strategy writes exactly the bytes [p, p+n), zeros, and nothing
 *    else; non-temporal stores are followed by sfence before the clear
 *    returns (or before a helper thread reports its piece done), so the
 *    zeros are visible to whoever the caller hands the memory to;
 *  - no single step is unbounded: an extent is cleared 32 MiB at a time (the
 *    kernel's clear_contig_highpages batch), 4 MiB at a time when split
 *    across helper threads;
 *  - the choice is measured, not read from a CPU model list.  The table has
 *    one cell per (cache state, size class): the rate of each candidate
 *    (loop, stosb, nt, and stosb or nt split across helper threads) and the
 *    choice.  A bounded calibration
 *    (a few ms, once, inside the first clear of >= 256 KiB, on that clear's
 *    own destination) measures 4 KiB..1 MiB hot and cold; larger classes
 *    start from a prior (the L3 size: a destination larger than 0.4 x L3 is
 *    not hot) and are refined by timing the real clears, exploring each
 *    candidate where the prior is weak and re-checking close calls after 64
 *    clears, then after twice as many each time the best holds (up to
 *    4096), each in a trial of 3 to 12 consecutive clears whose first is not
 *    learned from and which goes on while the rate still rises (the cost of
 *    switching is not the candidate's rate);
 *  - hot or cold comes from the caller (hints, or the age of a freed block);
 *    unknown is hot, the cheaper mistake (a cold block cleared with rep
 *    stosb loses ~25%; a hot one cleared non-temporally loses 2-6x);
 *  - cells are read and written with relaxed atomics: a racing update may be
 *    lost, never torn, and any choice clears correctly.
 * Layering: uses os (time, cache sizes, futex) and lock; below every
 * allocation module. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clear.h"

#if CLEAR_X86
#include <immintrin.h>
#include <x86intrin.h>
#endif


#define CLEAR_CHUNK ((size_t)32 << 20) /* one step of a whole-extent clear */
#define MT_PIECE ((size_t)4 << 20)     /* one piece of a threaded clear */
#define SMALL_CLEAR 128                /* below: clear_small */
#define CAL_MIN ((size_t)256 << 10)    /* first clear this large calibrates */
#define CAL_MAX ((size_t)1 << 20)      /* largest size calibrated synthetically */
#define ONLINE_MIN ((size_t)1 << 20)   /* clears this large are timed and learned from */
#define LOOP_MAX_SHIFT 18              /* loop is a candidate up to 256 KiB */
#define B_MIN 12                       /* size classes 2^12 (4 KiB) .. 2^30 (1 GiB and up) */
#define B_MAX 30
#define NB (B_MAX - B_MIN + 1)
#define EXPLORE_SAMPLES 2
#define RECHECK_MIN 64    /* re-check a close runner-up after 64 clears of the cell, ... */
#define RECHECK_MAX 4096  /* ... the gap doubling each time the best holds, up to 4096 */
#define TRIAL 3           /* clears per trial of a candidate, at least ... */
#define TRIAL_MAX 12      /* ... and at most, while its rate still rises (settling) */
#define CLOSE_CALL 4      /* close: within 5/4 of the best: r * 5 >= best * CLOSE_CALL */
#define COLD_AGE_MS 50    /* a block freed this long ago is taken as cold */
/* TOUCH_BIAS: a caller that reads the block next (TOUCH) gets rep stosb
 * unless non-temporal stores clear more than 9/8 as fast: nt leaves the
 * whole block in memory, rep stosb what the cache holds of it (calloc of a
 * recycled 64 MiB block: the pass after it took 2.9 ms after rep stosb, 5.1
 * ms after the hybrid, when the clears took 2.8 and 3.2 ms); rep stosb runs
 * as the candidate it is, so its rate keeps being learned. */
#define MAX_THREADS 4

typedef clear_kernel_fn kernel_fn;
static kernel_fn ktab[FOLIO_CLEAR_NSTRATEGIES]; /* clear_kernel, resolved once */

/* ------------------------------------------------------------ counters
 * Bytes per kind of strategy, in per-CPU shards (an uncontended atomic add). */
#define NSHARDS 16
static struct shard {
    _Atomic uint64_t bytes[CLEAR_NKINDS];
} __attribute__((aligned(CACHELINE))) shards[NSHARDS];
static _Atomic uint64_t zero_skipped, mt_clears, mt_bytes;

static inline void count(int kind, size_t n) {
    struct shard *sh = &shards[(unsigned)os_cpu() & (NSHARDS - 1)];
    atomic_fetch_add_explicit(&sh->bytes[kind], n, memory_order_relaxed);
}

void clear_zero_skipped(size_t n) { atomic_fetch_add_explicit(&zero_skipped, n, memory_order_relaxed); }

/* ------------------------------------------------------------ helper threads
 * One threaded clear at a time (mt.lock, trylock: a second one runs on its
 * own thread).  The job is published in static fields; `cursor` holds
 * (generation << 32 | next piece) and a piece is claimed by CAS on it, so a
 * helper that wakes late for a finished job claims nothing and never touches
 * its memory (the fields it read belong to the generation it claimed in). */
static struct {
    lock_t lock;
    _Atomic int wake;          /* helpers sleep on it; bumped for each job */
    _Atomic uint64_t cursor;   /* generation << 32 | next piece */
    _Atomic int done;          /* pieces finished */
    _Atomic(char *) p;
    _Atomic size_t n;
    _Atomic(kernel_fn) k;
    _Atomic uint32_t pieces;
    _Atomic int helpers, pid;
    _Atomic bool failed; /* thread creation failed: do not try again */
} mt = {.lock = LOCK_INIT(LOCK_RANK_CLEAR_MT)};

/* Claim and clear pieces of the current job until none is left. */
static void mt_work(void) {
    for (;;) {
        uint64_t c = atomic_load_explicit(&mt.cursor, memory_order_acquire);
        uint32_t i = (uint32_t)c;
        char *p = atomic_load_explicit(&mt.p, memory_order_relaxed);
        size_t n = atomic_load_explicit(&mt.n, memory_order_relaxed);
        kernel_fn k = atomic_load_explicit(&mt.k, memory_order_relaxed);
        uint32_t pieces = atomic_load_explicit(&mt.pieces, memory_order_relaxed);
        if (i >= pieces) return;
        if (!atomic_compare_exchange_weak_explicit(&mt.cursor, &c, c + 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        size_t off = (size_t)i * MT_PIECE, len = n - off < MT_PIECE ? n - off : MT_PIECE;
        k(p + off, len); /* non-temporal kernels end with sfence */
        if (atomic_fetch_add_explicit(&mt.done, 1, memory_order_release) + 1 == (int)pieces)
            os_futex_wake(&mt.done, 1);
    }
}

/* A helper sleeps on mt.wake; every HELPER_CHECK_MS without work it checks
 * whether the program's threads are gone, and leaves if so (bg.c). */
#define HELPER_CHECK_MS 250

static void *mt_helper(void *arg) {
    int seen = (int)(intptr_t)arg;
    bg_enter();
    for (;;) {
        int w;
        while ((w = atomic_load_explicit(&mt.wake, memory_order_acquire)) == seen) {
            os_futex_wait_ms(&mt.wake, seen, HELPER_CHECK_MS);
            if (atomic_load_explicit(&mt.wake, memory_order_acquire) == seen && bg_program_gone()) {
                bg_leave();
                return NULL;
            }
        }
        seen = w;
        mt_work();
    }
}

static int mt_cpus = 1; /* CPUs this process may run on, read at engine start */

static int mt_wanted(void) {
    long t = opt.clear_threads;
    if (t == 0) {
        t = mt_cpus;
        if (t > MAX_THREADS) t = MAX_THREADS;
    }
    if (t > 64) t = 64;
    return (int)t;
}

/* Start the helpers (lock held).  Thread creation allocates: the callers of
 * the engine hold no folio lock. */
static void mt_start(void) {
    int want = mt_wanted() - 1;
    while (mt.helpers < want) {
        if (!bg_start(mt_helper, (void *)(intptr_t)atomic_load(&mt.wake))) {
            mt.failed = true;
            break;
        }
        mt.helpers++;
    }
}

/* The helpers belong to the process that started them: in a fork child
 * they are gone (and mt.lock may be held by a thread that is gone too).
 * mt.pid: the owner; -pid while one thread of that process resets. */
static bool mt_owned(void) {
    int me = os_getpid(), old = atomic_load(&mt.pid);
    if (old == me) return true;
    if (old == -me || !atomic_compare_exchange_strong(&mt.pid, &old, -me)) return false;
    if (old != 0) {
        atomic_store(&mt.helpers, 0);
        atomic_store(&mt.failed, false);
        lock_reset(&mt.lock);
    }
    atomic_store(&mt.pid, me);
    return true;
}

/* Clear [p, p+n) with kernel k on this thread and the helpers; false when
 * there are none (or another threaded clear is running). */
static bool mt_clear(kernel_fn k, char *p, size_t n) {
    if (mt_wanted() < 2 || !mt_owned() || mt.failed || !lock_try(&mt.lock)) return false;
    if (mt.helpers < mt_wanted() - 1 && !mt.failed) mt_start();
    if (mt.helpers == 0) {
        lock_release(&mt.lock);
        return false;
    }
    uint32_t pieces = (uint32_t)((n + MT_PIECE - 1) / MT_PIECE);
    atomic_store_explicit(&mt.p, p, memory_order_relaxed);
    atomic_store_explicit(&mt.n, n, memory_order_relaxed);
    atomic_store_explicit(&mt.k, k, memory_order_relaxed);
    atomic_store_explicit(&mt.pieces, pieces, memory_order_relaxed);
    atomic_store_explicit(&mt.done, 0, memory_order_relaxed);
    uint64_t gen = (atomic_load_explicit(&mt.cursor, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&mt.cursor, gen << 32, memory_order_release);
    atomic_fetch_add_explicit(&mt.wake, 1, memory_order_release);
    os_futex_wake(&mt.wake, mt.helpers);
    mt_work();
    int d;
    while ((d = atomic_load_explicit(&mt.done, memory_order_acquire)) != (int)pieces)
        os_futex_wait(&mt.done, d);
    lock_release(&mt.lock);
    atomic_fetch_add_explicit(&mt_clears, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mt_bytes, n, memory_order_relaxed);
    return true;
}

/* ------------------------------------------------------------ running a strategy */
static size_t mt_min_bytes(void) { return (size_t)opt.clear_mt_mib << 20; }

/* The whole extent with kernel k, CLEAR_CHUNK at a time, or split across
 * threads when allowed.  Returns whether helper threads took part. */
static bool run_extent(kernel_fn k, char *p, size_t n, bool threads) {
    if (threads && n >= mt_min_bytes() && mt_clear(k, p, n)) return true;
    while (n > CLEAR_CHUNK) {
        k(p, CLEAR_CHUNK);
        p += CLEAR_CHUNK;
        n -= CLEAR_CHUNK;
    }
    k(p, n);
    return false;
}

/* Run concrete strategy s (no AUTO).  touch: the head is cleared last, with
 * ordinary stores, so it is in the cache when the caller starts on it.
 * Returns whether helper threads took part. */
static bool run(int s, char *p, size_t n, bool touch, bool threads) {
    size_t head = clear_cpu.head;
    if (s == FOLIO_CLEAR_HYBRID) {
        if (n <= head) return run_extent(ktab[FOLIO_CLEAR_STOSB], p, n, false);
        bool mt = run_extent(ktab[FOLIO_CLEAR_NT], p + head, n - head, threads);
        run_extent(ktab[FOLIO_CLEAR_STOSB], p, head, false);
        return mt;
    }
    kernel_fn k = ktab[s];
    if (touch && n > 2 * head && (s == FOLIO_CLEAR_STOSB || s == FOLIO_CLEAR_LOOP)) {
        bool mt = run_extent(k, p + head, n - head, threads);
        run_extent(k, p, head, false);
        return mt;
    }
    return run_extent(k, p, n, threads);
}

/* ------------------------------------------------------------ timing */
static inline uint64_t ticks(void) {
#if CLEAR_X86
    return __rdtsc();
#else
    return os_now_ns();
#endif
}
/* after every store has completed */
static inline uint64_t ticks_fenced(void) {
#if CLEAR_X86
    _mm_mfence();
    _mm_lfence();
#endif
    return ticks();
}
static _Atomic double ticks_per_us = 1000.0; /* measured during calibration */

/* ------------------------------------------------------------ the table
 * Candidates: loop (hot, up to 256 KiB), stosb, nt, and from mt_min_bytes up
 * stosb and nt split across threads.  A clear told ONE_THREAD chooses among
 * the first three. */
enum { C_LOOP, C_STOSB, C_NT, C_STOSB_MT, C_NT_MT, NCAND };
#define HIST 4 /* a candidate's rate: the best of its last 4 timed clears */
static const int cand_strategy[NCAND] = {FOLIO_CLEAR_LOOP, FOLIO_CLEAR_STOSB, FOLIO_CLEAR_NT,
                                         FOLIO_CLEAR_STOSB, FOLIO_CLEAR_NT};
static const char *const cand_name[NCAND] = {"loop", "stosb", "nt", "stosb_mt", "nt_mt"};
static inline bool cand_mt(int k) { return k >= C_STOSB_MT; }
enum { T_HOT, T_COLD, NTEMP };
enum { SRC_PRIOR, SRC_CALIBRATED, SRC_ONLINE };
static const char *const src_name[] = {"prior", "calibrated", "online"};

struct cell {
    _Atomic uint32_t rate[NCAND];     /* MB/s (bytes per us); 0: not a candidate here */
    _Atomic uint16_t samples[NCAND];  /* measurements behind rate (calibrated: 2) */
    _Atomic uint8_t choice;           /* best candidate */
    _Atomic uint8_t src;
    _Atomic uint8_t online;           /* learns from timed clears */
    _Atomic uint8_t weak;             /* prior only a guess: explore every candidate */
    _Atomic uint32_t uses;
    _Atomic uint8_t last;             /* candidate of the previous clear of this cell */
    _Atomic uint8_t trial, trial_left; /* candidate being tried, clears it still has */
    _Atomic uint8_t trial_on, trial_len; /* a trial is running; clears it has had */
    _Atomic uint8_t trial_patient;     /* the weak prior's first choice: see trial_step */
    _Atomic uint32_t trial_prev;       /* its last learned rate (0: none yet) */
    _Atomic uint32_t check_at, check_gap; /* next re-check (in uses), and the gap after it */
    _Atomic uint8_t hpos[NCAND];
    _Atomic uint32_t hist[NCAND][HIST]; /* the last HIST learned rates */
};
static struct cell cells[NTEMP][NB];

enum { ST_NONE, ST_RUNNING, ST_READY };
static _Atomic int engine_state; /* cpu detected, options read, prior table set */
static _Atomic int cal_state;
static _Atomic uint64_t cal_us, cal_bytes;
static int forced; /* FOLIO_CLEAR: 0 auto, else the strategy */

static inline unsigned bucket(size_t n) {
    unsigned b = n ? 63u - (unsigned)__builtin_clzll(n) : 0;
    if (b < B_MIN) b = B_MIN;
    if (b > B_MAX) b = B_MAX;
    return b - B_MIN;
}
static inline size_t bucket_size(unsigned i) { return (size_t)1 << (i + B_MIN); }

/* Can a clear of n bytes be split across threads? */
static inline bool mt_possible(size_t n) {
    return n >= mt_min_bytes() && mt_wanted() > 1 && !atomic_load_explicit(&mt.failed, memory_order_relaxed);
}

/* The best candidate (threaded ones only when allowed).  Weak prior: an
 * unmeasured nt's rate is its streaming bound, ranked at 8/9 of it (see
 * cell_choose). */
static int cell_best(struct cell *c, bool allow_mt) {
    int best = C_STOSB;
    uint32_t br = 0;
    bool weak = atomic_load_explicit(&c->weak, memory_order_relaxed);
    for (int k = 0; k < NCAND; k++) {
        if (cand_mt(k) && !allow_mt) continue;
        uint32_t r = atomic_load_explicit(&c->rate[k], memory_order_relaxed);
        if (k == C_NT && weak && !atomic_load_explicit(&c->samples[k], memory_order_relaxed))
            r = (uint32_t)((uint64_t)r * 8 / 9);
        if (r > br) br = r, best = k;
    }
    return best;
}

static void cell_set(struct cell *c, const uint32_t rate[NCAND], int src, uint16_t samples,
                     bool online, bool weak) {
    for (int k = 0; k < NCAND; k++) {
        atomic_store_explicit(&c->rate[k], rate[k], memory_order_relaxed);
        atomic_store_explicit(&c->samples[k], rate[k] ? samples : 0, memory_order_relaxed);
        atomic_store_explicit(&c->hpos[k], 0, memory_order_relaxed);
        for (int i = 0; i < HIST; i++) atomic_store_explicit(&c->hist[k][i], 0, memory_order_relaxed);
    }
    atomic_store_explicit(&c->src, (uint8_t)src, memory_order_relaxed);
    atomic_store_explicit(&c->online, online, memory_order_relaxed);
    atomic_store_explicit(&c->weak, weak, memory_order_relaxed);
    atomic_store_explicit(&c->uses, 0, memory_order_relaxed);
    atomic_store_explicit(&c->last, NCAND, memory_order_relaxed);
    atomic_store_explicit(&c->trial_left, 0, memory_order_relaxed);
    atomic_store_explicit(&c->trial_on, 0, memory_order_relaxed);
    atomic_store_explicit(&c->check_at, RECHECK_MIN, memory_order_relaxed);
    atomic_store_explicit(&c->check_gap, RECHECK_MIN, memory_order_relaxed);
    atomic_store_explicit(&c->choice, (uint8_t)cell_best(c, true), memory_order_relaxed);
}

/* A destination this large cannot be hot: its clears use the cold cells. */
static inline size_t never_hot(void) { return 2 * clear_cpu.l3; }

/* Before calibration: rep stosb, non-temporal from the L3 size up (seed
 * 002's rule); rates are ranks, not measurements. */
static void table_prior(void) {
    for (int t = 0; t < NTEMP; t++)
        for (unsigned i = 0; i < NB; i++) {
            uint32_t r[NCAND] = {0, 2, bucket_size(i) >= clear_cpu.l3 ? 3 : 1, 0, 0};
            cell_set(&cells[t][i], r, SRC_PRIOR, 0, false, true);
        }
}

static inline struct cell *cell_for(bool cold, size_t n) {
    if (n >= never_hot()) cold = true;
    return &cells[cold ? T_COLD : T_HOT][bucket(n)];
}

/* Start a trial of candidate k: TRIAL consecutive clears (the first is not
 * learned from), extended by cell_learn while the rate still rises. */
static int trial(struct cell *c, int k, bool patient) {
    atomic_store_explicit(&c->trial, (uint8_t)k, memory_order_relaxed);
    atomic_store_explicit(&c->trial_patient, patient, memory_order_relaxed);
    atomic_store_explicit(&c->trial_left, TRIAL - 1, memory_order_relaxed);
    atomic_store_explicit(&c->trial_len, 1, memory_order_relaxed);
    atomic_store_explicit(&c->trial_prev, 0, memory_order_relaxed);
    atomic_store_explicit(&c->trial_on, 1, memory_order_relaxed);
    return k;
}

/* The candidate to run: the best, unless a trial is running, a candidate
 * still needs samples (weak prior, or close to the best) or a close
 * runner-up is due for a re-check. */
static int cell_choose(struct cell *c, bool allow_mt) {
    int best = cell_best(c, allow_mt);
    if (!atomic_load_explicit(&c->online, memory_order_relaxed)) return best;
    uint32_t u = atomic_fetch_add_explicit(&c->uses, 1, memory_order_relaxed);
    uint8_t left = atomic_load_explicit(&c->trial_left, memory_order_relaxed);
    if (left) {
        int k = atomic_load_explicit(&c->trial, memory_order_relaxed);
        if (allow_mt || !cand_mt(k)) {
            atomic_store_explicit(&c->trial_left, (uint8_t)(left - 1), memory_order_relaxed);
            return k;
        }
    }
    bool weak = atomic_load_explicit(&c->weak, memory_order_relaxed);
    if (atomic_load_explicit(&c->samples[best], memory_order_relaxed) == 0) {
        /* the best by its prior is not measured yet: a trial, patient when
         * it is a weak prior's first choice (nothing measured yet) */
        bool first = weak;
        for (int k = 0; k < NCAND; k++)
            if (atomic_load_explicit(&c->samples[k], memory_order_relaxed)) first = false;
        return trial(c, best, first);
    }
    uint32_t br = atomic_load_explicit(&c->rate[best], memory_order_relaxed);
    int runner = -1;
    uint32_t rr = 0;
    for (int k = 0; k < NCAND; k++) {
        uint32_t r = atomic_load_explicit(&c->rate[k], memory_order_relaxed);
        if (k == best || r == 0 || (cand_mt(k) && !allow_mt)) continue;
        bool close = (uint64_t)r * 5 >= (uint64_t)br * CLOSE_CALL;
        if (atomic_load_explicit(&c->samples[k], memory_order_relaxed) < EXPLORE_SAMPLES) {
            /* not measured yet, r is the prior's.  A threaded variant is
             * tried when close to the best.  Weak prior: the order of stosb
             * and nt is unknown, try both -- nt only while it could win:
             * its prior there is the streaming rate measured cold, which it
             * does not beat on a hot destination, and trying it where the
             * cache holds the block evicts the block (rep stosb then needs
             * 3-10 clears at 32-64 MiB to get it cached again); beat:
             * by more than 1/8, as TOUCH_BIAS asks (the bound is loose:
             * nt clears a hot 32-64 MiB block 10-20% below it) */
            bool want = cand_mt(k) || !weak ? close
                                            : k != C_NT || (uint64_t)r * 8 > (uint64_t)br * 9;
            if (want) return trial(c, k, false);
            continue;
        }
        if (close && r > rr) rr = r, runner = k;
    }
    /* a close runner-up is re-checked, less and less often while the best
     * holds: a re-check costs more than its trial (the incumbent is slow for
     * a few clears after the other kind of store, see cell_learn) */
    if (runner >= 0 && u >= atomic_load_explicit(&c->check_at, memory_order_relaxed)) {
        uint32_t gap = atomic_load_explicit(&c->check_gap, memory_order_relaxed);
        atomic_store_explicit(&c->check_at, u + gap, memory_order_relaxed);
        atomic_store_explicit(&c->check_gap, gap < RECHECK_MAX ? gap * 2 : gap, memory_order_relaxed);
        return trial(c, runner, false);
    }
    return best;
}

/* A timed clear of candidate k.  The first clear after a switch of kind of
 * store (stosb, nt; threads or not does not matter) is not learned from, and
 * a trial goes on (up to TRIAL_MAX clears) while its rate still rises by
 * more than 1/16 a clear: on this kind of CPU a strategy runs markedly slower
 * over lines the other one left, for one clear at 16 MiB but for 3-10 at
 * 32-64 MiB (rep stosb after non-temporal stores on a hot 64 MiB block:
 * 8-12 GB/s, settling at 24-27 while nt stays at 20-22), which would always
 * favour the incumbent and, learned from a short trial, made the engine
 * choose nt where rep stosb wins. */
static void trial_step(struct cell *c, int k, uint32_t x) {
    if (!atomic_load_explicit(&c->trial_on, memory_order_relaxed) ||
        atomic_load_explicit(&c->trial, memory_order_relaxed) != k)
        return;
    unsigned len = atomic_load_explicit(&c->trial_len, memory_order_relaxed) + 1u;
    atomic_store_explicit(&c->trial_len, (uint8_t)len, memory_order_relaxed);
    uint32_t prev = atomic_load_explicit(&c->trial_prev, memory_order_relaxed);
    if (x) atomic_store_explicit(&c->trial_prev, x, memory_order_relaxed);
    if (atomic_load_explicit(&c->trial_left, memory_order_relaxed)) return;
    bool more = x && prev && (uint64_t)x * 16 > (uint64_t)prev * 17; /* still settling */
    if (x && !more && atomic_load_explicit(&c->trial_patient, memory_order_relaxed)) {
        /* the weak prior's first choice goes on while another candidate's
         * rate (its prior) is still ahead: from a block's first clears rep
         * stosb may need more than 3 to get it cached (calloc of a recycled
         * 64 MiB block: 8-12 GB/s for 3-10 clears, then 24) */
        for (int j = 0; j < NCAND; j++)
            if (j != k && (uint64_t)atomic_load_explicit(&c->rate[j], memory_order_relaxed) * 16 >
                              (uint64_t)x * 17)
                more = true;
    }
    if (more && len < TRIAL_MAX)
        atomic_store_explicit(&c->trial_left, 1, memory_order_relaxed);
    else
        atomic_store_explicit(&c->trial_on, 0, memory_order_relaxed);
}

static void cell_learn(struct cell *c, int k, size_t n, uint64_t dt) {
    int last = atomic_exchange_explicit(&c->last, (uint8_t)k, memory_order_relaxed);
    if (last >= NCAND || cand_strategy[last] != cand_strategy[k] || !dt) { /* the stores changed */
        trial_step(c, k, 0);
        return;
    }
    double mbps = (double)n * atomic_load_explicit(&ticks_per_us, memory_order_relaxed) / (double)dt;
    uint32_t x = mbps > 4e9 ? 4000000000u : mbps < 1 ? 1u : (uint32_t)mbps;
    uint32_t s = atomic_load_explicit(&c->samples[k], memory_order_relaxed);
    /* Interference only ever makes a clear slower (preemption, the other
     * tenant's memory traffic), so a candidate's rate is the best of its
     * last HIST samples: runs of slow outliers do not sink it, a lasting
     * change shows after HIST samples. */
    unsigned pos = atomic_load_explicit(&c->hpos[k], memory_order_relaxed) % HIST;
    atomic_store_explicit(&c->hist[k][pos], x, memory_order_relaxed);
    atomic_store_explicit(&c->hpos[k], (uint8_t)((pos + 1) % HIST), memory_order_relaxed);
    uint32_t v = 0;
    for (int i = 0; i < HIST; i++) {
        uint32_t h = atomic_load_explicit(&c->hist[k][i], memory_order_relaxed);
        if (h > v) v = h;
    }
    atomic_store_explicit(&c->rate[k], v ? v : 1, memory_order_relaxed);
    if (s < 65535) atomic_store_explicit(&c->samples[k], (uint16_t)(s + 1), memory_order_relaxed);
    atomic_store_explicit(&c->src, SRC_ONLINE, memory_order_relaxed);
    trial_step(c, k, x);
    int old = atomic_load_explicit(&c->choice, memory_order_relaxed), best = cell_best(c, true);
    if (best != old) { /* a new best: re-check the runner-up soon again */
        atomic_store_explicit(&c->choice, (uint8_t)best, memory_order_relaxed);
        uint32_t u = atomic_load_explicit(&c->uses, memory_order_relaxed);
        atomic_store_explicit(&c->check_gap, RECHECK_MIN, memory_order_relaxed);
        atomic_store_explicit(&c->check_at, u + RECHECK_MIN, memory_order_relaxed);
    }
}

/* ------------------------------------------------------------ calibration
 * On the destination of the first clear of >= CAL_MIN bytes, its first
 * S = min(n, CAL_MAX) bytes (rounded down to a power of two), for s = 4 KiB,
 * 16 KiB, 64 KiB, 256 KiB, 1 MiB (<= S), interleaving the candidates:
 *  - hot: a window of max(s, 256 KiB) is written with rep stosb (its lines
 *    dirty in L2, as a block the program just used), then its blocks of s
 *    bytes are cleared one after another and timed;
 *  - cold: a window of max(s, 128 KiB) is first cleared with non-temporal
 *    stores (which leave no line of it cached), then cleared again, timed
 *    (stosb and nt: the loop is a candidate for small hot clears only; up to
 *    256 KiB: cold clears stream, their rates do not change with size).
 * 7 samples (15 at 4 KiB hot, 3 from 256 KiB and cold), candidates in rotated order.  Each
 * class takes the median of the measured size at or below it.  Above S:
 *  - cold classes keep the largest measured size's rates (streaming);
 *  - hot classes start from the L3 prior (up to 0.4 x L3 the hot rates, the
 *    cold ones above; nt at its cold, streaming rate) and are marked weak:
 *    stosb gets a trial, nt too unless a measured best already beats its
 *    streaming rate.
 *    L3 is what the CPU reports (sysfs, else cpuid leaf 4); in a VM that is
 *    the hypervisor's figure (260 MiB on the KVM guest measured here, whose
 *    measured steady-state hot crossover is 64-96 MiB), so the prior only
 *    orders the first trials and the timed clears decide;
 *  - from mt_min_bytes, the threaded candidates start at 1.5 x the single
 *    thread's rate (a second core helps): the best gets a trial, and so
 *    does any candidate within 5/4 of it.
 * Every pass writes zeros, so the caller's clear that follows only has to
 * finish the job. */
#define CAL_SIZES 5
#define CAL_REPS 15 /* hot 4 KiB: the loop beats stosb by 4-8%, a close call */
#define CAL_COLD_MAX ((size_t)256 << 10)

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void calibrate(char *buf, size_t n) {
    size_t S = CAL_MAX;
    while (S > n) S >>= 1;
    uint64_t ns0 = os_now_ns(), c0 = ticks();
    kernel_fn knt = ktab[FOLIO_CLEAR_NT], kst = ktab[FOLIO_CLEAR_STOSB];
    enum { M_LOOP, M_STOSB, M_NT, NM };
    uint64_t meas[2][CAL_SIZES][NM]; /* median ticks per byte x 2^16; 0 = not measured */
    size_t sizes[CAL_SIZES];
    int nsizes = 0;
    memset(meas, 0, sizeof meas);
    kst(buf, S); /* fault in, warm */
    for (size_t s = (size_t)4 << 10; s <= S && nsizes < CAL_SIZES; s <<= 2) {
        int si = nsizes++;
        sizes[si] = s;
        for (int cold = 0; cold < 2; cold++) {
            if (cold && s > CAL_COLD_MAX) { /* streaming rates: the size below stands */
                memcpy(meas[1][si], meas[1][si - 1], sizeof meas[1][si]);
                continue;
            }
            size_t w = cold ? (s > ((size_t)128 << 10) ? s : (size_t)128 << 10)
                            : (s > ((size_t)256 << 10) ? s : (size_t)256 << 10);
            if (w > S) w = S;
            /* hot samples time >= 256 KiB of clearing (small sizes: rounds
             * of dirtying the window and clearing it) */
            size_t rounds = cold || w >= ((size_t)256 << 10) ? 1 : ((size_t)256 << 10) / w;
            int reps = cold || s >= ((size_t)256 << 10) ? 3 : s == ((size_t)4 << 10) ? CAL_REPS : 7;
            bool loop = !cold && s <= ((size_t)1 << LOOP_MAX_SHIFT);
            uint64_t t[NM][CAL_REPS];
            for (int r = 0; r < reps; r++)
                for (int j = 0; j < NM; j++) {
                    int k = (j + r) % NM;
                    if (k == M_LOOP && !loop) continue;
                    kernel_fn kk = ktab[cand_strategy[k]];
                    uint64_t sum = 0;
                    for (size_t round = 0; round < rounds; round++) {
                        if (cold) knt(buf, w);
                        else kst(buf, w);
                        uint64_t a = ticks_fenced();
                        for (size_t off = 0; off + s <= w; off += s) kk(buf + off, s);
                        sum += ticks_fenced() - a;
                    }
                    t[k][r] = sum;
                }
            for (int k = 0; k < NM; k++) {
                if (k == M_LOOP && !loop) continue;
                qsort(t[k], (size_t)reps, sizeof(uint64_t), cmp_u64);
                uint64_t med = t[k][reps / 2];
                meas[cold][si][k] = (med << 16) / (w * rounds) + 1;
            }
        }
    }
    uint64_t ns1 = os_now_ns(), c1 = ticks();
    if (ns1 > ns0 && c1 > c0) atomic_store(&ticks_per_us, (double)(c1 - c0) * 1000.0 / (double)(ns1 - ns0));
    double tpu = atomic_load(&ticks_per_us);
    /* rates in MB/s: bytes per us = 2^16 * ticks_per_us / (ticks per byte x 2^16) */
    uint32_t rate[2][CAL_SIZES][NM];
    for (int t = 0; t < 2; t++)
        for (int si = 0; si < nsizes; si++)
            for (int k = 0; k < NM; k++) {
                uint64_t m = meas[t][si][k];
                double r = m ? 65536.0 * tpu / (double)m : 0;
                rate[t][si][k] = m ? (r < 1 ? 1u : r > 4e9 ? 4000000000u : (uint32_t)r) : 0;
            }
    int top = nsizes - 1;
    for (unsigned i = 0; i < NB; i++) {
        size_t bs = bucket_size(i);
        int si = 0;
        while (si < top && sizes[si + 1] <= bs) si++;
        for (int t = 0; t < NTEMP; t++) {
            bool cold = t == T_COLD, measured = bs <= S, weak = false;
            uint32_t r[NCAND] = {0};
            memcpy(r, rate[cold][si], sizeof rate[cold][si]);
            if (bs > ((size_t)1 << LOOP_MAX_SHIFT)) r[C_LOOP] = 0;
            if (!measured && !cold) {
                if (bs * 5 > clear_cpu.l3 * 2) memcpy(r, rate[1][top], sizeof rate[1][top]);
                /* nt: the streaming rate (it does not depend on the cache) */
                if (r[C_NT] < rate[1][top][M_NT]) r[C_NT] = rate[1][top][M_NT];
                r[C_LOOP] = 0;
                weak = true;
            }
            if (bs >= mt_min_bytes() && mt_wanted() > 1) {
                r[C_STOSB_MT] = r[C_STOSB] / 2 * 3;
                r[C_NT_MT] = r[C_NT] / 2 * 3;
            }
            cell_set(&cells[t][i], r, measured ? SRC_CALIBRATED : SRC_PRIOR,
                     measured ? EXPLORE_SAMPLES : 0, bs >= ONLINE_MIN, weak);
        }
    }
    atomic_store(&cal_bytes, S);
    atomic_store(&cal_us, (ns1 - ns0) / 1000 + 1);
}

/* ------------------------------------------------------------ initialisation */
/* FOLIO_CLEAR (options.c reads it, by name or number): a strategy this CPU
 * lacks leaves the engine's own choice. */
static void parse_mode(void) {
    long c = opt.clear;
    forced = c > 0 && c < FOLIO_CLEAR_NSTRATEGIES && (c == FOLIO_CLEAR_HYBRID || ktab[c]) ? (int)c : 0;
}

static FORK_STATE lock_t init_lock = LOCK_INIT(LOCK_RANK_CLEAR_INIT);

static void engine_init(void) {
    lock_acquire(&init_lock);
    if (atomic_load_explicit(&engine_state, memory_order_relaxed) != ST_READY) {
        clear_detect_cpu();
        mt_cpus = os_cpu_allowance();
        for (int i = 0; i < FOLIO_CLEAR_NSTRATEGIES; i++) ktab[i] = clear_kernel(i);
        parse_mode();
        table_prior();
        atomic_store_explicit(&engine_state, ST_READY, memory_order_release);
    }
    lock_release(&init_lock);
}

void clear_visit_locks(lock_visit_fn *fn, void *ctx) {
    fn(ctx, "clear-init", -1, &init_lock);
    fn(ctx, "clear-mt", -1, &mt.lock);
}

void clear_lock_all(void) { lock_acquire(&init_lock); }
void clear_unlock_all(bool child) {
    if (child) lock_reset(&init_lock);
    else lock_release(&init_lock);
}

static inline void ensure_init(void) {
    if (unlikely(atomic_load_explicit(&engine_state, memory_order_acquire) != ST_READY)) engine_init();
}

/* ------------------------------------------------------------ the API */
int clear_hint(void *p, size_t n, unsigned hints) {
    char *c = p;
    if (n < SMALL_CLEAR) {
        clear_small(c, n);
        if (n) count(CLEAR_K_LOOP, n);
        return FOLIO_CLEAR_LOOP;
    }
    ensure_init();
    bool touch = hints & FOLIO_CLEAR_TOUCH, threads = !(hints & FOLIO_CLEAR_ONE_THREAD);
    /* calibrated cells, nothing to learn: the timing and learning cost ~400
     * instructions, 2% of a 256 KiB clear (callgrind), 0.5% at 1 MiB */
    if (likely(!forced && n < ONLINE_MIN &&
               (n < CAL_MIN || atomic_load_explicit(&cal_state, memory_order_relaxed) == ST_READY))) {
        struct cell *cell = &cells[(hints & FOLIO_CLEAR_COLD) ? T_COLD : T_HOT][bucket(n)];
        int s = cand_strategy[atomic_load_explicit(&cell->choice, memory_order_relaxed)];
        if (unlikely(s == FOLIO_CLEAR_NT && touch)) {
            s = n > clear_cpu.head ? FOLIO_CLEAR_HYBRID : FOLIO_CLEAR_STOSB;
            run(s, c, n, true, false);
        } else {
            ktab[s](c, n);
        }
        count(clear_kind(s), n);
        return s;
    }
    if (forced) {
        run(forced, c, n, touch, threads);
        count(clear_kind(forced), n);
        return forced;
    }
    if (unlikely(atomic_load_explicit(&cal_state, memory_order_relaxed) != ST_READY)) {
        int e = ST_NONE;
        if (atomic_compare_exchange_strong(&cal_state, &e, ST_RUNNING)) {
            calibrate(c, n);
            atomic_store(&cal_state, ST_READY);
        }
    }
    struct cell *cell = cell_for(hints & FOLIO_CLEAR_COLD, n);
    bool allow_mt = threads && mt_possible(n);
    int k = cell_choose(cell, allow_mt);
    if (touch && k == C_NT && !atomic_load_explicit(&cell->trial_on, memory_order_relaxed) &&
        (uint64_t)atomic_load_explicit(&cell->rate[C_STOSB], memory_order_relaxed) * 9 >=
            (uint64_t)atomic_load_explicit(&cell->rate[C_NT], memory_order_relaxed) * 8)
        k = C_STOSB; /* see TOUCH_BIAS */
    int s = cand_strategy[k];
    if (s == FOLIO_CLEAR_NT && touch) s = n > clear_cpu.head ? FOLIO_CLEAR_HYBRID : FOLIO_CLEAR_STOSB;
    uint64_t t0 = ticks();
    bool mt = run(s, c, n, touch, cand_mt(k));
    uint64_t dt = ticks() - t0;
    /* learn, unless a threaded candidate ran alone (another threaded clear
     * held the helpers); a hybrid counts as non-temporal once the head is
     * small beside it */
    if (atomic_load_explicit(&cell->online, memory_order_relaxed) && mt == cand_mt(k) &&
        (s == cand_strategy[k] || (s == FOLIO_CLEAR_HYBRID && n >= 8 * clear_cpu.head)))
        cell_learn(cell, k, n, dt);
    count(clear_kind(s), n);
    return s;
}

int clear_with(void *p, size_t n, int strategy) {
    if (strategy == FOLIO_CLEAR_AUTO) {
        clear_hint(p, n, 0);
        return 0;
    }
    ensure_init();
    if (strategy < 0 || strategy >= FOLIO_CLEAR_NSTRATEGIES) {
        errno = EINVAL;
        return -1;
    }
    if (strategy != FOLIO_CLEAR_HYBRID && !ktab[strategy]) {
        errno = ENOTSUP;
        return -1;
    }
    run(strategy, p, n, false, false);
    count(clear_kind(strategy), n);
    return 0;
}

unsigned clear_age_hint(uint64_t freed_at_ms) {
    uint64_t now = os_now_ms();
    return now >= freed_at_ms + COLD_AGE_MS ? FOLIO_CLEAR_COLD : FOLIO_CLEAR_HOT;
}

/* ------------------------------------------------------------ report */
/* The smallest size from which every class chooses non-temporal stores. */
static uint64_t nt_from(int t) {
    uint64_t from = 0;
    for (int i = NB - 1; i >= 0; i--) {
        int ch = atomic_load_explicit(&cells[t][i].choice, memory_order_relaxed);
        if (cand_strategy[ch] != FOLIO_CLEAR_NT) break;
        from = bucket_size((unsigned)i);
    }
    return from;
}

void clear_stats(struct clear_stats *st) {
    memset(st, 0, sizeof *st);
    uint64_t b[CLEAR_NKINDS] = {0};
    for (int i = 0; i < NSHARDS; i++)
        for (int k = 0; k < CLEAR_NKINDS; k++)
            b[k] += atomic_load_explicit(&shards[i].bytes[k], memory_order_relaxed);
    st->loop = b[CLEAR_K_LOOP];
    st->stosb = b[CLEAR_K_STOSB];
    st->nt = b[CLEAR_K_NT];
    st->hybrid = b[CLEAR_K_HYBRID];
    st->other = b[CLEAR_K_OTHER];
    st->zero_skipped = atomic_load_explicit(&zero_skipped, memory_order_relaxed);
    st->mt_clears = atomic_load_explicit(&mt_clears, memory_order_relaxed);
    st->mt_bytes = atomic_load_explicit(&mt_bytes, memory_order_relaxed);
    if (atomic_load(&engine_state) == ST_READY) {
        st->hot_nt_from = nt_from(T_HOT);
        st->cold_nt_from = nt_from(T_COLD);
    }
    st->calibration_us = atomic_load(&cal_us);
}

struct jw {
    void (*put)(void *, const char *);
    void *ctx;
};
static void jstr(struct jw *w, const char *s) { w->put(w->ctx, s); }
static void jnum(struct jw *w, uint64_t v) {
    char t[24];
    jstr(w, u64_text(t, v));
}
static void jkv(struct jw *w, const char *k, uint64_t v, bool comma) {
    jstr(w, "\"");
    jstr(w, k);
    jstr(w, "\": ");
    jnum(w, v);
    if (comma) jstr(w, ", ");
}
static void jks(struct jw *w, const char *k, const char *v, bool comma) {
    jstr(w, "\"");
    jstr(w, k);
    jstr(w, "\": \"");
    jstr(w, v);
    jstr(w, comma ? "\", " : "\"");
}

/* rates: MB/s, or null before calibration (the prior's ranks are not rates) */
static void json_cell(struct jw *w, const char *name, struct cell *c, bool mt, bool rates) {
    int nc = mt ? NCAND : C_STOSB_MT;
    jstr(w, "\"");
    jstr(w, name);
    jstr(w, "\": {");
    jks(w, "choice", cand_name[cell_best(c, mt)], true);
    jks(w, "source", src_name[atomic_load(&c->src)], true);
    if (!rates) {
        jstr(w, "\"mbps\": null}");
        return;
    }
    jstr(w, "\"mbps\": {");
    for (int k = 0; k < nc; k++) jkv(w, cand_name[k], atomic_load(&c->rate[k]), k + 1 < nc);
    jstr(w, "}, \"samples\": {");
    for (int k = 0; k < nc; k++) jkv(w, cand_name[k], atomic_load(&c->samples[k]), k + 1 < nc);
    jstr(w, "}}");
}

void clear_json(void (*put)(void *ctx, const char *s), void *ctx) {
    struct jw w = {put, ctx};
    if (atomic_load_explicit(&engine_state, memory_order_acquire) != ST_READY) {
        /* nothing cleared yet: the engine is set up by the first clear, not
         * by a report (folio top's, every second, or the one at exit) */
        long asked = opt.clear > 0 && opt.clear < FOLIO_CLEAR_NSTRATEGIES ? opt.clear : 0;
        jstr(&w, "{");
        jks(&w, "mode", folio_clear_name((int)asked), true);
        jkv(&w, "set_up", 0, true);
        jkv(&w, "calibrated", 0, true);
        jkv(&w, "mt_clears", atomic_load(&mt_clears), true);
        jkv(&w, "mt_bytes", atomic_load(&mt_bytes), false);
        jstr(&w, "}");
        return;
    }
    jstr(&w, "{");
    jkv(&w, "set_up", 1, true);
    jks(&w, "mode", folio_clear_name(forced), true);
    jks(&w, "loop", folio_clear_name(clear_cpu.loop_impl), true);
    jks(&w, "nt", folio_clear_name(clear_cpu.nt_impl), true);
    jkv(&w, "erms", clear_cpu.erms, true);
    jkv(&w, "l1d_bytes", clear_cpu.l1, true);
    jkv(&w, "l2_bytes", clear_cpu.l2, true);
    jkv(&w, "l3_bytes", clear_cpu.l3, true);
    jkv(&w, "head_bytes", clear_cpu.head, true);
    jkv(&w, "chunk_bytes", CLEAR_CHUNK, true);
    jkv(&w, "calibrated", atomic_load(&cal_state) == ST_READY, true);
    jkv(&w, "calibration_us", atomic_load(&cal_us), true);
    jkv(&w, "calibration_bytes", atomic_load(&cal_bytes), true);
    bool cal = atomic_load(&cal_state) == ST_READY;
    jkv(&w, "tsc_mhz", cal ? (uint64_t)atomic_load(&ticks_per_us) : 0, true);
    jkv(&w, "threads", (uint64_t)mt_wanted(), true);
    jkv(&w, "helpers", (uint64_t)atomic_load(&mt.helpers), true);
    jkv(&w, "mt_min_bytes", mt_min_bytes(), true);
    jkv(&w, "mt_clears", atomic_load(&mt_clears), true);
    jkv(&w, "mt_bytes", atomic_load(&mt_bytes), true);
    jkv(&w, "hot_nt_from", nt_from(T_HOT), true);
    jkv(&w, "cold_nt_from", nt_from(T_COLD), true);
    jstr(&w, "\n  \"table\": [");
    for (unsigned i = 0; i < NB; i++) {
        bool mt = bucket_size(i) * 2 > mt_min_bytes() && mt_wanted() > 1;
        jstr(&w, i ? ",\n    {" : "\n    {");
        jkv(&w, "size", bucket_size(i), true);
        json_cell(&w, "hot", &cells[T_HOT][i], mt, cal);
        jstr(&w, ", ");
        json_cell(&w, "cold", &cells[T_COLD][i], mt, cal);
        jstr(&w, "}");
    }
    jstr(&w, "]}");
}
