"""What a benchmark suite is made of.

A suite is a name, a description and a list of workloads; a workload says how
to run one benchmark command and which of its numbers to compare.  The runner
runs every workload under every allocator and reports medians and ratios of
the workload's primary metric, plus its extra metrics and, for every
workload, wall/CPU time, peak RSS and minor faults measured by the runner.
"""

import os
import shlex
from dataclasses import dataclass, field
from typing import Callable

from .. import paths


@dataclass(frozen=True)
class Metric:
    key: str            # a key of the benchmark's result line, or of the runner's measures
    label: str          # column / row label
    unit: str           # shown after the label
    better: str         # "lower" or "higher"
    digits: int = 3     # significant digits in tables

    def cost(self, value):
        """The value as a cost (lower is better): itself, or its inverse for higher-is-better."""
        if value is None:
            return None
        if self.better == "lower":
            return value
        return 1.0 / value if value else None

    def format(self, value):
        """`digits` significant digits; k/M/G suffixes from 10,000 up."""
        if value is None:
            return "-"
        if value == 0:
            return "0"
        for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
            if abs(value) >= scale:
                v = value / (scale if suffix != "k" else 1e3)
                return f"{v:.{self.digits}g}{suffix}"
        if abs(value) >= 10 ** self.digits:     # 1000..9999 with 3 digits: no exponent
            return f"{value:.0f}"
        return f"{value:.{self.digits}g}"


# Measured by the runner for every run (see runner.measure_run).
WALL = Metric("wall_s", "wall time", "s", "lower")
USER = Metric("user_s", "user time", "s", "lower")
CPU = Metric("cpu_s", "CPU time (user+sys)", "s", "lower")
SYS = Metric("sys_s", "system time", "s", "lower")
MAXRSS = Metric("maxrss_mib", "peak RSS", "MiB", "lower")
MINFLT = Metric("minflt", "minor faults", "", "lower")
COMMON_METRICS = [WALL, CPU, SYS, MAXRSS, MINFLT]


def parse_kv(stdout):
    """The last line of stdout with key=value fields, as a dict (numbers as floats)."""
    for line in reversed(stdout.strip().splitlines()):
        if "=" not in line:
            continue
        out = {}
        for tok in line.split():
            k, sep, v = tok.partition("=")
            if not sep:
                continue
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
        if out:
            return out
    return {}


def parse_result_line(stdout):
    """The ``bench=...`` result line of a bench/ program anywhere in stdout (for commands that
    print more after it, such as preload_exec followed by make), else parse_kv."""
    for line in stdout.splitlines():
        if line.startswith("bench="):
            return parse_kv(line)
    return parse_kv(stdout)


@dataclass
class Workload:
    name: str
    description: str
    metric: Metric                      # the primary metric: the headline table and the ratios
    binary: str = None                  # a program of bench/ (built into build/bench/)
    args: list = field(default_factory=list)
    quick_args: list = None             # replaces args under --quick
    extra_metrics: list = field(default_factory=list)
    env: dict = field(default_factory=dict)    # extra environment for every allocator
    command: Callable = None            # command(quick) -> argv, instead of binary+args
    parse: Callable = parse_kv          # parse(stdout) -> {key: value}
    timeout: float = None               # seconds; default: the runner's
    full_only: bool = False             # skipped under --quick
    prepare: Callable = None            # prepare(), once before a suite that runs it (after
    #                                     the suite's own), e.g. fetching a source tree
    before_run: Callable = None         # before_run(quick), before each run, not timed
    same_as: tuple = None               # (suite, workload) whose runs are interchangeable with
    #                                     this one's: when both are planned, allocators the other
    #                                     runs are not run again here but borrowed from it, and
    #                                     this one's other allocators run in its rotation
    same_as_allocators: dict = None     # {my allocator: its allocator} also interchangeable
    #                                     (e.g. folio-auto: folio, when the variant's
    #                                     environment is folio's default)
    est_s: float = None                 # expected wall seconds of one run (ETA before the first)
    reps: int = None                    # repetitions of the full run (default: the suite's)

    def argv(self, quick):
        if self.command is not None:
            return list(self.command(quick))
        args = self.quick_args if (quick and self.quick_args is not None) else self.args
        return [paths.bench_binary(self.binary)] + [str(a) for a in args]

    def shell(self, quick):
        """The command line, with paths inside the repository made relative to it."""
        argv = [os.path.relpath(a, paths.REPO) if a.startswith(paths.REPO + os.sep) else a
                for a in self.argv(quick)]
        return shlex.join(argv)


def build_bench_programs():
    paths.ensure_bench_binaries()


@dataclass
class Suite:
    name: str
    title: str
    description: str
    workloads: list
    prepare: Callable = build_bench_programs   # prepare(), once before the suite runs
    reps: int = None            # default repetitions of the full run (the runner's otherwise)
    allocators: Callable = None  # allocators(names) -> the names this suite runs
    focus: str = "folio"        # the allocator whose ratios to glibc and the best other are shown
    tables: Callable = None     # tables(SuiteTable, results) -> [(title, header, rows, notes)]
