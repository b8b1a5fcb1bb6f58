/* tests/support/early_lib.c: a shared library whose constructor allocates
 * before folio's constructors have run, and whose destructor frees after
 * folio's destructors have run.  Built by tests/run.sh into
 * build/tests/support/libfolio_early.so and preloaded by test_early after
 * libfolio.so (the dynamic loader runs the later preload's constructor
 * first; test_early verifies that order with LD_DEBUG=init).
 *
 * The constructor records what it allocated in a state that test_early
 * reads through folio_early_state(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "early_lib.h"

static struct folio_early_state st;

struct folio_early_state *folio_early_state(void)
{
    return &st;
}

static void fail(const char *what)
{
    if (st.errors++ == 0)
        snprintf(st.msg, sizeof st.msg, "%s", what);
}

unsigned char folio_early_byte(size_t i, size_t k)
{
    return (unsigned char)(i * 131 + k * 7 + 1);
}

static void *early_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc((size_t)(i % 700) + 1);
        if (!p) {
            fail("malloc in a thread started by the constructor failed");
            return NULL;
        }
        memset(p, 0x5c, (size_t)(i % 700) + 1);
        free(p);
    }
    return NULL;
}

__attribute__((constructor(101))) static void early_ctor(void)
{
    st.ran = 1;
    /* Blocks of every regime, kept for test_early to check and free. */
    static const size_t sizes[FOLIO_EARLY_BLOCKS] = {
        1, 16, 24, 100, 1000, 4000, 20000, 70000, 300000, 1u << 20, 3u << 20, 9u << 20,
        7, 48, 512, 8192,
    };
    for (size_t i = 0; i < FOLIO_EARLY_BLOCKS; i++) {
        size_t n = sizes[i];
        unsigned char *p = (i % 3 == 0) ? calloc(1, n) : malloc(n);
        if (!p) {
            fail("malloc/calloc in the constructor returned NULL");
            continue;
        }
        if (i % 3 == 0)
            for (size_t k = 0; k < n; k++)
                if (p[k] != 0) {
                    fail("calloc in the constructor returned non-zero memory");
                    break;
                }
        if (malloc_usable_size(p) < n)
            fail("malloc_usable_size in the constructor too small");
        for (size_t k = 0; k < n; k++)
            p[k] = folio_early_byte(i, k);
        st.blocks[i] = p;
        st.sizes[i] = n;
    }
    /* realloc, aligned allocation, strdup (libc's own malloc call). */
    char *s = malloc(10);
    if (!s)
        fail("malloc(10)");
    else {
        memcpy(s, "early", 6);
        s = realloc(s, 100000);
        if (!s || strcmp(s, "early") != 0)
            fail("realloc in the constructor lost data");
        free(s);
    }
    void *a = NULL;
    if (posix_memalign(&a, 4096, 5000) != 0 || ((uintptr_t)a & 4095) != 0)
        fail("posix_memalign in the constructor");
    free(a);
    a = aligned_alloc(64, 640);
    if (!a || ((uintptr_t)a & 63) != 0)
        fail("aligned_alloc in the constructor");
    free(a);
    char *d = strdup("allocated by libc for the constructor");
    if (!d)
        fail("strdup");
    free(d);
    /* The dynamic loader's own allocations: a failed lookup and dlerror. */
    if (dlsym(RTLD_DEFAULT, "no_such_symbol") != NULL)
        fail("dlsym(no_such_symbol) succeeded");
    const char *e = dlerror();
    if (!e || !strstr(e, "no_such_symbol"))
        fail("dlerror after a failed dlsym");
    /* A thread started (and joined) before folio's constructors. */
    pthread_t t;
    if (pthread_create(&t, NULL, early_thread, NULL) != 0)
        fail("pthread_create in the constructor");
    else
        pthread_join(t, NULL);
    /* Leave a dlerror pending for process exit. */
    (void)dlsym(RTLD_DEFAULT, "no_such_symbol_pending");
}

__attribute__((destructor(101))) static void early_dtor(void)
{
    /* Runs after folio's destructors: free what test_early left, allocate
     * and free some more, then say so. */
    int bad = 0;
    for (size_t i = 0; i < FOLIO_EARLY_BLOCKS; i++) {
        unsigned char *p = st.blocks[i];
        if (!p)
            continue;
        for (size_t k = 0; k < st.sizes[i]; k++)
            if (p[k] != folio_early_byte(i, k)) {
                bad = 1;
                break;
            }
        free(p);
        st.blocks[i] = NULL;
    }
    for (int i = 0; i < 200; i++) {
        void *p = malloc((size_t)i * 97 + 1);
        if (!p) {
            bad = 1;
            break;
        }
        memset(p, 1, (size_t)i * 97 + 1);
        free(p);
    }
    void *big = calloc(1, 5u << 20);
    if (!big)
        bad = 1;
    free(big);
    const char *msg = bad ? "folio-early: destructor FAILED\n" : "folio-early: destructor ok\n";
    if (write(2, msg, strlen(msg)) < 0)
        _exit(3);
}
