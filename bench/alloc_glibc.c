/* alloc_glibc: a glibc-bench-like single-thread loop (bench-malloc-thread's
 * shape, one thread).
 *
 * A working set of `--window` blocks; each step frees the block in a random
 * slot and allocates one of 16 B..32 KiB into it, the size drawn with a
 * density falling as 1/size (each power of two about as likely as the
 * next: many small blocks, a steady share of pages-sized ones), and writes
 * its first and last byte.  Fixed step count; reports the time. */
#include "bench.h"

int main(int argc, char **argv)
{
	long long ops = 20000000, window = 1024, seed = 1;
	const struct bench_opt opts[] = {
		{"ops", 'i', &ops, "free+malloc steps"},
		{"window", 'i', &window, "live blocks"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Single thread: random replacement in a window of 16 B..32 KiB blocks.",
		    opts, BENCH_NOPTS(opts));
	if (window < 1 || ops < 1) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	unsigned char **slot = calloc((size_t)window, sizeof *slot);
	if (!slot)
		return 1;
	uint64_t rng = bench_seed((uint64_t)seed, 0);
	unsigned long long check = 0;
	double t0 = bench_now();
	for (long long i = 0; i < ops; i++) {
		uint64_t r = bench_rand(&rng);
		size_t k = (size_t)(r % (uint64_t)window);
		unsigned b = 4 + (unsigned)((r >> 24) % 11); /* 2^4 .. 2^14, then up to 2^15 */
		size_t n = ((size_t)1 << b) + (size_t)((r >> 32) % ((uint64_t)1 << b));
		if (slot[k])
			check += slot[k][0];
		free(slot[k]);
		unsigned char *p = malloc(n);
		if (!p) {
			fprintf(stderr, "malloc(%zu) failed\n", n);
			return 1;
		}
		p[0] = (unsigned char)i;
		p[n - 1] = (unsigned char)k;
		slot[k] = p;
	}
	double el = bench_now() - t0;
	for (long long k = 0; k < window; k++)
		free(slot[k]);
	free(slot);
	bench_result("glibc", "ops=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     ops, el, (double)ops / el, el * 1e9 / (double)ops, check & 0xff);
	return 0;
}
