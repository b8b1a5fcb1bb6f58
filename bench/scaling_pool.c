/* scaling_pool: a thread pool whose tasks allocate bursts, over a timed
 * window.
 *
 * Each of `--threads` workers runs tasks: a task allocates a burst of
 * `--burst-min`..`--burst-max` blocks of `--min`..`--max` bytes (4..64 KiB:
 * the page heap's sizes), writes a byte per page of each, hands one block to
 * a shared mailbox and frees the block it took from there (a result passed
 * to another worker), then frees the rest in allocation order.  One
 * operation is one block.  Reports operations per second over a window of
 * `--seconds` that opens once every worker has done `--warmup` tasks. */
#include "bench.h"

#define PAGE 4096

struct ctx {
	long long burst_min, burst_max, min, max, mailboxes;
	char **mailbox;
};

static void step(void *arg, int tid, uint64_t *rng, struct bench_counter *cnt)
{
	(void)tid;
	struct ctx *c = arg;
	char *burst[256];
	long long n = (long long)bench_range(rng, (uint64_t)c->burst_min, (uint64_t)c->burst_max);
	for (long long i = 0; i < n; i++) {
		size_t sz = (size_t)bench_range(rng, (uint64_t)c->min, (uint64_t)c->max);
		char *p = malloc(sz);
		if (!p) {
			fprintf(stderr, "malloc(%zu) failed\n", sz);
			exit(1);
		}
		for (size_t off = 0; off < sz; off += PAGE)
			p[off] = (char)i;
		burst[i] = p;
	}
	uint64_t m = bench_rand(rng) % (uint64_t)c->mailboxes;
	free(__atomic_exchange_n(&c->mailbox[m], burst[n - 1], __ATOMIC_ACQ_REL));
	for (long long i = 0; i < n - 1; i++)
		free(burst[i]);
	bench_count(cnt, n);
}

int main(int argc, char **argv)
{
	long long threads = 2, burst_min = 8, burst_max = 64, min = 4096, max = 65536, mailboxes = 16;
	long long warmup = 2, seed = 1;
	double seconds = 1.0;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "workers"},
		{"burst-min", 'i', &burst_min, "fewest blocks per task"},
		{"burst-max", 'i', &burst_max, "most blocks per task (at most 256)"},
		{"min", 'i', &min, "smallest block (bytes)"},
		{"max", 'i', &max, "largest block (bytes)"},
		{"mailboxes", 'i', &mailboxes, "shared slots results are passed through"},
		{"seconds", 'd', &seconds, "length of the measured window"},
		{"warmup", 'i', &warmup, "tasks every worker completes before the window opens"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "A thread pool: tasks allocate, touch and free bursts of page-sized blocks.",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || burst_min < 1 || burst_max < burst_min || burst_max > 256 || min < 1 ||
	    max < min || mailboxes < 1 || seconds <= 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	struct ctx c = {burst_min, burst_max, min, max, mailboxes, NULL};
	c.mailbox = calloc((size_t)mailboxes, sizeof *c.mailbox);
	if (!c.mailbox)
		return 1;
	struct bench_timed_result r = bench_run_timed((int)threads, seconds, warmup, (uint64_t)seed, step, &c);
	for (long long m = 0; m < mailboxes; m++)
		free(c.mailbox[m]);
	free(c.mailbox);
	bench_timed_print("pool", threads, r, (double)(min + max) / 2 / 1048576.0, "");
	return 0;
}
