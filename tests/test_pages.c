/* test_pages: folio's own calls: the page API (folio_alloc_pages with and
 * without FOLIO_ZERO, folio_free_pages, free() of a page block), the
 * clearing engine (folio_clear) and the report (folio_report_json,
 * folio_report_write, folio_report_print). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#ifdef FOLIO_TEST_GLIBC
int main(void)
{
    SKIP("folio's own calls need folio");
}
#else

#define PG 4096u

static void pages(void)
{
    /* n = 1..600, zeroed, page aligned, writable, every page of it. */
    for (size_t n = 1; n <= 600; n++) {
        unsigned char *p = folio_alloc_pages(OPAQUE(n), FOLIO_ZERO);
        CHECK(p != NULL, "folio_alloc_pages(%zu, FOLIO_ZERO) failed", n);
        CHECK(((uintptr_t)OPAQUE(p) & (PG - 1)) == 0, "folio_alloc_pages(%zu) = %p not page aligned",
              n, (void *)p);
        size_t bad = first_not(p, n * PG, 0);
        CHECK(bad == (size_t)-1, "folio_alloc_pages(%zu, FOLIO_ZERO): byte %zu = %#x", n, bad,
              p[bad]);
        memset(p, 0xd7, n * PG);   /* dirty: the next one may recycle it */
        folio_free_pages(p, n);
    }
    /* Recycled dirty pages come back zero with FOLIO_ZERO, in a different
     * order of sizes (splits and merges of freed runs). */
    for (size_t n = 600; n >= 1; n = n * 2 / 3) {
        unsigned char *a = folio_alloc_pages(OPAQUE(n), 0);
        CHECK(a != NULL, "folio_alloc_pages(%zu, 0) failed", n);
        CHECK(((uintptr_t)OPAQUE(a) & (PG - 1)) == 0, "folio_alloc_pages(%zu, 0) not aligned", n);
        memset(a, 0x3e, n * PG);
        folio_free_pages(a, n);
        unsigned char *z = folio_alloc_pages(OPAQUE(n), FOLIO_ZERO);
        CHECK(z != NULL, "folio_alloc_pages(%zu, FOLIO_ZERO) failed", n);
        size_t bad = first_not(z, n * PG, 0);
        CHECK(bad == (size_t)-1, "recycled folio_alloc_pages(%zu, FOLIO_ZERO): byte %zu = %#x",
              n, bad, z[bad]);
        folio_free_pages(z, n);
        if (n == 1)
            break;
    }
    /* Many live page blocks at once do not overlap. */
    enum { LIVE = 64 };
    unsigned char *live[LIVE];
    size_t np[LIVE];
    for (int i = 0; i < LIVE; i++) {
        np[i] = 1 + (size_t)(i * 37) % 130;
        live[i] = folio_alloc_pages(np[i], i % 2 ? FOLIO_ZERO : 0);
        CHECK(live[i] != NULL, "folio_alloc_pages(%zu)", np[i]);
        memset(live[i], i + 1, np[i] * PG);
    }
    for (int i = 0; i < LIVE; i++) {
        CHECK(first_not(live[i], np[i] * PG, (unsigned char)(i + 1)) == (size_t)-1,
              "page block %d (%zu pages) overwritten", i, np[i]);
        if (i % 3 == 0)
            free(OPAQUE(live[i]));   /* free() also accepts page blocks */
        else
            folio_free_pages(live[i], np[i]);
    }
    /* Page blocks work with malloc_usable_size. */
    void *u = folio_alloc_pages(5, 0);
    CHECK(u != NULL, "folio_alloc_pages(5, 0)");
    CHECK(malloc_usable_size(u) >= 5 * PG, "malloc_usable_size(5 pages) = %zu",
          malloc_usable_size(u));
    folio_free_pages(u, 5);

    /* Bad sizes: NULL with ENOMEM. */
    const size_t bad_n[] = {0, SIZE_MAX, SIZE_MAX / PG, SIZE_MAX / PG + 1, (size_t)1 << 52};
    for (size_t i = 0; i < sizeof bad_n / sizeof bad_n[0]; i++) {
        errno = 0;
        void *p = folio_alloc_pages(OPAQUE(bad_n[i]), FOLIO_ZERO);
        int e = errno;
        CHECK(p == NULL, "folio_alloc_pages(%#zx) = %p, want NULL", bad_n[i], p);
        CHECK(e == ENOMEM, "folio_alloc_pages(%#zx): errno %d, want ENOMEM", bad_n[i], e);
    }
    /* folio_free_pages(NULL, n) is a no-op. */
    folio_free_pages(NULL, 3);
}

static void clearing(void)
{
    /* folio_clear zeroes exactly [p, p+n): check guard bytes either side,
     * odd offsets and sizes from 1 byte to 9 MiB. */
    static const size_t sizes[] = {1, 7, 15, 16, 17, 63, 64, 100, 4095, 4096, 4097, 65536 + 3,
                                   (1u << 20) - 1, 2u << 20, (9u << 20) + 5};
    size_t cap = (9u << 20) + 5 + 256;
    unsigned char *buf = malloc(cap);
    CHECK(buf != NULL, "malloc(%zu)", cap);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (size_t off = 0; off < 64; off += 13) {
            size_t n = sizes[i];
            memset(buf, 0xc3, n + off + 64);
            folio_clear(buf + off, n);
            CHECK(first_not(buf, off, 0xc3) == (size_t)-1, "folio_clear(+%zu, %zu) wrote before",
                  off, n);
            size_t bad = first_not(buf + off, n, 0);
            CHECK(bad == (size_t)-1, "folio_clear(+%zu, %zu) left byte %zu", off, n, bad);
            CHECK(first_not(buf + off + n, 64, 0xc3) == (size_t)-1,
                  "folio_clear(+%zu, %zu) wrote past the end", off, n);
        }
    }
    /* a zero-length clear writes nothing, at any alignment */
    for (size_t off = 0; off < 64; off++) {
        memset(buf, 0xc3, 256);
        folio_clear(buf + 64 + off, 0);
        CHECK(first_not(buf, 256, 0xc3) == (size_t)-1, "folio_clear(+%zu, 0) wrote byte %zu",
              64 + off, first_not(buf, 256, 0xc3));
    }
    free(OPAQUE(buf));
}

static long json_value(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *k = strstr(json, pat);
    if (!k)
        return -1;
    k += strlen(pat);
    while (*k == ' ' || *k == '\t' || *k == '\n')
        k++;
    if (*k != ':')
        return -1;
    k++;
    while (*k == ' ' || *k == '\t' || *k == '\n')
        k++;
    if (*k < '0' || *k > '9')
        return -1;
    return strtol(k, NULL, 10);
}

static void report(void)
{
    /* 1000 allocations and frees: the counters move by exactly that. */
    uint64_t allocs0 = report_u64("allocs"), frees0 = report_u64("frees");
    for (int i = 0; i < 1000; i++)
        free(OPAQUE(malloc(OPAQUE((size_t)i + 1))));
    CHECK(report_u64("allocs") == allocs0 + 1000 && report_u64("frees") == frees0 + 1000,
          "1000 malloc/free pairs: allocs %+lld, frees %+lld",
          (long long)(report_u64("allocs") - allocs0), (long long)(report_u64("frees") - frees0));

    size_t need = folio_report_json(NULL, 0);
    CHECK(need > 10 && need < (16u << 20), "folio_report_json(NULL, 0) = %zu", need);
    char *buf = malloc(need + 4096);
    CHECK(buf != NULL, "malloc");
    size_t got = folio_report_json(buf, need + 4096);
    CHECK(got >= need / 2 && got < need + 4096, "folio_report_json: %zu then %zu", need, got);
    CHECK(strlen(buf) == got, "folio_report_json returned %zu but wrote %zu chars", got,
          strlen(buf));
    const char *s = buf;
    while (*s == ' ' || *s == '\n')
        s++;
    CHECK(*s == '{', "report does not start with '{': %.40s", buf);
    CHECK(strstr(buf, "\"allocs\"") != NULL, "report lacks \"allocs\": %.200s", buf);
    CHECK(strrchr(buf, '}') != NULL, "report lacks a closing '}'");
    /* this report was made after the malloc of buf: one more allocation */
    long allocs = json_value(buf, "allocs"), frees = json_value(buf, "frees");
    CHECK(allocs == (long)allocs0 + 1001 && frees == (long)frees0 + 1000,
          "report: allocs %ld frees %ld, want %llu and %llu", allocs, frees,
          (unsigned long long)allocs0 + 1001, (unsigned long long)frees0 + 1000);
    CHECK(json_value(buf, "live_blocks") == allocs - frees,
          "report: live_blocks %ld is not allocs - frees (%ld)", json_value(buf, "live_blocks"),
          allocs - frees);
    CHECK(json_value(buf, "live_bytes") >= (long)malloc_usable_size(buf),
          "report: live_bytes %ld < the usable size of the live report buffer",
          json_value(buf, "live_bytes"));

    /* Truncation like snprintf: NUL-terminated, returns the full length. */
    char small[16];
    memset(small, 'x', sizeof small);
    size_t full = folio_report_json(small, sizeof small);
    CHECK(full > sizeof small - 1, "folio_report_json(small) = %zu", full);
    CHECK(memchr(small, 0, sizeof small) != NULL && strlen(small) == sizeof small - 1,
          "truncated report not NUL-terminated at len-1");
    CHECK(small[0] == buf[0], "truncated report differs from the full one");
    free(OPAQUE(buf));

    /* folio_report_write with %p replaced by the pid. */
    char tmpl[] = "/tmp/folio-test-report-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL, "mkdtemp");
    char path[256], expect[256];
    snprintf(path, sizeof path, "%s/r-%%p.json", dir);
    snprintf(expect, sizeof expect, "%s/r-%d.json", dir, (int)getpid());
    CHECK(folio_report_write(path) == 0, "folio_report_write(%s) failed", path);
    int fd = open(expect, O_RDONLY);
    CHECK(fd >= 0, "folio_report_write did not create %s", expect);
    char fbuf[256] = {0};
    ssize_t r = read(fd, fbuf, sizeof fbuf - 1);
    close(fd);
    CHECK(r > 0 && fbuf[0] == '{' && strstr(fbuf, "\"allocs\": ") != NULL,
          "report file %s: %.40s", expect, fbuf);
    unlink(expect);
    errno = 0;
    snprintf(path, sizeof path, "%s/no/such/dir/r.json", dir);
    CHECK(folio_report_write(path) == -1 && errno != 0,
          "folio_report_write(%s) into a missing directory did not fail", path);
    rmdir(dir);

    /* folio_report_print to a pipe writes something. */
    int pfd[2];
    CHECK(pipe(pfd) == 0, "pipe");
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    folio_report_print(pfd[1]);
    close(pfd[1]);
    static char pbuf[8192];
    r = read(pfd[0], pbuf, sizeof pbuf - 1);
    close(pfd[0]);
    CHECK(r > 0, "folio_report_print wrote nothing");
    pbuf[r] = 0;
    CHECK(strncmp(pbuf, "folio report\n", 13) == 0 && strstr(pbuf, "live bytes") != NULL,
          "folio_report_print: %.80s", pbuf);
}

int main(void)
{
    pages();
    clearing();
    report();
    return 0;
}
#endif
