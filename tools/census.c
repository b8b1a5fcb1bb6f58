/* tools/census.c: where a folio process's resident heap memory is, at exit.
 *
 *   make census
 *   LD_PRELOAD="build/libfolio.so build/census.so" CENSUS_FILE=/tmp/c.txt PROGRAM
 *
 * A developer's tool, not part of the library: preloaded after libfolio.so,
 * its destructor walks every arena's chunk table
 * (meta.h: the metadata of an address is at an address computed from it)
 * and reads the process's own page table (/proc/self/pagemap) to count, per
 * chunk and per kind of span, the pages handed out and the pages resident:
 * slabs (per size class also their objects in use), large blocks, free zone
 * blocks, pages no span maps (a pageset's blocks, the depot's spans) and
 * the arenas' metadata.  It is the breakdown behind peak RSS that the
 * report's counters cannot give: what of the heap is in use, and what is
 * free but resident.  It reads folio's descriptors without folio's locks,
 * so it is exact only when no other thread allocates (at exit, after the
 * program's threads are done).  Written for issue 14 (cc1, git status);
 * CENSUS_PEAK_MS=N takes it near the peak of RSS instead (see below). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "obj.h" /* slab_used; meta.h's arenas, chunks and spans */

#define USER_TOP ((uintptr_t)1 << 47)

static int pagemap_fd = -1;

/* resident pages among the n pages from a */
static uint32_t resident(uintptr_t a, uint32_t n) {
    static uint64_t e[512];
    uint32_t count = 0;
    while (n) {
        uint32_t k = n > 512 ? 512 : n;
        if (pread(pagemap_fd, e, 8 * (size_t)k, (off_t)(a / PAGE_SIZE * 8)) != (ssize_t)(8 * k)) return count;
        for (uint32_t i = 0; i < k; i++) count += (uint32_t)(e[i] >> 63);
        n -= k;
        a += (uintptr_t)k << PAGE_SHIFT;
    }
    return count;
}

enum { KINDS = SPAN_DENSE + 1, CLASSES = 256 };
static const char *const kind_name[KINDS] = {"unused", "zone_free", "pcp_free", "purging",
                                             "taken", "slab", "large", "dense"};
struct tally {
    uint64_t spans, pages, resident;
};
static struct tally by_kind[KINDS];
static struct {
    struct tally t;
    uint64_t used, capacity, size;
} by_class[CLASSES];
static uint64_t meta_resident, unmapped_resident;
/* objects other threads freed onto slabs' remote lists, not yet collected,
 * in bytes, by the slab's owner: a live thread's heap, a heap whose thread
 * exited, heap_abandoned (waiting for adoption), and floating slabs */
enum { OWN_LIVE, OWN_DEAD, OWN_ABANDONED, OWN_FLOATING, OWNS };
static const char *const own_name[OWNS] = {"live heaps'", "exited heaps'", "abandoned", "floating"};
static uint64_t remote_bytes[OWNS], remote_slabs[OWNS];
/* the floating slabs by what their remote lists wait for: a push took the
 * slab (queued for its owner, or on its way to the abandoned lists), the
 * list reached the bar at which a push takes it but no push has come
 * since, or it is below the bar */
enum { FLOAT_TAKEN_LIVE, FLOAT_TAKEN_DEAD, FLOAT_TAKEN_HANDED, FLOAT_AT_BAR, FLOAT_BELOW, FLOATS };
static const char *const float_name[FLOATS] = {"taken by a push, its owner live (rescue slots)",
                                               "taken by a push, its owner exited",
                                               "taken by a push, handed on (abandoned lists)",
                                               "at or past the bar, untaken", "below the bar"};
static uint64_t float_bytes[FLOATS], float_slabs[FLOATS];
_Static_assert(OWN_LIVE == 0 && FLOAT_TAKEN_DEAD == FLOAT_TAKEN_LIVE + OWN_DEAD &&
                   FLOAT_TAKEN_HANDED == FLOAT_TAKEN_LIVE + OWN_ABANDONED,
               "a taken floating slab's row is FLOAT_TAKEN_LIVE + its owner's kind");
/* a slab's owner: heap_abandoned (the only heap with id 0), a live
 * thread's heap, or an exited one's */
static unsigned owner_kind(const struct heap *o) {
    return o && o->objmap_id == 0 ? OWN_ABANDONED : o && __atomic_load_n(&o->live, __ATOMIC_RELAXED) ? OWN_LIVE : OWN_DEAD;
}

/* zone.c's chunk types (its private enum: CHUNK_SMALL 0, CHUNK_LARGE 1,
 * CHUNK_MEDIUM 2), by what sizes a chunk was split for; a head with any
 * other type is not an arena's */
static const char *const chunk_type_name[] = {"small", "large", "medium"};
#define CHUNK_TYPES (sizeof chunk_type_name / sizeof *chunk_type_name)

/* Whether the head at h is plausibly an arena's (a program's own mapping of
 * 256 MiB and more may start with a resident page too): every chunk's state,
 * type and free count in range, chunk 0 in the zone. */
static bool head_plausible(const struct arena_head *h) {
    if (h->state[0] != CHUNK_IN_ZONE) return false;
    for (unsigned ci = 0; ci < ARENA_CHUNKS; ci++)
        if (h->state[ci] > CHUNK_OCCUPIED || (h->type[ci] & 3) >= CHUNK_TYPES || h->free_pages[ci] > CHUNK_PAGES) return false;
    return ((uintptr_t)h->next & (ARENA_ALIGN - 1)) == (uintptr_t)ARENA_TABLE_PAGES << PAGE_SHIFT || !h->next;
}

static void census_chunk(FILE *out, const struct arena_head *h, uintptr_t base, unsigned ci) {
    const struct chunk *c = (const struct chunk *)(base + ((uintptr_t)ci << PAGE_SHIFT));
    uintptr_t cb = base + ((uintptr_t)ci << CHUNK_SHIFT);
    uint32_t chunk_res = resident(cb, CHUNK_PAGES), mapped_res = 0;
    uint64_t res_of[KINDS] = {0};
    uint32_t p = ci == 0 ? ARENA_META_PAGES : 0;
    if (ci == 0) { /* the arena's metadata: no span maps it */
        mapped_res = resident(cb, ARENA_META_PAGES);
        meta_resident += mapped_res;
    }
    while (p < CHUNK_PAGES) {
        struct span *s = atomic_load_explicit(&c->span_of[p], memory_order_relaxed);
        if (!s) {
            p++;
            continue;
        }
        unsigned k = s->kind < KINDS ? s->kind : SPAN_UNUSED;
        uint32_t n = s->npages && p + s->npages <= CHUNK_PAGES ? s->npages : 1;
        uint32_t r = resident(cb + ((uintptr_t)p << PAGE_SHIFT), n);
        by_kind[k].spans++, by_kind[k].pages += n, by_kind[k].resident += r;
        res_of[k] += r;
        mapped_res += r;
        if (k == SPAN_SLAB) {
            unsigned cl = s->cls;
            by_class[cl].t.spans++, by_class[cl].t.pages += n, by_class[cl].t.resident += r;
            by_class[cl].used += slab_used(s);
            by_class[cl].capacity += s->capacity;
            by_class[cl].size = s->obj_size;
            uintptr_t tf = atomic_load_explicit(&s->thread_free, memory_order_relaxed);
            const struct heap *o = atomic_load_explicit(&s->owner, memory_order_relaxed);
            unsigned w = (tf & SLAB_FLOATING) ? OWN_FLOATING : owner_kind(o);
            uint64_t remote = (uint64_t)slab_remote_count(tf) * s->obj_size;
            remote_bytes[w] += remote;
            remote_slabs[w]++;
            if (w == OWN_FLOATING) {
                unsigned f = (tf & SLAB_TAKEN) ? FLOAT_TAKEN_LIVE + owner_kind(o)
                             : slab_remote_count(tf) >= slab_float_bar(s) ? FLOAT_AT_BAR : FLOAT_BELOW;
                float_bytes[f] += remote;
                float_slabs[f]++;
            }
        }
        p += n;
    }
    /* a sample taken while threads allocate can count a page twice: no negative rest */
    uint32_t unmapped = chunk_res > mapped_res ? chunk_res - mapped_res : 0;
    unmapped_resident += unmapped;
    fprintf(out, "chunk %3u %-6s free %3u resident %3u: slab %lu large %lu zone_free %lu unmapped %u\n", ci,
            chunk_type_name[h->type[ci] & 3], h->free_pages[ci], chunk_res, (unsigned long)res_of[SPAN_SLAB],
            (unsigned long)res_of[SPAN_LARGE], (unsigned long)res_of[SPAN_ZONE_FREE], unmapped);
}

/* Every ARENA_ALIGN-aligned start inside the anonymous range [a, b) whose
 * first page (chunk 0's table) and head are resident and plausible. */
static void census_range(FILE *out, uintptr_t a, uintptr_t b) {
    for (uintptr_t base = (a + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1); base + ARENA_ALIGN <= b;
         base += ARENA_ALIGN) {
        const struct arena_head *h = arena_head_of(base);
        if (!resident(base, 1) || !resident((uintptr_t)h, 1) || !head_plausible(h)) continue;
        fprintf(out, "arena %#lx\n", (unsigned long)base);
        for (unsigned ci = 0; ci < ARENA_CHUNKS; ci++)
            if (h->state[ci] == CHUNK_IN_ZONE) census_chunk(out, h, base, ci);
    }
}

/* An arena is one reservation, but not always one line of /proc/self/maps:
 * chunks advised MADV_HUGEPAGE (FOLIO_THP) are mappings of their own, so
 * adjacent lines are joined into ranges first. */
static void census_arenas(FILE *out) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) return;
    char line[512];
    uintptr_t from = 0, to = 0;
    while (fgets(line, sizeof line, maps)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) != 2 || b > USER_TOP) continue;
        if (a != to) {
            if (to - from >= ARENA_ALIGN) census_range(out, from, to);
            from = a;
        }
        to = b;
    }
    if (to - from >= ARENA_ALIGN) census_range(out, from, to);
    fclose(maps);
}

/* One census of every arena, written to out; the tallies start from zero. */
static void census_write(FILE *out) {
    memset(by_kind, 0, sizeof by_kind);
    memset(by_class, 0, sizeof by_class);
    meta_resident = unmapped_resident = 0;
    memset(remote_bytes, 0, sizeof remote_bytes);
    memset(remote_slabs, 0, sizeof remote_slabs);
    memset(float_bytes, 0, sizeof float_bytes);
    memset(float_slabs, 0, sizeof float_slabs);
    census_arenas(out);
    uint64_t total = meta_resident + unmapped_resident;
    fprintf(out, "\n%-10s %7s %8s %9s\n", "kind", "spans", "pages", "resident");
    for (unsigned k = 1; k < KINDS; k++) {
        if (!by_kind[k].spans) continue;
        fprintf(out, "%-10s %7lu %8lu %9lu\n", kind_name[k], (unsigned long)by_kind[k].spans,
                (unsigned long)by_kind[k].pages, (unsigned long)by_kind[k].resident);
        total += by_kind[k].resident;
    }
    fprintf(out, "%-10s %7s %8s %9lu (pagesets' blocks, the depot's spans)\n", "unmapped", "", "",
             (unsigned long)unmapped_resident);
    fprintf(out, "%-10s %7s %8s %9lu\n%-10s %7s %8s %9lu pages resident in the arenas\n", "metadata", "", "",
            (unsigned long)meta_resident, "total", "", "", (unsigned long)total);
    fprintf(out, "\n%5s %6s %5s %6s %8s %7s %7s %5s %9s\n", "class", "size", "slabs", "pages", "resident", "used",
            "cap", "fill", "used KiB");
    uint64_t used_bytes = 0;
    for (unsigned c = 0; c < CLASSES; c++) {
        if (!by_class[c].t.spans) continue;
        uint64_t ub = by_class[c].used * by_class[c].size;
        used_bytes += ub;
        fprintf(out, "%5u %6lu %5lu %6lu %8lu %7lu %7lu %5.2f %9lu\n", c, (unsigned long)by_class[c].size,
                (unsigned long)by_class[c].t.spans, (unsigned long)by_class[c].t.pages,
                (unsigned long)by_class[c].t.resident, (unsigned long)by_class[c].used,
                (unsigned long)by_class[c].capacity, (double)by_class[c].used / (double)by_class[c].capacity,
                (unsigned long)(ub / 1024));
    }
    fprintf(out, "objects in use (lists included) %lu KiB in slabs of %lu resident KiB\n",
            (unsigned long)(used_bytes / 1024), (unsigned long)(by_kind[SPAN_SLAB].resident * 4));
    for (unsigned w = 0; w < OWNS; w++)
        fprintf(out, "  of which freed by other threads, not yet collected: %lu KiB in %s slabs (%lu slabs)\n",
                (unsigned long)(remote_bytes[w] / 1024), own_name[w], (unsigned long)remote_slabs[w]);
    for (unsigned f = 0; f < FLOATS; f++)
        fprintf(out, "    floating, %s: %lu KiB (%lu slabs)\n", float_name[f], (unsigned long)(float_bytes[f] / 1024),
                (unsigned long)float_slabs[f]);
}

/* The peak mode (CENSUS_PEAK_MS=N): a detached thread reads the process's
 * RSS every N ms and, when it is the highest so far, takes a census into
 * best[], which the destructor writes instead of one taken at exit.  A
 * census taken while threads allocate is approximate (no locks; folio's
 * descriptors are type-stable, so it does not crash), and the samples
 * land near, not at, the peak.  CENSUS_AT_MS=T (with CENSUS_PEAK_MS) takes
 * one census T ms after start instead: a steady state, where the peak of
 * RSS may come as the program ends. */
static char best[1 << 20], scratch[1 << 20];
#define RSS_TAG "process RSS " /* every census's first line: ... RSS_TAG N KiB */
static long best_rss_pages;
static pid_t sampler_pid; /* a fork child has no sampler: its census is taken at its exit */
static atomic_bool peak_stop;
static pthread_mutex_t best_lock = PTHREAD_MUTEX_INITIALIZER; /* best[] and best_rss_pages */

static long rss_pages(void) {
    long size = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
    fclose(f);
    return rss;
}

static void *peak_sampler(void *arg) {
    long ms = (long)(intptr_t)arg;
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    const char *at = getenv("CENSUS_AT_MS"); /* one census at that time, not at the peak */
    if (at) {
        long a = atol(at);
        struct timespec t = {a / 1000, (a % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    while (!atomic_load(&peak_stop)) {
        long rss = rss_pages();
        if (rss > best_rss_pages && !(at && best_rss_pages)) {
            FILE *out = fmemopen(scratch, sizeof scratch - 1, "w");
            if (out) {
                fprintf(out, "peak sample: " RSS_TAG "%ld KiB\n", rss * 4);
                census_write(out);
                long n = ftell(out);
                fclose(out);
                pthread_mutex_lock(&best_lock);
                if (n > 0 && n < (long)sizeof scratch && !atomic_load(&peak_stop)) {
                    memcpy(best, scratch, (size_t)n);
                    best[n] = 0;
                    best_rss_pages = rss;
                }
                pthread_mutex_unlock(&best_lock);
            }
        }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

__attribute__((constructor)) static void census_start(void) {
    /* the run's first process removes a census left by an earlier run, and
     * marks the environment its programs inherit (census() keeps the
     * largest process's census of this run only) */
    const char *path = getenv("CENSUS_FILE");
    if (path && !getenv("CENSUS_RUN")) {
        unlink(path);
        setenv("CENSUS_RUN", "1", 1);
    }
    const char *ms = getenv("CENSUS_PEAK_MS");
    if (!path || !ms || atol(ms) <= 0) return;
    pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sampler_pid = getpid();
    if (pagemap_fd < 0 || pthread_create(&t, &attr, peak_sampler, (void *)(intptr_t)atol(ms)))
        fprintf(stderr, "census: cannot start the peak sampler\n");
    pthread_attr_destroy(&attr);
}

/* The process RSS (KiB) on the first line of the census already in path,
 * or -1: every census starts with a line that ends "process RSS N KiB". */
static long census_file_rss(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[128];
    long kib = -1;
    if (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, RSS_TAG);
        if (at) kib = atol(at + strlen(RSS_TAG));
    }
    fclose(f);
    return kib;
}

/* Several processes of one run share CENSUS_FILE (a fork child, a program
 * started by another one under the same environment, such as /usr/bin/time
 * with LD_PRELOAD set for both): the census of the process with the larger
 * RSS stays, whichever exits last. */
__attribute__((destructor(101))) static void census(void) {
    const char *path = getenv("CENSUS_FILE");
    if (!path) return;
    bool sampled = best_rss_pages && getpid() == sampler_pid;
    long rss_kib = (sampled ? best_rss_pages : rss_pages()) * 4;
    if (census_file_rss(path) > rss_kib) return;
    FILE *out = fopen(path, "w");
    if (pagemap_fd < 0) pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (!out || pagemap_fd < 0) {
        fprintf(stderr, "census: cannot write %s or read /proc/self/pagemap\n", path);
        if (out) fclose(out);
        return;
    }
    pthread_mutex_lock(&best_lock);
    atomic_store(&peak_stop, true);
    pthread_mutex_unlock(&best_lock);
    if (sampled) {
        fputs(best, out);
    } else {
        fprintf(out, "exit census: " RSS_TAG "%ld KiB\n", rss_kib);
        census_write(out);
    }
    fclose(out);
}
