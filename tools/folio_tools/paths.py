"""Where things are, and building them when they are missing."""

import os
import shutil
import subprocess
import sys

# tools/folio_tools/paths.py -> repository root
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
BUILD = os.path.join(REPO, "build")
LIBRARY = os.path.join(BUILD, "libfolio.so")
BENCH_SRC = os.path.join(REPO, "bench")
BENCH_BIN = os.path.join(BUILD, "bench")


# An installed `folio` (make install) runs the installed library and builds nothing.
INSTALLED_VERSION = None
HELPER = None   # rusage_exec when installed; else built into build/bench/


def use_installed(library, helper, version):
    global LIBRARY, HELPER, INSTALLED_VERSION
    LIBRARY = library
    HELPER = helper
    INSTALLED_VERSION = version


class BuildError(Exception):
    """A build step failed or is impossible; the message says why."""


def _tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_library(quiet=False):
    """Return the absolute path of build/libfolio.so, running ``make -C REPO`` if it is missing."""
    if os.path.exists(LIBRARY):
        return LIBRARY
    if INSTALLED_VERSION:
        raise BuildError(f"{LIBRARY} is missing: folio {INSTALLED_VERSION} is not installed "
                         "completely (make install again from the source tree)")
    if not os.path.exists(os.path.join(REPO, "Makefile")):
        raise BuildError(f"{LIBRARY} is missing and there is no Makefile in {REPO} to build it")
    if not quiet:
        print(f"folio: {os.path.relpath(LIBRARY, REPO)} is missing; running make -C {REPO}",
              file=sys.stderr)
    proc = subprocess.run(["make", "-C", REPO], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0 or not os.path.exists(LIBRARY):
        raise BuildError(f"make -C {REPO} failed (status {proc.returncode}):\n{_tail(proc.stdout)}")
    return LIBRARY


def ensure_bench_binaries():
    """Build the benchmark programs of bench/ into build/bench/ (make is incremental)."""
    if INSTALLED_VERSION:
        raise BuildError("folio bench builds its programs from the source tree: run it as "
                         "./folio bench in a clone of folio")
    if shutil.which("make") is None or shutil.which("cc") is None:
        raise BuildError("building bench/ needs make and cc (apt-get install -y build-essential)")
    proc = subprocess.run(["make", "-C", BENCH_SRC, f"OUT={BENCH_BIN}"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise BuildError(f"building bench/ failed:\n{_tail(proc.stdout)}")
    return BENCH_BIN


def bench_binary(name):
    return os.path.join(BENCH_BIN, name)


def git_describe():
    """The repository's commit (short hash, '+dirty' when the tree has changes), or 'unknown'."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "no commit"
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
