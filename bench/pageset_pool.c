/* pageset_pool: a thread pool whose tasks allocate bursts of page-sized blocks.
 *
 * `--threads` workers take tasks from a shared counter.  A task allocates a
 * burst of between `--burst-min` and `--burst-max` blocks of random sizes in
 * [--min, --max] (4-16 KiB by default), writes one byte per page of each, and
 * then frees the whole burst in allocation order: the allocate-all/free-all
 * cycle whose depth seed 003's auto-tuning learns.  The tasks come in
 * `--waves` waves; between two waves the pool is idle for `--idle-ms` (all
 * workers wait), as a server between bursts of requests.  The result is the
 * time the pool was busy (the idle gaps are not counted) and the blocks per
 * second; `--max-seconds` stops it early (`completed=0`).  At the end the
 * resident set size is measured right away (`rss_end_mib`) and after
 * `--settle` idle seconds (`rss_final_mib`). */
#include "bench.h"
#include <stdatomic.h>

#define PAGE 4096

struct pool {
	_Alignas(64) _Atomic long long next; /* next task of the current wave */
	_Alignas(64) _Atomic int stop;       /* the time cap was reached */
	int quit;                            /* set by main before the last wave_start */
	long long tasks_per_wave, waves, threads;
	double t0, max_seconds;
	long long burst_min, burst_max, min, max;
	uint64_t seed;
	pthread_barrier_t wave_start, wave_end;
};

struct worker {
	struct pool *pool;
	int id;
	long long tasks, blocks, bytes;
	unsigned long long check;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct pool *P = w->pool;
	uint64_t rng = bench_seed(P->seed, (uint64_t)w->id);
	unsigned char **burst = bench_xmalloc(sizeof *burst * (size_t)P->burst_max);
	size_t *sizes = bench_xmalloc(sizeof *sizes * (size_t)P->burst_max);
	unsigned long long check = 0;
	for (;;) {
		pthread_barrier_wait(&P->wave_start);
		if (P->quit)
			break;
		while (!atomic_load_explicit(&P->stop, memory_order_relaxed) &&
		       atomic_fetch_add_explicit(&P->next, 1, memory_order_relaxed) < P->tasks_per_wave) {
			if (P->max_seconds > 0 && bench_now() - P->t0 > P->max_seconds) {
				atomic_store_explicit(&P->stop, 1, memory_order_relaxed);
				break;
			}
			long long n = (long long)bench_range(&rng, (uint64_t)P->burst_min,
							     (uint64_t)P->burst_max);
			for (long long i = 0; i < n; i++) {
				size_t sz = (size_t)bench_range(&rng, (uint64_t)P->min, (uint64_t)P->max);
				unsigned char *p = malloc(sz);
				if (!p) {
					fprintf(stderr, "malloc(%zu) failed\n", sz);
					exit(1);
				}
				for (size_t off = 0; off < sz; off += PAGE)
					p[off] = (unsigned char)(i + (long long)off);
				p[sz - 1] = (unsigned char)i;
				burst[i] = p;
				sizes[i] = sz;
				w->bytes += (long long)sz;
			}
			for (long long i = 0; i < n; i++) {
				check += burst[i][0] + burst[i][sizes[i] - 1];
				free(burst[i]);
			}
			w->blocks += n;
			w->tasks++;
		}
		pthread_barrier_wait(&P->wave_end);
	}
	w->check = check;
	free(burst);
	free(sizes);
	return NULL;
}

int main(int argc, char **argv)
{
	long long threads = 4, tasks = 20000, waves = 20, idle_ms = 20, burst_min = 16,
		  burst_max = 256, min = 4 << 10, max = 16 << 10, seed = 1;
	double settle = 2.0, max_seconds = 0;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "worker threads"},
		{"max-seconds", 'd', &max_seconds, "stop early after this many busy seconds (0: never)"},
		{"tasks", 'i', &tasks, "tasks in all (split evenly over the waves)"},
		{"waves", 'i', &waves, "waves of tasks"},
		{"idle-ms", 'i', &idle_ms, "idle milliseconds between waves"},
		{"burst-min", 'i', &burst_min, "fewest blocks a task allocates"},
		{"burst-max", 'i', &burst_max, "most blocks a task allocates"},
		{"min", 'i', &min, "smallest block in bytes"},
		{"max", 'i', &max, "largest block in bytes"},
		{"settle", 'd', &settle, "idle seconds before the final RSS is measured"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv,
		    "A thread pool whose tasks allocate and free bursts of 4-16 KiB blocks, in waves.",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || waves < 1 || tasks < waves || idle_ms < 0 || burst_min < 1 ||
	    burst_max < burst_min || min < 1 || max < min || settle < 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}

	long long rss0 = bench_rss_bytes();
	struct pool *P = aligned_alloc(64, sizeof *P);
	if (!P)
		return 1;
	memset(P, 0, sizeof *P);
	P->tasks_per_wave = tasks / waves;
	P->waves = waves;
	P->threads = threads;
	P->burst_min = burst_min;
	P->burst_max = burst_max;
	P->min = min;
	P->max = max;
	P->seed = (uint64_t)seed;
	P->max_seconds = max_seconds;
	pthread_barrier_init(&P->wave_start, NULL, (unsigned)threads + 1);
	pthread_barrier_init(&P->wave_end, NULL, (unsigned)threads + 1);
	struct worker *w = calloc((size_t)threads, sizeof *w);
	pthread_t *t = bench_xmalloc(sizeof *t * (size_t)threads);
	if (!w)
		return 1;
	for (long long k = 0; k < threads; k++) {
		w[k].pool = P;
		w[k].id = (int)k;
		bench_spawn(&t[k], work, &w[k]);
	}
	double busy = 0;
	for (long long wave = 0; wave < waves && !atomic_load(&P->stop); wave++) {
		if (wave > 0 && idle_ms > 0)
			bench_sleep((double)idle_ms / 1000.0);
		atomic_store_explicit(&P->next, 0, memory_order_relaxed);
		double t0 = bench_now();
		P->t0 = t0 - busy; /* the cap counts busy time only */
		pthread_barrier_wait(&P->wave_start);
		pthread_barrier_wait(&P->wave_end);
		busy += bench_now() - t0;
	}
	P->quit = 1;
	pthread_barrier_wait(&P->wave_start);
	long long done = 0, blocks = 0, bytes = 0;
	unsigned long long check = 0;
	for (long long k = 0; k < threads; k++) {
		pthread_join(t[k], NULL);
		done += w[k].tasks;
		blocks += w[k].blocks;
		bytes += w[k].bytes;
		check += w[k].check;
	}
	free(w);
	free(t);
	pthread_barrier_destroy(&P->wave_start);
	pthread_barrier_destroy(&P->wave_end);
	free(P);
	long long rss_end = bench_rss_bytes();
	bench_sleep(settle);
	long long rss_final = bench_rss_bytes();
	bench_result("pageset_pool",
		     "threads=%lld tasks=%lld completed=%d blocks=%lld elapsed_s=%.6f ops_per_sec=%.0f "
		     "ns_per_op=%.1f gib_allocated=%.2f rss_start_mib=%.1f rss_end_mib=%.1f "
		     "rss_final_mib=%.1f peak_rss_mib=%.1f settle_s=%g check=%llu",
		     threads, done, done == waves * (tasks / waves), blocks, busy, (double)blocks / busy, busy * 1e9 / (double)blocks,
		     (double)bytes / (double)(1 << 30), (double)rss0 / 1048576.0,
		     (double)rss_end / 1048576.0, (double)rss_final / 1048576.0,
		     (double)bench_hwm_bytes() / 1048576.0, settle, check & 0xff);
	return 0;
}
