/* faults_firsttouch: grow a data structure to a given size, writing every
 * byte once, as a program that builds its state does (issue 14, seed 001's
 * first-touch workloads).
 *
 *   --kind 0: a tree of nodes of 32..256 bytes (8 children each, filled in
 *             breadth-first order, every node written when made);
 *   --kind 1: a chained hash table of 32..256-byte nodes whose bucket array
 *             doubles (realloc) whenever the load reaches 1, rehashing every
 *             node.
 * Grows until the nodes and the table hold --heap bytes.  Then reads
 * /proc/self/smaps_rollup: how much of the resident memory the kernel backs
 * with huge pages (AnonHugePages / Rss, the hugepage coverage).  Reports the
 * time to build, the minor faults taken while building and per MiB of
 * resident memory, and the coverage.  The structure is not freed: the
 * process exits. */
#include "bench.h"

#include <sys/resource.h>

struct tnode {
	struct tnode *child[8];
	uint64_t key;
	char payload[];
};

struct hnode {
	struct hnode *next;
	uint64_t key;
	char payload[];
};

static long long minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static long long smaps_kb(const char *key)
{
	char line[256];
	long long v = 0;
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, key, strlen(key)))
			v = strtoll(line + strlen(key), NULL, 10);
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	long long heap = 256ll << 20, kind = 0, seed = 1;
	const struct bench_opt opts[] = {
		{"heap", 'i', &heap, "bytes to grow the structure to (K/M/G suffixes)"},
		{"kind", 'i', &kind, "0: tree, 1: hash table"},
		{"seed", 'i', &seed, "random seed"},
	};
	bench_parse(argc, argv, "Grow a tree or a hash table to --heap bytes, writing each byte once.",
		    opts, sizeof opts / sizeof opts[0]);
	uint64_t rng = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
	long long f0 = minflt();
	double t0 = bench_now();
	long long bytes = 0, nodes = 0;
	if (kind == 0) {
		/* a queue of the nodes whose children are not all made, as an array of pointers
		 * grown by realloc (part of the heap) */
		size_t cap = 1024, head = 0, tail = 0;
		struct tnode **queue = bench_xmalloc(cap * sizeof *queue);
		struct tnode *root = NULL;
		int filled = 0;
		while (bytes < heap) {
			size_t size = 32 + (size_t)(bench_rand(&rng) % 225);
			if (size < sizeof(struct tnode))
				size = sizeof(struct tnode);
			struct tnode *n = bench_xmalloc(size);
			memset(n, 0, size);
			n->key = bench_rand(&rng);
			bytes += (long long)size;
			nodes++;
			if (!root) {
				root = n;
			} else {
				queue[head]->child[filled++] = n;
				if (filled == 8) {
					filled = 0;
					head++;
				}
			}
			if (tail == cap) {
				queue = realloc(queue, 2 * cap * sizeof *queue);
				if (!queue) {
					fprintf(stderr, "realloc failed\n");
					return 1;
				}
				bytes += (long long)(cap * sizeof *queue);
				cap *= 2;
			}
			queue[tail++] = n;
		}
		bench_sink(root);
		bench_sink(queue);
	} else {
		size_t nb = 1024;
		struct hnode **table = calloc(nb, sizeof *table);
		if (!table)
			return 1;
		bytes += (long long)(nb * sizeof *table);
		while (bytes < heap) {
			size_t size = 32 + (size_t)(bench_rand(&rng) % 225);
			struct hnode *n = bench_xmalloc(size);
			memset(n->payload, (int)nodes, size - sizeof *n);
			n->key = bench_rand(&rng);
			size_t b = (size_t)(n->key & (nb - 1));
			n->next = table[b];
			table[b] = n;
			bytes += (long long)size;
			if (++nodes == (long long)nb) { /* load 1: double and rehash */
				struct hnode **t2 = calloc(2 * nb, sizeof *t2);
				if (!t2)
					return 1;
				for (size_t i = 0; i < nb; i++)
					for (struct hnode *p = table[i], *next; p; p = next) {
						next = p->next;
						size_t c = (size_t)(p->key & (2 * nb - 1));
						p->next = t2[c];
						t2[c] = p;
					}
				free(table);
				bytes += (long long)(nb * sizeof *table);
				table = t2;
				nb *= 2;
			}
		}
		bench_sink(table);
	}
	double elapsed = bench_now() - t0;
	long long faults = minflt() - f0;
	long long huge_kb = smaps_kb("AnonHugePages:"), rss_kb = smaps_kb("Rss:");
	bench_result(kind == 0 ? "firsttouch-tree" : "firsttouch-hash",
		     "heap_mib=%.1f nodes=%lld elapsed_s=%.4f build_faults=%lld faults_per_mib=%.2f "
		     "anon_huge_mib=%.1f rss_mib=%.1f coverage=%.4f",
		     bytes / 1048576.0, nodes, elapsed, faults,
		     rss_kb ? faults / (rss_kb / 1024.0) : 0.0, huge_kb / 1024.0, rss_kb / 1024.0,
		     rss_kb ? (double)huge_kb / (double)rss_kb : 0.0);
	return 0;
}
