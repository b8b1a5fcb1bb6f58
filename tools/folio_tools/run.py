"""``folio run`` (a command under folio, with a summary of its reports) and ``folio report``."""

import json
import os
import shlex
import shutil
import signal
import sys
import tempfile

from . import paths, proc, report


def _save(path, reports, main_pid):
    """One process: its report object.  Several: a JSON list, main process first, then by pid.

    Each object gets a "pid" key (taken from the file name) when the library did not write one."""
    ordered = sorted(reports, key=lambda r: (r.pid != main_pid, r.pid or 0))
    items = []
    for r in ordered:
        d = dict(r)
        if "pid" not in d and r.pid is not None:
            d["pid"] = r.pid
        items.append(d)
    data = items[0] if len(items) == 1 else items
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def _print_summary(argv, ex, reports, problems, report_path, saved):
    err = sys.stderr
    how = (f"exited with status {os.WEXITSTATUS(ex.status)}" if os.WIFEXITED(ex.status)
           else f"was killed by {ex.signal_name}")
    print(f"\n== folio run: `{shlex.join(argv)}` {how} after {ex.wall_s:.2f} s "
          f"(user {ex.user_s:.2f} s, sys {ex.sys_s:.2f} s, largest peak RSS "
          f"{report.fmt_bytes(ex.maxrss_kib * 1024)}, minor faults {ex.minflt:,}) ==", file=err)
    if reports:
        nmain = sum(1 for r in reports if r.pid == ex.pid)
        print(f"folio reports: {len(reports)} process{'es' if len(reports) != 1 else ''}"
              + ("" if nmain else f" (none from the main process, pid {ex.pid})"), file=err)
        print(report.summary(reports, main_pid=ex.pid), file=err)
    else:
        print("folio: no process wrote a report (a process writes its report when it exits "
              "normally; none after _exit(), exec of a static binary, or a signal)", file=err)
    for p in problems:
        print(f"folio: {p}", file=err)
    if report_path:
        print(f"folio: report saved to {report_path}" if saved
              else f"folio: no report to save to {report_path}", file=err)


def cmd_run(args):
    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("folio run: no command given (usage: folio run [--report PATH] -- CMD ARGS...)",
              file=sys.stderr)
        return 2
    try:
        lib = paths.ensure_library()
    except paths.BuildError as e:
        print(f"folio run: {e}", file=sys.stderr)
        return 2

    tmp = tempfile.mkdtemp(prefix="folio-run.")
    env = dict(os.environ)
    env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["FOLIO_REPORT"] = report.report_pattern(tmp)
    try:
        # Like a shell waiting for a foreground job: the terminal's ^C/^\ go to the
        # command (same process group); we only wait and then summarise.
        old = {}

        def ignore_signals():
            for s in (signal.SIGINT, signal.SIGQUIT):
                old[s] = signal.signal(s, signal.SIG_IGN)
        try:
            ex = proc.run(argv, env, on_start=ignore_signals)
        except OSError as e:
            print(f"folio run: cannot run {argv[0]}: {e.strerror or e}", file=sys.stderr)
            return 127 if isinstance(e, FileNotFoundError) or e.errno == 2 else 126
        except paths.BuildError as e:
            print(f"folio run: {e}", file=sys.stderr)
            return 2
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        pid = ex.pid

        reports, problems = report.collect(tmp)
        saved = bool(args.report and reports)
        if saved:       # before printing: stderr may be a closed pipe
            _save(args.report, reports, pid)
        try:
            _print_summary(argv, ex, reports, problems, args.report, saved)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
        return ex.exit_code
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load(source):
    """Reports of a saved file, or of a running process's live statistics (a pid that is
    not the name of a file)."""
    if source.isdigit() and not os.path.exists(source):
        from . import live
        try:
            sample = live.read(int(source))
        except live.NoStatistics as e:
            raise OSError(f"pid {source}: {e}") from None
        return [report.Report(sample.report, live.path_of(int(source)), int(source))]
    return report.load_file(source)


def cmd_report(args):
    status = 0
    as_json = []
    for path in args.files:
        try:
            reports = _load(path)
        except (OSError, ValueError) as e:
            print(f"folio report: {path}: {e}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            as_json.append({"source": path, "processes": len(reports),
                            "summed": report.aggregate(reports),
                            "reports": [dict(r, pid=r.pid) if r.pid is not None else dict(r)
                                        for r in reports]})
            continue
        print(f"== {path}: {len(reports)} process report{'s' if len(reports) != 1 else ''} ==")
        main_pid = reports[0].pid if len(reports) > 1 else None
        print(report.summary(reports, main_pid=main_pid))
    if args.json:
        json.dump(as_json[0] if len(as_json) == 1 else as_json, sys.stdout, indent=2)
        print()
    return status
