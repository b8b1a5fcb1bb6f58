/* test_options: README.md's options table and the code's table (base.h
 * FOLIO_OPTIONS) say the same thing: every option of the code has one row,
 * with its variable and its default, and every FOLIO_* row of the README is
 * an option of the code (or FOLIO_REPORT, read apart).  Also: a value is
 * read with its K/M/G suffix, a bad value leaves the default, and a
 * variable whose name only starts with an option's is not it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obj.h"
#include "unit.h"

static char readme[1 << 16];

static void load_readme(void) {
    /* run from the repository root (make test), or find it from this file */
    const char *paths[] = {"README.md", "../README.md", "../../README.md"};
    for (unsigned i = 0; i < sizeof paths / sizeof *paths; i++) {
        FILE *f = fopen(paths[i], "r");
        if (!f) continue;
        size_t n = fread(readme, 1, sizeof readme - 1, f);
        fclose(f);
        readme[n] = 0;
        if (strstr(readme, "## Options")) return;
    }
    fprintf(stderr, "SKIP: README.md not found from the working directory\n");
    exit(77);
}

/* The README row of `env`: "| `ENV` | DEFAULT |", or NULL. */
static const char *row_of(const char *env) {
    char key[96];
    snprintf(key, sizeof key, "\n| `%s` |", env);
    return strstr(readme, key);
}

static int check_row(const char *env, long def) {
    const char *r = row_of(env);
    if (!r) {
        fprintf(stderr, "README.md has no options row for %s\n", env);
        return 1;
    }
    r = strchr(r + 2, '|'); /* the variable cell's closing bar */
    if (!r) return 1;
    while (*++r == ' ') {
    }
    char cell[32];
    size_t k = strcspn(r, " |");
    if (k >= sizeof cell) k = sizeof cell - 1;
    memcpy(cell, r, k);
    cell[k] = 0;
    char want[32];
    snprintf(want, sizeof want, "%ld", def);
    bool ok = !strcmp(cell, want) || (!strcmp(env, "FOLIO_CLEAR") && def == 0 && !strcmp(cell, "auto")) ||
              (!strcmp(env, "FOLIO_THP") && !strcmp(cell, thp_option_names[def]));
    if (!ok) fprintf(stderr, "README.md: %s default is '%s', the code's is %ld\n", env, cell, def);
    return !ok;
}

int main(void) {
    load_readme();
    int bad = 0, n = 0;
#define X(name, env, def, doc) bad += check_row(env, def), n++;
    FOLIO_OPTIONS(X)
#undef X
    /* every FOLIO_ row of the table is an option of the code */
    const char *table = strstr(readme, "## Options");
    const char *end = table ? strstr(table + 3, "\n## ") : NULL;
    for (const char *r = table; r && (!end || r < end); r = strstr(r + 1, "\n| `FOLIO_")) {
        if (r == table) continue;
        char env[64];
        size_t k = strcspn(r + 4, "`");
        if (k >= sizeof env) k = sizeof env - 1;
        memcpy(env, r + 4, k);
        env[k] = 0;
        bool known = !strcmp(env, "FOLIO_REPORT");
#define X(name, e, def, doc) known |= !strcmp(env, e);
        FOLIO_OPTIONS(X)
#undef X
        if (!known) fprintf(stderr, "README.md documents %s, which the code does not read\n", env);
        bad += !known;
    }
    EXPECT(bad == 0, "%d mismatches between README.md's options table and FOLIO_OPTIONS", bad);

    /* values: suffixes, and a bad value keeps the default */
    setenv("FOLIO_MEMORY_LIMIT", "3M", 1);
    setenv("FOLIO_HUGE_CACHE_MIB", "-5", 1);
    setenv("FOLIO_ARENA_MIB", "junk", 1);
    setenv("FOLIO_PCP_HIGHER", "99", 1); /* a longer name is not FOLIO_PCP_HIGH */
    options_init();
    EXPECT(opt.memory_limit == 3l << 20, "FOLIO_MEMORY_LIMIT=3M read as %ld", opt.memory_limit);
    EXPECT(opt.pcp_high == 0, "FOLIO_PCP_HIGHER=99 read as FOLIO_PCP_HIGH (%ld)", opt.pcp_high);
#define X(name, env, def, doc)                                                                  \
    if (!strcmp(env, "FOLIO_HUGE_CACHE_MIB")) EXPECT(opt.name == def, "bad value changed " env); \
    if (!strcmp(env, "FOLIO_ARENA_MIB")) EXPECT(opt.name == def, "bad value changed " env);
    FOLIO_OPTIONS(X)
#undef X
    /* the parser itself: strtoull's base 0, saturating, with a suffix */
    struct {
        const char *in;
        uint64_t want;
        size_t used;
    } cases[] = {{"123", 123, 3},           {"0x40", 64, 4},      {"010", 8, 3},       {"08", 0, 1},
                 {"0x", 0, 1},              {"2M", 2u << 20, 2},  {"1g", 1u << 30, 2}, {"48K\n", 48u << 10, 3},
                 {"99999999999999999999", UINT64_MAX, 20},       {"17179869184G", UINT64_MAX, 12},
                 {"abc", 0, 0},             {"", 0, 0},           {"-5", 0, 0}};
    for (unsigned i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *end;
        uint64_t v = os_parse_size(cases[i].in, &end);
        EXPECT(v == cases[i].want && (size_t)(end - cases[i].in) == cases[i].used,
               "os_parse_size(\"%s\") = %llu, %zu characters (want %llu, %zu)", cases[i].in,
               (unsigned long long)v, (size_t)(end - cases[i].in), (unsigned long long)cases[i].want, cases[i].used);
    }
    printf("%d options, each one README row with its default\n", n);
    return 0;
}
