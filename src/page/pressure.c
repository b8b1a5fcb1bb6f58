/* pressure: the two zone flags the kernel's pageset rules read, measured
 * against the limits a process has (seed 003; mm/page_alloc.c, vmscan.c).
 *
 *  - below high (ZONE_BELOW_HIGH: free pages under the high watermark):
 *    some limit's usage is above 7/8 of it.  Pagesets stop growing and
 *    shrink toward high_min on every free.
 *  - reclaim active (ZONE_RECLAIM_ACTIVE: kswapd balancing the node): set
 *    once some usage passes 15/16 of its limit (kswapd wakes at the low
 *    watermark, above the high one in usage terms), kept until every usage
 *    is back under 7/8 (kswapd stops at the high watermark).  Every
 *    pageset, fixed or tuned, is capped at 4 x batch (high_min).
 *
 * The limits: FOLIO_MEMORY_LIMIT against folio's resident estimate, and the
 * process's memory cgroup (v2 memory.max against memory.current, v1
 * memory.limit_in_bytes against memory.usage_in_bytes).  Usage is measured
 * at most every 100 ms, from refills and frees alike; the cgroup's limit is
 * re-read at most once a second, so a limit set or changed after start is
 * seen.  One thread measures at a time (the compare-and-swap on the due
 * time); the others read the last state.  The cgroup's files are found
 * only once the zone holds CGROUP_LOOKUP_PAGES: a smaller heap's pagesets
 * hold too little to matter to any limit, and most processes (a shell, a
 * compiler's driver, git) never get there, so they read no /proc or /sys
 * file for it at start. */
#include <stdlib.h>
#include <string.h>

#include "page.h"

#define MEASURE_INTERVAL_MS 100u
#define LIMIT_INTERVAL_MS 1000u

#define CGROUP_LOOKUP_PAGES (4 * CHUNK_PAGES)

static char limit_file[256], usage_file[256]; /* the cgroup's files; "" none */
/* 0: not looked for yet; 1: a thread is looking; 2: done (the names above
 * are written before it is stored, read only after it is loaded) */
static _Atomic int cgroup_looked;
static _Atomic size_t cgroup_limit;           /* bytes; 0: none ("max", unlimited) */
static _Atomic uint64_t next_measure_ms, next_limit_ms;
static _Atomic int state;
static int forced = -1; /* tests: -1 measure, else the state */
static _Atomic uint64_t below_high_periods, reclaim_periods, limit_reads;

/* A number from a cgroup file; 0 for "max", v1's "unlimited" (2^63 rounded
 * down to a page) and anything unreadable. */
static size_t read_bytes(const char *path) {
    char buf[64];
    if (!os_read_file(path, buf, sizeof buf) || buf[0] < '0' || buf[0] > '9') return 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    return v >= (1ull << 60) ? 0 : (size_t)v;
}

static bool set_files(const char *dir, const char *limit, const char *usage) {
    if (strlen(dir) + 32 > sizeof limit_file) return false;
    strcpy(limit_file, dir);
    strcat(limit_file, limit);
    strcpy(usage_file, dir);
    strcat(usage_file, usage);
    char buf[8];
    if (os_read_file(limit_file, buf, sizeof buf)) return true;
    limit_file[0] = usage_file[0] = 0; /* no memory controller there */
    return false;
}

/* The memory cgroup's files, from /proc/self/cgroup: a v1 line naming the
 * memory controller ("N:memory:/path") wins over the v2 line ("0::/path"),
 * since a hybrid system runs the memory controller on v1. */
static void find_cgroup(void) {
    char buf[2048], dir[200];
    if (!os_read_file("/proc/self/cgroup", buf, sizeof buf)) return;
    const char *v2 = NULL;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2) {
            *c2 = 0;
            const char *ctl = c1 + 1, *path = c2 + 1;
            bool memory = false;
            for (const char *m = strstr(ctl, "memory"); m; m = strstr(m + 1, "memory"))
                if ((m == ctl || m[-1] == ',') && (m[6] == 0 || m[6] == ',')) memory = true;
            if (memory && strlen(path) < 150) {
                strcpy(dir, "/sys/fs/cgroup/memory");
                strcat(dir, path);
                if (set_files(dir, "/memory.limit_in_bytes", "/memory.usage_in_bytes")) return;
            }
            if (!*ctl && line[0] == '0' && c1 == line + 1) v2 = path;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (v2 && strlen(v2) < 150) {
        strcpy(dir, "/sys/fs/cgroup");
        strcat(dir, strcmp(v2, "/") ? v2 : "");
        set_files(dir, "/memory.max", "/memory.current");
    }
}

/* Whether the cgroup's files are known (limit_file[0]: there is one); the
 * first caller once the heap is large enough looks them up (not under a
 * lock: pressure_state's callers hold none), the others go on without. */
static bool cgroup_known(void) {
    int s = atomic_load_explicit(&cgroup_looked, memory_order_acquire);
    if (s == 2) return true;
    if (s == 1 || zone_managed_pages() < CGROUP_LOOKUP_PAGES) return false;
    if (!atomic_compare_exchange_strong(&cgroup_looked, &s, 1)) return false;
    find_cgroup();
    atomic_store_explicit(&cgroup_looked, 2, memory_order_release);
    return true;
}

static bool sources(void) { return opt.memory_limit > 0 || (cgroup_known() && limit_file[0]); }

/* Usage against a limit: 0 under 7/8, 1 above 7/8, 2 above 15/16. */
static int level(size_t usage, size_t limit) {
    if (!limit) return 0;
    if (usage > limit - limit / 16) return 2;
    return usage > limit - limit / 8;
}

static int measure(uint64_t now) {
    int lv = 0;
    if (opt.memory_limit > 0) lv = level(zone_resident_estimate(), (size_t)opt.memory_limit);
    if (cgroup_known() && limit_file[0]) {
        uint64_t due = atomic_load_explicit(&next_limit_ms, memory_order_relaxed);
        if (now >= due) {
            atomic_store_explicit(&next_limit_ms, now + LIMIT_INTERVAL_MS, memory_order_relaxed);
            atomic_store_explicit(&cgroup_limit, read_bytes(limit_file), memory_order_relaxed);
            atomic_fetch_add_explicit(&limit_reads, 1, memory_order_relaxed);
        }
        size_t lim = atomic_load_explicit(&cgroup_limit, memory_order_relaxed);
        if (lim) {
            int c = level(read_bytes(usage_file), lim);
            if (c > lv) lv = c;
        }
    }
    int old = atomic_load_explicit(&state, memory_order_relaxed), s = 0;
    if (lv >= 1) s |= PRESSURE_BELOW_HIGH;
    if (lv == 2 || (lv == 1 && (old & PRESSURE_RECLAIM))) s |= PRESSURE_RECLAIM;
    if ((s & PRESSURE_BELOW_HIGH) && !(old & PRESSURE_BELOW_HIGH))
        atomic_fetch_add_explicit(&below_high_periods, 1, memory_order_relaxed);
    if ((s & PRESSURE_RECLAIM) && !(old & PRESSURE_RECLAIM))
        atomic_fetch_add_explicit(&reclaim_periods, 1, memory_order_relaxed);
    return s;
}

int pressure_state(void) {
    if (forced >= 0) return forced;
    if (!sources()) return 0;
    uint64_t now = os_now_ms();
    uint64_t due = atomic_load_explicit(&next_measure_ms, memory_order_relaxed);
    if (now >= due &&
        atomic_compare_exchange_strong(&next_measure_ms, &due, now + MEASURE_INTERVAL_MS))
        atomic_store_explicit(&state, measure(now), memory_order_relaxed);
    return atomic_load_explicit(&state, memory_order_relaxed);
}

/* The state as last measured (no clock read): after a pageset's lock is
 * released, to decide whether the reclaim pass is due. */
int pressure_peek(void) {
    return forced >= 0 ? forced : atomic_load_explicit(&state, memory_order_relaxed);
}

void pressure_stats(struct pressure_stats *st) {
    st->state = forced >= 0 ? forced : atomic_load_explicit(&state, memory_order_relaxed);
    st->below_high_periods = atomic_load_explicit(&below_high_periods, memory_order_relaxed);
    st->reclaim_periods = atomic_load_explicit(&reclaim_periods, memory_order_relaxed);
    st->limit_reads = atomic_load_explicit(&limit_reads, memory_order_relaxed);
    st->cgroup_limit = atomic_load_explicit(&cgroup_limit, memory_order_relaxed);
}

#ifdef FOLIO_TEST_HOOKS
void pageset_force_pressure(int s) { forced = s; }
/* tests: a fake cgroup (limit and usage files); "" for none */
void pressure_set_cgroup_files(const char *limit, const char *usage) {
    strcpy(limit_file, limit);
    strcpy(usage_file, usage);
    atomic_store(&cgroup_looked, 2);
    atomic_store(&cgroup_limit, 0);
    atomic_store(&next_limit_ms, 0);
}
/* tests: the next pressure_state() measures, and re-reads the limit */
void pressure_measure_now(void) {
    atomic_store(&next_measure_ms, 0);
    atomic_store(&next_limit_ms, 0);
}
#endif
