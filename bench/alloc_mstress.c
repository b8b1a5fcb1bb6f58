/* alloc_mstress: an mstress-like mix (mimalloc-bench's shape, written here).
 *
 * `--iterations` iterations, each with `--threads` new threads.  A thread
 * fills a local array of retained objects of random length, frees random
 * ones of them, and exchanges objects with a shared transfer array (one
 * atomic exchange per slot: what it takes out, allocated by any thread of
 * any iteration, it frees); the transfer array survives the iterations.
 * Sizes: mostly 8 B..1 KiB words with a falling density, 1 in 100 up to
 * 32 KiB, 1 in 10,000 up to 512 KiB.  Reports the time. */
#include <stdatomic.h>

#include "bench.h"

#define TRANSFER 1000

static unsigned char *_Atomic transfer[TRANSFER];

/* One cache line per worker: the workers' own state must not be a line the
 * two threads write in turn, or the row measures that, not the allocator. */
struct worker {
	_Alignas(64) long long steps;
	uint64_t rng;
	unsigned long long check;
};

static size_t pick(uint64_t *rng)
{
	uint64_t r = bench_rand(rng);
	if (r % 10000 == 0)
		return (size_t)bench_range(rng, 32769, 512 * 1024);
	if (r % 100 == 1)
		return (size_t)bench_range(rng, 1025, 32768);
	unsigned b = 3 + (unsigned)((r >> 20) % 7); /* 8 B .. 1 KiB */
	return ((size_t)1 << b) + (size_t)((r >> 32) % ((uint64_t)1 << b));
}

static unsigned char *alloc_obj(uint64_t *rng)
{
	size_t n = pick(rng);
	unsigned char *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	p[0] = (unsigned char)n;
	p[n - 1] = 2;
	return p;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = w->rng;
	unsigned long long check = 0;
	long long cap = 500 + (long long)(bench_rand(&rng) % 1500);
	unsigned char **ret = calloc((size_t)cap, sizeof *ret);
	if (!ret)
		exit(1);
	for (long long i = 0; i < w->steps; i++) {
		uint64_t r = bench_rand(&rng);
		size_t k = (size_t)(r % (uint64_t)cap);
		switch ((r >> 32) % 8) {
		case 0: /* exchange with the transfer array */
			ret[k] = atomic_exchange_explicit(&transfer[(r >> 40) % TRANSFER], ret[k],
							  memory_order_acq_rel);
			break;
		case 1: /* free */
			if (ret[k])
				check += ret[k][0];
			free(ret[k]);
			ret[k] = NULL;
			break;
		default: /* replace */
			if (ret[k])
				check += ret[k][0];
			free(ret[k]);
			ret[k] = alloc_obj(&rng);
		}
	}
	for (long long k = 0; k < cap; k++)
		free(ret[k]);
	free(ret);
	w->rng = rng;
	w->check += check;
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 2, iterations = 50, steps = 20000000, seed = 1;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "threads per iteration"},
		{"iterations", 'i', &iterations, "iterations (new threads each)"},
		{"steps", 'i', &steps, "steps per thread in all iterations"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Threads retain, free and exchange mixed-size objects; threads restart.",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || iterations < 1 || steps < iterations) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	struct worker *w = aligned_alloc(64, sizeof *w * (size_t)threads);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)threads);
	if (!w)
		return 1;
	for (long long k = 0; k < threads; k++)
		w[k] = (struct worker){.rng = bench_seed((uint64_t)seed, (uint64_t)k)};
	double t0 = bench_now();
	for (long long it = 0; it < iterations; it++) {
		for (long long k = 0; k < threads; k++) {
			w[k].steps = steps / iterations;
			bench_spawn(&t[k], run, &w[k]);
		}
		for (long long k = 0; k < threads; k++)
			pthread_join(t[k], NULL);
	}
	for (long long k = 0; k < TRANSFER; k++)
		free(atomic_exchange(&transfer[k], NULL));
	double el = bench_now() - t0;
	unsigned long long check = 0;
	for (long long k = 0; k < threads; k++)
		check += w[k].check;
	long long total = (steps / iterations) * iterations * threads;
	free(w);
	free(t);
	bench_result("mstress", "threads=%lld iterations=%lld ops=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     threads, iterations, total, el, (double)total / el, el * 1e9 / (double)total, check & 0xff);
	return 0;
}
