/* alloc_cache_scratch: passive and active false sharing (Hoard's cache-scratch).
 *
 * The main thread allocates one `--size`-byte object per thread back to back
 * (so an allocator that packs them shares cache lines between threads) and
 * hands one to each thread.  Each thread frees its object, then `--iterations`
 * times allocates an object of the same size, writes each of its bytes
 * `--writes` times, and frees it.  An allocator that gives threads objects in
 * the same cache line makes the writes slow.  Reports the time. */
#include "bench.h"

struct worker {
	char *first;
	long long iterations, writes, size;
	pthread_barrier_t *start;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	pthread_barrier_wait(w->start);
	free(w->first);
	for (long long i = 0; i < w->iterations; i++) {
		volatile char *p = malloc((size_t)w->size);
		if (!p) {
			fprintf(stderr, "malloc failed\n");
			exit(1);
		}
		for (long long r = 0; r < w->writes; r++)
			for (long long b = 0; b < w->size; b++)
				p[b] = (char)(p[b] + 1);
		free((void *)p);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 2, iterations = 1000000, writes = 200, size = 8;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "worker threads"},
		{"iterations", 'i', &iterations, "malloc/write/free rounds per thread"},
		{"writes", 'i', &writes, "writes to each byte per round"},
		{"size", 'i', &size, "object size in bytes"},
	};
	bench_parse(argc, argv, "False sharing between threads through allocator placement (cache-scratch).",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || size < 1 || iterations < 0 || writes < 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}

	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	struct worker *w = calloc((size_t)threads, sizeof *w);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)threads);
	for (long long k = 0; k < threads; k++) {
		w[k] = (struct worker){.first = bench_xmalloc((size_t)size), .iterations = iterations,
				       .writes = writes, .size = size, .start = &start};
		memset(w[k].first, 0, (size_t)size);
	}
	for (long long k = 0; k < threads; k++)
		bench_spawn(&t[k], run, &w[k]);
	pthread_barrier_wait(&start);
	double t0 = bench_now();
	for (long long k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	double el = bench_now() - t0;
	free(w);
	free(t);
	long long total = threads * iterations;
	bench_result("cache_scratch", "threads=%lld iterations=%lld elapsed_s=%.6f ops_per_sec=%.0f",
		     threads, total, el, (double)total / el);
	return 0;
}
