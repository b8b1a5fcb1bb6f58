// folio-test: tsan
/* test_clear_calloc: calloc (and FOLIO_ZERO pages) return zeroed memory on
 * every path the clearing engine sees, and its counters say which:
 *  - fresh memory from the kernel: known zero, not cleared (zero_skipped_bytes);
 *  - recycled large blocks (40 KiB .. 2 MiB) and huge extents (2 MiB .. 33 MiB),
 *    dirtied before they were freed: cleared (cleared_bytes_* grow), the
 *    first of >= 256 KiB calibrating the engine inside calloc;
 *  - purged (malloc_trim): known zero again;
 *  - blocks that realloc grew (in place in the zone, by mremap for huge) and
 *    freed dirty; huge extents freed long ago (taken as cold);
 *  - folio_alloc_pages(FOLIO_ZERO) of recycled pages;
 *  - four threads recycling at once. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

static uint64_t cleared(void)
{
	return report_u64("cleared_bytes_loop") + report_u64("cleared_bytes_stosb") +
	       report_u64("cleared_bytes_nt") + report_u64("cleared_bytes_hybrid") +
	       report_u64("cleared_bytes_other");
}

static void expect_zero(const void *p, size_t n, const char *what)
{
	size_t bad = first_not(OPAQUE(p), n, 0);
	CHECK(bad == (size_t)-1, "%s: %zu bytes at %p: byte %zu is %#x", what, n, p, bad,
	      ((const unsigned char *)p)[bad]);
}

/* malloc n, dirty all of it, free; then calloc n and check it. */
static void recycle(size_t n, const char *what)
{
	unsigned char *p = malloc(OPAQUE(n));
	CHECK(p != NULL, "%s: malloc(%zu)", what, n);
	memset(p, 0xa5, malloc_usable_size(p));
	free(OPAQUE(p));
	p = calloc(1, OPAQUE(n));
	CHECK(p != NULL, "%s: calloc(%zu)", what, n);
	expect_zero(p, n, what);
	memset(p, 0x3c, n);
	free(OPAQUE(p));
}

static const size_t sizes[] = {40000, 65536, 100003, 262144, 300001, (1u << 20) - 1, 1u << 20,
			       (2u << 20) - 5, (2u << 20) + 1, (5u << 20) + 7, (16u << 20) + 3,
			       (33u << 20) + 11};
#define NSIZES (sizeof sizes / sizeof *sizes)

static void *thread_main(void *arg)
{
	size_t base = (size_t)(uintptr_t)arg;
	for (int r = 0; r < 20; r++)
		for (size_t i = 0; i < 6; i++)
			recycle(base + i * 70001 + (size_t)r * 4099, "threads");
	return NULL;
}

int main(void)
{
	/* fresh: known zero, not cleared */
	uint64_t skipped0 = report_u64("zero_skipped_bytes");
	void *fresh[NSIZES];
	for (size_t i = 0; i < NSIZES; i++) {
		fresh[i] = calloc(1, OPAQUE(sizes[i]));
		CHECK(fresh[i] != NULL, "calloc(%zu)", sizes[i]);
		expect_zero(fresh[i], sizes[i], "fresh");
	}
	CHECK(report_u64("zero_skipped_bytes") > skipped0, "fresh memory was not known zero");
	for (size_t i = 0; i < NSIZES; i++) {
		memset(fresh[i], 0x11, sizes[i]);
		free(OPAQUE(fresh[i]));
	}

	/* recycled, dirty: cleared by the engine (which calibrates on the way) */
	uint64_t c0 = cleared();
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < NSIZES; i++)
			recycle(sizes[i], "recycled");
	CHECK(cleared() > c0, "recycled memory was not cleared by the engine");
	CHECK(report_u64("calibrated") == 1, "no calibration after clears of >= 256 KiB");

	/* purged: malloc_trim gives everything back; calloc finds zeros again */
	for (size_t i = 0; i < NSIZES; i++) {
		unsigned char *p = malloc(OPAQUE(sizes[i]));
		CHECK(p != NULL, "malloc");
		memset(p, 0x77, sizes[i]);
		free(OPAQUE(p));
	}
	malloc_trim(0);
	uint64_t skipped1 = report_u64("zero_skipped_bytes");
	for (size_t i = 0; i < NSIZES; i++) {
		unsigned char *p = calloc(1, OPAQUE(sizes[i]));
		CHECK(p != NULL, "calloc after trim");
		expect_zero(p, sizes[i], "purged");
		memset(p, 0x78, sizes[i]);
		free(OPAQUE(p));
	}
	CHECK(report_u64("zero_skipped_bytes") > skipped1, "purged memory was not known zero");

	/* realloc-grown blocks, freed dirty, then calloc'd */
	static const size_t grow[][2] = {{100000, 1500000},      /* large, in the zone */
					 {40000, (2u << 20) - 4096}, /* large to a whole chunk */
					 {1u << 20, (3u << 20) + 5},  /* large to huge */
					 {3u << 20, 9u << 20},        /* huge, mremap */
					 {9u << 20, (20u << 20) + 1}};
	for (size_t i = 0; i < sizeof grow / sizeof *grow; i++) {
		unsigned char *p = malloc(OPAQUE(grow[i][0]));
		CHECK(p != NULL, "malloc");
		memset(p, 0x42, grow[i][0]);
		p = realloc(OPAQUE(p), grow[i][1]);
		CHECK(p != NULL, "realloc to %zu", grow[i][1]);
		memset(p, 0x43, malloc_usable_size(p));
		free(OPAQUE(p));
		p = calloc(1, OPAQUE(grow[i][1]));
		CHECK(p != NULL, "calloc");
		expect_zero(p, grow[i][1], "realloc-grown");
		free(OPAQUE(p));
		/* and a smaller block that may land in the same memory */
		p = calloc(1, OPAQUE(grow[i][1] * 3 / 4));
		CHECK(p != NULL, "calloc");
		expect_zero(p, grow[i][1] * 3 / 4, "realloc-grown, smaller");
		memset(p, 0x44, grow[i][1] * 3 / 4);
		free(OPAQUE(p));
	}

	/* huge extents freed long ago (taken as cold: non-temporal clear) */
	for (size_t n = (3u << 20) + 1; n <= (24u << 20); n *= 2) {
		unsigned char *p = malloc(OPAQUE(n));
		CHECK(p != NULL, "malloc");
		memset(p, 0x99, n);
		free(OPAQUE(p));
		struct timespec ts = {0, 80 * 1000 * 1000};
		nanosleep(&ts, NULL);
		p = calloc(1, OPAQUE(n));
		CHECK(p != NULL, "calloc");
		expect_zero(p, n, "cold huge");
		free(OPAQUE(p));
	}

	/* FOLIO_ZERO pages */
	for (size_t np = 1; np <= 1024; np = np * 3 + 1) {
		unsigned char *p = folio_alloc_pages(np, 0);
		CHECK(p != NULL, "folio_alloc_pages(%zu)", np);
		memset(p, 0x5e, np * FOLIO_PAGE_SIZE);
		folio_free_pages(p, np);
		p = folio_alloc_pages(np, FOLIO_ZERO);
		CHECK(p != NULL, "folio_alloc_pages(%zu, FOLIO_ZERO)", np);
		expect_zero(p, np * FOLIO_PAGE_SIZE, "FOLIO_ZERO pages");
		folio_free_pages(p, np);
	}

	/* several threads recycling at once */
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, thread_main,
				     (void *)(uintptr_t)(40000 + (size_t)i * 300000)) == 0,
		      "pthread_create");
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	return 0;
}
