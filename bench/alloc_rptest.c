/* alloc_rptest: rptest-like rounds of threads with a share of remote frees.
 *
 * `--rounds` rounds; each starts `--threads` new threads, which take over the
 * slot arrays and mailboxes the previous round's threads left (generations).
 * A step frees the object in a random slot of the thread's own array and
 * allocates a new one of 16 B..16 KiB (log-uniform: each power of two is as
 * likely, so small objects dominate by count, larger ones by bytes),
 * writing its first and last byte.  `--remote-pct` percent of the freed
 * objects are not freed by their thread but sent, in batches of 64, to the
 * next thread's mailbox; every thread frees what its mailbox holds every 64
 * steps.  Fixed step count; reports the time. */
#include "bench.h"

#define BATCH 64
#define INBOX 8192

struct mailbox {
	pthread_mutex_t lock;
	long long n;
	unsigned char *p[INBOX];
};

/* One cache line per worker: the workers' own state must not be a line the
 * threads write in turn, or the row measures that, not the allocator. */
struct worker {
	_Alignas(64) struct mailbox *box, *next_box;
	unsigned char **slot;
	long long slots, ops, remote_pct;
	uint64_t rng;
	unsigned long long check;
};

static unsigned char *new_obj(uint64_t *rng)
{
	uint64_t r = bench_rand(rng);
	unsigned k = 4 + (unsigned)(r % 10); /* 2^4 .. 2^13, then up to 2^14 */
	size_t n = ((size_t)1 << k) + (size_t)((r >> 8) % ((uint64_t)1 << k));
	unsigned char *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	p[0] = (unsigned char)n;
	p[n - 1] = 1;
	return p;
}

static unsigned long long drain(struct worker *w)
{
	unsigned long long check = 0;
	static __thread unsigned char *got[INBOX];
	struct mailbox *b = w->box;
	pthread_mutex_lock(&b->lock);
	long long n = b->n;
	memcpy(got, b->p, sizeof got[0] * (size_t)n);
	b->n = 0;
	pthread_mutex_unlock(&b->lock);
	for (long long i = 0; i < n; i++) {
		check += got[i][0];
		free(got[i]);
	}
	return check;
}

static void send(struct worker *w, unsigned char **out, long long n)
{
	struct mailbox *b = w->next_box;
	pthread_mutex_lock(&b->lock);
	long long room = INBOX - b->n, k = n < room ? n : room;
	memcpy(b->p + b->n, out, sizeof out[0] * (size_t)k);
	b->n += k;
	pthread_mutex_unlock(&b->lock);
	for (long long i = k; i < n; i++) /* a full mailbox: freed here */
		free(out[i]);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	unsigned char *out[BATCH];
	long long nout = 0;
	uint64_t rng = w->rng;
	unsigned long long check = 0;
	for (long long i = 0; i < w->ops; i++) {
		uint64_t r = bench_rand(&rng);
		size_t k = (size_t)(r % (uint64_t)w->slots);
		unsigned char *old = w->slot[k];
		if (old) {
			check += old[0];
			if ((long long)((r >> 40) % 100) < w->remote_pct) {
				out[nout++] = old;
				if (nout == BATCH) {
					send(w, out, nout);
					nout = 0;
				}
			} else {
				free(old);
			}
		}
		w->slot[k] = new_obj(&rng);
		if ((i & (BATCH - 1)) == BATCH - 1)
			check += drain(w);
	}
	send(w, out, nout);
	check += drain(w);
	w->rng = rng;
	w->check += check;
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 2, rounds = 100, ops = 8000000, slots = 2000, remote = 25, seed = 1;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "threads per round"},
		{"rounds", 'i', &rounds, "rounds (new threads each round)"},
		{"ops", 'i', &ops, "free+malloc steps per thread in all rounds"},
		{"slots", 'i', &slots, "live objects per thread"},
		{"remote-pct", 'i', &remote, "percent of frees sent to another thread"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Rounds of threads: 16 B..16 KiB objects, a share freed by another thread.",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || rounds < 1 || ops < rounds || slots < 1 || remote < 0 || remote > 100) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	struct mailbox *box = calloc((size_t)threads, sizeof *box);
	struct worker *w = aligned_alloc(64, sizeof *w * (size_t)threads);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)threads);
	if (!box || !w)
		return 1;
	for (long long k = 0; k < threads; k++) {
		pthread_mutex_init(&box[k].lock, NULL);
		w[k] = (struct worker){.box = &box[k], .next_box = &box[(k + 1) % threads],
				       .slot = calloc((size_t)slots, sizeof(unsigned char *)), .slots = slots,
				       .ops = ops / rounds, .remote_pct = remote,
				       .rng = bench_seed((uint64_t)seed, (uint64_t)k)};
		if (!w[k].slot)
			return 1;
	}
	double t0 = bench_now();
	for (long long r = 0; r < rounds; r++) {
		for (long long k = 0; k < threads; k++)
			bench_spawn(&t[k], run, &w[k]);
		for (long long k = 0; k < threads; k++)
			pthread_join(t[k], NULL);
	}
	for (long long k = 0; k < threads; k++) {
		for (long long i = 0; i < slots; i++)
			free(w[k].slot[i]);
		for (long long i = 0; i < box[k].n; i++)
			free(box[k].p[i]);
	}
	double el = bench_now() - t0;
	unsigned long long check = 0;
	for (long long k = 0; k < threads; k++) {
		check += w[k].check;
		free(w[k].slot);
	}
	long long total = (ops / rounds) * rounds * threads;
	free(w);
	free(box);
	free(t);
	bench_result("rptest", "threads=%lld rounds=%lld ops=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     threads, rounds, total, el, (double)total / el, el * 1e9 / (double)total, check & 0xff);
	return 0;
}
