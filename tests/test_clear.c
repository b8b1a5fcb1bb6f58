// folio-test: tsan
/* test_clear: folio's clearing engine writes exactly the bytes asked.
 *
 * Every strategy of folio_clear_with (each instruction-set variant this CPU
 * has; the others must fail with ENOTSUP) and the engine (folio_clear,
 * folio_clear_hint with every hint) clear [p, p+n) for n = 0..300 at 9 head
 * alignments and for n up to 5 MiB at 3 alignments, inside a patterned
 * buffer whose 256 guard bytes on each side must be untouched.  The engine's
 * counters and its "clear" report object are checked (a report made before
 * the first clear does not set the engine up); re-executed children
 * check the FOLIO_CLEAR=<name> forced modes and clears split across helper
 * threads (FOLIO_CLEAR_MT_MIB=1). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "api.h"

#define GUARD 256
static unsigned char *buf;
static size_t buf_size;
static uint64_t seed = 1;

/* Clear n bytes at buf + GUARD + off with strategy (or the engine: -1 - hints)
 * and check the result and the guards. */
static void check_one(int strategy, unsigned hints, size_t off, size_t n)
{
	size_t total = GUARD + off + n + GUARD;
	CHECK(total <= buf_size, "buffer too small for %zu", total);
	seed++;
	pattern_fill(buf, total, seed);
	unsigned char *p = buf + GUARD + off;
	if (strategy < 0) {
		int used = strategy == -2 ? (folio_clear(p, n), FOLIO_CLEAR_AUTO)
					  : folio_clear_hint(p, n, hints);
		CHECK(used >= 0 && used < FOLIO_CLEAR_NSTRATEGIES && folio_clear_name(used),
		      "folio_clear_hint(n=%zu, hints=%#x) returned %d", n, hints, used);
	} else {
		errno = 0;
		int rc = folio_clear_with(p, n, strategy);
		CHECK(rc == 0, "folio_clear_with(%s, n=%zu) = %d", folio_clear_name(strategy), n, rc);
	}
	size_t bad = first_not(p, n, 0);
	CHECK(bad == (size_t)-1, "%s hints %#x off %zu n %zu: byte %zu is %#x, not 0",
	      strategy >= 0 ? folio_clear_name(strategy) : "engine", hints, off, n, bad, p[bad]);
	size_t head = pattern_check(buf, GUARD + off, seed);
	CHECK(head == (size_t)-1, "%s hints %#x off %zu n %zu: byte %zu before the range changed",
	      strategy >= 0 ? folio_clear_name(strategy) : "engine", hints, off, n, head);
	for (size_t i = GUARD + off + n; i < total; i++)
		CHECK(buf[i] == pattern_byte_(seed, i),
		      "%s hints %#x off %zu n %zu: byte %zu after the range changed",
		      strategy >= 0 ? folio_clear_name(strategy) : "engine", hints, off, n,
		      i - (GUARD + off + n));
}

static const size_t big[] = {511, 512, 513, 1000, 4095, 4096, 4097, 8191, 65535, 65536 + 17,
			     (256u << 10) - 1, (256u << 10) + 5, (1u << 20) + 3, (2u << 20) + 1,
			     (3u << 20) + 7, (5u << 20) + 13};
static const size_t small_offs[] = {0, 1, 7, 8, 15, 16, 31, 33, 63};
static const size_t big_offs[] = {0, 13, 63};

static void sweep(int strategy, unsigned hints)
{
	for (size_t n = 0; n <= 300; n++)
		for (size_t i = 0; i < sizeof small_offs / sizeof *small_offs; i++)
			check_one(strategy, hints, small_offs[i], n);
	for (size_t j = 0; j < sizeof big / sizeof *big; j++)
		for (size_t i = 0; i < sizeof big_offs / sizeof *big_offs; i++)
			check_one(strategy, hints, big_offs[i], big[j]);
}

static int run_child(const char *self, const char *mode, char *const env_add[])
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		for (int i = 0; env_add[i]; i++)
			putenv(env_add[i]);
		execl(self, self, mode, (char *)NULL);
		_exit(127);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st), "child %s killed by signal %d", mode, WTERMSIG(st));
	return WEXITSTATUS(st);
}

/* child: FOLIO_CLEAR=<name>: the engine must use that strategy */
static int child_forced(void)
{
	const char *name = getenv("FOLIO_CLEAR");
	int want = -1;
	for (int i = 1; i < FOLIO_CLEAR_NSTRATEGIES; i++)
		if (!strcmp(folio_clear_name(i), name))
			want = i;
	CHECK(want > 0, "unknown FOLIO_CLEAR %s", name);
	for (size_t j = 0; j < sizeof big / sizeof *big; j++) {
		check_one(-1, 0, 5, big[j]);
		seed++;
		pattern_fill(buf, big[j], seed);
		if (big[j] >= 128) {
			int used = folio_clear_hint(buf, big[j], 0);
			CHECK(used == want, "FOLIO_CLEAR=%s: engine used %s at %zu", name,
			      folio_clear_name(used), big[j]);
		}
	}
	/* calloc of recycled memory goes through it too */
	for (size_t n = 40000; n <= (6u << 20); n = n * 3 + 4099) {
		unsigned char *q = malloc(OPAQUE(n));
		CHECK(q != NULL, "malloc");
		memset(q, 0x5a, n);
		free(OPAQUE(q));
		q = calloc(1, OPAQUE(n));
		CHECK(q != NULL, "calloc");
		CHECK(first_not(q, n, 0) == (size_t)-1, "FOLIO_CLEAR=%s: calloc(%zu) not zero", name, n);
		free(OPAQUE(q));
	}
	return 0;
}

/* child: FOLIO_CLEAR_MT_MIB=1, FOLIO_CLEAR_THREADS=3: clears from 1 MiB are
 * split across helper threads; several application threads at once. */
static void *mt_worker(void *arg)
{
	size_t len = (size_t)(uintptr_t)arg;
	unsigned char *q = mmap(NULL, len + 2 * GUARD, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(q != MAP_FAILED, "mmap");
	for (int r = 0; r < 6; r++) {
		memset(q, 0x77, len + 2 * GUARD);
		folio_clear_hint(q + GUARD, len - r, r & 1 ? FOLIO_CLEAR_COLD : FOLIO_CLEAR_HOT);
		CHECK(first_not(q + GUARD, len - r, 0) == (size_t)-1, "threaded clear of %zu", len - r);
		CHECK(first_not(q, GUARD, 0x77) == (size_t)-1, "threaded clear: head guard");
		CHECK(first_not(q + GUARD + len - r, GUARD + r, 0x77) == (size_t)-1,
		      "threaded clear: tail guard");
	}
	munmap(q, len + 2 * GUARD);
	return NULL;
}

static int child_mt(void)
{
	uint64_t before = report_u64("mt_clears");
	/* forced nt: every clear from 1 MiB takes the threaded path */
	for (size_t n = (1u << 20) + 11; n <= (5u << 20); n += (1u << 20) + 4093)
		for (size_t i = 0; i < sizeof big_offs / sizeof *big_offs; i++)
			check_one(-1, 0, big_offs[i], n); /* the engine (forced) */
	CHECK(report_u64("mt_clears") > before, "no clear was split across threads");
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, mt_worker,
				     (void *)(uintptr_t)(((size_t)(i + 2) << 20) + 777)) == 0,
		      "pthread_create");
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
#ifndef __SANITIZE_THREAD__ /* TSan cannot start threads in the child of a threaded fork */
	/* and after fork, in the child, whose helpers are gone */
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		check_one(-1, 0, 3, (3u << 20) + 5);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "clear in a fork child of a process with clear helpers");
#endif
	return 0;
}

int main(int argc, char **argv)
{
	buf_size = (6u << 20) + 4 * GUARD;
	buf = mmap(NULL, buf_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED, "mmap");
	if (argc > 1 && !strcmp(argv[1], "child-forced"))
		return child_forced();
	if (argc > 1 && !strcmp(argv[1], "child-mt"))
		return child_mt();

	/* a report does not set the engine up (folio top asks for one every
	 * second); the first clear of a size that needs the engine does */
	CHECK(report_u64("set_up") == 0 && report_u64("set_up") == 0, "a report set the clearing engine up");
	folio_clear(buf, 1u << 20);
	CHECK(report_u64("set_up") == 1, "a clear of 1 MiB did not set the engine up");

	/* names and bad input */
	for (int i = 0; i < FOLIO_CLEAR_NSTRATEGIES; i++)
		CHECK(folio_clear_name(i) && *folio_clear_name(i), "strategy %d has no name", i);
	CHECK(folio_clear_name(-1) == NULL && folio_clear_name(FOLIO_CLEAR_NSTRATEGIES) == NULL,
	      "names out of range");
	errno = 0;
	CHECK(folio_clear_with(buf, 64, FOLIO_CLEAR_NSTRATEGIES) == -1 && errno == EINVAL,
	      "an unknown strategy fails with EINVAL");

	/* the engine first: its first clear of >= 256 KiB calibrates */
	sweep(-1, 0);
	CHECK(report_u64("calibrated") == 1, "the engine did not calibrate");
	CHECK(report_u64("calibration_us") > 0, "calibration_us");
	static const unsigned hints[] = {FOLIO_CLEAR_HOT, FOLIO_CLEAR_COLD, FOLIO_CLEAR_TOUCH,
					 FOLIO_CLEAR_COLD | FOLIO_CLEAR_TOUCH,
					 FOLIO_CLEAR_HOT | FOLIO_CLEAR_ONE_THREAD};
	for (size_t h = 0; h < sizeof hints / sizeof *hints; h++)
		sweep(-1, hints[h]);
	sweep(-2, 0); /* folio_clear */

	/* every strategy */
	int supported = 0;
	for (int s = 1; s < FOLIO_CLEAR_NSTRATEGIES; s++) {
		errno = 0;
		int rc = folio_clear_with(buf, 4096, s);
		if (rc != 0) {
			CHECK(errno == ENOTSUP, "%s failed with errno %d", folio_clear_name(s), errno);
			NOTE("%s: not on this CPU", folio_clear_name(s));
			continue;
		}
		supported++;
		sweep(s, 0);
	}
	CHECK(supported >= 9, "only %d strategies run here (SSE2 alone gives 9)", supported);

	/* counters: a forced non-temporal clear of 1 MiB shows */
	uint64_t nt0 = report_u64("cleared_bytes_nt");
	CHECK(folio_clear_with(buf, 1u << 20, FOLIO_CLEAR_NT) == 0, "nt");
	CHECK(report_u64("cleared_bytes_nt") >= nt0 + (1u << 20), "cleared_bytes_nt did not grow");
	uint64_t st0 = report_u64("cleared_bytes_stosb");
	CHECK(folio_clear_with(buf, 1u << 20, FOLIO_CLEAR_STOSB) == 0, "stosb");
	CHECK(report_u64("cleared_bytes_stosb") >= st0 + (1u << 20), "cleared_bytes_stosb");
	uint64_t hy0 = report_u64("cleared_bytes_hybrid");
	CHECK(folio_clear_with(buf, 2u << 20, FOLIO_CLEAR_HYBRID) == 0, "hybrid");
	CHECK(report_u64("cleared_bytes_hybrid") >= hy0 + (2u << 20), "cleared_bytes_hybrid");
	/* a calloc of fresh memory (a new 3 MiB huge mapping: this process has
	 * allocated nothing yet) is known zero: skipped, and counted exactly */
	uint64_t zs0 = report_u64("zero_skipped_bytes");
	void *fresh = calloc(1, OPAQUE((size_t)3 << 20));
	CHECK(fresh != NULL, "calloc(1, 3 MiB)");
	CHECK(report_u64("zero_skipped_bytes") == zs0 + (3u << 20),
	      "calloc(1, 3 MiB) of fresh memory: zero_skipped_bytes grew by %lld, want %u",
	      (long long)(report_u64("zero_skipped_bytes") - zs0), 3u << 20);
	CHECK(first_not(fresh, 3u << 20, 0) == (size_t)-1, "calloc(1, 3 MiB) not zero");
	free(OPAQUE(fresh));

	/* forced modes and threads, in children */
	char self[4096];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
	CHECK(sl > 0, "readlink /proc/self/exe");
	self[sl] = 0;
	static const char *const forced[] = {"loop", "stosb", "nt", "hybrid", "pages", "memset"};
	for (size_t i = 0; i < sizeof forced / sizeof *forced; i++) {
		static char env[64];
		snprintf(env, sizeof env, "FOLIO_CLEAR=%s", forced[i]);
		char *add[] = {env, NULL};
		CHECK(run_child(self, "child-forced", add) == 0, "FOLIO_CLEAR=%s child failed", forced[i]);
	}
	char *mt_nt[] = {"FOLIO_CLEAR=nt", "FOLIO_CLEAR_MT_MIB=1", "FOLIO_CLEAR_THREADS=3", NULL};
	CHECK(run_child(self, "child-mt", mt_nt) == 0, "threaded clears (forced nt) failed");
	char *mt_auto[] = {"FOLIO_CLEAR=stosb", "FOLIO_CLEAR_MT_MIB=1", "FOLIO_CLEAR_THREADS=2", NULL};
	CHECK(run_child(self, "child-mt", mt_auto) == 0, "threaded clears (forced stosb) failed");
	munmap(buf, buf_size);
	return 0;
}
