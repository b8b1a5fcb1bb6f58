/* purge: returning expired free memory to the kernel.
 *
 * Invariant: free memory stays resident for about purge_delay_ms after it was
 * freed (cheap reuse) and is then madvised away (RSS falls).  The work runs
 * from allocation slow paths at most once per quarter delay, and, once enough
 * memory waits, from one background thread, so a program that frees a large
 * working set and goes quiet still sees its RSS fall.  That thread leaves
 * when the program's threads are gone (bg.c); it is not restarted in that
 * process, since nothing can allocate any more. */
#include "page.h"

/* dirty free memory that justifies a background purger */
#define PURGE_THREAD_BACKLOG ((size_t)2 << 20)

static _Atomic uint64_t next_purge_ms;
static FORK_STATE _Atomic int purge_thread_state; /* 0 none, 1 starting/running */

static uint64_t tick_interval(void) {
    uint64_t d = (uint64_t)opt.purge_delay_ms / 4;
    return d < 10 ? 10 : d;
}

static const struct obj_hooks no_hooks;
const struct obj_hooks *obj_hooks = &no_hooks;

void purge_register(const struct obj_hooks *hooks) { obj_hooks = hooks; }

static size_t obj_held_bytes(void) { return obj_hooks->held_bytes ? obj_hooks->held_bytes() : 0; }

static void (*_Atomic bg_work)(uint64_t now_ms);

void purge_register_bg_work(void (*fn)(uint64_t now_ms)) { atomic_store(&bg_work, fn); }

static void (*_Atomic bg_start_work)(void);

void purge_register_bg_start(void (*fn)(void)) { atomic_store(&bg_start_work, fn); }

uint64_t purge_bg_interval_ms(void) {
    return atomic_load_explicit(&purge_thread_state, memory_order_relaxed) == 1 ? tick_interval() : 0;
}

/* One purger at a time: the work frees pages, which may tick again. */
static FORK_STATE _Atomic int purging;

/* budget: bytes a caller on an allocation path may spend (0: the purger
 * thread, no bound) */
static void purge_now(size_t budget) {
    if (atomic_exchange_explicit(&purging, 1, memory_order_acquire)) return;
    pageset_decay_tick();
    zone_purge(false, budget);
    huge_purge(false);
    if (!budget) zone_collapse_dense(4, os_now_ms()); /* the purger thread only: each copies 2 MiB */
    if (obj_hooks->reclaim) obj_hooks->reclaim();
    atomic_store_explicit(&purging, 0, memory_order_release);
}

uint64_t purge_tick(void) {
    uint64_t now = os_now_ms();
    if (zone_take_over_bound()) { /* the heap grew past the dirty bound: not a tick later */
        purge_now((size_t)64 << 20);
        return now;
    }
    uint64_t due = atomic_load_explicit(&next_purge_ms, memory_order_relaxed);
    if (now < due) return now;
    if (atomic_compare_exchange_strong_explicit(&next_purge_ms, &due, now + tick_interval(),
                                                memory_order_relaxed, memory_order_relaxed))
        purge_now((size_t)64 << 20);
    return now;
}

/* The purger sleeps a tick at a time on purge_wake; a program thread that
 * exits wakes it early (purge_note_thread_exit), and it then looks every
 * few milliseconds for a while, so a program whose last thread just
 * exited ends at once, not a tick later. */
static _Atomic int purge_wake;
#define EXIT_POLL_MS 2
#define EXIT_POLLS 50

/* arg: purge_wake as the starting thread read it before the purger could
 * be woken.  The purger compares the word with the value it last saw, not
 * with the one it waits on, so an exit noted while it was not waiting (its
 * own start: the thread whose exit started it notes the exit next) is not
 * lost for a tick. */
static void *purge_main(void *arg) {
    int seen = (int)(intptr_t)arg;
    bg_enter();
    int polls = 0;
    uint64_t next = os_now_ms() + tick_interval();
    for (;;) {
        uint64_t now = os_now_ms();
        unsigned wait = now < next ? (unsigned)(next - now) : 1;
        if (polls && wait > EXIT_POLL_MS) wait = EXIT_POLL_MS;
        if (atomic_load_explicit(&purge_wake, memory_order_acquire) == seen)
            os_futex_wait_ms(&purge_wake, seen, wait);
        int w = atomic_load_explicit(&purge_wake, memory_order_acquire);
        if (w != seen) {
            polls = EXIT_POLLS;
            seen = w;
        } else if (polls) {
            polls--;
        }
        if (bg_program_gone()) break;
        now = os_now_ms();
        if (now >= next) {
            purge_now(0);
            next = now + tick_interval();
        }
        void (*work)(uint64_t) = atomic_load_explicit(&bg_work, memory_order_relaxed);
        if (work) work(now);
    }
    bg_leave();
    return NULL; /* the program's threads are gone: glibc ends the process */
}

void purge_note_thread_exit(void) {
    if (atomic_load_explicit(&purge_thread_state, memory_order_relaxed) != 1) return;
    atomic_fetch_add_explicit(&purge_wake, 1, memory_order_release);
    os_futex_wake(&purge_wake, 1);
}

/* Called with no folio lock held (thread creation allocates). */
void purge_maybe_start_thread(void) {
    if (!opt.purge_thread || atomic_load_explicit(&purge_thread_state, memory_order_relaxed))
        return;
    if (zone_dirty_bytes() + huge_dirty_bytes() + obj_held_bytes() < PURGE_THREAD_BACKLOG &&
        !pageset_grown())
        return;
    int expected = 0;
    /* before the state is 1: no exit is noted (purge_note_thread_exit) until then */
    int seen = atomic_load_explicit(&purge_wake, memory_order_acquire);
    if (!atomic_compare_exchange_strong(&purge_thread_state, &expected, 1)) return;
    void (*start)(void) = atomic_load_explicit(&bg_start_work, memory_order_relaxed);
    if (start) start(); /* in this thread, before the purger runs: ordered before what follows */
    if (!bg_start(purge_main, (void *)(intptr_t)seen)) atomic_store(&purge_thread_state, 2); /* never again */
}

void purge_after_fork_child(bool parent_had_threads) {
    /* 2: no purger thread in this process (bg.c: a fork child of a process
     * with threads makes none); the slow paths purge */
    FORK_RESET(purge_thread_state, parent_had_threads ? 2 : 0);
    FORK_RESET(purging, 0);
    bg_after_fork_child(parent_had_threads);
}
