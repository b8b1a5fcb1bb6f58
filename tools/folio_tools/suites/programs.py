"""Suite ``programs``: tools people run, under each allocator.

The other suites run programs written for them; a user swaps allocators for
the programs they already have.  Here each workload is an installed tool on
input generated once (a fixed seed, in a temporary directory), started
through bench/preload_exec so that the runner's wait4 measures the tool
itself: wall time (the primary metric), user and system time, peak RSS and
minor faults.

- ``sort``: ``sort -S 64M`` of 1.5 M random lines (45 MB): one large buffer,
  freed before the merge buffers are allocated;
- ``sqlite``: an in-memory table of 400,000 rows with an index (its page
  cache: blocks of a page and a header);
- ``perl``: a hash of 600,000 keys with array values, then its sorted keys;
- ``jq``: a filter over a 300,000-object JSON array (24 MB);
- ``gxx``: ``g++ -O1 -c`` of a file of standard-library templates.

A tool that is not installed is left out (the suite's description says
which); nothing stands in for it.  3 repetitions by default; full run
only (the tools take seconds each, not --quick's fractions).
"""

import os
import random
import shutil
import tempfile

from .. import paths
from .base import MAXRSS, MINFLT, SYS, USER, WALL, Suite, Workload, build_bench_programs, parse_result_line

DATA = os.path.join(tempfile.gettempdir(), "folio-programs")
LINES = os.path.join(DATA, "lines.txt")
JSON = os.path.join(DATA, "data.json")
SQL = os.path.join(DATA, "rows.sql")
CXX = os.path.join(DATA, "templates.cpp")

SQL_TEXT = """create table t(a integer primary key, b text, c real);
with recursive r(x) as (select 1 union all select x + 1 from r where x < 400000)
  insert into t select x, hex(randomblob(16)), random() from r;
create index ib on t(b);
select count(*), sum(length(b)) from t where c > 0;
"""

CXX_TEXT = """#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
template <int N> struct R {
    static int f(std::map<std::string, int> &m) { m[std::to_string(N)] = N; return R<N - 1>::f(m) + N; }
};
template <> struct R<0> { static int f(std::map<std::string, int> &) { return 0; } };
int main() {
    std::map<std::string, int> m;
    std::regex re("a+b*");
    std::ostringstream o;
    o << R<300>::f(m);
    std::cout << o.str() << std::regex_match("aab", re) << "\\n";
}
"""

PERL_TEXT = ('my %h; for my $i (1..600000) { $h{"k$i"} = [$i, "v" x ($i % 50)]; } '
             'my @k = sort keys %h; print scalar(@k), "\\n";')


def _write(path, make):
    """Write path once (make(f) fills it); a file already there from an earlier run is kept."""
    if os.path.exists(path):
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        make(f)
    os.replace(tmp, path)


def _lines(f):
    rng = random.Random(1)
    for _ in range(1500000):
        f.write("%08x %s\n" % (rng.getrandbits(32), "x" * rng.randint(0, 40)))


def _json(f):
    rng = random.Random(1)
    f.write("[")
    for i in range(300000):
        f.write("%s{\"id\":%d,\"name\":\"n%d\",\"tags\":[\"t%d\",\"u%d\"],\"v\":%r}"
                % ("," if i else "", i, i, i % 7, i % 13, rng.random()))
    f.write("]\n")


def _prepare():
    build_bench_programs()
    os.makedirs(DATA, exist_ok=True)
    _write(LINES, _lines)
    _write(JSON, _json)
    _write(SQL, lambda f: f.write(SQL_TEXT))
    _write(CXX, lambda f: f.write(CXX_TEXT))


def _tool(name, argv, what, est_s):
    def command(quick):
        return [paths.bench_binary("preload_exec")] + argv
    return Workload(name, what, WALL, command=command, parse=parse_result_line,
                    extra_metrics=[USER, SYS, MAXRSS, MINFLT], full_only=True, est_s=est_s)


CANDIDATES = [
    ("sort", _tool("sort", ["sort", "-S", "64M", LINES, "-o", os.devnull],
                   "sort -S 64M of 1.5 M random lines (45 MB)", 1.5)),
    ("sqlite3", _tool("sqlite", ["sqlite3", ":memory:", "-init", SQL, ".quit"],
                      "sqlite3: in-memory table of 400,000 rows and an index", 1.0)),
    ("perl", _tool("perl", ["perl", "-e", PERL_TEXT], "perl: hash of 600,000 keys, sorted keys", 3.0)),
    ("jq", _tool("jq", ["jq", "-c", "[.[] | select(.id % 3 == 0) | {a: .name, t: .tags}] | length", JSON],
                 "jq: filter over a 300,000-object array (24 MB)", 1.5)),
    ("g++", _tool("gxx", ["g++", "-O1", "-c", "-x", "c++", CXX, "-o", os.devnull],
                  "g++ -O1 -c of a file of standard-library templates", 4.0)),
]
MISSING = [tool for tool, _ in CANDIDATES if not shutil.which(tool)]

SUITE = Suite(
    name="programs",
    title="installed tools: sort, sqlite3, perl, jq, g++",
    description="Tools people run, on generated input: sort -S 64M of 45 MB of lines, an in-memory "
                "sqlite3 table with an index, a perl hash, a jq filter over 24 MB of JSON, g++ -O1 -c "
                "of standard-library templates; wall time, user and system time, peak RSS, minor "
                "faults." + (" Not installed here, left out: " + ", ".join(MISSING) + "." if MISSING else ""),
    workloads=[w for tool, w in CANDIDATES if tool not in MISSING],
    prepare=_prepare,
    reps=3,
)
