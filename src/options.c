/* options: the one table of tunables (internal.h FOLIO_OPTIONS), each set by
 * its FOLIO_* environment variable.  Read once, at initialisation; nothing
 * here allocates. */
#include <stdlib.h>

#include "internal.h"

struct folio_options opt = {
#define X(name, env, def, doc) .name = def,
    FOLIO_OPTIONS(X)
#undef X
};

static void parse(const char *env, long *v) {
    const char *s = getenv(env);
    if (!s || !*s) return;
    char *end;
    long x = strtol(s, &end, 0);
    if (end == s || x < 0) return;
    int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
    *v = x << shift;
}

void options_init(void) {
#define X(name, env, def, doc) parse(env, &opt.name);
    FOLIO_OPTIONS(X)
#undef X
    if (opt.purge_min_order > MAX_ORDER) opt.purge_min_order = MAX_ORDER;
    if (opt.pcp_batch < 1) opt.pcp_batch = 1;
    if (opt.pcp_batch > 1024) opt.pcp_batch = 1024;
    opt.report_path = getenv("FOLIO_REPORT");
}
