/* clear: the one path every internal zeroing takes.
 * Invariant: folio_clear(p, n) writes exactly the bytes [p, p+n).  The
 * strategy engine (whole-extent, non-temporal, hybrid) lands here later. */
#include <string.h>

#include "internal.h"

__attribute__((visibility("default"))) void folio_clear(void *p, size_t n) { memset(p, 0, n); }
