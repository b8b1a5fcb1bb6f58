// folio-test: no-sanitize
/* test_libc_names: glibc's own names of the malloc family (__libc_malloc,
 * __libc_free, ...) are folio's.  Code that calls them to reach "the real
 * malloc" (a malloc hook, a wrapping library) mixes them with plain malloc
 * and free; if they were glibc's, folio's free would be handed a block of
 * glibc's heap and end the process ("free(): invalid pointer").
 *
 * Each block below crosses between the two names at least once, and
 * malloc_usable_size (folio's, which refuses a pointer it did not hand out)
 * is asked about each.  Sanitizer builds (folio_* names) do not export the
 * family, so this test is not built there. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t a, size_t b);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);
extern void *__libc_valloc(size_t n);
extern void *__libc_pvalloc(size_t n);

static void owned(void *p, size_t n, const char *what)
{
    CHECK(p != NULL, "%s returned NULL", what);
    /* folio's malloc_usable_size ends the process on a block it does not own */
    CHECK(malloc_usable_size(p) >= n, "%s: usable size %zu < %zu", what, malloc_usable_size(p), n);
    memset(p, 0xa5, n);
}

int main(void)
{
    static const size_t sizes[] = {1, 24, 100, 1000, 5000, 40000, 300000, 3u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        void *p = __libc_malloc(n);
        owned(p, n, "__libc_malloc");
        free(p);

        p = malloc(n);
        owned(p, n, "malloc");
        __libc_free(p);

        unsigned char *c = __libc_calloc(n, 1);
        CHECK(c != NULL, "__libc_calloc(%zu, 1)", n);
        for (size_t k = 0; k < n; k += 97)
            CHECK(c[k] == 0, "__libc_calloc(%zu, 1): byte %zu is %u", n, k, c[k]);
        owned(c, n, "__libc_calloc");
        c = __libc_realloc(c, 2 * n + 1);
        owned(c, 2 * n + 1, "__libc_realloc");
        c = realloc(c, n / 2 + 1);
        owned(c, n / 2 + 1, "realloc");
        __libc_free(c);

        void *a = __libc_memalign(256, n);
        owned(a, n, "__libc_memalign");
        CHECK((uintptr_t)a % 256 == 0, "__libc_memalign(256, %zu) = %p", n, a);
        free(a);
    }
    long page = sysconf(_SC_PAGESIZE);
    void *v = __libc_valloc(10);
    owned(v, 10, "__libc_valloc");
    CHECK((uintptr_t)v % (uintptr_t)page == 0, "__libc_valloc(10) = %p", v);
    free(v);
    v = __libc_pvalloc(10);
    owned(v, (size_t)page, "__libc_pvalloc");
    CHECK((uintptr_t)v % (uintptr_t)page == 0, "__libc_pvalloc(10) = %p", v);
    __libc_free(v);
    __libc_free(NULL);
    return 0;
}
