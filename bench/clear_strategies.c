/* clear_strategies: every clearing strategy of folio's engine, and the
 * engine's own choice, in GB/s at sizes 4 KiB .. 1 GiB, on a destination that
 * is hot (just written: dirty lines in the cache) or cold (its lines evicted
 * by non-temporal stores).  The seed tables of issue 5 come out of it:
 *   (a) seed 000: page at a time against one rep stosb over the extent, 2 MiB and 1 GiB;
 *   (b) seed 002: rep stosb against non-temporal stores, 16 MiB and 128 MiB, hot and cold;
 *   (c) every strategy and the engine (told hot or cold, one thread) at every size.
 *
 * The strategies are folio's (folio_clear_with, loaded from libfolio.so with
 * dlopen: --lib, default <dir of this program>/../libfolio.so), so this runs
 * under any malloc.  Method: for each repetition, each size, hot then cold,
 * each strategy in a rotated order: prepare the window (hot: memset to 1;
 * cold: folio's non-temporal clear), then time clearing it in blocks of the
 * size; a measurement repeats such rounds until >= 32 MiB (full run: 64 MiB)
 * were cleared, at least 3 rounds up to 256 MiB and 2 above, and is the
 * median round (bursts of other processes' load hit single rounds).  Untimed
 * rounds with the same strategy come first, up to 128 MiB until the rate
 * stops rising (at most 10), above one: on this kind of CPU a strategy runs
 * slower over lines another one left (rep stosb after non-temporal stores:
 * for 1 round at 16 MiB, 3-10 at 32-64 MiB), so every column is its
 * strategy's steady state.  Windows: hot max(size, 256 KiB) (in L2), cold
 * max(size, 1 MiB).  Reported: the median over repetitions, and "paired":
 * the median over repetitions of engine / the best strategy in the same
 * repetition.  The engine warms up (explores) with 60 untimed clears per
 * size and state (36 from 128 MiB, 18 from 512 MiB) before the first timed
 * one.
 *
 * Output: readable tables, then one line `clear_strategies_json {...}`. */
#include "bench.h"

#include <sys/mman.h>

typedef int (*clear_hint_fn)(void *, size_t, unsigned);
typedef int (*clear_with_fn)(void *, size_t, int);
typedef const char *(*clear_name_fn)(int);
typedef size_t (*report_fn)(char *, size_t);

/* folio.h's values (bench/ programs do not see include/) */
enum { S_AUTO, S_LOOP, S_STOSB, S_NT, S_HYBRID, S_PAGES, S_MEMSET };
#define H_HOT 0x1u
#define H_COLD 0x2u
#define H_ONE_THREAD 0x8u

static clear_hint_fn clear_hint;
static clear_with_fn clear_with;
static clear_name_fn clear_name;
static report_fn report_json;

#define NSTRAT 8 /* loop stosb nt hybrid pages memset, engine (1 thread), engine (threads) */
static const int strat_id[NSTRAT] = {S_LOOP, S_STOSB, S_NT, S_HYBRID, S_PAGES, S_MEMSET, -1, -2};
static const char *const strat_label[NSTRAT] = {"loop", "stosb", "nt", "hybrid", "pages",
						"memset", "engine", "engine_mt"};
#define MAXSIZES 32
#define MAXROUNDS 1024
#define MAXREPS 15

static double gbps[MAXREPS][MAXSIZES][2][NSTRAT];
static size_t volume = (size_t)64 << 20; /* bytes timed per measurement, at least */
static int choice_count[MAXSIZES][2][16];

static inline void fence(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
	double t[MAXREPS];
	memcpy(t, v, sizeof(double) * (size_t)n);
	qsort(t, (size_t)n, sizeof(double), cmpd);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static void prepare(char *w, size_t wsize, int cold)
{
	if (cold)
		clear_with(w, wsize, S_NT);
	else
		memset(w, 1, wsize);
}

/* One clear of [p, p+n) with strategy index k; returns the strategy used. */
static int do_clear(int k, char *p, size_t n, int cold)
{
	unsigned h = cold ? H_COLD : H_HOT;
	if (strat_id[k] == -1)
		return clear_hint(p, n, h | H_ONE_THREAD);
	if (strat_id[k] == -2)
		return clear_hint(p, n, h);
	clear_with(p, n, strat_id[k]);
	return strat_id[k];
}

/* One round: prepare the window, clear it in blocks of s, GB/s. */
static double round_gbps(char *pool, size_t w, size_t s, int cold, int k, int si, int record)
{
	prepare(pool, w, cold);
	fence();
	double t0 = bench_now();
	for (size_t off = 0; off + s <= w; off += s) {
		int used = do_clear(k, pool + off, s, cold);
		if (record && used >= 0 && used < 16)
			choice_count[si][cold][used]++;
	}
	fence();
	return (double)w / (bench_now() - t0) / 1e9;
}

/* GB/s of strategy k at size s, hot or cold. */
static double measure(char *pool, size_t s, int cold, int k, int si, int record)
{
	size_t w = cold ? (s > (1u << 20) ? s : (1u << 20)) : (s > (256u << 10) ? s : (256u << 10));
	size_t rounds = volume / w, big = (size_t)128 << 20;
	size_t min_rounds = s <= 2 * big ? 3 : 2; /* one 1 GiB clear is too noisy to stand alone */
	if (rounds < min_rounds)
		rounds = min_rounds;
	if (rounds > MAXROUNDS)
		rounds = MAXROUNDS;
	/* untimed rounds first, up to 128 MiB until the rate stops rising by
	 * more than 1/16 (at most 10): a strategy is slower over lines another
	 * strategy left than over its own, for 1 round at 16 MiB but for 3-10 at
	 * 32-64 MiB (the last-level cache takes that long to hold the window
	 * again), so each column is its strategy's steady state.  Above: one. */
	int warm_max = s <= big ? 10 : 1;
	double prev = 0;
	for (int i = 0; i < warm_max; i++) {
		double g = round_gbps(pool, w, s, cold, k, si, 0);
		if (i > 0 && g * 16 <= prev * 17)
			break;
		prev = g;
	}
	static double rate[MAXROUNDS];
	for (size_t r = 0; r < rounds; r++)
		rate[r] = round_gbps(pool, w, s, cold, k, si, record);
	/* the median round: a burst of the other tenants' load hits some rounds */
	qsort(rate, rounds, sizeof(double), cmpd);
	return rounds % 2 ? rate[rounds / 2] : (rate[rounds / 2 - 1] + rate[rounds / 2]) / 2;
}

static void *load(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "clear_strategies: cannot load %s: %s\n", lib, dlerror());
		exit(1);
	}
	clear_hint = (clear_hint_fn)dlsym(h, "folio_clear_hint");
	clear_with = (clear_with_fn)dlsym(h, "folio_clear_with");
	clear_name = (clear_name_fn)dlsym(h, "folio_clear_name");
	report_json = (report_fn)dlsym(h, "folio_report_json");
	if (!clear_hint || !clear_with || !clear_name || !report_json) {
		fprintf(stderr, "clear_strategies: %s lacks folio_clear_hint/with/name\n", lib);
		exit(1);
	}
	return h;
}

static double med(int nreps, int si, int cold, int k)
{
	double v[MAXREPS];
	for (int r = 0; r < nreps; r++)
		v[r] = gbps[r][si][cold][k];
	return median_of(v, nreps);
}

/* The engine against the best strategy (by median) of the row, paired: the
 * median over repetitions of engine / that strategy in the same repetition
 * (both measured within a fraction of a second of each other, so a slow
 * period of the machine hits both). */
static double paired(int nreps, int si, int cold)
{
	int best = 0;
	double bv = -1, v[MAXREPS];
	for (int k = 0; k < 6; k++)
		if (med(nreps, si, cold, k) > bv)
			bv = med(nreps, si, cold, k), best = k;
	for (int r = 0; r < nreps; r++)
		v[r] = gbps[r][si][cold][best] > 0 ? gbps[r][si][cold][6] / gbps[r][si][cold][best] : 0;
	return median_of(v, nreps);
}

static int top_choice(int si, int cold)
{
	int best = -1, bc = 0;
	for (int i = 0; i < 16; i++)
		if (choice_count[si][cold][i] > bc)
			bc = choice_count[si][cold][i], best = i;
	return best;
}

static const char *size_text(size_t s, char *buf)
{
	if (s >= (1u << 30))
		sprintf(buf, "%zu GiB", s >> 30);
	else if (s >= (1u << 20))
		sprintf(buf, "%zu MiB", s >> 20);
	else
		sprintf(buf, "%zu KiB", s >> 10);
	return buf;
}

static int find_size(size_t *sizes, int n, size_t s)
{
	for (int i = 0; i < n; i++)
		if (sizes[i] == s)
			return i;
	return -1;
}

int main(int argc, char **argv)
{
	long long quick = 0, reps = 0, max_size = 1ll << 30, hot_max = 1ll << 40;
	char self[4096], lib[4200];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
	self[sl > 0 ? sl : 0] = 0;
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = 0;
	snprintf(lib, sizeof lib, "%s/../libfolio.so", self);
	static char lib_opt[4200];
	struct bench_opt o[] = {
		{"quick", 'i', &quick, "1: sizes in steps of 4 (plus 2, 16, 128 MiB), 3 repetitions"},
		{"reps", 'i', &reps, "repetitions (0: 5, or 3 with --quick 1)"},
		{"max-size", 'i', &max_size, "largest size in bytes (K/M/G suffixes)"},
		{"hot-max", 'i', &hot_max, "largest size also measured hot (above: cold only)"},
	};
	/* --lib PATH is a string: take it out before bench_parse */
	int ac = 0;
	char *av[64];
	for (int i = 0; i < argc && ac < 63; i++) {
		if (!strcmp(argv[i], "--lib") && i + 1 < argc) {
			snprintf(lib_opt, sizeof lib_opt, "%s", argv[++i]);
			continue;
		}
		av[ac++] = argv[i];
	}
	bench_parse(ac, av, "every clearing strategy of folio and the engine's choice (GB/s); "
		    "--lib PATH: the libfolio.so to load", o, BENCH_NOPTS(o));
	load(lib_opt[0] ? lib_opt : lib);
	if (reps <= 0)
		reps = quick ? 3 : 5;
	if (quick)
		volume = (size_t)32 << 20;
	if (reps > MAXREPS)
		reps = MAXREPS;
	size_t sizes[MAXSIZES];
	int ns = 0;
	for (size_t s = 4096; s <= (size_t)max_size && ns < MAXSIZES; s <<= 1) {
		int sh = __builtin_ctzll(s);
		int keep = !quick || sh % 2 == 0 || s == (2u << 20) || s == (16u << 20) ||
			   s == (128u << 20);
		if (keep)
			sizes[ns++] = s;
	}
	size_t pool_size = sizes[ns - 1] > (1u << 20) ? sizes[ns - 1] : (1u << 20);
	char *pool = mmap(NULL, pool_size, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (pool == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(pool, 1, pool_size);
	/* the engine calibrates inside its first clear of >= 256 KiB: do it here */
	double tc = bench_now();
	clear_hint(pool, 1u << 20, H_HOT);
	tc = bench_now() - tc;

	/* warm the engine up (its online exploration: a trial of 3-12 clears
	 * per candidate) before timing it: 40 clears on one thread (24 from
	 * 128 MiB, 12 from 512 MiB), then half as many with threads allowed */
	for (int si = 0; si < ns; si++)
		for (int cold = 0; cold < 2; cold++) {
			size_t s = sizes[si];
			int n1 = s >= ((size_t)512 << 20) ? 12 : s >= ((size_t)128 << 20) ? 24 : 40;
			for (int i = 0; i < n1 + n1 / 2; i++) {
				if ((!cold && s > (size_t)hot_max) || s < (256u << 10))
					continue;
				prepare(pool, s, cold);
				clear_hint(pool, s, (cold ? H_COLD : H_HOT) | (i < n1 ? H_ONE_THREAD : 0));
			}
		}
	double t0 = bench_now();
	for (int r = 0; r < reps; r++)
		for (int si = 0; si < ns; si++)
			for (int cold = 0; cold < 2; cold++)
				for (int j = 0; j < NSTRAT; j++) {
					int k = (j + r + si) % NSTRAT;
					if (!cold && sizes[si] > (size_t)hot_max) {
						gbps[r][si][cold][k] = -1;
						continue;
					}
					gbps[r][si][cold][k] = measure(pool, sizes[si], cold, k, si, r > 0 || reps == 1);
				}
	double elapsed = bench_now() - t0;

	char b1[32], b2[32];
	printf("clear_strategies: %lld repetitions, %.1f s; engine calibration inside its first "
	       "clear: %.2f ms (wall, incl. that clear)\n\n", reps, elapsed, tc * 1e3);
	/* (c) */
	for (int cold = 0; cold < 2; cold++) {
		printf("(c) GB/s, %s destination (median of %lld)\n", cold ? "cold" : "hot", reps);
		printf("%8s", "size");
		for (int k = 0; k < NSTRAT; k++)
			printf(" %9s", strat_label[k]);
		printf("  %-7s %s %s\n", "choice", "engine/best", "paired");
		for (int si = 0; si < ns; si++) {
			if (med((int)reps, si, cold, 1) < 0)
				continue; /* not measured (--hot-max) */
			printf("%8s", size_text(sizes[si], b1));
			double best = 0;
			for (int k = 0; k < NSTRAT; k++) {
				double v = med((int)reps, si, cold, k);
				if (k < 6 && v > best)
					best = v;
				printf(" %9.2f", v);
			}
			int ch = top_choice(si, cold);
			printf("  %-7s %11.3f %6.3f\n", ch >= 0 ? clear_name(ch) : "-",
			       med((int)reps, si, cold, 6) / best, paired((int)reps, si, cold));
		}
		printf("\n");
	}
	/* (a) */
	printf("(a) seed 000: page at a time against the whole extent (GB/s)\n");
	printf("%8s %5s %10s %10s %8s %10s %8s\n", "extent", "state", "pages", "stosb", "change",
	       "engine", "change");
	size_t a_sizes[2] = {2u << 20, 1u << 30};
	for (int i = 0; i < 2; i++) {
		int si = find_size(sizes, ns, a_sizes[i]);
		if (si < 0)
			continue;
		for (int cold = 0; cold < 2; cold++) {
			double pg = med((int)reps, si, cold, 4), st = med((int)reps, si, cold, 1);
			double en = med((int)reps, si, cold, 6);
			if (pg < 0)
				continue;
			printf("%8s %5s %10.2f %10.2f %+7.1f%% %10.2f %+7.1f%%\n", size_text(sizes[si], b1),
			       cold ? "cold" : "hot", pg, st, 100 * (st / pg - 1), en, 100 * (en / pg - 1));
		}
	}
	printf("\n(b) seed 002: rep stosb against non-temporal stores (GB/s)\n");
	printf("%8s %5s %10s %10s %8s %8s\n", "size", "state", "stosb", "nt", "change", "engine");
	size_t b_sizes[2] = {16u << 20, 128u << 20};
	for (int i = 0; i < 2; i++) {
		int si = find_size(sizes, ns, b_sizes[i]);
		if (si < 0)
			continue;
		for (int cold = 0; cold < 2; cold++) {
			double st = med((int)reps, si, cold, 1), nt = med((int)reps, si, cold, 2);
			int ch = top_choice(si, cold);
			if (st < 0)
				continue;
			printf("%8s %5s %10.2f %10.2f %+7.1f%% %8s\n", size_text(sizes[si], b2),
			       cold ? "cold" : "hot", st, nt, 100 * (nt / st - 1),
			       ch >= 0 ? clear_name(ch) : "-");
		}
	}

	/* the machine-readable line */
	static char rep[1 << 16];
	report_json(rep, sizeof rep);
	const char *c = strstr(rep, "\"clear\": ");
	printf("\nclear_strategies_json {\"reps\": %lld, \"elapsed_s\": %.3f, \"calibration_wall_ms\": "
	       "%.3f, \"strategies\": [", reps, elapsed, tc * 1e3);
	for (int k = 0; k < NSTRAT; k++)
		printf("%s\"%s\"", k ? ", " : "", strat_label[k]);
	printf("], \"rows\": [");
	for (int si = 0; si < ns; si++)
		for (int cold = 0; cold < 2; cold++) {
			int ch = top_choice(si, cold);
			printf("%s{\"size\": %zu, \"state\": \"%s\", \"choice\": \"%s\", \"gbps\": [",
			       si || cold ? ", " : "", sizes[si], cold ? "cold" : "hot",
			       ch >= 0 ? clear_name(ch) : "-");
			for (int k = 0; k < NSTRAT; k++)
				printf("%s%.3f", k ? ", " : "", med((int)reps, si, cold, k));
			double lo = 1e30, hi = 0;
			for (int r = 0; r < reps; r++) {
				double v = gbps[r][si][cold][6];
				if (v < lo)
					lo = v;
				if (v > hi)
					hi = v;
			}
			printf("], \"paired\": %.4f", med((int)reps, si, cold, 1) < 0 ? -1.0 :
			       paired((int)reps, si, cold));
			printf(", \"engine_spread\": %.3f", med((int)reps, si, cold, 6) > 0 ?
				(hi - lo) / med((int)reps, si, cold, 6) : 0.0);
			printf(", \"min\": [");
			for (int k = 0; k < NSTRAT; k++) {
				double lo = 1e30;
				for (int r = 0; r < reps; r++)
					if (gbps[r][si][cold][k] < lo)
						lo = gbps[r][si][cold][k];
				printf("%s%.3f", k ? ", " : "", lo);
			}
			printf("]}");
		}
	printf("], \"clear\": ");
	if (c) {
		c += 9;
		int depth = 0;
		for (const char *q = c; *q; q++) {
			putchar(*q == '\n' ? ' ' : *q);
			if (*q == '{')
				depth++;
			else if (*q == '}' && --depth == 0)
				break;
		}
	} else {
		printf("null");
	}
	printf("}\n");
	munmap(pool, pool_size);
	return 0;
}
