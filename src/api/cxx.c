/* cxx: the C++ operators new and delete (Itanium ABI names), without a
 * libstdc++ dependency.
 * Invariant: a failed new calls the program's new_handler, else throws
 * std::bad_alloc through libstdc++ when it is loaded (it is, in any C++
 * program); the nothrow forms return NULL, also when the handler throws. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

#include "api_layer.h"

#ifndef FOLIO_PREFIX /* sanitizer builds keep the runtime's operators */
extern void (*_ZSt15get_new_handlerv(void))(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* A nothrow form's failure with a new_handler installed: the handler may
 * throw bad_alloc, which the nothrow form must turn into NULL, and C cannot
 * catch it.  The next definition of the same operator (libstdc++'s, loaded
 * in a program that installs a handler) does exactly that around the
 * throwing operator, which is folio's: it retries and calls the handler as
 * below.  Without one (dlsym finds none) the handler is called here. */
static void *cxx_nothrow_next(void *next, size_t n, size_t align) {
    static const char nothrow_tag = 0; /* std::nothrow's stand-in: an empty struct, never read */
    if (align <= MIN_ALIGN) return ((void *(*)(size_t, const void *))next)(n, &nothrow_tag);
    return ((void *(*)(size_t, size_t, const void *))next)(n, align, &nothrow_tag);
}

/* nothrow: the mangled name of the nothrow form being served, else NULL */
static void *cxx_new(size_t n, size_t align, const char *nothrow) {
    for (;;) {
        void *p = align <= MIN_ALIGN ? API(malloc)(n) : api_aligned(align, n);
        if (likely(p)) return p;
        void (*handler)(void) = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
        void *next = handler && nothrow ? dlsym(RTLD_NEXT, nothrow) : NULL; /* may allocate: no lock held */
        if (next) return cxx_nothrow_next(next, n, align);
        if (handler) {
            handler();
            continue;
        }
        if (nothrow) return NULL;
        if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
        os_write_err("folio: operator new: out of memory\n");
        abort();
    }
}

/* The plain operators take malloc's fast path inline (a C++ program's
 * every new is one of them): only its miss, or a size above the small
 * tier, calls out; a failed miss goes on to the handler loop above. */
__attribute__((noinline)) static void *cxx_new_miss(size_t n) {
    void *p = api_small_alloc_slow(n);
    return likely(p) ? p : cxx_new(n, 0, NULL);
}
static inline void *cxx_new_plain(size_t n) {
    if (likely(n <= SMALL_MAX)) return small_alloc_fast(n, cxx_new_miss);
    return cxx_new(n, 0, NULL);
}

#define NEW(name, ...) EXPORT void *name
NEW(_Znwm)(size_t n) { return cxx_new_plain(n); }
NEW(_Znam)(size_t n) { return cxx_new_plain(n); }
NEW(_ZnwmRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return cxx_new(n, 0, "_ZnwmRKSt9nothrow_t"); }
NEW(_ZnamRKSt9nothrow_t)(size_t n, const void *nt) { (void)nt; return cxx_new(n, 0, "_ZnamRKSt9nothrow_t"); }
NEW(_ZnwmSt11align_val_t)(size_t n, size_t al) { folio_init(); return cxx_new(n, al, NULL); }
NEW(_ZnamSt11align_val_t)(size_t n, size_t al) { folio_init(); return cxx_new(n, al, NULL); }
NEW(_ZnwmSt11align_val_tRKSt9nothrow_t)(size_t n, size_t al, const void *nt) {
    (void)nt;
    folio_init();
    return cxx_new(n, al, "_ZnwmSt11align_val_tRKSt9nothrow_t");
}
NEW(_ZnamSt11align_val_tRKSt9nothrow_t)(size_t n, size_t al, const void *nt) {
    (void)nt;
    folio_init();
    return cxx_new(n, al, "_ZnamSt11align_val_tRKSt9nothrow_t");
}
EXPORT void _ZdlPv(void *p) { free(p); }
EXPORT void _ZdaPv(void *p) { free(p); }
EXPORT void _ZdlPvm(void *p, size_t n) { (void)n; free(p); }
EXPORT void _ZdaPvm(void *p, size_t n) { (void)n; free(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; free(p); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) { (void)nt; free(p); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n; (void)al; free(p); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) { (void)n; (void)al; free(p); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
    (void)al;
    (void)nt;
    free(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
    (void)al;
    (void)nt;
    free(p);
}
#endif
