/* init: folio's start-up, the fork handlers and the exit report.
 *
 * Invariants:
 *  - initialisation runs once, under init_lock, before any exported call
 *    reaches a lower layer, and never allocates (it may run inside dlsym);
 *  - fork: the prepare handler takes every folio lock in rank order, so
 *    the child starts with consistent state and can allocate; in a process
 *    that glibc says has one thread (a shell, most forking programs) no
 *    other thread can hold a lock or be inside folio, so it takes none, and
 *    neither the parent nor the child writes them back after the fork. */
#define _GNU_SOURCE
#include <pthread.h>
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define HAVE_SINGLE_THREADED 1
#endif
#endif

#include "api_layer.h"

static FORK_STATE lock_t init_lock = LOCK_INIT(LOCK_RANK_INIT);

/* a thread of the program is exiting: the purger may have spare slabs to
 * give back, and must leave if this was the program's last thread */
static void on_thread_exit(void) {
    purge_maybe_start_thread();
    purge_note_thread_exit();
}

void folio_init(void) {
    if (likely(atomic_load_explicit(&folio_ready, memory_order_acquire))) return;
    lock_acquire(&init_lock);
    if (!atomic_load_explicit(&folio_ready, memory_order_relaxed)) {
        options_init();
        classes_init();
        pageset_init();
        slab_init();
        heap_set_exit_hook(on_thread_exit);
        live_init();
        purge_register_bg_work(live_tick);
        purge_register_bg_start(live_prepare);
        atomic_store_explicit(&folio_ready, 1, memory_order_release);
    }
    lock_release(&init_lock);
}

/* every folio lock, for the report: init's own, then each layer's */
void api_visit_locks(lock_visit_fn *fn, void *ctx) {
    fn(ctx, "init", -1, &init_lock);
    clear_visit_locks(fn, ctx);
    heap_visit_locks(fn, ctx);
    page_visit_locks(fn, ctx);
    meta_visit_locks(fn, ctx);
}

/* Every folio lock, in rank order (base.h): a thread in the middle of any
 * folio operation finishes it before the fork, and no path holds a lock
 * while waiting for a lower-ranked one, so this cannot deadlock.  The
 * clearing engine's threaded-clear lock is not taken: its helpers do not
 * exist in the child, which resets it (clear.c). */
/* The locks are spread over several pages (huge.c's shards alone: 64 locks
 * on 4 pages), and each page written after a fork is copied, or faulted
 * again, once in the parent and once in the child: 10-12 faults per fork.
 * A single-threaded process skips them: glibc clears __libc_single_threaded
 * before it creates a second thread (folio's own included) and never sets it
 * back, so while it is true the calling thread is the only one, and it is in
 * fork, not in folio (a fork from a signal handler that interrupted folio
 * would deadlock on the taken locks anyway).  What prepare decided is what
 * the parent and the child handlers act on. */
static FORK_STATE bool fork_locked;

bool api_single_threaded(void) {
#ifdef HAVE_SINGLE_THREADED
    return __libc_single_threaded;
#else
    return false;
#endif
}

static void fork_prepare(void) {
    if (api_single_threaded()) {
        if (fork_locked) fork_locked = false;
        return;
    }
    fork_locked = true;
    lock_acquire(&init_lock);
    clear_lock_all();
    heap_lock_all();
    page_lock_all();
    meta_lock_all();
}
static void fork_parent(void) {
    if (!fork_locked) return;
    meta_unlock_all(false);
    page_unlock_all(false);
    heap_unlock_all(false);
    clear_unlock_all(false);
    lock_release(&init_lock);
}
static void fork_child(void) {
    if (fork_locked) {
        meta_unlock_all(true);
        page_unlock_all(true);
        heap_unlock_all(true);
        clear_unlock_all(true);
        lock_reset(&init_lock);
    }
    purge_after_fork_child(fork_locked); /* fork_locked: the parent had other threads */
    live_after_fork_child();
}

__attribute__((constructor)) static void folio_ctor(void) {
    folio_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

__attribute__((destructor)) static void folio_dtor(void) {
    if (opt.report_path && *opt.report_path) folio_report_write(opt.report_path);
    live_exit();
}
