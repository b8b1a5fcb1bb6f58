"""Running a command and measuring it: wall time and wait4's rusage.

Commands run under ``build/bench/rusage_exec`` (bench/rusage_exec.c), a small
C program that forks the command, waits for it with wait4 and writes the
rusage to a file.  Measuring from Python directly would be wrong for peak RSS:
ru_maxrss survives exec, so a child spawned from this Python process starts
with Python's resident size as its peak.  The variables that select the
allocator (LD_PRELOAD, FOLIO_*) are handed to rusage_exec with ``-e`` so they
apply to the command only, not to the helper.

The helper is started with the signals Python ignores (SIGPIPE, SIGXFSZ) and
SIGINT/SIGQUIT reset to their defaults, so the command behaves as under a
shell; the helper itself ignores SIGINT/SIGQUIT while it waits.
"""

import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass

from . import paths

_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGQUIT)


def _child_only(name):
    return name == "LD_PRELOAD" or name.startswith("FOLIO_")


@dataclass
class Exit:
    """How a command ended, with its resource usage."""
    pid: int
    status: int            # raw wait status
    wall_s: float
    user_s: float
    sys_s: float
    maxrss_kib: int        # peak RSS of the command (the largest of it and its waited-for children)
    minflt: int
    majflt: int
    nvcsw: int
    nivcsw: int
    timed_out: bool = False

    @property
    def exit_code(self):
        """The shell's convention: the exit status, or 128+N when killed by signal N."""
        if os.WIFEXITED(self.status):
            return os.WEXITSTATUS(self.status)
        if os.WIFSIGNALED(self.status):
            return 128 + os.WTERMSIG(self.status)
        return 1

    @property
    def signal_name(self):
        if os.WIFSIGNALED(self.status):
            try:
                return signal.Signals(os.WTERMSIG(self.status)).name
            except ValueError:
                return f"signal {os.WTERMSIG(self.status)}"
        return None


def helper():
    """Path of rusage_exec, built with make if missing (installed: the installed one)."""
    if paths.HELPER:
        if not os.access(paths.HELPER, os.X_OK):
            raise paths.BuildError(f"{paths.HELPER} is missing (make install again)")
        return paths.HELPER
    path = paths.bench_binary("rusage_exec")
    if not os.path.exists(path):
        res = subprocess.run(["make", "-C", paths.BENCH_SRC, f"OUT={paths.BENCH_BIN}", path],
                             capture_output=True, text=True)
        if res.returncode != 0 or not os.path.exists(path):
            raise paths.BuildError(f"cannot build {path}:\n{res.stdout}{res.stderr}")
    return path


def run(argv, env, stdout_fd=None, stderr_fd=None, timeout=None, on_start=None):
    """Run argv (searched in PATH) with environment env and return an Exit.

    stdout_fd/stderr_fd redirect the command's output; timeout (seconds) kills
    it with SIGKILL; on_start() is called once it is started.  Raises OSError
    when argv[0] cannot be executed, paths.BuildError when the helper cannot
    be built."""
    h = helper()
    fd, result = tempfile.mkstemp(prefix="folio-rusage.")
    os.close(fd)
    try:
        hargv = [h]
        if timeout:
            hargv += ["--timeout", f"{timeout:g}"]
        for k, v in env.items():
            if _child_only(k):
                hargv += ["-e", f"{k}={v}"]
        hargv += [result, "--"] + list(argv)
        henv = {k: v for k, v in env.items() if not _child_only(k)}
        actions = []
        if stdout_fd is not None:
            actions.append((os.POSIX_SPAWN_DUP2, stdout_fd, 1))
        if stderr_fd is not None:
            actions.append((os.POSIX_SPAWN_DUP2, stderr_fd, 2))
        pid = os.posix_spawn(h, hargv, henv, file_actions=actions or None,
                             setsigdef=_DEFAULT_SIGNALS)
        if on_start:
            on_start()
        while True:
            try:
                _, hstatus = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        with open(result) as f:
            fields = dict(tok.split("=", 1) for tok in f.read().split() if "=" in tok)
        if not fields:
            raise OSError(f"{h} failed (wait status {hstatus}) and measured nothing")
        err = int(fields.get("exec_errno", 0))
        if err:
            raise OSError(err, os.strerror(err), argv[0])
        return Exit(pid=int(fields["pid"]), status=int(fields["status"]),
                    wall_s=float(fields["wall_s"]), user_s=float(fields["user_s"]),
                    sys_s=float(fields["sys_s"]), maxrss_kib=int(fields["maxrss_kib"]),
                    minflt=int(fields["minflt"]), majflt=int(fields["majflt"]),
                    nvcsw=int(fields["nvcsw"]), nivcsw=int(fields["nivcsw"]),
                    timed_out=fields.get("timed_out") == "1")
    finally:
        os.unlink(result)
