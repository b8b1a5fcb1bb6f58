/* tests/api.h: the allocation API a test calls.
 *
 * Include it after every system header.
 *
 * Normal mode: the test is linked against build/libfolio.so, which exports
 * the standard names, so malloc & co. are folio's and nothing is renamed.
 *
 * Sanitizer mode (-DFOLIO_PREFIX, with ASan+UBSan or TSan): the sanitizer
 * runtime owns the standard names and folio exports folio_malloc & co.; the
 * macros below send the test's calls to folio.  Memory that libc itself
 * allocates (strdup, getline, dlerror, ...) then comes from the sanitizer's
 * allocator: a test must never hand it to the renamed free.
 *
 * FOLIO_TEST_GLIBC: only for checking a test itself against glibc (compile
 * the test without folio); supplies free_sized/free_aligned_sized, which
 * glibc 2.36 lacks, as plain free. */
#ifndef FOLIO_TEST_API_H
#define FOLIO_TEST_API_H

#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <folio.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef FOLIO_PREFIX

void *folio_malloc(size_t size);
void folio_free(void *p);
void *folio_calloc(size_t n, size_t size);
void *folio_realloc(void *p, size_t size);
void *folio_reallocarray(void *p, size_t n, size_t size);
void *folio_aligned_alloc(size_t alignment, size_t size);
int folio_posix_memalign(void **out, size_t alignment, size_t size);
void *folio_memalign(size_t alignment, size_t size);
void *folio_valloc(size_t size);
void *folio_pvalloc(size_t size);
size_t folio_malloc_usable_size(void *p);
void folio_free_sized(void *p, size_t size);
void folio_free_aligned_sized(void *p, size_t alignment, size_t size);
int folio_malloc_trim(size_t pad);
struct mallinfo2 folio_mallinfo2(void);

#define malloc folio_malloc
#define free folio_free
#define calloc folio_calloc
#define realloc folio_realloc
#define reallocarray folio_reallocarray
#define aligned_alloc folio_aligned_alloc
#define posix_memalign folio_posix_memalign
#define memalign folio_memalign
#define valloc folio_valloc
#define pvalloc folio_pvalloc
#define malloc_usable_size folio_malloc_usable_size
#define free_sized folio_free_sized
#define free_aligned_sized folio_free_aligned_sized
#define malloc_trim folio_malloc_trim
#define mallinfo2() folio_mallinfo2()   /* function-like: "struct mallinfo2" stays */

#define FOLIO_TEST_MODE "prefix"

#elif defined(FOLIO_TEST_GLIBC)

static inline void free_sized(void *p, size_t size)
{
    (void)size;
    free(p);
}
static inline void free_aligned_sized(void *p, size_t alignment, size_t size)
{
    (void)alignment;
    (void)size;
    free(p);
}
#define FOLIO_TEST_MODE "glibc"

#else

/* C23 names; glibc 2.36's headers do not declare them, folio exports them. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
#define FOLIO_TEST_MODE "folio"

#endif

#ifdef __cplusplus
}
#endif

/* Helpers for C tests (they need check.h, included first); below the
 * macros, so that their allocations come from the allocator under test. */
#if !defined(__cplusplus) && defined(FOLIO_TEST_CHECK_H)
/* Everything readable from fd until EOF (a child's stderr through a pipe),
 * NUL-terminated, from the allocator under test (free it with free);
 * closes fd. */
__attribute__((unused)) static char *read_all(int fd)
{
    size_t cap = 1 << 12, len = 0;
    char *out = malloc(cap);
    CHECK(out != NULL, "malloc");
    for (;;) {
        if (len + 1 >= cap) {
            cap *= 2;
            out = realloc(out, cap);
            CHECK(out != NULL, "realloc");
        }
        ssize_t r = read(fd, out + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    out[len] = 0;
    close(fd);
    return out;
}

/* Options are read once, at start: unless name is already set to value,
 * set it and re-execute this program with the same arguments. */
__attribute__((unused)) static void reexec_with_env(char **argv, const char *name, const char *value)
{
    const char *now = getenv(name);
    if (now && strcmp(now, value) == 0)
        return;
    setenv(name, value, 1);
    execv("/proc/self/exe", argv);
    FAIL("re-executing with %s=%s", name, value);
}

/* Fork; the child, with its stderr going to a pipe and no core dump, runs
 * fn(arg) under alarm(secs) and exits 0 (exit_group: under TSan, _exit waits
 * for folio's purger).  Returns the child's stderr (free it) and sets
 * *status to its wait status. */
__attribute__((unused)) static char *run_in_child(void (*fn)(const void *), const void *arg,
                                                  unsigned secs, int *status)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* an expected abort dumps no core */
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        alarm(secs);
        fn(arg);
        syscall(SYS_exit_group, 0);
    }
    close(fds[1]);
    char *out = read_all(fds[0]);
    CHECK(waitpid(pid, status, 0) == pid, "waitpid");
    return out;
}

/* Where text holds want followed by no further hex digit (want ends with a
 * pointer: the exact pointer, not a prefix of a longer one), or NULL. */
__attribute__((unused)) static const char *find_message(const char *text, const char *want)
{
    size_t n = strlen(want);
    for (const char *m = strstr(text, want); m; m = strstr(m + 1, want)) {
        char c = m[n];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return m;
    }
    return NULL;
}

/* The threads of this process now (/proc/self/status), -1 if unknown. */
__attribute__((unused)) static int proc_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    fclose(f);
    return n;
}

#ifdef RUSAGE_THREAD
/* The calling thread's minor faults so far. */
__attribute__((unused)) static long thread_minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}
#endif

/* Write v into each 4 KiB page of [p, p + n). */
__attribute__((unused)) static void touch_pages(char *p, size_t n, char v)
{
    for (size_t i = 0; i < n; i += 4096)
        p[i] = v;
}

#ifndef FOLIO_TEST_GLIBC
/* One top-level counter of folio's JSON report. */
__attribute__((unused)) static uint64_t report_u64(const char *key)
{
    static char rep[1 << 16];
    folio_report_json(rep, sizeof rep);
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    char *s = strstr(rep, pat);
    CHECK(s != NULL, "report has no %s", key);
    return strtoull(s + strlen(pat), NULL, 10);
}
#endif
#endif

#endif
