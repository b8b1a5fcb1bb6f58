/* scaling_server: a larson-like server over a timed window.
 *
 * Each of `--threads` threads owns `--slots` objects of 16..`--max` bytes.
 * One step replaces `--batch` random slots (free the old object, malloc a
 * new one, write its first and last byte; one operation each), then swaps
 * one of its objects with a shared mailbox of `--mailboxes` entries, so
 * objects are freed by threads that did not allocate them.  Reports
 * operations per second over a window of `--seconds` that opens once every
 * thread has done `--warmup` steps (its slots are all filled by then). */
#include "bench.h"

struct ctx {
	long long slots, batch, max, mailboxes;
	unsigned char ***slot;      /* per thread */
	unsigned char **mailbox;    /* shared, exchanged atomically */
};

static unsigned char *fresh(struct ctx *c, uint64_t *rng)
{
	size_t n = (size_t)bench_range(rng, 16, (uint64_t)c->max);
	unsigned char *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	p[0] = p[n - 1] = (unsigned char)n;
	return p;
}

static void step(void *arg, int tid, uint64_t *rng, struct bench_counter *cnt)
{
	struct ctx *c = arg;
	unsigned char **s = c->slot[tid];
	for (long long i = 0; i < c->batch; i++) {
		uint64_t k = bench_rand(rng) % (uint64_t)c->slots;
		free(s[k]);
		s[k] = fresh(c, rng);
	}
	uint64_t k = bench_rand(rng) % (uint64_t)c->slots;
	uint64_t m = bench_rand(rng) % (uint64_t)c->mailboxes;
	s[k] = __atomic_exchange_n(&c->mailbox[m], s[k], __ATOMIC_ACQ_REL);
	if (!s[k])
		s[k] = fresh(c, rng);
	bench_count(cnt, c->batch);
}

int main(int argc, char **argv)
{
	long long threads = 2, slots = 1000, batch = 100, max = 1024, mailboxes = 64, warmup = 2, seed = 1;
	double seconds = 1.0;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "threads"},
		{"slots", 'i', &slots, "objects each thread holds"},
		{"batch", 'i', &batch, "replacements per step"},
		{"max", 'i', &max, "largest object (bytes; the smallest is 16)"},
		{"mailboxes", 'i', &mailboxes, "shared slots objects are swapped through"},
		{"seconds", 'd', &seconds, "length of the measured window"},
		{"warmup", 'i', &warmup, "steps every thread completes before the window opens"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Threads replace random objects of their own; objects migrate (larson-like).",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || slots < 1 || batch < 1 || max < 16 || mailboxes < 1 || seconds <= 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	struct ctx c = {.slots = slots, .batch = batch, .max = max, .mailboxes = mailboxes};
	c.slot = bench_xmalloc(sizeof *c.slot * (size_t)threads);
	uint64_t rng = bench_seed((uint64_t)seed, 777);
	for (long long t = 0; t < threads; t++) {
		c.slot[t] = bench_xmalloc(sizeof **c.slot * (size_t)slots);
		for (long long k = 0; k < slots; k++)
			c.slot[t][k] = fresh(&c, &rng);
	}
	c.mailbox = calloc((size_t)mailboxes, sizeof *c.mailbox);
	if (!c.mailbox)
		return 1;
	struct bench_timed_result r = bench_run_timed((int)threads, seconds, warmup, (uint64_t)seed, step, &c);
	for (long long t = 0; t < threads; t++) {
		for (long long k = 0; k < slots; k++)
			free(c.slot[t][k]);
		free(c.slot[t]);
	}
	for (long long m = 0; m < mailboxes; m++)
		free(c.mailbox[m]);
	free(c.mailbox);
	free(c.slot);
	bench_timed_print("server", threads, r, (double)(16 + max) / 2 / 1048576.0, "");
	return 0;
}
