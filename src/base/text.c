/* text: the one decimal number writer, for the report and the clearing
 * engine's JSON.  Invariant: it never allocates (the report runs at exit,
 * possibly with a broken heap). */
#include "base.h"

const char *u64_text(char buf[24], uint64_t v) {
    char *p = buf + 23;
    *p = 0;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return p;
}
