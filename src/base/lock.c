/* lock: the slow half of the futex mutex in base.h, and the lock-order
 * checker of debug builds.
 *
 * Invariant: v == 2 whenever a thread may be sleeping on the lock, so an
 * unlock that sees 2 always wakes one sleeper. */
#include "base.h"

void lock_slow(lock_t *l) {
    atomic_fetch_add_explicit(&l->contended, 1, memory_order_relaxed);
    for (int spin = 0; spin < 64; spin++) {
        __builtin_ia32_pause();
        if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 && lock_try_raw(l)) return;
    }
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0) os_futex_wait(&l->v, 2);
}

/* ---- hold times (FOLIO_LOCK_STATS=1) ----
 * Cycles are converted to nanoseconds at read time, by the cycle counter's
 * rate since timing began; a hold that began before timing did (since == 0)
 * is not counted. */
bool lock_timing LOADER_WRITTEN;
_Atomic int folio_ready LOADER_WRITTEN; /* the api's, here for its page (base.h) */
static uint64_t timing_ticks0, timing_ns0;

void lock_timing_start(void) {
    timing_ns0 = os_now_ns();
    timing_ticks0 = __builtin_ia32_rdtsc();
    __atomic_store_n(&lock_timing, true, __ATOMIC_RELAXED);
}

void lock_hold_begin(lock_t *l) {
    __atomic_store_n(&l->acquired, l->acquired + 1, __ATOMIC_RELAXED);
    l->since = __builtin_ia32_rdtsc();
}

void lock_hold_end(lock_t *l) {
    if (!l->since) return;
    uint64_t t = __builtin_ia32_rdtsc();
    __atomic_store_n(&l->held_ticks, l->held_ticks + (t - l->since), __ATOMIC_RELAXED);
    l->since = 0;
}

void lock_stat_read(lock_t *l, struct lock_stat *st) {
    st->acquired = __atomic_load_n(&l->acquired, __ATOMIC_RELAXED); /* 0 unless lock_timing */
    st->contended = atomic_load_explicit(&l->contended, memory_order_relaxed);
    st->held_ns = 0;
    if (!__atomic_load_n(&lock_timing, __ATOMIC_RELAXED)) return;
    uint64_t ticks = __builtin_ia32_rdtsc() - timing_ticks0, ns = os_now_ns() - timing_ns0;
    uint64_t held = __atomic_load_n(&l->held_ticks, __ATOMIC_RELAXED);
    if (ticks) st->held_ns = (uint64_t)((unsigned __int128)held * ns / ticks);
}

#ifdef FOLIO_DEBUG
/* ---- lock order (debug builds) ----
 * Each thread records the locks it holds.  A blocking acquisition of l is
 * legal only when every held lock ranks below l, or has l's rank and a
 * lower address; a trylock is recorded but not checked (it never waits).
 * The first violation ends the process with both locks named, before the
 * acquisition can deadlock, so a test that only once runs the bad path
 * still fails. */
#define HELD_MAX 64 /* pageset_lock_all holds one per CPU: bounded below */

static const char *const rank_name[LOCK_RANK_COUNT] = {
    [LOCK_RANK_NONE] = "unranked",       [LOCK_RANK_INIT] = "init",
    [LOCK_RANK_CLEAR_INIT] = "clear-init", [LOCK_RANK_CLEAR_MT] = "clear-mt",
    [LOCK_RANK_HEAPS] = "heaps",           [LOCK_RANK_DENSE] = "dense",
    [LOCK_RANK_HUGE] = "huge",           [LOCK_RANK_PAGESET] = "pageset",
    [LOCK_RANK_DEPOT] = "depot",         [LOCK_RANK_ZONE] = "zone",           [LOCK_RANK_ARENA] = "arena",
    [LOCK_RANK_META] = "meta",
};

static __thread struct {
    lock_t *lock[HELD_MAX];
    int n;
    int overflow; /* locks held beyond HELD_MAX (not tracked) */
} held __attribute__((tls_model("initial-exec")));

static const char *name_of(const lock_t *l) {
    return l->rank > 0 && l->rank < LOCK_RANK_COUNT ? rank_name[l->rank] : "unranked";
}

static _Noreturn void violation(const char *what, const lock_t *want, const lock_t *have) {
    os_write_err("folio: lock order violation: ");
    os_write_err(what);
    os_write_err(" ");
    os_write_err(name_of(want));
    if (have) {
        os_write_err(" while holding ");
        os_write_err(name_of(have));
    }
    os_write_err("\n");
    os_fatal_ptr("lock:", want);
}

void lockdep_acquire(lock_t *l, bool trylock) {
    if (l->rank <= LOCK_RANK_NONE || l->rank >= LOCK_RANK_COUNT) violation("acquiring", l, NULL);
    for (int i = 0; i < held.n; i++) {
        lock_t *h = held.lock[i];
        if (h == l) violation("acquiring again", l, h);
        if (trylock) continue;
        if (h->rank > l->rank || (h->rank == l->rank && (uintptr_t)h > (uintptr_t)l))
            violation("acquiring", l, h);
    }
    if (held.n < HELD_MAX) held.lock[held.n++] = l;
    else held.overflow++;
}

static bool forget(lock_t *l) {
    for (int i = held.n - 1; i >= 0; i--)
        if (held.lock[i] == l) {
            held.lock[i] = held.lock[--held.n];
            return true;
        }
    return false;
}

void lockdep_release(lock_t *l) {
    if (forget(l)) return;
    if (held.overflow > 0) held.overflow--;
    else violation("releasing a lock not held:", l, NULL);
}

/* A system call that takes the process's mmap lock for writing (a
 * madvise that changes a mapping's flags) waits for every page fault in
 * progress; under a zone's or the arena's lock every thread that needs
 * pages would wait with it. */
void lockdep_check_syscall(const char *call) {
    for (int i = 0; i < held.n; i++)
        if (held.lock[i]->rank == LOCK_RANK_ZONE || held.lock[i]->rank == LOCK_RANK_ARENA) {
            os_write_err("folio: ");
            os_write_err(call);
            os_write_err(" while holding ");
            os_write_err(name_of(held.lock[i]));
            os_write_err("\n");
            os_fatal_ptr("lock:", held.lock[i]);
        }
}

void lockdep_forget(lock_t *l) {
    if (!forget(l) && held.overflow > 0) held.overflow--;
}
#endif
