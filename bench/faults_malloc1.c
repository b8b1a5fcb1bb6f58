/* faults_malloc1: will-it-scale malloc1 over the allocator.
 *
 * Each of `--threads` threads loops: malloc(`--size`) (128 MiB by default),
 * free, never touching the memory.  An allocator that maps and unmaps such
 * blocks every time pays a syscall pair and, with threads, the kernel's mmap
 * lock.  Reports operations per second per thread over a window of
 * `--seconds` that opens once every thread has done `--warmup` iterations. */
#include "bench.h"

static void step(void *ctx, int tid, uint64_t *rng, struct bench_counter *c)
{
	(void)tid;
	(void)rng;
	size_t n = *(size_t *)ctx;
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "malloc(%zu) failed\n", n);
		exit(1);
	}
	bench_sink(p);
	free(p);
	bench_count(c, 1);
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
	bench_parse(argc, argv, "malloc + free of a large untouched block in a loop (will-it-scale malloc1).",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || size < 1 || seconds <= 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	size_t n = (size_t)size;
	struct bench_timed_result r = bench_run_timed((int)threads, seconds, warmup, (uint64_t)seed,
							step, &n);
	bench_timed_print("malloc1", threads, r, (double)size / 1048576.0, "");
	return 0;
}
