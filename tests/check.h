/* tests/check.h: the small helper every folio test includes.
 *
 * A test is a standalone program: exit status 0 = pass, 77 = skip (a tool or
 * feature it needs is missing), anything else = fail.  A failed CHECK prints
 *     FAIL tests/test_x.c:123: <expression>: <message>
 * on stderr and exits 1 at once (with _exit, so a failure in one thread does
 * not race the other threads through atexit handlers).
 *
 * Include system headers first, then "check.h", then "api.h". */
#ifndef FOLIO_TEST_CHECK_H
#define FOLIO_TEST_CHECK_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TEST_SKIP_STATUS 77

__attribute__((format(printf, 5, 6), noreturn, unused)) static void
check_fail_(const char *file, int line, const char *expr, int err,
            const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* One write, so lines from several failing threads do not interleave. */
    char out[1400];
    int n = snprintf(out, sizeof out, "FAIL %s:%d: %s: %s (errno %d)\n", file,
                     line, expr, msg, err);
    if (n > (int)sizeof out - 1)
        n = (int)sizeof out - 1;
    if (write(2, out, (size_t)n) < 0) {
        /* nothing more we can do */
    }
    _exit(1);
}

/* CHECK(cond, fmt, ...): fail the test unless cond holds. */
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            check_fail_(__FILE__, __LINE__, #cond, errno, __VA_ARGS__);        \
    } while (0)

/* FAIL(fmt, ...): unconditional failure. */
#define FAIL(...) check_fail_(__FILE__, __LINE__, "FAIL", errno, __VA_ARGS__)

/* SKIP(fmt, ...): the test cannot run here; exits with status 77. */
#define SKIP(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "SKIP: ");                                             \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        exit(TEST_SKIP_STATUS);                                                \
    } while (0)

/* NOTE(fmt, ...): a progress line on stderr (shown by run.sh on failure). */
#define NOTE(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "  ");                                                 \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
    } while (0)

/* OPAQUE(x): the value of x, hidden from the optimizer.  The compiler knows
 * what malloc/calloc/aligned_alloc promise (alignment, zeroed memory, that
 * malloc(SIZE_MAX) is silly) and would otherwise fold the very checks these
 * tests make, or drop a malloc/free pair whose result is unused. */
#ifdef __cplusplus
#define OPAQUE_AUTO_ auto
#else
#define OPAQUE_AUTO_ __auto_type
#endif
#define OPAQUE(x)                                                              \
    __extension__({                                                            \
        OPAQUE_AUTO_ opaque_v_ = (x);                                          \
        __asm__ volatile("" : "+r"(opaque_v_) : : "memory");                  \
        opaque_v_;                                                             \
    })

/* Seconds of a monotonic clock. */
static inline double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* How long a time-boxed test runs: `dflt` seconds, scaled by the environment
 * variable FOLIO_TEST_SCALE (a float, e.g. 0.2 for a quick run, 5 for a soak). */
static inline double test_seconds(double dflt)
{
    const char *s = getenv("FOLIO_TEST_SCALE");
    if (s && *s) {
        double f = strtod(s, NULL);
        if (f > 0)
            return dflt * f;
    }
    return dflt;
}

/* A small, fast, per-thread random generator (xorshift64*). */
typedef struct { uint64_t s; } rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (r->s == 0)
        r->s = 1;
}

static inline uint64_t rng_next(rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi] (inclusive). */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi)
{
    return lo + (size_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* ---- patterns ----------------------------------------------------------
 * pattern_fill(p, n, seed) writes a sequence that depends on seed and on the
 * offset; pattern_check returns the first offset that differs, or (size_t)-1.
 * Whole 64-bit words are written (little-endian byte order, any alignment)
 * so multi-megabyte blocks fill quickly. */

static inline uint64_t pattern_word_(uint64_t seed, size_t word_index)
{
    uint64_t x = seed ^ ((uint64_t)word_index * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return x;
}

static inline unsigned char pattern_byte_(uint64_t seed, size_t off)
{
    uint64_t w = pattern_word_(seed, off / 8);
    return (unsigned char)(w >> (8 * (off % 8)));
}

/* Fill bytes [from, n) of the block at p (offsets relative to p). */
__attribute__((unused)) static void pattern_fill_from(void *p, size_t from,
                                                      size_t n, uint64_t seed)
{
    unsigned char *b = (unsigned char *)p;
    size_t i = from;
    for (; i < n && i % 8 != 0; i++)
        b[i] = pattern_byte_(seed, i);
    for (; i + 8 <= n; i += 8) {
        uint64_t w = pattern_word_(seed, i / 8);
        memcpy(b + i, &w, 8);
    }
    for (; i < n; i++)
        b[i] = pattern_byte_(seed, i);
}

__attribute__((unused)) static void pattern_fill(void *p, size_t n,
                                                 uint64_t seed)
{
    pattern_fill_from(p, 0, n, seed);
}

__attribute__((unused)) static size_t pattern_check(const void *p, size_t n,
                                                    uint64_t seed)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w != pattern_word_(seed, i / 8)) {
            for (size_t j = i; j < i + 8; j++)
                if (b[j] != pattern_byte_(seed, j))
                    return j;
        }
    }
    for (; i < n; i++)
        if (b[i] != pattern_byte_(seed, i))
            return i;
    return (size_t)-1;
}

/* First offset in [0, n) whose byte is not `c`, or (size_t)-1. */
__attribute__((unused)) static size_t first_not(const void *p, size_t n,
                                                unsigned char c)
{
    const unsigned char *b = (const unsigned char *)p;
    size_t i = 0;
    uint64_t w8 = 0x0101010101010101ull * c;
    while (i < n && (uintptr_t)(b + i) % 8 != 0) {
        if (b[i] != c)
            return i;
        i++;
    }
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w != w8)
            break;
    }
    for (; i < n; i++)
        if (b[i] != c)
            return i;
    return (size_t)-1;
}

#endif
