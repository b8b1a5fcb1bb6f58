/* faults_ebizzy: an ebizzy-like workload.
 *
 * At start, `--chunks` chunks of `--chunk-size` bytes (512 KiB) are filled
 * with sorted 8-byte records.  Each of `--threads` threads loops: pick a
 * random chunk, malloc a buffer of the chunk's size, copy the chunk's records
 * into it, binary-search it for a random key, free the buffer.  One loop is
 * one record, as in ebizzy.  Reports records per second and the minor page
 * faults per MiB of buffers allocated, over a window of `--seconds` that
 * opens once every thread has done `--warmup` loops. */
#include "bench.h"

struct ctx {
	uint64_t **chunk;
	long long nchunks;
	size_t bytes;
	size_t nrec;
	long long found[64];
};

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void step(void *arg, int tid, uint64_t *rng, struct bench_counter *cnt)
{
	struct ctx *c = arg;
	const uint64_t *src = c->chunk[bench_rand(rng) % (uint64_t)c->nchunks];
	uint64_t *buf = malloc(c->bytes);
	if (!buf) {
		fprintf(stderr, "malloc(%zu) failed\n", c->bytes);
		exit(1);
	}
	memcpy(buf, src, c->bytes);
	uint64_t key = src[bench_rand(rng) % c->nrec];
	if (bsearch(&key, buf, c->nrec, sizeof *buf, cmp))
		c->found[tid & 63]++;
	free(buf);
	bench_count(cnt, 1);
}

int main(int argc, char **argv)
{
	long long threads = 4, chunks = 10, chunk_size = 512 << 10, warmup = 1, seed = 1;
	double seconds = 1.0;
	const struct bench_opt opts[] = {
		{"threads", 'i', &threads, "threads"},
		{"chunks", 'i', &chunks, "source chunks"},
		{"chunk-size", 'i', &chunk_size, "bytes per chunk and per copy buffer"},
		{"seconds", 'd', &seconds, "length of the measured window"},
		{"warmup", 'i', &warmup, "iterations every thread completes before the window opens"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Threads malloc a buffer, copy records into it, search, free (ebizzy-like).",
		    opts, BENCH_NOPTS(opts));
	if (threads < 1 || chunks < 1 || chunk_size < 8 || seconds <= 0) {
		fprintf(stderr, "bad parameters\n");
		return 2;
	}
	struct ctx c = {.nchunks = chunks, .bytes = (size_t)chunk_size & ~(size_t)7};
	c.nrec = c.bytes / sizeof(uint64_t);
	c.chunk = bench_xmalloc(sizeof *c.chunk * (size_t)chunks);
	uint64_t rng = bench_seed((uint64_t)seed, 999);
	for (long long k = 0; k < chunks; k++) {
		c.chunk[k] = bench_xmalloc(c.bytes);
		uint64_t v = 0;
		for (size_t i = 0; i < c.nrec; i++) {
			v += 1 + bench_rand(&rng) % 1000;
			c.chunk[k][i] = v;
		}
	}
	struct bench_timed_result r = bench_run_timed((int)threads, seconds, warmup, (uint64_t)seed,
							step, &c);
	long long found = 0;
	for (int k = 0; k < 64; k++)
		found += c.found[k];
	for (long long k = 0; k < chunks; k++)
		free(c.chunk[k]);
	free(c.chunk);
	char extra[96];
	snprintf(extra, sizeof extra, "found=%lld records_per_sec=%.0f", found,
		 (double)r.ops / r.elapsed);
	bench_timed_print("ebizzy", threads, r, (double)c.bytes / 1048576.0, extra);
	return 0;
}
