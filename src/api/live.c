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
 *    while the text changes, so a copy taken between two equal even reads is
 *    whole;
 *  - a process writes only its own file: a fork child drops the parent's
 *    mapping (live_after_fork_child) and, like any process, publishes its
 *    own once it has run a second; the pid is checked again before each
 *    write, for children made without the fork handlers. */
#include <stdlib.h>
#include <string.h>

#include "api_layer.h"

#define LIVE_INTERVAL_MS 1000
#define LIVE_MAGIC "folio-live-1\n"

/* The file's first 64 bytes; the text follows, NUL-terminated.  folio top
 * (tools/folio_tools/live.py) reads this layout. */
struct live_head {
    char magic[16];
    _Atomic uint64_t seq;   /* odd while the text is being written */
    uint64_t pid;
    uint64_t updated_ns;    /* CLOCK_MONOTONIC of the last write */
    uint64_t interval_ms;   /* how often it is written, at most */
    uint64_t len;           /* the text's length */
    uint64_t size;          /* the file's */
};
_Static_assert(sizeof(struct live_head) == 64, "folio top reads a 64-byte header");

static FORK_STATE struct live_head *page;
static size_t page_size;
static int page_pid;
static char page_path[40];
static FORK_STATE _Atomic uint64_t due_ms;  /* the next write, not before */
static FORK_STATE _Atomic int busy;         /* a publisher is at work */
static _Atomic int ended;        /* exit: the file is gone, never make another */
static char text[64 * 1024];

static void path_of(int pid, char out[40]) {
    char num[24];
    strcpy(out, "/dev/shm/folio.");
    strcat(out, u64_text(num, (uint64_t)pid));
}

/* the report: a fixed part (its clearing table included) and a line per
 * pageset, with room to spare */
static size_t size_needed(void) {
    size_t n = 16384 + 320 * (size_t)pageset_count();
    return (n + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
}

static void publish(void) {
    int pid = os_getpid();
    if (page && page_pid != pid) { /* a child the fork handler did not see */
        os_shm_drop(NULL, page, page_size);
        page = NULL;
    }
    if (!page) {
        path_of(pid, page_path);
        page_size = size_needed();
        page = os_shm_create(page_path, page_size);
        if (!page) {
            atomic_store(&due_ms, UINT64_MAX); /* no /dev/shm, or no room: stop trying */
            return;
        }
        page_pid = pid;
        memcpy(page->magic, LIVE_MAGIC, sizeof LIVE_MAGIC);
        page->pid = (uint64_t)pid;
        page->interval_ms = LIVE_INTERVAL_MS;
        page->size = page_size;
    }
    size_t room = page_size - sizeof *page;
    size_t n = folio_report_json(text, sizeof text);
    if (n >= room) return; /* cannot happen with size_needed's margin; never publish half */
    /* odd first: an exchange, a full barrier on x86, so the text's stores
     * are not seen before it (the readers are other processes) */
    uint64_t seq = atomic_load_explicit(&page->seq, memory_order_relaxed);
    atomic_exchange_explicit(&page->seq, seq + 1, memory_order_acq_rel);
    memcpy((char *)(page + 1), text, n + 1);
    page->len = n;
    page->updated_ns = os_now_ns();
    atomic_store_explicit(&page->seq, seq + 2, memory_order_release);
}

static void drop_file(void) {
    if (page && page_pid == os_getpid()) os_shm_drop(page_path, NULL, 0);
}

static FORK_STATE bool enabled;

void live_init(void) {
    enabled = opt.live != 0;
    atomic_store(&due_ms, os_now_ms() + LIVE_INTERVAL_MS);
}

void live_tick(uint64_t now) {
    if (!enabled) return;
    uint64_t due = atomic_load_explicit(&due_ms, memory_order_relaxed);
    if (now < due) return;
    if (!atomic_compare_exchange_strong_explicit(&due_ms, &due, now + LIVE_INTERVAL_MS,
                                                 memory_order_relaxed, memory_order_relaxed))
        return;
    if (atomic_exchange(&busy, 1)) return;
    if (!atomic_load(&ended)) publish();
    atomic_store(&busy, 0);
    /* exit came while this thread published: whichever of the two sees the
     * flag free removes the file (sequentially consistent: one of them does) */
    if (atomic_load(&ended) && !atomic_exchange(&busy, 1)) drop_file();
}

/* The file goes; the mapping stays (a thread may still write it, and the
 * process is ending), and no other file is made: busy stays taken. */
void live_exit(void) {
    atomic_store(&ended, 1);
    if (!atomic_exchange(&busy, 1)) drop_file();
}

/* The parent's page is the parent's: unmap it here; this process publishes
 * its own from its first second on. */
void live_after_fork_child(void) {
    if (page) os_shm_drop(NULL, page, page_size);
    page = NULL;
    atomic_store(&busy, 0);
    live_init();
}
