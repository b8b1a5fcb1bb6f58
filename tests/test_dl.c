// folio-test: no-sanitize
/* test_dl: the dynamic loader and libdl call malloc/calloc/free themselves
 * (dlerror's message buffer, the per-thread dlerror state that glibc frees
 * at thread exit, dlopen's link maps).  A failing dlsym followed by dlerror,
 * failing and succeeding dlopen, from the main thread and from short-lived
 * threads, must all work with folio as the process's malloc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

#include "check.h"
#include "api.h"

static void failing_lookups(int rounds, const char *who)
{
    for (int i = 0; i < rounds; i++) {
        void *s = dlsym(RTLD_DEFAULT, "no_such_symbol");
        CHECK(s == NULL, "%s: dlsym(no_such_symbol) = %p", who, s);
        const char *e = dlerror();
        CHECK(e != NULL, "%s: dlerror() after a failed dlsym returned NULL", who);
        CHECK(strstr(e, "no_such_symbol") != NULL, "%s: dlerror() = \"%s\"", who, e);
        CHECK(dlerror() == NULL, "%s: second dlerror() not NULL", who);
        if (i % 16 == 0) {
            void *h = dlopen("libfolio-test-no-such-library.so", RTLD_NOW);
            CHECK(h == NULL, "%s: dlopen of a missing library succeeded", who);
            e = dlerror();
            CHECK(e != NULL && strstr(e, "libfolio-test-no-such-library.so") != NULL,
                  "%s: dlerror() after a failed dlopen = \"%s\"", who, e ? e : "(null)");
        }
        if (i % 7 == 0) {
            /* Leave an error pending: glibc frees its buffer at the next
             * error, or at thread exit. */
            CHECK(dlsym(RTLD_DEFAULT, "another_missing_symbol") == NULL, "%s: dlsym", who);
        }
    }
}

static void *thread_lookups(void *arg)
{
    char who[32];
    snprintf(who, sizeof who, "thread %d", (int)(intptr_t)arg);
    void *p = malloc(100);
    CHECK(p != NULL, "malloc");
    failing_lookups(200, who);
    /* Exit with an error pending, so glibc frees the dlerror state during
     * thread teardown. */
    CHECK(dlsym(RTLD_DEFAULT, "pending_at_exit") == NULL, "dlsym");
    free(p);
    return NULL;
}

int main(void)
{
    /* Blocks allocated before, checked after. */
    enum { N = 200 };
    unsigned char *keep[N];
    for (int i = 0; i < N; i++) {
        keep[i] = malloc((size_t)(i * 53 % 3000) + 1);
        CHECK(keep[i] != NULL, "malloc");
        memset(keep[i], i & 0xff, (size_t)(i * 53 % 3000) + 1);
    }

    failing_lookups(3000, "main thread");

    /* A real library, opened and closed repeatedly; look a symbol up. */
    for (int i = 0; i < 200; i++) {
        void *h = dlopen("libm.so.6", RTLD_NOW | (i % 2 ? RTLD_LOCAL : RTLD_GLOBAL));
        CHECK(h != NULL, "dlopen(libm.so.6): %s", dlerror());
        void *cosine = dlsym(h, "cos");
        CHECK(cosine != NULL, "dlsym(libm, cos)");
        CHECK(dlsym(h, "no_such_symbol_in_libm") == NULL, "dlsym(libm, missing)");
        const char *e = dlerror();
        CHECK(e != NULL && strstr(e, "no_such_symbol_in_libm"), "dlerror = %s", e ? e : "(null)");
        Dl_info info;
        CHECK(dladdr(cosine, &info) != 0 && info.dli_fname != NULL, "dladdr(cos)");
        CHECK(dlclose(h) == 0, "dlclose: %s", dlerror());
    }

    /* Many short-lived threads doing the same. */
    for (int round = 0; round < 15; round++) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            CHECK(pthread_create(&t[i], NULL, thread_lookups, (void *)(intptr_t)(round * 4 + i)) == 0,
                  "pthread_create");
        failing_lookups(100, "main thread beside the threads");
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
    }

    for (int i = 0; i < N; i++) {
        CHECK(first_not(keep[i], (size_t)(i * 53 % 3000) + 1, (unsigned char)(i & 0xff)) ==
                  (size_t)-1,
              "block %d damaged across the dl calls", i);
        free(keep[i]);
    }
    /* Exit with an error pending in the main thread too. */
    CHECK(dlsym(RTLD_DEFAULT, "pending_at_process_exit") == NULL, "dlsym");
    return 0;
}
