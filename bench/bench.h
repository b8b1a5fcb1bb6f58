/* bench.h: the small toolkit every folio benchmark program shares.
 *
 * A benchmark program uses nothing but the standard malloc family, so the
 * allocator under test is whatever LD_PRELOAD puts first.  Each program:
 *   - takes `--name value` options from a table (bench_parse), `--help` lists them;
 *   - prints exactly one machine-readable result line on stdout:
 *       bench=NAME malloc_lib=PATH key=value key=value ...
 *     where malloc_lib is the shared object that provides `malloc` in this
 *     process (the runner checks it, so a preload that silently failed is
 *     caught instead of being measured as the wrong allocator).
 *
 * Everything here is header-only and static so each program is one .c file.
 */
#ifndef FOLIO_BENCH_H
#define FOLIO_BENCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---- time ---------------------------------------------------------------- */

static inline double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void bench_sleep(double seconds)
{
	struct timespec ts;
	ts.tv_sec = (time_t)seconds;
	ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

/* ---- random numbers: xorshift64*, one state per thread -------------------- */

static inline uint64_t bench_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static inline uint64_t bench_seed(uint64_t seed, uint64_t stream)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ULL + stream * 0xBF58476D1CE4E5B9ULL + 1;
	return s ? s : 1;
}

/* A value in [lo, hi] (inclusive). */
static inline uint64_t bench_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
	return lo + bench_rand(s) % (hi - lo + 1);
}

/* ---- keeping the compiler from deleting malloc/free pairs ----------------- */

static inline void bench_sink(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

/* ---- options -------------------------------------------------------------- */

struct bench_opt {
	const char *name; /* without the leading "--" */
	char type;        /* 'i': long long (accepts K/M/G suffixes), 'd': double */
	void *val;        /* long long * or double * holding the default */
	const char *help;
};

static inline void bench_usage(FILE *f, const char *prog, const char *about,
			const struct bench_opt *o, size_t n)
{
	fprintf(f, "usage: %s [--option value]...\n%s\noptions:\n", prog, about);
	for (size_t i = 0; i < n; i++) {
		if (o[i].type == 'i')
			fprintf(f, "  --%-12s %s (default %lld)\n", o[i].name, o[i].help,
				*(long long *)o[i].val);
		else
			fprintf(f, "  --%-12s %s (default %g)\n", o[i].name, o[i].help,
				*(double *)o[i].val);
	}
}

static inline long long bench_parse_int(const char *s, const char *name)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	if (end == s || errno) {
		fprintf(stderr, "bad value for --%s: %s\n", name, s);
		exit(2);
	}
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end) {
		fprintf(stderr, "bad value for --%s: %s\n", name, s);
		exit(2);
	}
	return v;
}

static inline void bench_parse(int argc, char **argv, const char *about,
			const struct bench_opt *o, size_t n)
{
	for (int a = 1; a < argc; a++) {
		const char *arg = argv[a];
		if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
			bench_usage(stdout, argv[0], about, o, n);
			exit(0);
		}
		size_t i;
		for (i = 0; i < n; i++)
			if (arg[0] == '-' && arg[1] == '-' && !strcmp(arg + 2, o[i].name))
				break;
		if (i == n || a + 1 >= argc) {
			fprintf(stderr, "%s: unknown option or missing value: %s\n", argv[0], arg);
			bench_usage(stderr, argv[0], about, o, n);
			exit(2);
		}
		const char *v = argv[++a];
		if (o[i].type == 'i') {
			*(long long *)o[i].val = bench_parse_int(v, o[i].name);
		} else {
			char *end;
			double d = strtod(v, &end);
			if (end == v || *end) {
				fprintf(stderr, "bad value for --%s: %s\n", o[i].name, v);
				exit(2);
			}
			*(double *)o[i].val = d;
		}
	}
}

#define BENCH_NOPTS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- memory of this process ----------------------------------------------- */

/* Current resident set size in bytes (from /proc/self/statm), 0 if unknown. */
static inline long long bench_rss_bytes(void)
{
	long long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (fscanf(f, "%lld %lld", &size, &res) != 2)
		res = 0;
	fclose(f);
	return res * sysconf(_SC_PAGESIZE);
}

/* Peak resident set size in bytes (VmHWM), 0 if unknown. */
static inline long long bench_hwm_bytes(void)
{
	char line[256];
	long long kb = 0;
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

/* ---- threads -------------------------------------------------------------- */

static inline void bench_spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
	int rc = pthread_create(t, NULL, fn, arg);
	if (rc) {
		fprintf(stderr, "pthread_create: %s\n", strerror(rc));
		exit(1);
	}
}

static inline void *bench_xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	return p;
}

/* ---- the result line ------------------------------------------------------ */

/* Path of the object that defines the `malloc` this process calls. */
static inline const char *bench_malloc_lib(void)
{
	Dl_info info;
	void *sym = dlsym(RTLD_DEFAULT, "malloc");
	if (sym && dladdr(sym, &info) && info.dli_fname && info.dli_fname[0])
		return info.dli_fname;
	return "unknown";
}

/* bench_result("churn", "ops=%lld elapsed_s=%.6f", ...): one line on stdout. */
__attribute__((format(printf, 2, 3)))
static inline void bench_result(const char *name, const char *fmt, ...)
{
	va_list ap;
	printf("bench=%s malloc_lib=%s ", name, bench_malloc_lib());
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* ---- timed multi-thread loops (will-it-scale style) ------------------------ */

/* A thread's progress, alone in its cache line: operations (the owner adds to
 * them as it works) and completed iterations.  The main thread samples them. */
struct bench_counter {
	_Alignas(64) long long ops;
	long long iters;
	char pad[64 - 2 * sizeof(long long)];
};

static inline void bench_count(struct bench_counter *c, long long n)
{
	__atomic_store_n(&c->ops, c->ops + n, __ATOMIC_RELAXED);
}

/* One iteration of a timed loop; it calls bench_count() as it does work. */
typedef void (*bench_step_fn)(void *ctx, int tid, uint64_t *rng, struct bench_counter *c);

struct bench_timed {
	bench_step_fn step;
	void *ctx;
	int tid;
	uint64_t rng;
	struct bench_counter *counter;
	volatile int *stop;
	pthread_barrier_t *start;
};

static inline void *bench_timed_thread(void *arg)
{
	struct bench_timed *t = arg;
	pthread_barrier_wait(t->start);
	while (!__atomic_load_n(t->stop, __ATOMIC_RELAXED)) {
		t->step(t->ctx, t->tid, &t->rng, t->counter);
		__atomic_store_n(&t->counter->iters, t->counter->iters + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static inline long long bench_minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* The measured window, told to `perf stat --control fifo:CTL,ACK -D -1`
 * (the scaling suite's wrapper): BENCH_PERF_CTL=CTL:ACK names the FIFOs;
 * counting runs only between "enable" and "disable", so perf's counts are
 * the window's.  Without the variable, nothing happens. */
static inline void bench_perf_ctl(const char *cmd)
{
	static int ctl = -1, ack = -1;
	const char *spec = getenv("BENCH_PERF_CTL");
	if (!spec || !*spec)
		return;
	if (ctl < 0) {
		char path[512];
		const char *colon = strchr(spec, ':');
		if (!colon || (size_t)(colon - spec) >= sizeof path)
			return;
		memcpy(path, spec, (size_t)(colon - spec));
		path[colon - spec] = 0;
		ctl = open(path, O_WRONLY);
		ack = open(colon + 1, O_RDONLY);
		if (ctl < 0 || ack < 0) {
			fprintf(stderr, "BENCH_PERF_CTL: cannot open %s\n", spec);
			exit(1);
		}
	}
	char buf[16];
	if (write(ctl, cmd, strlen(cmd)) < 0 || read(ack, buf, sizeof buf) <= 0) {
		fprintf(stderr, "BENCH_PERF_CTL: perf did not answer %s", cmd);
		exit(1);
	}
}

struct bench_timed_result {
	long long ops;            /* operations in the measured window, all threads */
	long long min_thread_ops; /* the slowest thread's operations in the window */
	double elapsed;           /* length of the measured window */
	long long minflt;         /* minor faults in the window (whole process) */
	double warmup;            /* seconds until every thread had done its warm-up iterations */
	long long total_minflt;   /* minor faults from start until every thread stopped */
};

/* Runs `step` in `threads` threads.  The window is measured once every thread
 * has completed `warmup_iters` iterations (so first-touch costs of a caching
 * allocator are not mixed with its steady state; at most 30 s of warm-up), and
 * lasts `seconds`; then the threads stop (each finishes its iteration). */
static inline struct bench_timed_result bench_run_timed(int threads, double seconds,
							 long long warmup_iters, uint64_t seed,
							 bench_step_fn step, void *ctx)
{
	volatile int stop = 0;
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	struct bench_timed *t = calloc((size_t)threads, sizeof *t);
	pthread_t *th = calloc((size_t)threads, sizeof *th);
	struct bench_counter *cnt = aligned_alloc(64, sizeof *cnt * (size_t)threads);
	long long *ops0 = calloc((size_t)threads, sizeof *ops0);
	if (!t || !th || !cnt || !ops0)
		exit(1);
	memset(cnt, 0, sizeof *cnt * (size_t)threads);
	for (int k = 0; k < threads; k++) {
		t[k] = (struct bench_timed){.step = step, .ctx = ctx, .tid = k,
					    .rng = bench_seed(seed, (uint64_t)k), .counter = &cnt[k],
					    .stop = &stop, .start = &start};
		bench_spawn(&th[k], bench_timed_thread, &t[k]);
	}
	struct bench_timed_result r = {0, -1, 0, 0, 0, 0};
	long long f_start = bench_minflt();
	pthread_barrier_wait(&start);
	double t_start = bench_now();
	for (;;) {
		int warm = 1;
		for (int k = 0; k < threads; k++)
			if (__atomic_load_n(&cnt[k].iters, __ATOMIC_RELAXED) < warmup_iters)
				warm = 0;
		if (warm || bench_now() - t_start > 30.0)
			break;
		bench_sleep(0.001);
	}
	for (int k = 0; k < threads; k++)
		ops0[k] = __atomic_load_n(&cnt[k].ops, __ATOMIC_RELAXED);
	bench_perf_ctl("enable\n");
	long long f0 = bench_minflt();
	double t0 = bench_now();
	r.warmup = t0 - t_start;
	bench_sleep(seconds);
	for (int k = 0; k < threads; k++) {
		long long v = __atomic_load_n(&cnt[k].ops, __ATOMIC_RELAXED) - ops0[k];
		r.ops += v;
		if (r.min_thread_ops < 0 || v < r.min_thread_ops)
			r.min_thread_ops = v;
	}
	r.minflt = bench_minflt() - f0;
	r.elapsed = bench_now() - t0;
	bench_perf_ctl("disable\n");
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	for (int k = 0; k < threads; k++)
		pthread_join(th[k], NULL);
	r.total_minflt = bench_minflt() - f_start;
	pthread_barrier_destroy(&start);
	free(t);
	free(th);
	free(cnt);
	free(ops0);
	return r;
}

/* The result line of a timed benchmark: rates, the window, minor faults per
 * MiB (`mib_per_op`: MiB allocated or touched per operation), then `extra`
 * (more key=value fields, or ""). */
static inline void bench_timed_print(const char *name, long long threads,
				     struct bench_timed_result r, double mib_per_op,
				     const char *extra)
{
	double rate = (double)r.ops / r.elapsed;
	double mib = (double)r.ops * mib_per_op;
	bench_result(name,
		     "threads=%lld ops=%lld elapsed_s=%.6f ops_per_sec=%.0f ops_per_sec_per_thread=%.0f "
		     "min_thread_ops=%lld warmup_s=%.3f mib=%.1f window_minflt=%lld "
		     "faults_per_mib=%.4f total_minflt=%lld %s",
		     threads, r.ops, r.elapsed, rate, rate / (double)threads, r.min_thread_ops,
		     r.warmup, mib, r.minflt, mib > 0 ? (double)r.minflt / mib : 0.0,
		     r.total_minflt, extra);
}

#endif
