/* live: folio's counters published while the process runs, for `folio top`
 * (FOLIO_LIVE).  The file /dev/shm/folio.<pid> holds a header and the text
 * of folio_report_json (report.c's snapshot: one source of counters); it is
 * created once the process has run a second, rewritten at most once a
 * second by the background purger, or from the api's maintenance tick while
 * no purger wakes every second, and removed at exit.  A snapshot costs
 * about 0.1-0.4 ms (docs/notes/live.md).
 *
 * Invariants:
 *  - one publisher at a time: an atomic flag taken with an exchange and
 *    never waited for, so no lock is ever held across the syscalls here, and
 *    a tick that finds a publisher at work just returns;
 *  - a reader copies a consistent text: the header's sequence number is odd
 *    while the text changes (the header goes out first with it odd, then
 *    the text, then the header with it even), so a copy taken between two
 *    equal even reads is whole;
 *  - the file is written with pwrite and never mapped (os_file_*): no call
 *    here takes the kernel's mmap lock for writing, so a process's first
 *    second, when the file is made, is no different from its steady state;
 *  - a process writes only its own file: the pid is checked before each
 *    write, and a fork child, seeing that the file and the schedule were
 *    its parent's, publishes its own once it has run a second from its
 *    first due tick on;
 *  - a file outlives its process only until the next folio process makes
 *    its own: a process that ended without exit handlers (killed, _exit, an
 *    exec into a program without folio) cannot remove its file, so each new
 *    file's maker removes those of pids that no longer exist, once nobody
 *    has written them for STALE_AFTER_S (a live publisher rewrites its file
 *    every second: a file of a process in another pid namespace that shares
 *    this /dev/shm stays); a file of a pid reused since is left alone. */
#include <stdlib.h>
#include <string.h>

#include "api_layer.h"

#define LIVE_INTERVAL_MS 1000
#define LIVE_MAGIC "folio-live-1\n"

/* The file's first 64 bytes; the text follows, NUL-terminated.  folio top
 * (tools/folio_tools/live.py) reads this layout. */
struct live_head {
    char magic[16];
    uint64_t seq;           /* odd while the text is being written */
    uint64_t pid;
    uint64_t updated_ns;    /* CLOCK_MONOTONIC of the last write */
    uint64_t interval_ms;   /* how often it is written, at most */
    uint64_t len;           /* the text's length */
    uint64_t size;          /* the file's */
};
_Static_assert(sizeof(struct live_head) == 64, "folio top reads a 64-byte header");

static struct live_head head; /* what the file's header says (the publisher's) */
static FORK_STATE _Atomic int file_pid; /* the process whose file exists, 0: none (exit reads it while a stuck publisher may write it) */
static char file_path[40];
static FORK_STATE _Atomic uint64_t due_ms;  /* the next write, not before */
static FORK_STATE int clock_pid;            /* the process due_ms counts for (0: none yet) */
static FORK_STATE _Atomic int busy;         /* a publisher is at work */
static FORK_STATE _Atomic int ended; /* exit: the file is gone, never make another */
static __thread bool exit_began __attribute__((tls_model("initial-exec"))); /* live_exit's short way */

static char text[64 * 1024];

#define LIVE_DIR "/dev/shm/"
#define LIVE_PREFIX "folio."
#define STALE_AFTER_S 60
#define SWEEP_MAX 4096 /* directory entries looked at: the sweep's cost is bounded */

static void path_of(int pid, char out[40]) {
    char num[24];
    strcpy(out, LIVE_DIR LIVE_PREFIX);
    strcat(out, u64_text(num, (uint64_t)pid));
}

/* LIVE_PREFIX followed by a pid, and nothing else: the pid, else 0 */
static int pid_in_name(const char *name) {
    if (strncmp(name, LIVE_PREFIX, sizeof LIVE_PREFIX - 1) != 0) return 0;
    const char *d = name + sizeof LIVE_PREFIX - 1;
    long pid = 0;
    for (; *d >= '0' && *d <= '9' && pid < (1l << 31); d++) pid = pid * 10 + (*d - '0');
    return !*d && pid > 0 && pid < (1l << 31) ? (int)pid : 0;
}

static bool sweep_one(const char *name, void *self) {
    int pid = pid_in_name(name);
    if (!pid || pid == *(int *)self || os_pid_exists(pid)) return true;
    char path[40];
    path_of(pid, path);
    if (os_file_age_s(path) >= STALE_AFTER_S) os_file_unlink(path);
    return true;
}

static void sweep_stale(int self) { os_dir_each(LIVE_DIR, SWEEP_MAX, sweep_one, &self); }

/* the report: a fixed part (its clearing table included) and a line per
 * pageset, with room to spare */
static size_t size_needed(void) {
    size_t n = 16384 + 320 * (size_t)pageset_count();
    return (n + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
}

/* not inlined into live_tick: the tick runs on every process's slow paths
 * (mk/layout.ld's first text window), a publish only after its first
 * second (the process pid's, which live_tick has checked) */
static __attribute__((noinline)) void publish(int pid) {
    bool create = !file_pid;
    size_t size = size_needed();
    if (create) {
        path_of(pid, file_path);
        memset(&head, 0, sizeof head);
        memcpy(head.magic, LIVE_MAGIC, sizeof LIVE_MAGIC);
        head.pid = (uint64_t)pid;
        head.interval_ms = LIVE_INTERVAL_MS;
        head.size = size;
        sweep_stale(pid); /* first: their room may be what this file needs */
    }
    int fd = os_file_open(file_path, create, size);
    if (fd < 0) {
        if (create) atomic_store(&due_ms, UINT64_MAX); /* no /dev/shm, or no room: stop trying */
        else file_pid = 0;                             /* removed under us: make it again */
        return;
    }
    file_pid = pid;
    /* The descriptor is the lowest free number, which may be one the
     * program closed and is about to dup2 over (a standard descriptor): it
     * is written to and closed only while it is still the file opened here,
     * else it is the program's now, and left alone. */
    struct os_file_id id;
    if (!os_file_id(fd, &id)) return;
    /* exit came meanwhile, and may end the process before this write is
     * done: the new file goes at once (the exit's wait removes one made
     * before it came) */
    bool gone = create && atomic_load(&ended);
    if (gone) os_file_unlink(file_path);
    size_t n = gone ? 0 : folio_report_json(text, sizeof text);
    if (!gone && n < head.size - sizeof head && os_file_is(fd, &id)) { /* always, with size_needed's margin; never publish half */
        head.seq += head.seq & 1 ? 2 : 1; /* odd (after a failed write, a new odd) */
        bool ok = os_file_pwrite(fd, &head, sizeof head, 0) &&
                  os_file_pwrite(fd, text, n + 1, sizeof head);
        head.len = n;
        head.updated_ns = os_now_ns();
        if (ok && os_file_is(fd, &id)) { /* else the file stays odd: readers wait for the next write */
            head.seq++;
            os_file_pwrite(fd, &head, sizeof head, 0);
        }
    }
    if (gone) file_pid = 0;
    if (os_file_is(fd, &id)) os_file_close(fd);
}

static FORK_STATE _Atomic int dropped; /* drop_file ran: busy stays taken from then on */
/* this process's file, if it made one, goes (a fork child's parent's stays) */
static void unlink_own_file(void) {
    if (file_pid && file_pid == os_getpid()) os_file_unlink(file_path);
}
static void drop_file(void) {
    unlink_own_file();
    atomic_store(&dropped, 1);
}

static FORK_STATE bool enabled;

/* The purger is about to start, in the thread that starts it.  A thread
 * whose exit began starts a purger that must publish nothing.  Nothing is
 * faulted in ahead here: the first publish, at the process's first second,
 * faults in the report's code and the text buffer (about 30 pages) in the
 * purger's thread; a snapshot taken ahead, when the purger starts, put
 * those pages in every program that freed 2 MiB, most of which end within
 * their first second and never publish (56-256 KiB of peak RSS in the alloc
 * suite's programs; docs/notes/live.md). */
void live_prepare(void) {
    if (exit_began) atomic_store(&ended, 1);
}

/* The schedule starts at the process's first tick (due_ms 0: due), whose
 * publish only records the pid (clock_pid): no clock or pid is read at
 * start, and a process that never ticks reads neither. */
void live_init(void) { enabled = opt.live != 0; }

void live_tick(uint64_t now) {
    if (!enabled || exit_began) return;
    uint64_t due = atomic_load_explicit(&due_ms, memory_order_relaxed);
    if (now < due) return;
    if (!atomic_compare_exchange_strong_explicit(&due_ms, &due, now + LIVE_INTERVAL_MS,
                                                 memory_order_relaxed, memory_order_relaxed))
        return;
    if (atomic_exchange(&busy, 1)) return;
    if (!atomic_load(&ended)) {
        /* here, not in publish: every process's first tick comes here, and
         * publish's code lies past the first text window (a fault) */
        int pid = os_getpid();
        if (file_pid && file_pid != pid) file_pid = 0; /* a fork child: the file is its parent's */
        if (clock_pid != pid) clock_pid = pid; /* its first tick (or a fork child's: the schedule was its
                                                * parent's): its first second starts now, due_ms is a second ahead */
        else publish(pid);
    }
    atomic_store(&busy, 0);
    /* exit came while this thread published: whichever of the two sees the
     * flag free removes the file (sequentially consistent: one of them does) */
    if (atomic_load(&ended) && !atomic_exchange(&busy, 1)) drop_file();
}

/* The file goes, and no other file is made: busy stays taken.  A
 * publisher at work when exit comes (the purger, another thread)
 * removes the file once it is done, but the process may end before it gets
 * there: nothing waits for the purger.  So exit waits for it, a little
 * (a write takes well under a millisecond; a publisher this thread
 * interrupted, from a signal handler, is never done: EXIT_WAIT_MS bounds
 * that), and then removes a file the publisher made itself (one stuck on
 * folio's locks in the report, its threads descheduled on a busy
 * machine: the stress helper saw 4 of 80 such exits leave their file). */
#define EXIT_WAIT_MS 50
void live_exit(void) {
    /* A process (or fork child) before its first tick, with no other
     * thread: it has no file, and makes none from here on, as the flag on
     * this thread's own TLS page (which a fork child has written already)
     * stops its ticks, those of a library destructor that runs after this
     * one included, and the purger such a destructor may start sets ended
     * first (live_prepare).  Its exit then writes none of the flags above:
     * in a fork child their page is its parent's, shared until written.
     * (A thread the program starts in a later destructor could still
     * publish; the sweep removes such a file.) */
    if (!enabled) return;
    if (api_single_threaded() && !atomic_load(&busy) && (!clock_pid || clock_pid != os_getpid())) {
        exit_began = true;
        return;
    }
    atomic_store(&ended, 1);
    for (int ms = 0; atomic_exchange(&busy, 1); ms++) {
        if (atomic_load(&dropped)) return;
        if (ms == EXIT_WAIT_MS) { /* the publisher is stuck (waiting on folio's locks, descheduled): */
            unlink_own_file(); /* the file it made; one it has yet to make it removes itself */
            return;
        }
        os_futex_wait_ms(&busy, 1, 1);
    }
    drop_file();
}

/* The parent's file and schedule are the parent's: publish finds it out
 * (the pid) at the child's first due tick and starts the child's first
 * second there.  Nothing is written here that is not wrong already, so a
 * child that execs, or that ends without exit handlers, copies none of
 * folio's pages, and reads no clock. */
void live_after_fork_child(void) {
    FORK_RESET(busy, 0); /* a thread of the parent's was publishing */
    FORK_RESET(dropped, 0);
}
