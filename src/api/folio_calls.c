/* folio_calls: folio's own exported calls (folio.h) beyond the malloc
 * family: whole pages, and the clearing engine.
 * Invariant: each initialises folio before it reaches a lower layer. */
#include <errno.h>
#include <stdlib.h>

#include "api_layer.h"

EXPORT void *folio_alloc_pages(size_t npages, unsigned flags) {
    if (npages == 0 || npages > (PTRDIFF_MAX >> PAGE_SHIFT)) {
        errno = ENOMEM;
        return NULL;
    }
    return api_big_alloc(npages << PAGE_SHIFT, PAGE_SIZE, flags & FOLIO_ZERO);
}

EXPORT void folio_free_pages(void *p, size_t npages) {
    (void)npages;
    API(free)(p);
}


EXPORT int folio_clear_hint(void *p, size_t n, unsigned hints) {
    folio_init();
    return clear_hint(p, n, hints);
}

EXPORT void folio_clear(void *p, size_t n) { folio_clear_hint(p, n, FOLIO_CLEAR_TOUCH); }

EXPORT int folio_clear_with(void *p, size_t n, int strategy) {
    folio_init();
    return clear_with(p, n, strategy);
}
