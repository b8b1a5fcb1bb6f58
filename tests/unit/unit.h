/* The check every unit test uses: print where and why, then fail. */
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
#endif
