/* numa: the machine's NUMA topology, read once from sysfs
 * (devices/system/node: "online", and each node's "cpulist"), and where a
 * CPU's memory belongs.
 *
 * Invariants:
 *  - numa_nodes() is 1 on a machine with one node, or when sysfs cannot
 *    tell: then numa_place_node() is -1 and no placement call is made;
 *  - the topology is read once, by the first caller; a caller that finds
 *    it being read waits for it (a few small files), so every caller sees
 *    the same answer;
 *  - a CPU that no node's cpulist names (or beyond NUMA_MAX_CPUS) belongs
 *    to the first online node. */
#include "base.h"

#define NUMA_MAX_CPUS 1024

/* a CPU's node + 1, 0 for a CPU no cpulist names: only the machine's CPUs'
 * entries are written, so a process touches the array's first bytes only
 * (mk/layout.ld puts it last among the variables every process uses) */
static uint8_t cpu_node[NUMA_MAX_CPUS];
static int nodes = 1, first_node;
static const char *root = "/sys";
static _Atomic int state; /* 0: not read, 1: being read, 2: ready */

/* Each number of a sysfs list ("0-3,8,10-11") in turn; false when the
 * text is not such a list. */
static bool each_in_list(const char *s, void (*fn)(int v, void *ctx), void *ctx) {
    bool any = false;
    while (*s && *s != '\n') {
        int lo = 0, hi;
        if (*s < '0' || *s > '9') return false;
        while (*s >= '0' && *s <= '9') lo = lo * 10 + (*s++ - '0');
        hi = lo;
        if (*s == '-') {
            s++;
            hi = 0;
            if (*s < '0' || *s > '9') return false;
            while (*s >= '0' && *s <= '9') hi = hi * 10 + (*s++ - '0');
        }
        for (int v = lo; v <= hi && v < 65536; v++) fn(v, ctx);
        any = true;
        if (*s == ',') s++;
    }
    return any;
}

static void path_of(char *buf, size_t len, const char *tail, int node) {
    size_t n = 0;
    for (const char *p = root; *p && n + 1 < len; p++) buf[n++] = *p;
    for (const char *p = "/devices/system/node/"; *p && n + 1 < len; p++) buf[n++] = *p;
    if (node >= 0) {
        char t[24];
        for (const char *p = "node"; *p && n + 1 < len; p++) buf[n++] = *p;
        for (const char *p = u64_text(t, (uint64_t)node); *p && n + 1 < len; p++) buf[n++] = *p;
        if (n + 1 < len) buf[n++] = '/';
    }
    for (const char *p = tail; *p && n + 1 < len; p++) buf[n++] = *p;
    buf[n] = 0;
}

struct online {
    int count, list[64];
};
static void add_node(int v, void *ctx) {
    struct online *o = ctx;
    if (o->count < 64) o->list[o->count++] = v;
}
static void set_cpu(int cpu, void *ctx) {
    if (cpu < NUMA_MAX_CPUS) cpu_node[cpu] = (uint8_t)(*(int *)ctx + 1);
}

static void read_topology(void) {
    char path[512], buf[4096];
    struct online o = {0, {0}};
    nodes = 1;
    first_node = 0;
    path_of(path, sizeof path, "online", -1);
    if (!os_read_file(path, buf, sizeof buf) || !each_in_list(buf, add_node, &o) || o.count < 1) return;
    first_node = o.list[0] < 255 ? o.list[0] : 0;
    for (int i = 0; i < o.count; i++) {
        if (o.list[i] > 254) continue;
        path_of(path, sizeof path, "cpulist", o.list[i]);
        if (os_read_file(path, buf, sizeof buf)) each_in_list(buf, set_cpu, &o.list[i]);
    }
    nodes = o.count;
}

static void ensure_read(void) {
    if (likely(atomic_load_explicit(&state, memory_order_acquire) == 2)) return;
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&state, &expected, 1, memory_order_acquire,
                                                memory_order_relaxed)) {
        read_topology();
        atomic_store_explicit(&state, 2, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&state, memory_order_acquire) != 2) __builtin_ia32_pause();
}

int numa_nodes(void) {
    ensure_read();
    return nodes;
}

int numa_node_of_cpu(int cpu) {
    ensure_read();
    int n = cpu >= 0 && cpu < NUMA_MAX_CPUS ? cpu_node[cpu] : 0;
    return n ? n - 1 : first_node;
}

int numa_place_node(int cpu) { return numa_nodes() > 1 ? numa_node_of_cpu(cpu) : -1; }

#ifdef FOLIO_TEST_HOOKS
/* tests: read the topology again, from a fake sysfs tree at dir */
void numa_set_root(const char *dir) {
    root = dir;
    for (int c = 0; c < NUMA_MAX_CPUS; c++) cpu_node[c] = 0;
    atomic_store_explicit(&state, 0, memory_order_release);
    ensure_read();
}
#endif
