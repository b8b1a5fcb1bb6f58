/* pageset_prodcons: one thread hands 16-32 KiB buffers to another (seed 003's
 * AF_UNIX / netperf shape: socket buffers of order 2-3 allocated on the
 * sender's CPU and freed on the receiver's).
 *
 * `--pairs` pairs of threads.  In each pair the producer allocates buffers of
 * random sizes in [--min, --max], writes one cache line per page (or the whole
 * buffer with `--fill 1`) and passes them in batches of `--batch` through a
 * bounded single-producer/single-consumer ring of `--ring` batches; the
 * consumer reads one word per page and frees the buffer, so every free is
 * remote and the freed pages land on the consumer's CPU.  A fixed number of
 * buffers per pair (or as many as `--max-seconds` allows: `completed=0`); the
 * time of that phase and the buffers per second are the result.  Then everything is
 * freed, and the resident set size is measured right away (`rss_end_mib`) and
 * after `--settle` seconds of idleness (`rss_final_mib`), when an allocator
 * that decays its caches on a timer has had the time to do so. */
#include "bench.h"
#include <sched.h>
#include <stdatomic.h>

#define PAGE 4096

struct pair {
	_Alignas(64) _Atomic long long head; /* batches consumed */
	_Alignas(64) _Atomic long long tail; /* batches produced */
	_Atomic long long final;             /* batches produced in all, once known; else -1 */
	_Alignas(64) unsigned char **ring;   /* ring[slot * batch + i] */
	long long nbatches, ring_len, batch, min, max, fill;
	double max_seconds;
	uint64_t seed;
	unsigned long long check;
	long long bytes;
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
	long long bytes = 0, b;
	pthread_barrier_wait(q->start);
	double t0 = bench_now();
	for (b = 0; b < q->nbatches; b++) {
		if (q->max_seconds > 0 && (b & 15) == 0 && bench_now() - t0 > q->max_seconds)
			break;
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
			if (q->fill) {
				memset(p, (int)(b + i), n);
			} else {
				for (size_t off = 0; off < n; off += PAGE)
					memset(p + off, (int)(b + i), n - off < 64 ? n - off : 64);
			}
			p[n - 1] = (unsigned char)i;
			/* the size travels in the first word, so the consumer knows the extent */
			memcpy(p, &n, sizeof n);
			slot[i] = p;
			bytes += (long long)n;
		}
		atomic_store_explicit(&q->tail, b + 1, memory_order_release);
	}
	q->bytes = bytes;
	atomic_store_explicit(&q->final, b, memory_order_release);
	return NULL;
}

static void *consumer(void *arg)
{
	struct pair *q = arg;
	unsigned long long check = 0;
	pthread_barrier_wait(q->start);
	for (long long b = 0;; b++) {
		unsigned spins = 0;
		while (atomic_load_explicit(&q->tail, memory_order_acquire) <= b) {
			long long fin = atomic_load_explicit(&q->final, memory_order_acquire);
			if (fin >= 0 && b >= fin)
				goto out;
			backoff(&spins);
		}
		unsigned char **slot = q->ring + (b % q->ring_len) * q->batch;
		for (long long i = 0; i < q->batch; i++) {
			unsigned char *p = slot[i];
			size_t n;
			memcpy(&n, p, sizeof n);
			for (size_t off = PAGE; off < n; off += PAGE)
				check += p[off];
			check += p[n - 1];
			free(p);
		}
		atomic_store_explicit(&q->head, b + 1, memory_order_release);
	}
out:
	q->check = check;
	return NULL;
}

int main(int argc, char **argv)
{
	long long buffers = 1000000, pairs = 1, batch = 16, ring = 16, min = 16 << 10, max = 32 << 10;
	long long fill = 0, seed = 1;
	double settle = 2.0, max_seconds = 0;
	const struct bench_opt opts[] = {
		{"buffers", 'i', &buffers, "buffers passed per pair"},
		{"max-seconds", 'd', &max_seconds, "stop early after this many seconds (0: never)"},
		{"pairs", 'i', &pairs, "producer/consumer thread pairs"},
		{"batch", 'i', &batch, "buffers per batch"},
		{"ring", 'i', &ring, "batches in flight per pair"},
		{"min", 'i', &min, "smallest buffer in bytes"},
		{"max", 'i', &max, "largest buffer in bytes"},
		{"fill", 'i', &fill, "1: write the whole buffer; 0: one cache line per page"},
		{"settle", 'd', &settle, "idle seconds before the final RSS is measured"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv,
		    "Producer threads allocate 16-32 KiB buffers, consumer threads free them (remote frees).",
		    opts, BENCH_NOPTS(opts));
	if (pairs < 1 || batch < 1 || ring < 1 || min < 64 || max < min || buffers < batch ||
	    settle < 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}

	long long rss0 = bench_rss_bytes();
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)(2 * pairs + 1));
	struct pair *q = aligned_alloc(64, sizeof *q * (size_t)pairs);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)(2 * pairs));
	if (!q)
		return 1;
	for (long long k = 0; k < pairs; k++) {
		memset(&q[k], 0, sizeof q[k]);
		q[k].ring = bench_xmalloc(sizeof(unsigned char *) * (size_t)(ring * batch));
		q[k].nbatches = (buffers + batch - 1) / batch;
		q[k].ring_len = ring;
		q[k].batch = batch;
		q[k].min = min;
		q[k].max = max;
		q[k].fill = fill;
		q[k].max_seconds = max_seconds;
		atomic_store(&q[k].final, -1);
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
	long long total = 0, bytes = 0, planned = 0;
	for (long long k = 0; k < pairs; k++) {
		check += q[k].check;
		total += atomic_load(&q[k].final) * batch;
		planned += q[k].nbatches * batch;
		bytes += q[k].bytes;
		free(q[k].ring);
	}
	free(q);
	free(t);
	long long rss_end = bench_rss_bytes();
	bench_sleep(settle);
	long long rss_final = bench_rss_bytes();
	bench_result("pageset_prodcons",
		     "buffers=%lld completed=%d threads=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.1f "
		     "gib_per_sec=%.3f rss_start_mib=%.1f rss_end_mib=%.1f rss_final_mib=%.1f "
		     "peak_rss_mib=%.1f settle_s=%g check=%llu",
		     total, total == planned, 2 * pairs, el, (double)total / el, el * 1e9 / (double)total,
		     (double)bytes / el / (double)(1 << 30), (double)rss0 / 1048576.0,
		     (double)rss_end / 1048576.0, (double)rss_final / 1048576.0,
		     (double)bench_hwm_bytes() / 1048576.0, settle, check & 0xff);
	return 0;
}
