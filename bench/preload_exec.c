/* preload_exec: say which library will provide malloc, then become a command.
 *
 *   preload_exec CMD [ARGS...]
 *
 * Prints the usual result line (`bench=exec malloc_lib=PATH argc=N`) on
 * stdout, then execvp's CMD in the same process.  The runner uses it in front
 * of commands that are not our own programs (the kernel build, the small
 * programs): since exec keeps the pid, the runner's wait4 measures the
 * command itself.
 *
 * It is linked statically, so LD_PRELOAD does not apply to it: only CMD and
 * its children load the allocator.  A dynamically linked wrapper ran the
 * allocator's start-up (and a printf buffer's malloc) before the exec, and the
 * kernel counts that in the same process's faults and peak RSS: a small
 * program's figures then held the allocator's per-process cost twice.  PATH
 * is LD_PRELOAD's first entry (the library the command will load), or
 * libc.so.6 without one; a preload that fails makes ld.so print "cannot be
 * preloaded" on the command's stderr, which the runner treats as a failed
 * run.  Exits 127 if CMD cannot be executed. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fprintf(argc < 2 ? stderr : stdout,
			"usage: %s CMD [ARGS...]\nPrints which library will provide malloc, then execs CMD.\n",
			argv[0]);
		return argc < 2 ? 2 : 0;
	}
	const char *pre = getenv("LD_PRELOAD");
	char lib[4096] = "libc.so.6";
	if (pre && *pre) {
		size_t n = strcspn(pre, ": ");
		if (n && n < sizeof lib) {
			memcpy(lib, pre, n);
			lib[n] = 0;
		}
	}
	printf("bench=exec malloc_lib=%s argc=%d\n", lib, argc - 1);
	fflush(stdout);
	execvp(argv[1], argv + 1);
	fprintf(stderr, "preload_exec: cannot execute %s: %s\n", argv[1], strerror(errno));
	return 127;
}
