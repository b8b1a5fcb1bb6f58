/* faults_page_fault1: will-it-scale page_fault1 over the allocator.
 *
 * Each of `--threads` threads loops: malloc(`--size`) (128 MiB by default),
 * write one byte to every 4 KiB page, free.  As in will-it-scale, one
 * operation is one page written.  Reports pages per second per thread and the
 * minor page faults per MiB written, over a window of `--seconds` that opens
 * once every thread has done `--warmup` iterations (will-it-scale also skips
 * its first seconds), so an allocator that keeps the memory is measured in
 * its steady state; total_minflt counts the faults of the whole run. */
#include "bench.h"

static void step(void *ctx, int tid, uint64_t *rng, struct bench_counter *c)
{
	(void)tid;
	(void)rng;
	size_t n = *(size_t *)ctx;
	char *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	for (size_t b = 0; b < n; b += 4096) {
		p[b] = 1;
		bench_count(c, 1);
	}
	bench_sink(p);
	free(p);
}

int main(int argc, char **argv)
{
	long long threads = 1, size = 128LL << 20, warmup = 1, seed = 1;
	double seconds = 1.0;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "threads"},
		{"size", 'i', &size, "bytes per malloc"},
		{"seconds", 'd', &seconds, "length of the measured window"},
		{"warmup", 'i', &warmup, "iterations every thread completes before the window opens"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "malloc, write a byte per page, free, in a loop (will-it-scale page_fault1).",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || size < 4096 || seconds <= 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	size_t n = (size_t)size;
	struct bench_timed_result r = bench_run_timed((int)threads, seconds, warmup, (uint64_t)seed,
							step, &n);
	bench_timed_print("page_fault1", threads, r, 4096.0 / 1048576.0, "");
	return 0;
}
