/* options: the one table of tunables (base.h FOLIO_OPTIONS), each set by
 * its FOLIO_* environment variable.  Read once, at initialisation; nothing
 * here allocates. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

struct folio_options opt = {
#define X(name, env, def, doc) .name = def,
    FOLIO_OPTIONS(X)
#undef X
};

/* The clearing strategies by name (FOLIO_CLEAR=nt); folio_clear_name()
 * reads the same table. */
const char *const clear_strategy_names[FOLIO_CLEAR_NSTRATEGIES] = {
    [FOLIO_CLEAR_AUTO] = "auto",
    [FOLIO_CLEAR_LOOP] = "loop",
    [FOLIO_CLEAR_STOSB] = "stosb",
    [FOLIO_CLEAR_NT] = "nt",
    [FOLIO_CLEAR_HYBRID] = "hybrid",
    [FOLIO_CLEAR_PAGES] = "pages",
    [FOLIO_CLEAR_MEMSET] = "memset",
    [FOLIO_CLEAR_LOOP_SSE2] = "loop-sse2",
    [FOLIO_CLEAR_LOOP_AVX2] = "loop-avx2",
    [FOLIO_CLEAR_LOOP_AVX512] = "loop-avx512",
    [FOLIO_CLEAR_STOSQ] = "stosq",
    [FOLIO_CLEAR_NT_MOVNTI] = "nt-movnti",
    [FOLIO_CLEAR_NT_SSE2] = "nt-sse2",
    [FOLIO_CLEAR_NT_AVX2] = "nt-avx2",
    [FOLIO_CLEAR_NT_AVX512] = "nt-avx512",
};

const char *const thp_option_names[FOLIO_THP_NMODES] = {
    [FOLIO_THP_AUTO] = "auto", [FOLIO_THP_NEVER] = "never", [FOLIO_THP_ALWAYS] = "always"};

extern char **environ;

/* The environment is scanned here, not with getenv: getenv's code is a
 * window of libc that nothing else a small program runs may touch (a fault
 * and up to 64 KiB of RSS), and one pass (env_has_folio) finds the process
 * that sets no FOLIO_* variable, most of them, without a lookup per option. */
/* e past its prefix p, or NULL when p is not one */
static const char *past_prefix(const char *e, const char *p) {
    while (*p && *e == *p) e++, p++;
    return *p ? NULL : e;
}
/* name's value in the environment, or NULL */
static const char *env_value(const char *name) {
    for (char **env = environ; env && *env; env++) {
        const char *e = past_prefix(*env, name);
        if (e && *e == '=') return e + 1;
    }
    return NULL;
}
static bool env_has_folio(void) {
    for (char **env = environ; env && *env; env++)
        if (past_prefix(*env, "FOLIO_")) return true;
    return false;
}

static void parse(const char *env, long *v) {
    const char *s = env_value(env), *end;
    if (!s || !*s) return;
    uint64_t x = os_parse_size(s, &end);
    const char *const *names = !strcmp(env, "FOLIO_CLEAR") ? clear_strategy_names
                               : !strcmp(env, "FOLIO_THP") ? thp_option_names : NULL;
    int nnames = names == clear_strategy_names ? FOLIO_CLEAR_NSTRATEGIES : FOLIO_THP_NMODES;
    if (end == s && names) { /* a value's name */
        for (int i = 0; i < nnames; i++)
            if (!strcmp(s, names[i])) *v = i;
        return;
    }
    if (end == s || x > (uint64_t)LONG_MAX) return; /* not a number (or negative): the default stays */
    *v = (long)x;
}

void options_init(void) {
    bool any = env_has_folio();
#define X(name, env, def, doc) \
    if (any) parse(env, &opt.name);
    FOLIO_OPTIONS(X)
#undef X
    if (opt.purge_min_order > MAX_ORDER) opt.purge_min_order = MAX_ORDER;
    if (opt.pcp_batch < 1) opt.pcp_batch = 1;
    if (opt.zone_homes < 0) opt.zone_homes = 0;
    if (opt.zone_homes > ZONE_HOMES_MAX) opt.zone_homes = ZONE_HOMES_MAX;
    if (opt.pcp_batch > 1024) opt.pcp_batch = 1024;
    if (opt.thp < 0 || opt.thp >= FOLIO_THP_NMODES) opt.thp = FOLIO_THP_AUTO;
    opt.report_path = any ? env_value("FOLIO_REPORT") : NULL;
    if (opt.lock_stats == 1) lock_timing_start();
}
