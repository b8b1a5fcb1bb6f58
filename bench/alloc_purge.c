/* alloc_purge: how much memory goes back to the OS after most of a heap is freed.
 *
 * Builds a heap of `--heap` bytes of objects (70% of them 16..1024 B, 30%
 * 1..64 KiB, every page written), frees a random `--free-pct` percent of the
 * objects, and then stays alive for `--delay` seconds, in slices of 0.25 s each
 * followed by a short burst of small malloc/free pairs (allocators that purge
 * on a timer driven by allocation activity get their chance).  Reports the
 * resident set size when the heap was full, right after the frees and after
 * the delay, plus the time taken by the build and free phases. */
#include "bench.h"

struct obj {
	struct obj *next;
	size_t size;
};

int main(int argc, char **argv)
{
	long long heap = 512LL << 20, free_pct = 90, seed = 1;
	double delay = 1.5;
	const struct bench_opt opts[] = {
		{"heap", 'i', &heap, "bytes allocated before the frees"},
		{"free-pct", 'i', &free_pct, "percent of objects freed"},
		{"delay", 'd', &delay, "seconds to wait before measuring RSS again"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Frees most of a large heap and measures RSS after a purge delay.",
		    opts, BENCH_NOPTS(opts));
	if (heap < (1 << 20) || free_pct < 0 || free_pct > 100 || delay < 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	uint64_t rng = bench_seed((uint64_t)seed, 0);
	long long rss0 = bench_rss_bytes();

	double t0 = bench_now();
	size_t cap = 1024, count = 0;
	struct obj **all = bench_xmalloc(cap * sizeof *all);
	long long total = 0;
	while (total < heap) {
		size_t n = bench_rand(&rng) % 10 < 7 ? (size_t)bench_range(&rng, 16, 1024)
						      : (size_t)bench_range(&rng, 1024, 65536);
		struct obj *o = bench_xmalloc(n);
		o->size = n;
		for (size_t b = 4096; b < n; b += 4096)
			((char *)o)[b] = 1;
		if (count == cap) {
			cap *= 2;
			struct obj **grown = realloc(all, cap * sizeof *all);
			if (!grown)
				return 1;
			all = grown;
		}
		all[count++] = o;
		total += (long long)n;
	}
	double t_build = bench_now() - t0;
	long long rss_full = bench_rss_bytes();

	t0 = bench_now();
	size_t kept = 0;
	for (size_t i = 0; i < count; i++) {
		if ((long long)(bench_rand(&rng) % 100) < free_pct)
			free(all[i]);
		else
			all[kept++] = all[i];
	}
	double t_free = bench_now() - t0;
	long long rss_freed = bench_rss_bytes();

	double waited = 0;
	while (waited < delay) {
		double slice = delay - waited < 0.25 ? delay - waited : 0.25;
		bench_sleep(slice);
		waited += slice;
		for (int i = 0; i < 1000; i++) {
			void *p = malloc(64 + (size_t)(i % 8) * 64);
			bench_sink(p);
			free(p);
		}
	}
	long long rss_after = bench_rss_bytes();

	long long kept_bytes = 0;
	for (size_t i = 0; i < kept; i++) {
		kept_bytes += (long long)all[i]->size;
		free(all[i]);
	}
	free(all);
	const double mib = 1048576.0;
	bench_result("purge",
		     "heap_mib=%.1f objects=%zu kept_mib=%.1f rss_start_mib=%.1f rss_full_mib=%.1f "
		     "rss_after_free_mib=%.1f rss_after_delay_mib=%.1f build_s=%.6f free_s=%.6f "
		     "delay_s=%.2f elapsed_s=%.6f",
		     (double)total / mib, count, (double)kept_bytes / mib, (double)rss0 / mib,
		     (double)rss_full / mib, (double)rss_freed / mib, (double)rss_after / mib,
		     t_build, t_free, delay, t_build + t_free);
	return 0;
}
