/* options: the one table of tunables (internal.h FOLIO_OPTIONS), each set by
 * its FOLIO_* environment variable.  Read once, at initialisation; nothing
 * here allocates. */
#include <limits.h>
#include <stdlib.h>

#include "internal.h"

struct folio_options opt = {
#define X(name, env, def, doc) .name = def,
    FOLIO_OPTIONS(X)
#undef X
};

static void parse(const char *env, long *v) {
    const char *s = getenv(env), *end;
    if (!s || !*s) return;
    uint64_t x = os_parse_size(s, &end);
    if (end == s || x > (uint64_t)LONG_MAX) return; /* not a number (or negative): the default stays */
    *v = (long)x;
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
