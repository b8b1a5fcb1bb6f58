"""Read the verbose output of CPython's regrtest for one test module.

Used by tests/programs/cpython.sh, run without folio:

  cpython_results.py summary OUT RC
      one line: test cases ran and skipped, and CPython's skip reasons (or
      how the run ended, if it did not finish)
  cpython_results.py compare MODULE FOLIO_OUT FOLIO_RC BASE_OUT BASE_RC
      a module that failed under folio, against the same module run without
      folio: a failure also seen without folio prints SKIP and that run's
      reason; one seen only under folio prints FAIL and its traceback, and
      the exit status is 1.

A failure is keyed by unittest's description of the test case (with the
subtest's parameters), so the two runs are compared case by case.  A run
that ended without unittest's "Ran N tests" (a crash, or regrtest's
--timeout) is one failure keyed by the test case that was running.
"""
import collections
import re
import sys

SEP1 = "=" * 70
SEP2 = "-" * 70
RAN = re.compile(r"^Ran (\d+) tests? in ")
TOTALS = re.compile(r"^(?:OK|FAILED) \((.*)\)$")
STARTED = re.compile(r"^(\w+ \([\w.]+\).*?) \.\.\. ?(.*)$")
SKIPPED = re.compile(r"\.\.\. skipped (.*)$")
RUNNER_FRAME = re.compile(r'File "(.*/(unittest|libregrtest)/|.*/test/support/__init__.py|.*/test/__main__.py|<frozen runpy>)')
TIMEOUT = re.compile(r"Timeout \(\d+:\d\d:\d\d\)!")
DUMP = re.compile(r"Timeout \(\d+:\d\d:\d\d\)!|Fatal Python error")


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def failures(lines):
    """{case: traceback} for unittest's FAIL/ERROR/UNEXPECTED SUCCESS list."""
    found = {}
    i = 0
    while i < len(lines):
        m = re.match(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (.+)$", lines[i])
        after_sep = i > 0 and (lines[i - 1] == SEP1 or lines[i - 1].startswith("UNEXPECTED SUCCESS: "))
        if not (m and after_sep):
            i += 1
            continue
        case, kind = m.group(2), m.group(1)
        if kind == "UNEXPECTED SUCCESS":
            found[case] = kind
            i += 1
            continue
        body = []
        j = i + 1
        if j < len(lines) and lines[j] == SEP2:
            j += 1
        while j < len(lines) and lines[j] not in (SEP1, SEP2):
            body.append(lines[j])
            j += 1
        found[case] = kind + "\n" + "\n".join(body).strip()
        i = j
    return found


def ran(lines):
    return [int(m.group(1)) for m in map(RAN.match, lines) if m]


def crash(lines, rc):
    """(case, reason) for a run that ended before unittest's summary."""
    last = None
    for line in lines:
        m = STARTED.match(line)
        if m:
            last = m.group(1)
    timed_out = any(TIMEOUT.search(line) for line in lines)
    why = "timed out (regrtest --timeout)" if timed_out else "exit status %s" % rc
    where = last or "none"
    case = "<module did not finish>" + (" in " + last if last else "")
    return case, "%s, last test case started: %s" % (why, where)


def tail(lines):
    """The end of a run's output, from faulthandler's dump if there is one."""
    starts = [i for i, line in enumerate(lines) if DUMP.search(line)]
    first = starts[-1] if starts else max(0, len(lines) - 30)
    return "\n".join(lines[first:first + 40])


def outcome(lines, rc):
    """{case: reason} of one run: its failures, or its crash."""
    if not ran(lines):
        case, reason = crash(lines, rc)
        return {case: reason + "\n" + tail(lines)}, True
    found = failures(lines)
    if not found and rc != 0:
        found["<module exit status %s>" % rc] = tail(lines)
    return found, False


def summary(path, rc):
    lines = read(path)
    if not ran(lines):
        started = sum(1 for line in lines if STARTED.match(line))
        print("did not finish: %s; %d test cases started" % (crash(lines, rc)[1], started))
        return
    cases = sum(ran(lines))
    skipped = 0
    for m in map(TOTALS.match, lines):
        if m:
            s = re.search(r"skipped=(\d+)", m.group(1))
            skipped += int(s.group(1)) if s else 0
    reasons = collections.Counter()
    for line in lines:
        m = SKIPPED.search(line)
        if m:
            reasons[m.group(1)[:100]] += 1
    text = "%d test cases ran, %d skipped by CPython" % (cases, skipped)
    if reasons:
        text += " (" + "; ".join("%d× %s" % (n, r) for r, n in reasons.most_common(4))
        text += "; ..." if len(reasons) > 4 else ""
        text += ")"
    print(text)


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1].strip() if lines else "?"


def compare(module, folio_out, folio_rc, base_out, base_rc):
    folio, _ = outcome(read(folio_out), folio_rc)
    base, base_crashed = outcome(read(base_out), base_rc)
    bad = 0
    for case, text in folio.items():
        if case in base:
            why = base[case].splitlines()[0] if base_crashed else last_line(base[case])
            print("SKIP %s: %s: fails without folio too: %s" % (module, case, why))
        else:
            bad += 1
            extra = " (without folio the module did not finish either: %s)" % next(
                iter(base.values())).splitlines()[0] if base_crashed else ""
            print("FAIL %s: %s: fails under folio only%s" % (module, case, extra))
            lines = [l for l in text.splitlines() if not RUNNER_FRAME.search(l)]
            print("\n".join("    | " + l for l in lines[:40]))
    return 1 if bad else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "summary":
        summary(argv[2], argv[3])
        return 0
    if len(argv) == 7 and argv[1] == "compare":
        return compare(argv[2], argv[3], argv[4], argv[5], argv[6])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
