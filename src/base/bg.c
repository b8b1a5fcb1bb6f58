/* bg: folio's background threads and the rule that they never outlive the
 * program.
 *
 * Invariants:
 *  - a background thread blocks every signal from its first instruction
 *    (it is created with all signals blocked), so process-directed signals
 *    go to the program's threads;
 *  - every live background thread has its tid in bg_tids while it may
 *    block; bg_program_gone() looks for a live thread outside that set
 *    (/proc/self/task: a main thread that called pthread_exit stays as a
 *    zombie and does not count);
 *  - a background thread that finds the program gone returns, and glibc
 *    ends the process with exit(0) when the last thread returns, which is
 *    what the program's own last thread would have done. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>

#include "base.h"

#define BG_MAX 72 /* the purger and up to 64 clearing helpers */

/* page-aligned: bg.o is the library's first object with FORK_STATE data, so
 * the section starts on a page and (under 4 KiB) stays on it */
static FORK_STATE __attribute__((aligned(4096))) _Atomic int bg_tids[BG_MAX];

bool bg_start(void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0;
}

void bg_enter(void) {
    int me = os_gettid();
    for (int i = 0; i < BG_MAX; i++) {
        int e = 0;
        if (atomic_compare_exchange_strong(&bg_tids[i], &e, me)) return;
    }
    /* more than BG_MAX: this one is not registered, so it keeps the others
     * from deciding the program is gone; it must not block for good */
}

void bg_leave(void) {
    int me = os_gettid();
    for (int i = 0; i < BG_MAX; i++) {
        int e = me;
        if (atomic_compare_exchange_strong(&bg_tids[i], &e, 0)) return;
    }
}

bool bg_program_gone(void) { return os_other_threads_alive(bg_tids, BG_MAX) == 0; }

void bg_after_fork_child(void) {
    for (int i = 0; i < BG_MAX; i++) atomic_store_explicit(&bg_tids[i], 0, memory_order_relaxed);
}
