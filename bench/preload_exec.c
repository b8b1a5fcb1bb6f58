/* preload_exec: say which library provides malloc, then become a command.
 *
 *   preload_exec CMD [ARGS...]
 *
 * Prints the usual result line (`bench=exec malloc_lib=PATH argc=N`) on
 * stdout, then execvp's CMD in the same process.  The runner uses it in front
 * of commands that are not our own programs (the kernel build): the line shows
 * that LD_PRELOAD took effect in the environment the command and all its
 * children inherit, and since exec keeps the pid, the runner's wait4 still
 * measures the command itself.  Exits 127 if CMD cannot be executed. */
#include "bench.h"

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fprintf(argc < 2 ? stderr : stdout,
			"usage: %s CMD [ARGS...]\nPrints which library provides malloc, then execs CMD.\n",
			argv[0]);
		return argc < 2 ? 2 : 0;
	}
	bench_result("exec", "argc=%d", argc - 1);
	execvp(argv[1], argv + 1);
	fprintf(stderr, "preload_exec: cannot execute %s: %s\n", argv[1], strerror(errno));
	return 127;
}
