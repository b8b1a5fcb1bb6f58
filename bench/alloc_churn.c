/* alloc_churn: single-thread small-object churn.
 *
 * A window of `--window` live objects; each operation frees a random slot and
 * allocates a new object of a random size in [--min, --max] into it, writing
 * its first and last byte.  Fixed operation count; reports the time taken. */
#include "bench.h"

int main(int argc, char **argv)
{
	long long ops = 40000000, window = 10000, min = 8, max = 512, seed = 1;
	const struct bench_opt opts[] = {
		{"ops", 'i', &ops, "free+malloc operations"},
		{"window", 'i', &window, "live objects"},
		{"min", 'i', &min, "smallest object size in bytes"},
		{"max", 'i', &max, "largest object size in bytes"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Single-thread churn of small objects in a window of live objects.",
		    opts, BENCH_NOPTS(opts));
	if (window < 1 || min < 1 || max < min) {
		fprintf(stderr, "need window >= 1 and 1 <= min <= max\n");
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
		size_t n = (size_t)min + (size_t)((r >> 32) % (uint64_t)(max - min + 1));
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
	bench_result("churn", "ops=%lld elapsed_s=%.6f ops_per_sec=%.0f ns_per_op=%.2f check=%llu",
		     ops, el, (double)ops / el, el * 1e9 / (double)ops, check & 0xff);
	return 0;
}
