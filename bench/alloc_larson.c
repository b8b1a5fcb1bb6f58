/* alloc_larson: larson-like server pattern.
 *
 * Each of `--threads` threads owns an array of `--slots` objects.  It
 * repeatedly frees a random slot and allocates a new object of a random size
 * in [--min, --max] into it.  Every `--handoff` operations a thread swaps
 * `--swap` random slots with a shared exchange pool (under a mutex), so
 * objects migrate between threads and are later freed by a thread that did
 * not allocate them.  Fixed operation count per thread; reports throughput. */
#include "bench.h"

struct shared {
	pthread_mutex_t lock;
	unsigned char **pool;
	long long pool_len;
	pthread_barrier_t start;
};

struct worker {
	struct shared *sh;
	long long ops, slots, min, max, handoff, swap;
	uint64_t seed;
	unsigned long long check;
	long long handed;
};

static unsigned char *new_obj(uint64_t *rng, long long min, long long max)
{
	size_t n = (size_t)bench_range(rng, (uint64_t)min, (uint64_t)max);
	unsigned char *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	p[0] = (unsigned char)n;
	p[n - 1] = 1;
	return p;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	uint64_t rng = w->seed;
	unsigned long long check = 0;
	unsigned char **slot = bench_xmalloc(sizeof *slot * (size_t)w->slots);
	for (long long k = 0; k < w->slots; k++)
		slot[k] = new_obj(&rng, w->min, w->max);
	pthread_barrier_wait(&w->sh->start);

	for (long long i = 1; i <= w->ops; i++) {
		size_t k = (size_t)(bench_rand(&rng) % (uint64_t)w->slots);
		check += slot[k][0];
		free(slot[k]);
		slot[k] = new_obj(&rng, w->min, w->max);
		if (w->handoff && i % w->handoff == 0) {
			struct shared *sh = w->sh;
			pthread_mutex_lock(&sh->lock);
			for (long long j = 0; j < w->swap; j++) {
				size_t a = (size_t)(bench_rand(&rng) % (uint64_t)w->slots);
				size_t b = (size_t)(bench_rand(&rng) % (uint64_t)sh->pool_len);
				unsigned char *tmp = slot[a];
				slot[a] = sh->pool[b];
				sh->pool[b] = tmp;
			}
			pthread_mutex_unlock(&sh->lock);
			w->handed += w->swap;
		}
	}
	for (long long k = 0; k < w->slots; k++)
		free(slot[k]);
	free(slot);
	w->check = check;
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 2, ops = 12000000, slots = 1000, min = 16, max = 1024;
	long long handoff = 1000, swap = 64, seed = 1;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "worker threads"},
		{"ops", 'i', &ops, "free+malloc operations per thread"},
		{"slots", 'i', &slots, "live objects per thread"},
		{"min", 'i', &min, "smallest object size in bytes"},
		{"max", 'i', &max, "largest object size in bytes"},
		{"handoff", 'i', &handoff, "operations between exchanges with other threads (0: never)"},
		{"swap", 'i', &swap, "slots swapped with the shared pool per exchange"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Threads replace random slots of their own arrays; slots migrate between threads.",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || slots < 1 || min < 1 || max < min || handoff < 0 || swap < 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}

	struct shared sh;
	pthread_mutex_init(&sh.lock, NULL);
	pthread_barrier_init(&sh.start, NULL, (unsigned)threads + 1);
	sh.pool_len = slots;
	sh.pool = bench_xmalloc(sizeof *sh.pool * (size_t)slots);
	uint64_t rng = bench_seed((uint64_t)seed, 1000);
	for (long long k = 0; k < slots; k++)
		sh.pool[k] = new_obj(&rng, min, max);

	struct worker *w = calloc((size_t)threads, sizeof *w);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)threads);
	for (long long k = 0; k < threads; k++) {
		w[k] = (struct worker){.sh = &sh, .ops = ops, .slots = slots, .min = min, .max = max,
				       .handoff = handoff, .swap = swap,
				       .seed = bench_seed((uint64_t)seed, (uint64_t)k)};
		bench_spawn(&t[k], run, &w[k]);
	}
	pthread_barrier_wait(&sh.start);
	double t0 = bench_now();
	for (long long k = 0; k < threads; k++)
		pthread_join(t[k], NULL);
	double el = bench_now() - t0;

	unsigned long long check = 0;
	long long handed = 0;
	for (long long k = 0; k < threads; k++) {
		check += w[k].check;
		handed += w[k].handed;
	}
	for (long long k = 0; k < slots; k++)
		free(sh.pool[k]);
	free(sh.pool);
	free(w);
	free(t);
	long long total = ops * threads;
	bench_result("larson", "threads=%lld ops=%lld handed=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     threads, total, handed, el, (double)total / el, el * 1e9 / (double)total, check & 0xff);
	return 0;
}
