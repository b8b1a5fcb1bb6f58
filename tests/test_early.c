// folio-test: no-sanitize
/* test_early: allocation before folio's constructors run and after its
 * destructors ran.
 *
 * tests/run.sh builds tests/support/early_lib.c into a shared library and
 * passes its path in FOLIO_TEST_EARLY_LIB (without it this test is
 * skipped).  This program re-executes itself with
 *     LD_PRELOAD="<libfolio.so> <libfolio_early.so>" LD_DEBUG=files
 * so the early library's constructor runs before libfolio's (the loader
 * initializes the later preload first; the LD_DEBUG=files trace proves it)
 * and allocates, calls calloc/realloc/posix_memalign/strdup, fails a dlsym
 * and reads dlerror, and starts a thread.  The re-executed child checks and
 * frees half of those blocks; the early library's destructor, which runs
 * after libfolio's, frees the rest and allocates more, then prints
 * "folio-early: destructor ok". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"
#include "support/early_lib.h"

extern char **environ;

static int child(void)
{
    struct folio_early_state *(*get)(void) =
        (struct folio_early_state * (*)(void)) dlsym(RTLD_DEFAULT, "folio_early_state");
    CHECK(get != NULL, "libfolio_early.so is not loaded in the child");
    unsigned char (*byte)(size_t, size_t) =
        (unsigned char (*)(size_t, size_t))dlsym(RTLD_DEFAULT, "folio_early_byte");
    CHECK(byte != NULL, "folio_early_byte not found");
    struct folio_early_state *st = get();
    CHECK(st->ran, "the early constructor did not run");
    CHECK(st->errors == 0, "the early constructor saw %d failures, first: %s", st->errors,
          st->msg);
    for (size_t i = 0; i < FOLIO_EARLY_BLOCKS; i++) {
        unsigned char *p = st->blocks[i];
        CHECK(p != NULL, "early block %zu missing", i);
        CHECK(((uintptr_t)p & 15) == 0, "early block %zu = %p not 16-aligned", i, (void *)p);
        CHECK(malloc_usable_size(p) >= st->sizes[i], "early block %zu: usable %zu < %zu", i,
              malloc_usable_size(p), st->sizes[i]);
        for (size_t k = 0; k < st->sizes[i]; k++)
            CHECK(p[k] == byte(i, k), "early block %zu (size %zu) byte %zu damaged", i,
                  st->sizes[i], k);
        if (i % 2 == 0) {
            /* Half are freed (or grown) now, after folio's constructors. */
            if (i % 4 == 0) {
                p = realloc(p, st->sizes[i] * 2 + 10);
                CHECK(p != NULL, "realloc of early block %zu", i);
                for (size_t k = 0; k < st->sizes[i]; k++)
                    CHECK(p[k] == byte(i, k), "realloc of early block %zu lost byte %zu", i, k);
            }
            free(p);
            st->blocks[i] = NULL;
        }
    }
    /* Normal allocation works afterwards. */
    for (size_t n = 1; n < (32u << 20); n = n * 3 + 5) {
        void *p = calloc(1, n);
        CHECK(p != NULL, "calloc(1, %zu)", n);
        CHECK(first_not(OPAQUE(p), n, 0) == (size_t)-1, "calloc(1, %zu) not zero", n);
        free(p);
    }
    return 0;   /* exit(): destructors run, the early one last */
}

/* The path of the libfolio.so this program is linked with. */
static const char *folio_path(void)
{
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "folio_report_json");
    if (!sym || !dladdr(sym, &info) || !info.dli_fname)
        return NULL;
    return info.dli_fname;
}

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("FOLIO_TEST_EARLY_CHILD"))
        return child();

    const char *early = getenv("FOLIO_TEST_EARLY_LIB");
    if (!early || access(early, R_OK) != 0)
        SKIP("FOLIO_TEST_EARLY_LIB not set: tests/run.sh builds the early library");
    const char *folio = folio_path();
    CHECK(folio != NULL && strstr(folio, "folio") != NULL,
          "cannot find libfolio.so in this process (found %s)", folio ? folio : "nothing");
    char *folio_abs = realpath(folio, NULL);
    char *early_abs = realpath(early, NULL);
    CHECK(folio_abs && early_abs, "realpath");

    char preload[8192];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s %s", folio_abs, early_abs);
    /* The child's environment: ours without LD_PRELOAD/LD_DEBUG, plus. */
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    CHECK(env != NULL, "calloc");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 && strncmp(environ[i], "LD_DEBUG", 8) != 0)
            env[k++] = environ[i];
    env[k++] = preload;
    env[k++] = "LD_DEBUG=files";
    env[k++] = "FOLIO_TEST_EARLY_CHILD=1";
    env[k] = NULL;

    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        alarm(60);
        char *args[] = {argv[0], NULL};
        execve("/proc/self/exe", args, env);
        _exit(127);
    }
    close(fds[1]);
    char *out = read_all(fds[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "--- child stderr (LD_DEBUG=files trace included) ---\n%s\n---\n", out);
        FAIL("re-executed child %s %d", WIFEXITED(st) ? "exited with status" : "was killed by signal",
             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }

    /* The loader initialized the early library before libfolio, and
     * finalized it after. */
    char want_early[4200], want_folio[4200];
    snprintf(want_early, sizeof want_early, "calling init: %s\n", early_abs);
    snprintf(want_folio, sizeof want_folio, "calling init: %s\n", folio_abs);
    const char *ie = strstr(out, want_early), *iff = strstr(out, want_folio);
    if (!ie || !iff || ie > iff) {
        fprintf(stderr, "--- child stderr ---\n%s\n---\n", out);
        FAIL("the early library's constructor did not run before libfolio's (%s, %s)",
             ie ? "early init seen" : "no early init line",
             iff ? "folio init seen" : "no folio init line");
    }
    snprintf(want_early, sizeof want_early, "calling fini: %s [", early_abs);
    snprintf(want_folio, sizeof want_folio, "calling fini: %s [", folio_abs);
    ie = strstr(out, want_early);
    iff = strstr(out, want_folio);
    if (!ie || !iff || ie < iff) {
        fprintf(stderr, "--- child stderr ---\n%s\n---\n", out);
        FAIL("the early library's destructor did not run after libfolio's (%s, %s)",
             ie ? "early fini seen" : "no early fini line",
             iff ? "folio fini seen" : "no folio fini line");
    }
    if (!strstr(out, "folio-early: destructor ok")) {
        fprintf(stderr, "--- child stderr ---\n%s\n---\n", out);
        FAIL("the early library's destructor did not report success");
    }
    NOTE("early constructor ran before libfolio's; its destructor after libfolio's was ok");
    free(out);
    free(env);
    free(folio_abs);
    free(early_abs);
    return 0;
}
