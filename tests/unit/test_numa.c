/* Unit test: the NUMA topology read from a fake sysfs tree (numa_set_root):
 * two nodes with CPUs "0-1,4" and "2-3,5-7", a CPU no node names, one
 * node, a tree that is not there, and a node list that is not a list;
 * where each CPU's memory is placed (numa_place_node: -1, no placement,
 * with one node); then the placement call itself on this machine's first
 * node, for a mapping of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "unit.h"

static char dir[64];

static void put(const char *rel, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/devices/system/node/%s", dir, rel);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void mkdirs(void) {
    char path[256];
    const char *parts[] = {"/devices", "/devices/system", "/devices/system/node",
                           "/devices/system/node/node0", "/devices/system/node/node1"};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        snprintf(path, sizeof path, "%s%s", dir, parts[i]);
        mkdir(path, 0700);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/folio-numa.%d", (int)getpid());
    mkdir(dir, 0700);
    mkdirs();
    put("online", "0-1\n");
    put("node0/cpulist", "0-1,4\n");
    put("node1/cpulist", "2-3,5-7\n");
    numa_set_root(dir);
    EXPECT_ALL(numa_nodes() == 2, "two nodes read as %d", numa_nodes());
    static const int want[] = {0, 0, 1, 1, 0, 1, 1, 1};
    for (int c = 0; c < 8; c++)
        EXPECT_ALL(numa_node_of_cpu(c) == want[c], "cpu %d on node %d, not %d", c, numa_node_of_cpu(c), want[c]);
    EXPECT_ALL(numa_node_of_cpu(9) == 0 && numa_node_of_cpu(5000) == 0, "a CPU no node names is not on the first node");
    EXPECT_ALL(numa_place_node(6) == 1 && numa_place_node(1) == 0, "placement: cpu 6 -> %d, cpu 1 -> %d",
               numa_place_node(6), numa_place_node(1));

    put("online", "1\n"); /* one node, not node 0 */
    numa_set_root(dir);
    EXPECT_ALL(numa_nodes() == 1 && numa_node_of_cpu(3) == 1 && numa_node_of_cpu(100) == 1,
               "one node (node 1): %d nodes, cpu 3 on %d", numa_nodes(), numa_node_of_cpu(3));
    EXPECT_ALL(numa_place_node(3) == -1, "one node, yet a placement");

    put("online", "junk\n");
    numa_set_root(dir);
    EXPECT_ALL(numa_nodes() == 1 && numa_place_node(2) == -1, "a node list that is not a list: %d nodes", numa_nodes());

    numa_set_root("/nonexistent-folio-sysfs");
    EXPECT_ALL(numa_nodes() == 1 && numa_node_of_cpu(1) == 0, "no sysfs: %d nodes", numa_nodes());

    /* this machine: placement on the first node of its own topology works */
    numa_set_root("/sys");
    int node = numa_node_of_cpu(0);
    size_t n = (size_t)4 << 20;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT(p != MAP_FAILED, "mmap");
    if (access("/sys/devices/system/node/online", R_OK) == 0)
        EXPECT_ALL(os_place_on_node(p, n, node), "mbind on node %d refused", node);
    else
        printf("SKIP mbind: no /sys/devices/system/node\n");
    EXPECT_ALL(!os_place_on_node(p, n, 64), "a node beyond the mask accepted");
    munmap(p, n);
    printf("this machine: %d node(s), cpu 0 on node %d\n", numa_nodes(), node);

    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return unit_failures != 0;
}
