/* The checks every unit test uses: print where and why, then fail. */
#ifndef FOLIO_UNIT_H
#define FOLIO_UNIT_H
#include <stdio.h>

#define EXPECT(c, ...)                                                                             \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* The same, but the test goes on (up to 20 failures) to show every case
 * that fails; main returns unit_failures != 0. */
static int unit_failures __attribute__((unused));
#define EXPECT_ALL(c, ...)                                                                         \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            if (++unit_failures > 20) return 1;                                                    \
        }                                                                                          \
    } while (0)
#endif
