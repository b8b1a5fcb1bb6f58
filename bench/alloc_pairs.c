/* alloc_pairs: N malloc+free pairs of sizes drawn from [lo, hi], for counting
 * instructions per pair under callgrind (tools/folio_tools/callgrind.py runs it
 * with N and 2N pairs: the difference over N cancels start-up and exit).
 *
 * Sizes come from a table filled once from a fixed seed, so every allocator
 * gets the same sequence and the per-pair loop adds the same few instructions
 * to each (--dry 1 runs the loop without allocating, to show that overhead).
 * --batch B: B mallocs then their B frees per round instead of malloc, free.
 * --cxx 1: C++'s operator new and sized operator delete instead (a C++
 * program's new/delete: the allocator's own operators where it has them, else
 * libstdc++'s, loaded here, which call malloc and free).
 */
#include "bench.h"

#include <dlfcn.h>

static void *(*cxx_new)(size_t);
static void (*cxx_delete)(void *, size_t);

/* operator new(size_t) and operator delete(void *, size_t) of the process,
 * else of libstdc++ */
static void cxx_find(void)
{
	cxx_new = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
	cxx_delete = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
	if (!cxx_new || !cxx_delete) {
		void *lib = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
		if (!lib) {
			fprintf(stderr, "alloc_pairs: --cxx 1 needs libstdc++.so.6: %s\n", dlerror());
			exit(2);
		}
		cxx_new = (void *(*)(size_t))dlsym(lib, "_Znwm");
		cxx_delete = (void (*)(void *, size_t))dlsym(lib, "_ZdlPvm");
	}
	if (!cxx_new || !cxx_delete) {
		fprintf(stderr, "alloc_pairs: no operator new/delete found\n");
		exit(2);
	}
}

#define NSIZES 4096 /* a power of two: the index is a mask */

int main(int argc, char **argv)
{
	long long n = 200000, lo = 16, hi = 1024, batch = 1, seed = 42, dry = 0, cxx = 0;
	struct bench_opt opts[] = {
		{"pairs", 'i', &n, "malloc+free pairs"},
		{"lo", 'i', &lo, "smallest size in bytes"},
		{"hi", 'i', &hi, "largest size in bytes"},
		{"batch", 'i', &batch, "mallocs before their frees (1: malloc, free)"},
		{"seed", 'i', &seed, "seed of the size sequence"},
		{"dry", 'i', &dry, "1: the loop without malloc/free (its own instructions)"},
		{"cxx", 'i', &cxx, "1: operator new and sized operator delete instead of malloc and free"},
	};
	bench_parse(argc, argv, "N malloc+free pairs of random sizes in [lo, hi].", opts,
		    BENCH_NOPTS(opts));
	if (lo < 1 || hi < lo || batch < 1 || batch > 4096 || n < 0) {
		fprintf(stderr, "alloc_pairs: need 1 <= lo <= hi, 1 <= batch <= 4096, pairs >= 0\n");
		return 2;
	}
	if (cxx)
		cxx_find();
	static size_t sizes[NSIZES];
	static void *live[4096];
	uint64_t rng = bench_seed((uint64_t)seed, 0);
	for (int i = 0; i < NSIZES; i++)
		sizes[i] = (size_t)bench_range(&rng, (uint64_t)lo, (uint64_t)hi);

	double t0 = bench_now();
	long long done = 0;
	unsigned k = 0;
	while (done < n) {
		long long b = n - done < batch ? n - done : batch;
		for (long long i = 0; i < b; i++) {
			size_t sz = sizes[k++ & (NSIZES - 1)];
			live[i] = dry ? (void *)sz : cxx ? cxx_new(sz) : bench_xmalloc(sz);
			bench_sink(live[i]);
		}
		for (long long i = 0; i < b; i++) {
			bench_sink(live[i]);
			if (cxx && !dry)
				cxx_delete(live[i], sizes[(k - (unsigned)b + (unsigned)i) & (NSIZES - 1)]);
			else if (!dry)
				free(live[i]);
		}
		done += b;
	}
	double el = bench_now() - t0;
	bench_result("alloc_pairs", "pairs=%lld lo=%lld hi=%lld batch=%lld dry=%lld cxx=%lld elapsed_s=%.6f",
		     n, lo, hi, batch, dry, cxx, el);
	return 0;
}
