/* tests/support/early_lib.h: what early_lib's constructor leaves for
 * test_early to check. */
#ifndef FOLIO_EARLY_LIB_H
#define FOLIO_EARLY_LIB_H

#include <stddef.h>

#define FOLIO_EARLY_BLOCKS 16

struct folio_early_state {
    int ran;                            /* the constructor ran */
    int errors;                         /* checks that failed in it */
    char msg[200];                      /* the first failure */
    void *blocks[FOLIO_EARLY_BLOCKS];   /* blocks it allocated and kept */
    size_t sizes[FOLIO_EARLY_BLOCKS];
};

/* Exported by libfolio_early.so. */
struct folio_early_state *folio_early_state(void);
/* The byte at offset k of block i. */
unsigned char folio_early_byte(size_t i, size_t k);

#endif
