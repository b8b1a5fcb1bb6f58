/* alloc_xmalloc: producer/consumer with cross-thread frees (xmalloc-like).
 *
 * `--pairs` pairs of threads.  In each pair the producer allocates objects of
 * random sizes in [--min, --max], writes them, and passes them in batches of
 * `--batch` pointers through a bounded single-producer/single-consumer ring
 * of `--ring` batches; the consumer reads and frees every object, so every
 * free is a remote free.  Fixed object count per pair; reports the time. */
#include "bench.h"
#include <sched.h>
#include <stdatomic.h>

struct pair {
	_Alignas(64) _Atomic long long head; /* batches consumed */
	_Alignas(64) _Atomic long long tail; /* batches produced */
	_Alignas(64) unsigned char **ring;   /* ring[slot * batch + i] */
	long long nbatches, ring_len, batch, min, max;
	uint64_t seed;
	unsigned long long check;
	pthread_barrier_t *start;
};

static void backoff(unsigned *spins)
{
	if (++*spins > 64) {
		sched_yield();
		*spins = 0;
	}
}

static void *producer(void *arg)
{
	struct pair *q = arg;
	uint64_t rng = q->seed;
	pthread_barrier_wait(q->start);
	for (long long b = 0; b < q->nbatches; b++) {
		unsigned spins = 0;
		while (b - atomic_load_explicit(&q->head, memory_order_acquire) >= q->ring_len)
			backoff(&spins);
		unsigned char **slot = q->ring + (b % q->ring_len) * q->batch;
		for (long long i = 0; i < q->batch; i++) {
			size_t n = (size_t)bench_range(&rng, (uint64_t)q->min, (uint64_t)q->max);
			unsigned char *p = malloc(n);
			if (!p) {
				fprintf(stderr, "malloc(%zu) failed\n", n);
				exit(1);
			}
			p[0] = (unsigned char)i;
			p[n - 1] = (unsigned char)b;
			slot[i] = p;
		}
		atomic_store_explicit(&q->tail, b + 1, memory_order_release);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct pair *q = arg;
	unsigned long long check = 0;
	pthread_barrier_wait(q->start);
	for (long long b = 0; b < q->nbatches; b++) {
		unsigned spins = 0;
		while (atomic_load_explicit(&q->tail, memory_order_acquire) <= b)
			backoff(&spins);
		unsigned char **slot = q->ring + (b % q->ring_len) * q->batch;
		for (long long i = 0; i < q->batch; i++) {
			check += slot[i][0];
			free(slot[i]);
		}
		atomic_store_explicit(&q->head, b + 1, memory_order_release);
	}
	q->check = check;
	return NULL;
}

int main(int argc, char **argv)
{
	long long objects = 6144000, pairs = 1, batch = 256, ring = 64, min = 8, max = 512, seed = 1;
	const struct bench_opt opts[] = {
		{"objects", 'i', &objects, "objects passed per pair"},
		{"pairs", 'i', &pairs, "producer/consumer thread pairs"},
		{"batch", 'i', &batch, "pointers per batch"},
		{"ring", 'i', &ring, "batches in flight per pair"},
		{"min", 'i', &min, "smallest object size in bytes"},
		{"max", 'i', &max, "largest object size in bytes"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Producer threads allocate, consumer threads free (cross-thread frees).",
		    opts, BENCH_NOPTS(opts));
	if (pairs < 1 || batch < 1 || ring < 1 || min < 1 || max < min || objects < batch) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}

	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)(2 * pairs + 1));
	struct pair *q = aligned_alloc(64, sizeof *q * (size_t)pairs);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)(2 * pairs));
	for (long long k = 0; k < pairs; k++) {
		memset(&q[k], 0, sizeof q[k]);
		q[k].ring = bench_xmalloc(sizeof(unsigned char *) * (size_t)(ring * batch));
		q[k].nbatches = (objects + batch - 1) / batch;
		q[k].ring_len = ring;
		q[k].batch = batch;
		q[k].min = min;
		q[k].max = max;
		q[k].seed = bench_seed((uint64_t)seed, (uint64_t)k);
		q[k].start = &start;
		bench_spawn(&t[2 * k], producer, &q[k]);
		bench_spawn(&t[2 * k + 1], consumer, &q[k]);
	}
	pthread_barrier_wait(&start);
	double t0 = bench_now();
	for (long long k = 0; k < 2 * pairs; k++)
		pthread_join(t[k], NULL);
	double el = bench_now() - t0;

	unsigned long long check = 0;
	long long total = 0;
	for (long long k = 0; k < pairs; k++) {
		check += q[k].check;
		total += q[k].nbatches * batch;
		free(q[k].ring);
	}
	free(q);
	free(t);
	bench_result("xmalloc", "objects=%lld threads=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     total, 2 * pairs, el, (double)total / el, el * 1e9 / (double)total, check & 0xff);
	return 0;
}
