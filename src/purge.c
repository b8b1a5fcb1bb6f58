/* purge: returning expired free memory to the kernel.
 *
 * Invariant: free memory stays resident for about purge_delay_ms after it was
 * freed (cheap reuse) and is then madvised away (RSS falls).  The work runs
 * from allocation slow paths at most once per quarter delay, and, once enough
 * memory waits, from one background thread, so a program that frees a large
 * working set and goes quiet still sees its RSS fall. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>

#include "internal.h"

/* dirty free memory that justifies a background purger */
#define PURGE_THREAD_BACKLOG ((size_t)2 << 20)

static _Atomic uint64_t next_purge_ms;
static _Atomic int purge_thread_state; /* 0 none, 1 starting/running */

static uint64_t tick_interval(void) {
    uint64_t d = (uint64_t)opt.purge_delay_ms / 4;
    return d < 10 ? 10 : d;
}

/* One purger at a time: the work frees pages, which may tick again. */
static _Atomic int purging;

/* budget: bytes a caller on an allocation path may spend (0: the purger
 * thread, no bound) */
static void purge_now(size_t budget) {
    if (atomic_exchange_explicit(&purging, 1, memory_order_acquire)) return;
    pageset_decay_tick();
    zone_purge(false, budget);
    huge_purge(false);
    slab_reclaim_abandoned();
    atomic_store_explicit(&purging, 0, memory_order_release);
}

void purge_tick(void) {
    uint64_t now = os_now_ms();
    uint64_t due = atomic_load_explicit(&next_purge_ms, memory_order_relaxed);
    if (now < due) return;
    if (!atomic_compare_exchange_strong_explicit(&next_purge_ms, &due, now + tick_interval(),
                                                 memory_order_relaxed, memory_order_relaxed))
        return;
    purge_now((size_t)64 << 20);
}

static void *purge_main(void *arg) {
    (void)arg;
    for (;;) {
        os_sleep_ms((unsigned)tick_interval());
        purge_now(0);
    }
    return NULL;
}

/* Called with no folio lock held (thread creation allocates). */
void purge_maybe_start_thread(void) {
    if (!opt.purge_thread || atomic_load_explicit(&purge_thread_state, memory_order_relaxed))
        return;
    if (zone_dirty_bytes() + huge_dirty_bytes() + slab_spare_bytes() < PURGE_THREAD_BACKLOG &&
        !pageset_grown())
        return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&purge_thread_state, &expected, 1)) return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&t, &attr, purge_main, NULL) != 0) opt.purge_thread = 0;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void purge_after_fork_child(void) {
    atomic_store(&purge_thread_state, 0);
    atomic_store(&purging, 0);
}
