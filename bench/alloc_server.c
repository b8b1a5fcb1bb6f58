/* alloc_server: a larson-like server with thread generations.
 *
 * `--threads` lines of work, each with an array of `--slots` objects.  A
 * thread runs `--gen-ops` steps (free a random slot, malloc 8..1000 B into
 * it, write its first and last byte), then starts its successor, which
 * takes the array over, and exits: the objects a generation allocated are
 * freed by the next ones, after their thread is gone.  Every `--handoff`
 * steps a thread swaps `--swap` slots with a shared pool, so objects also
 * move between the lines of work.  `--ops` steps per line in all; reports
 * the time. */
#include "bench.h"

struct shared {
	pthread_mutex_t lock;
	unsigned char **pool;
	long long pool_len;
};

struct line {
	struct shared *sh;
	unsigned char **slot;
	long long slots, left, gen_ops, handoff, swap, min, max, generations;
	uint64_t rng;
	unsigned long long check;
	pthread_mutex_t done_lock;
	pthread_cond_t done_cv;
	int done;
};

static unsigned char *new_obj(struct line *l)
{
	size_t n = (size_t)bench_range(&l->rng, (uint64_t)l->min, (uint64_t)l->max);
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
	struct line *l = arg;
	long long n = l->left < l->gen_ops ? l->left : l->gen_ops;
	for (long long i = 1; i <= n; i++) {
		size_t k = (size_t)(bench_rand(&l->rng) % (uint64_t)l->slots);
		l->check += l->slot[k][0];
		free(l->slot[k]);
		l->slot[k] = new_obj(l);
		if (l->handoff && i % l->handoff == 0) {
			struct shared *sh = l->sh;
			pthread_mutex_lock(&sh->lock);
			for (long long j = 0; j < l->swap; j++) {
				size_t a = (size_t)(bench_rand(&l->rng) % (uint64_t)l->slots);
				size_t b = (size_t)(bench_rand(&l->rng) % (uint64_t)sh->pool_len);
				unsigned char *tmp = l->slot[a];
				l->slot[a] = sh->pool[b];
				sh->pool[b] = tmp;
			}
			pthread_mutex_unlock(&sh->lock);
		}
	}
	l->left -= n;
	l->generations++;
	if (l->left > 0) { /* the successor takes the array over */
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &a, run, l);
		if (rc) {
			fprintf(stderr, "pthread_create: %s\n", strerror(rc));
			exit(1);
		}
		pthread_attr_destroy(&a);
		return NULL;
	}
	pthread_mutex_lock(&l->done_lock);
	l->done = 1;
	pthread_cond_signal(&l->done_cv);
	pthread_mutex_unlock(&l->done_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 2, ops = 8000000, gen_ops = 20000, slots = 2000, min = 8, max = 1000;
	long long handoff = 1000, swap = 32, seed = 1;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "lines of work (threads alive at a time)"},
		{"ops", 'i', &ops, "free+malloc steps per line"},
		{"gen-ops", 'i', &gen_ops, "steps of one generation (one thread)"},
		{"slots", 'i', &slots, "live objects per line"},
		{"min", 'i', &min, "smallest object size in bytes"},
		{"max", 'i', &max, "largest object size in bytes"},
		{"handoff", 'i', &handoff, "steps between exchanges with the shared pool (0: never)"},
		{"swap", 'i', &swap, "slots swapped per exchange"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Larson-like server: each thread hands its objects to its successor and exits.",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || ops < 1 || gen_ops < 1 || slots < 1 || min < 1 || max < min || handoff < 0 ||
	    swap < 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	struct shared sh;
	pthread_mutex_init(&sh.lock, NULL);
	sh.pool_len = slots;
	sh.pool = bench_xmalloc(sizeof *sh.pool * (size_t)slots);
	struct line *l = calloc((size_t)threads, sizeof *l);
	if (!l)
		return 1;
	uint64_t rng = bench_seed((uint64_t)seed, 1000);
	for (long long k = 0; k < slots; k++) {
		sh.pool[k] = malloc((size_t)bench_range(&rng, (uint64_t)min, (uint64_t)max));
		sh.pool[k][0] = 0;
	}
	for (long long k = 0; k < threads; k++) {
		l[k] = (struct line){.sh = &sh, .slots = slots, .left = ops, .gen_ops = gen_ops,
				     .handoff = handoff, .swap = swap, .min = min, .max = max,
				     .rng = bench_seed((uint64_t)seed, (uint64_t)k)};
		pthread_mutex_init(&l[k].done_lock, NULL);
		pthread_cond_init(&l[k].done_cv, NULL);
		l[k].slot = bench_xmalloc(sizeof *l[k].slot * (size_t)slots);
		for (long long i = 0; i < slots; i++)
			l[k].slot[i] = new_obj(&l[k]);
	}
	double t0 = bench_now();
	for (long long k = 0; k < threads; k++) {
		pthread_t t;
		bench_spawn(&t, run, &l[k]);
		pthread_detach(t);
	}
	unsigned long long check = 0;
	long long generations = 0;
	for (long long k = 0; k < threads; k++) {
		pthread_mutex_lock(&l[k].done_lock);
		while (!l[k].done)
			pthread_cond_wait(&l[k].done_cv, &l[k].done_lock);
		pthread_mutex_unlock(&l[k].done_lock);
		check += l[k].check;
		generations += l[k].generations;
	}
	double el = bench_now() - t0;
	for (long long k = 0; k < threads; k++) {
		for (long long i = 0; i < slots; i++)
			free(l[k].slot[i]);
		free(l[k].slot);
	}
	for (long long k = 0; k < slots; k++)
		free(sh.pool[k]);
	free(sh.pool);
	free(l);
	long long total = ops * threads;
	bench_result("server", "threads=%lld generations=%lld ops=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     threads, generations, total, el, (double)total / el, el * 1e9 / (double)total, check & 0xff);
	return 0;
}
