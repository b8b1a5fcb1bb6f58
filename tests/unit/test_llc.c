/* Unit test: os_llc_bytes, which probes the cache leaves from index3 (one
 * read and one failed open on most machines), gives the size of cpu0's
 * last leaf, which is the largest of all leaves (each size read here with
 * stdio, every leaf); skipped where sysfs lists no cache leaf. */
#include <stdio.h>
#include <stdlib.h>

#include "base.h"
#include "unit.h"

int main(void) {
    size_t last = 0, largest = 0;
    int leaves = 0;
    for (int i = 0; i < 10; i++) {
        char path[80], buf[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
        last = (size_t)os_parse_size(buf, NULL);
        if (last > largest) largest = last;
        leaves++;
    }
    if (leaves == 0) {
        puts("SKIP llc: no cache leaf in sysfs");
        return 77;
    }
    size_t llc = os_llc_bytes();
    printf("llc: %d leaves, last %zu, largest %zu, os_llc_bytes %zu\n", leaves, last, largest, llc);
    EXPECT(llc == last, "os_llc_bytes %zu, the last leaf (index%d) %zu", llc, leaves - 1, last);
    EXPECT(llc == largest, "os_llc_bytes %zu, the largest leaf %zu", llc, largest);
    puts("llc: ok");
    return 0;
}
