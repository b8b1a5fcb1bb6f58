/* consumer: a program built against an installed folio (pkg-config or CMake,
 * shared or static).  Its malloc family, and the C library's own calls into
 * malloc (strdup), must be folio's: folio's counters move by exactly the
 * calls made (the C library's malloc would leave them still). */
#define _GNU_SOURCE
#include <folio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char json[1 << 16];

static long counter(const char *key) {
    char k[64];
    folio_report_json(json, sizeof json);
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(json, k);
    return p ? atol(p + strlen(k)) : -1;
}

/* one of each call; returns whether every pointer is non-NULL */
static int round_trip(long *allocs_made, long *live_made, long *frees_made, long *live_after) {
    long allocs = counter("allocs"), frees = counter("frees"), live = counter("live_blocks");
    char *s = strdup("consumer"); /* the C library calls malloc */
    char *p = malloc(100);
    char *q = calloc(3, 40);
    void *a = aligned_alloc(64, 256);
    void *m = NULL;
    int rc = posix_memalign(&m, 128, 200);
    p = realloc(p, 5000); /* another size class: a new block, the old one freed */
    *allocs_made = counter("allocs") - allocs;
    *live_made = counter("live_blocks") - live;
    free(s);
    free(p);
    free(q);
    free(a);
    free(m);
    *frees_made = counter("frees") - frees;
    *live_after = counter("live_blocks") - live;
    return rc == 0 && s && p && q && a;
}

int main(void) {
    long allocs, live, frees, after;
    /* the first round also meets the C library's own first-use allocations
     * (a thread's key storage): count the second */
    round_trip(&allocs, &live, &frees, &after);
    int ok = round_trip(&allocs, &live, &frees, &after);
    ok = ok && allocs == 6 && live == 5 && frees == 6 && after == 0;
    printf("consumer: allocs +%ld, live +%ld, then frees +%ld, live %+ld: malloc %s folio's\n",
           allocs, live, frees, after, ok ? "is" : "is NOT");
    return ok ? 0 : 1;
}
