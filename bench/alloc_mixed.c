/* alloc_mixed: mixed sizes with random lifetimes.
 *
 * Each of `--threads` threads runs `--ops` steps.  A step allocates one object
 * whose size is drawn from a mix (by default 90% in 8..512 B, 9% in 512 B..32 KiB,
 * 1% in 32 KiB..1 MiB, each uniform) and a lifetime drawn uniformly in
 * 1..`--lifetime` steps, writes a byte per 4 KiB of it, and then frees every
 * object whose lifetime ends at this step (a timing wheel).  Reports the time. */
#include "bench.h"

struct obj {
	struct obj *next;
};

struct worker {
	long long ops, lifetime, medium_pct, large_pct;
	uint64_t seed;
	long long peak_live;
	pthread_barrier_t *start;
};

static size_t pick_size(uint64_t *rng, long long medium_pct, long long large_pct)
{
	uint64_t r = bench_rand(rng) % 100;
	if (r < (uint64_t)large_pct)
		return (size_t)bench_range(rng, 32768, 1 << 20);
	if (r < (uint64_t)(large_pct + medium_pct))
		return (size_t)bench_range(rng, 512, 32768);
	return (size_t)bench_range(rng, 8, 512);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = w->seed;
	long long wheel_len = w->lifetime + 1;
	struct obj **wheel = calloc((size_t)wheel_len, sizeof *wheel);
	long long live = 0;
	if (!wheel)
		exit(1);
	pthread_barrier_wait(w->start);
	for (long long i = 0; i < w->ops; i++) {
		size_t n = pick_size(&rng, w->medium_pct, w->large_pct);
		if (n < sizeof(struct obj))
			n = sizeof(struct obj);
		struct obj *o = malloc(n);
		if (!o) {
			fprintf(stderr, "malloc(%zu) failed\n", n);
			exit(1);
		}
		for (size_t b = 4096; b < n; b += 4096)
			((char *)o)[b] = 1;
		long long due = (i + (long long)bench_range(&rng, 1, (uint64_t)w->lifetime)) % wheel_len;
		o->next = wheel[due];
		wheel[due] = o;
		live++;
		if (live > w->peak_live)
			w->peak_live = live;
		struct obj *f = wheel[i % wheel_len];
		wheel[i % wheel_len] = NULL;
		while (f) {
			struct obj *nx = f->next;
			free(f);
			live--;
			f = nx;
		}
	}
	for (long long k = 0; k < wheel_len; k++)
		for (struct obj *f = wheel[k], *nx; f; f = nx) {
			nx = f->next;
			free(f);
		}
	free(wheel);
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 1, ops = 4000000, lifetime = 4000, medium = 9, large = 1, seed = 1;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "worker threads (independent)"},
		{"ops", 'i', &ops, "allocations per thread"},
		{"lifetime", 'i', &lifetime, "longest lifetime in steps (mean is half)"},
		{"medium-pct", 'i', &medium, "percent of objects in 512 B..32 KiB"},
		{"large-pct", 'i', &large, "percent of objects in 32 KiB..1 MiB"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Mixed object sizes with random lifetimes (timing wheel).", opts, BENCH_NOPTS(opts));
	if (threads < 1 || lifetime < 1 || medium < 0 || large < 0 || medium + large > 100) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	struct worker *w = calloc((size_t)threads, sizeof *w);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)threads);
	for (long long k = 0; k < threads; k++) {
		w[k] = (struct worker){.ops = ops, .lifetime = lifetime, .medium_pct = medium,
				       .large_pct = large, .seed = bench_seed((uint64_t)seed, (uint64_t)k),
				       .start = &start};
		bench_spawn(&t[k], run, &w[k]);
	}
	pthread_barrier_wait(&start);
	double t0 = bench_now();
	for (long long k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	double el = bench_now() - t0;
	long long peak_live = 0;
	for (long long k = 0; k < threads; k++)
		peak_live += w[k].peak_live;
	free(w);
	free(t);
	long long total = threads * ops;
	bench_result("mixed", "threads=%lld ops=%lld peak_live=%lld elapsed_s=%.6f ops_per_sec=%.0f hwm_mib=%.1f",
		     threads, total, peak_live, el, (double)total / el, (double)bench_hwm_bytes() / 1048576.0);
	return 0;
}
