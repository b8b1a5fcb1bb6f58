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
 *    what the program's own last thread would have done;
 *  - the child of a fork in a process that had other threads starts no
 *    background thread (bg_refused): POSIX allows it only async-signal-safe
 *    calls until it execs, and a thread made from inside malloc there waits
 *    for good on any lock another thread of the parent held at the fork
 *    (a sanitizer's thread registry did).  Its purges run from allocation
 *    slow paths instead, and its clears in the calling thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <errno.h>
#include <signal.h>

#include "base.h"

#define BG_MAX 72 /* the purger and up to 64 clearing helpers */

/* Not FORK_STATE: a fork child resets these only where a thread was
 * started (bg_after_fork_child), and the fork page holds .data now. */
static _Atomic int bg_tids[BG_MAX];

/* Stacks for the first BG_STACKS threads (the purger and the default
 * clearing helpers), in folio's own image: glibc maps a stack and protects
 * its guard page for any other thread, two calls that take the kernel's
 * mmap lock for writing whenever the thread starts, in a program's steady
 * state too (issue 15).  They have no guard page: folio's threads use a
 * few KiB (folio's largest frame, -fstack-usage, is 4 KiB), and glibc puts the
 * thread's descriptor and static TLS at the top of either kind of stack.  A
 * background thread returns only when the program is gone, so a stack is
 * never reused; a fork child, which has none of the threads, starts over. */
#define BG_STACKS 4
#if defined(__SANITIZE_THREAD__)
#define BG_STACK_SIZE (2 << 20) /* TSan keeps ~900 KiB of each thread's state in its static TLS */
#else
#define BG_STACK_SIZE (64 * 1024)
#endif
static char bg_stacks[BG_STACKS][BG_STACK_SIZE] __attribute__((aligned(4096)));
/* the top of one of our stacks that its thread uses (glibc's descriptor and
 * TLS, and the purger's deepest call, the live file's snapshot: ~10 KiB),
 * written by the starting thread: faulted in at the start, in a program's
 * warm-up, not at the first publish, a second later in its steady state */
#define BG_STACK_PREFAULT (16 * 1024)
static _Atomic int bg_stacks_used;
static _Atomic bool bg_refused;

static int create(pthread_t *t, void *(*fn)(void *), void *arg, void *stack) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack) pthread_attr_setstack(&attr, stack, BG_STACK_SIZE);
    else pthread_attr_setstacksize(&attr, BG_STACK_SIZE);
    int rc = pthread_create(t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return rc;
}

/* set while this thread is in bg_start: glibc's pthread_create allocates
 * the new thread's dtv in the calling thread, for folio, not the program */
static __thread bool bg_starting __attribute__((tls_model("initial-exec")));
bool bg_start_in_progress(void) { return bg_starting; }

bool bg_start(void *(*fn)(void *), void *arg) {
    if (atomic_load_explicit(&bg_refused, memory_order_relaxed)) return false;
    bg_starting = true;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int i = atomic_fetch_add_explicit(&bg_stacks_used, 1, memory_order_relaxed);
    /* one of ours, else (all taken, or glibc refused it: static TLS too
     * large for it) one of glibc's */
    if (i < BG_STACKS)
        for (size_t off = PAGE_SIZE; off <= BG_STACK_PREFAULT; off += PAGE_SIZE)
            ((volatile char *)bg_stacks[i])[BG_STACK_SIZE - off] = 0;
    int rc = i < BG_STACKS ? create(&t, fn, arg, bg_stacks[i]) : -1;
    if (rc != 0) rc = create(&t, fn, arg, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    bg_starting = false;
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

/* The program's main thread, watched without a file descriptor: it holds
 * a robust mutex from its first allocation on, and the kernel marks the
 * mutex's owner dead when the thread exits (pthread_exit too, where it
 * stays a zombie).  While it lives the program is not gone, so the
 * background threads read /proc (a descriptor open for an instant, seen
 * by a program that lists its descriptors: CPython's tests do) only after
 * it exited.  main_watch_pid: the process that locked it (a fork child
 * inherits a copy locked by its parent's thread: it uses /proc), 0 before,
 * -1 once the main thread is known to have exited. */
static pthread_mutex_t main_alive;
static _Atomic int main_watch_pid;

void bg_watch_main_thread(int pid) {
    pthread_mutexattr_t attr;
    if (atomic_load_explicit(&main_watch_pid, memory_order_relaxed)) return;
    pthread_mutexattr_init(&attr);
    /* a kernel without robust futexes: no watch, /proc decides */
    bool robust = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) == 0 &&
                  pthread_mutex_init(&main_alive, &attr) == 0;
    pthread_mutexattr_destroy(&attr);
    if (robust && pthread_mutex_lock(&main_alive) == 0)
        atomic_store_explicit(&main_watch_pid, pid, memory_order_release);
}

static bool main_thread_alive(void) {
    int pid = atomic_load_explicit(&main_watch_pid, memory_order_acquire);
    if (pid <= 0 || pid != os_getpid()) return false;
    if (pthread_mutex_trylock(&main_alive) == EBUSY) return true;
    /* EOWNERDEAD: it exited and this thread owns the mutex now, for good
     * (another background thread's trylock meanwhile says busy: it looks
     * again at its next poll) */
    atomic_store_explicit(&main_watch_pid, -1, memory_order_relaxed);
    return false;
}

/* While the mutex says the main thread lives, /proc is still read once
 * every MAIN_WATCH_RECHECK_MS: a program that replaced its main thread's
 * robust list (set_robust_list) would otherwise never be found gone. */
#define MAIN_WATCH_RECHECK_MS 10000
static _Atomic uint64_t main_watch_recheck_ms;

bool bg_program_gone(void) {
    if (main_thread_alive()) {
        uint64_t now = os_now_ms(), due = atomic_load_explicit(&main_watch_recheck_ms, memory_order_relaxed);
        if (!due) {
            atomic_compare_exchange_strong(&main_watch_recheck_ms, &due, now + MAIN_WATCH_RECHECK_MS);
            return false;
        }
        if (now < due || !atomic_compare_exchange_strong(&main_watch_recheck_ms, &due, now + MAIN_WATCH_RECHECK_MS))
            return false;
    }
    return os_other_threads_alive(bg_tids, BG_MAX) == 0;
}

/* A parent that never had another thread (glibc's single-threaded flag,
 * cleared by the first pthread_create, ours included) started none of
 * ours: nothing to reset, and the page these variables share is not even
 * read (a zero-page fault in every fork child of a small program). */
void bg_after_fork_child(bool parent_had_threads) {
    if (!parent_had_threads) return;
    FORK_RESET(bg_refused, true);
    FORK_RESET(bg_stacks_used, 0);
    for (int i = 0; i < BG_MAX; i++) FORK_RESET(bg_tids[i], 0);
}
