/* alloc_realloc: realloc growth.
 *
 * `--buffers` buffers grow side by side (a random buffer per step, so a
 * buffer's neighbour is often not free).  A step grows a buffer by a random
 * amount up to max(64 B, size/8) with realloc, then writes the new last byte
 * and one byte per 4 KiB of the new part; a buffer that reaches `--max` bytes
 * is checked, freed and starts again at 1..64 bytes.  Reports the time. */
#include "bench.h"

int main(int argc, char **argv)
{
	long long ops = 4000000, buffers = 32, max = 1 << 20, seed = 1;
	const struct bench_opt opts[] = {
		{"ops", 'i', &ops, "realloc calls"},
		{"buffers", 'i', &buffers, "buffers growing side by side"},
		{"max", 'i', &max, "size at which a buffer is freed and restarted"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Buffers grown step by step with realloc.", opts, BENCH_NOPTS(opts));
	if (buffers < 1 || max < 128) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	unsigned char **buf = calloc((size_t)buffers, sizeof *buf);
	size_t *len = calloc((size_t)buffers, sizeof *len);
	if (!buf || !len)
		return 1;
	uint64_t rng = bench_seed((uint64_t)seed, 0);
	long long restarts = 0, copied_checks = 0;

	double t0 = bench_now();
	for (long long i = 0; i < ops; i++) {
		size_t k = (size_t)(bench_rand(&rng) % (uint64_t)buffers);
		size_t old = len[k];
		if (old >= (size_t)max) {
			/* the first byte must have survived every move */
			if (buf[k][0] != (unsigned char)k) {
				fprintf(stderr, "realloc lost data\n");
				return 1;
			}
			copied_checks++;
			free(buf[k]);
			buf[k] = NULL;
			old = 0;
			restarts++;
		}
		size_t step = old / 8 > 64 ? old / 8 : 64;
		size_t n = old + (size_t)bench_range(&rng, 1, step);
		unsigned char *p = realloc(buf[k], n);
		if (!p) {
			fprintf(stderr, "realloc(%zu) failed\n", n);
			return 1;
		}
		for (size_t b = (old + 4095) & ~(size_t)4095; b < n; b += 4096)
			if (b)
				p[b] = 1;
		p[n - 1] = 2;
		if (old == 0)
			p[0] = (unsigned char)k;
		buf[k] = p;
		len[k] = n;
	}
	double el = bench_now() - t0;
	for (long long k = 0; k < buffers; k++)
		free(buf[k]);
	free(buf);
	free(len);
	bench_result("realloc", "ops=%lld restarts=%lld checks=%lld elapsed_s=%.6f ops_per_sec=%.0f",
		     ops, restarts, copied_checks, el, (double)ops / el);
	return 0;
}
