/* options_table: the code's options table (src/base/base.h FOLIO_OPTIONS),
 * printed for the documentation, so that folio(3) lists every FOLIO_*
 * variable with the default and meaning the library has.
 *
 *   options_table --man        roff paragraphs for folio(3)
 *   options_table --markdown   README rows: | `FOLIO_X` | default | meaning | */
#include <stdio.h>
#include <string.h>

#include "base.h"

/* FOLIO_THP's values by name (base.h enum; options.c is not linked here) */
static const char *const thp_names[] = {"auto", "never", "always"};

/* FOLIO_CLEAR's default, 0, is the strategy "auto" */
static const char *default_text(const char *env, long def, char buf[32]) {
    if (!strcmp(env, "FOLIO_CLEAR") && def == 0) return "auto";
    if (!strcmp(env, "FOLIO_THP")) return thp_names[def];
    snprintf(buf, 32, "%ld", def);
    return buf;
}

/* roff: a backslash is written \e, a line must not start with . or ' */
static void roff(const char *s) {
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", stdout);
        else if (*s == '-') fputs("\\-", stdout);
        else putchar(*s);
    }
}

int main(int argc, char **argv) {
    char buf[32];
    int man = argc > 1 && !strcmp(argv[1], "--man");
    int md = argc > 1 && !strcmp(argv[1], "--markdown");
    if (!man && !md) {
        fprintf(stderr, "usage: options_table --man|--markdown\n");
        return 2;
    }
#define X(name, env, def, doc)                                                  \
    if (man) {                                                                  \
        printf(".TP\n.B %s\n(default %s) ", env, default_text(env, def, buf)); \
        roff(doc);                                                              \
        putchar('\n');                                                          \
    } else {                                                                    \
        printf("| `%s` | %s | %s |\n", env, default_text(env, def, buf), doc);  \
    }
    FOLIO_OPTIONS(X)
#undef X
    return 0;
}
