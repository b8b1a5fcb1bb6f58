/* rusage_exec: run a command and report its resource usage (used by ./folio).
 *
 *   rusage_exec [--timeout SECONDS] [-e NAME=VALUE]... OUTFILE -- CMD [ARGS...]
 *
 * Sets the -e variables (so that LD_PRELOAD and FOLIO_* apply to CMD and
 * not to this program, which is running already), forks, execs CMD, waits for it with wait4 and writes one line to OUTFILE:
 *   pid=.. status=.. wall_s=.. user_s=.. sys_s=.. maxrss_kib=.. minflt=..
 *   majflt=.. nvcsw=.. nivcsw=.. timed_out=0|1 exec_errno=..
 * (status is the raw wait status).  With --timeout, CMD is killed with
 * SIGKILL after SECONDS.  SIGINT and SIGQUIT are ignored while waiting, like
 * a shell waiting for a foreground job.  Exits 0 when it could write OUTFILE.
 *
 * Why not measure from Python: a process's ru_maxrss survives exec, and a
 * child spawned from the Python process starts with the Python process's
 * resident size as its peak.  A fresh fork from this small program starts
 * near 1 MiB, so the peak RSS it reports is the command's own. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t timed_out;
static volatile pid_t child;

static void on_alarm(int sig)
{
	(void)sig;
	timed_out = 1;
	if (child > 0)
		kill(child, SIGKILL);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double tv(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
	double timeout = 0;
	int a = 1, nenv = 0;
	char **envs = calloc((size_t)argc, sizeof *envs);
	if (!envs)
		return 2;
	while (a + 1 < argc) {
		if (!strcmp(argv[a], "--timeout"))
			timeout = strtod(argv[a + 1], NULL);
		else if (!strcmp(argv[a], "-e") && strchr(argv[a + 1], '='))
			envs[nenv++] = argv[a + 1];
		else
			break;
		a += 2;
	}
	if (a + 2 >= argc || strcmp(argv[a + 1], "--")) {
		fprintf(stderr, "usage: %s [--timeout SECONDS] [-e NAME=VALUE]... OUTFILE -- CMD [ARGS...]\n",
			argv[0]);
		return 2;
	}
	const char *outfile = argv[a];
	char **cmd = argv + a + 2;

	int errpipe[2];
	if (pipe2(errpipe, O_CLOEXEC)) {
		perror("pipe2");
		return 2;
	}
	/* The variables go into this process's environment before the fork,
	 * not the child's after it: putenv grows environ with malloc, and in
	 * the child that wrote pages copied from this one, which the kernel
	 * counted in the command's faults (about 7, in every row that sets a
	 * variable, every allocator's but the system's).  This program execs
	 * nothing else, so they apply to CMD alone all the same. */
	for (int i = 0; i < nenv; i++)
		putenv(envs[i]);
	double t0 = now();
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		close(errpipe[0]);
		execvp(cmd[0], cmd);
		int e = errno;
		if (write(errpipe[1], &e, sizeof e) < 0) {
		}
		_exit(127);
	}
	child = pid;
	close(errpipe[1]);
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	if (timeout > 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_alarm;
		sigaction(SIGALRM, &sa, NULL);
		struct itimerval it = {{0, 0}, {(time_t)timeout,
						(suseconds_t)((timeout - (double)(time_t)timeout) * 1e6)}};
		setitimer(ITIMER_REAL, &it, NULL);
	}
	int exec_errno = 0;
	ssize_t n;
	while ((n = read(errpipe[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
	}
	if (n != (ssize_t)sizeof exec_errno)
		exec_errno = 0;
	int status;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0) {
		if (errno != EINTR) {
			perror("wait4");
			return 2;
		}
	}
	double wall = now() - t0;

	FILE *f = fopen(outfile, "w");
	if (!f) {
		perror(outfile);
		return 2;
	}
	fprintf(f,
		"pid=%d status=%d wall_s=%.6f user_s=%.6f sys_s=%.6f maxrss_kib=%ld minflt=%ld "
		"majflt=%ld nvcsw=%ld nivcsw=%ld timed_out=%d exec_errno=%d\n",
		(int)pid, status, wall, tv(ru.ru_utime), tv(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt,
		ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw, (int)timed_out, exec_errno);
	return fclose(f) ? 2 : 0;
}
