/* clear_calloc: calloc of a recycled block, then a pass over it (issue 5,
 * table d).  Each iteration: calloc(1, size), then a pass over every cache
 * line -- timed -- then write the whole block (the program using it) and
 * free it, untimed, so the next calloc can get the same, dirty, block back.
 * The pass (--pass) reads each line's first word, checks it is zero and
 * writes it back incremented (rmw, the default: a program callocs memory to
 * write into it), or only reads (read: over a fresh mapping that reads the
 * kernel's shared zero page and defers all zeroing to the first write, which
 * is then outside the timed part).  One untimed warm-up iteration first, so even the first
 * timed calloc can be served from recycled memory.
 *
 * Result: gbps = size / median(calloc + pass time); also the mean, the
 * first timed iteration, and the median free time. */
#include "bench.h"

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, long long n)
{
	qsort(v, (size_t)n, sizeof(double), cmpd);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	long long size = 1 << 20, iters = 20, warmup = 1, read_only = 0;
	struct bench_opt o[] = {
		{"size", 'i', &size, "bytes per calloc (K/M/G suffixes)"},
		{"iters", 'i', &iters, "timed iterations"},
		{"warmup", 'i', &warmup, "untimed iterations first"},
		{"read-only", 'i', &read_only, "1: the pass only reads (default 0: read and write back)"},
	};
	bench_parse(argc, argv, "calloc a recycled block, read it, write it, free it", o,
		    BENCH_NOPTS(o));
	if (size < 64 || iters < 1) {
		fprintf(stderr, "clear_calloc: --size >= 64 and --iters >= 1\n");
		return 2;
	}
	size_t n = (size_t)size;
	double *t = bench_xmalloc(sizeof(double) * (size_t)iters);
	double *tf = bench_xmalloc(sizeof(double) * (size_t)iters);
	unsigned long long sum = 0;
	long long f0 = bench_minflt();
	double first = 0, total = 0;
	for (long long i = -warmup; i < iters; i++) {
		double t0 = bench_now();
		unsigned char *p = calloc(1, n);
		if (!p) {
			fprintf(stderr, "clear_calloc: calloc(1, %zu) failed\n", n);
			return 1;
		}
		if (read_only) {
			for (size_t off = 0; off < n; off += 64) {
				unsigned long long w;
				memcpy(&w, p + off, sizeof w);
				sum |= w;
			}
		} else {
			for (size_t off = 0; off + 8 <= n; off += 64) {
				unsigned long long w;
				memcpy(&w, p + off, sizeof w);
				sum |= w;
				w++;
				memcpy(p + off, &w, sizeof w);
			}
		}
		double t1 = bench_now();
		memset(p, (int)(i & 0x7f) + 1, n);
		bench_sink(p);
		double t2 = bench_now();
		free(p);
		double t3 = bench_now();
		if (i >= 0) {
			t[i] = t1 - t0;
			tf[i] = t3 - t2;
			total += t1 - t0;
			if (i == 0)
				first = t1 - t0;
		}
	}
	if (sum) {
		fprintf(stderr, "clear_calloc: calloc returned memory that is not zero\n");
		return 1;
	}
	long long faults = bench_minflt() - f0;
	double med = median(t, iters), medf = median(tf, iters);
	bench_result("clear_calloc",
		     "size=%zu iters=%lld pass=%s gbps=%.3f mean_gbps=%.3f first_gbps=%.3f "
		     "calloc_pass_us=%.2f free_us=%.2f faults_per_iter=%.1f",
		     n, iters, read_only ? "read" : "rmw", (double)n / med / 1e9, (double)n * (double)iters / total / 1e9,
		     (double)n / first / 1e9, med * 1e6, medf * 1e6,
		     (double)faults / (double)(iters + warmup));
	free(t);
	free(tf);
	return 0;
}
