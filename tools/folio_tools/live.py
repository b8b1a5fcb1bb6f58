"""Reading the live statistics a process running folio publishes (FOLIO_LIVE).

The library (src/api/live.c) keeps /dev/shm/folio.<pid>: a 64-byte header
(magic, a sequence number that is odd while the text changes, pid, the
CLOCK_MONOTONIC nanoseconds of the last write, the write interval, the text's
length, the file's size) followed by the text of folio_report_json.  It writes
it from the process's first second on, at most once a second (with pwrite:
it never maps the file, so that no mmap lands in a program's steady state),
and removes it at exit.  A file whose process is gone (killed, _exit) or no
longer runs folio (an exec into a program without it) is stale:
``stale_files`` finds them.
"""

import json
import os
import struct
import time

SHM = "/dev/shm"
MAGIC = b"folio-live-1\n"
HEAD = struct.Struct("<16sQQQQQQ")


class NoStatistics(Exception):
    """The process publishes nothing (the message says why)."""


def path_of(pid):
    return os.path.join(SHM, f"folio.{pid}")


def alive(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _maps(pid):
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read()
    except OSError:
        return None


def _written_lately(pid, within_s=5.0):
    """pid's statistics file names pid and was written in the last within_s seconds."""
    try:
        with open(path_of(pid), "rb") as f:
            head = f.read(HEAD.size)
    except OSError:
        return False
    if len(head) < HEAD.size:
        return False
    magic, _seq, fpid, updated_ns, _i, _l, _s = HEAD.unpack_from(head)
    return magic.startswith(MAGIC) and fpid == pid and time.monotonic() - updated_ns / 1e9 <= within_s


def publishes(pid):
    """True: the process has its statistics file and runs folio (its library mapped, or,
    linked statically, the file written in the last 5 s); False: it does not; None: cannot
    tell (its maps are not readable), then the file's existence decides."""
    if not alive(pid) or not os.path.exists(path_of(pid)):
        return False
    maps = _maps(pid)
    if maps is None:
        return True
    return "libfolio" in maps or _written_lately(pid)


def runs_folio(pid):
    """The process has folio's shared library mapped, or (a static link) has written its
    statistics file in the last 5 s."""
    maps = _maps(pid) or ""
    return "libfolio" in maps or _written_lately(pid)


def children(pid):
    """The pids whose parent is pid."""
    kids = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return kids


def descendants(pid):
    """pid's descendants, breadth first (children before grandchildren)."""
    out, todo = [], children(pid)
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children(p)
    return out


class Sample:
    """One consistent read of a process's statistics."""

    def __init__(self, pid, seq, updated, interval_s, report):
        self.pid, self.seq, self.updated, self.interval_s = pid, seq, updated, interval_s
        self.report = report          # the folio_report_json object

    @property
    def age(self):
        """Seconds since the library wrote it (CLOCK_MONOTONIC, as time.monotonic)."""
        return max(0.0, time.monotonic() - self.updated)


def read(pid, tries=50):
    """The current statistics of pid; raises NoStatistics."""
    path = path_of(pid)
    for _ in range(tries):
        try:
            with open(path, "rb") as f:
                raw = f.read()
                f.seek(0)
                again = f.read(HEAD.size)
        except FileNotFoundError:
            raise NoStatistics(f"{path} does not exist") from None
        except OSError as e:
            raise NoStatistics(f"{path}: {e.strerror}") from None
        if len(raw) < HEAD.size or len(again) < HEAD.size:
            time.sleep(0.002)
            continue
        magic, seq, fpid, updated_ns, interval_ms, length, _size = HEAD.unpack_from(raw)
        if not magic.startswith(MAGIC):
            if not magic.strip(b"\0"):
                time.sleep(0.002)  # created (zero-filled) and not yet written: read again
                continue
            raise NoStatistics(f"{path} is not a folio statistics file")
        if seq % 2 or HEAD.unpack_from(again)[1] != seq or seq == 0:
            time.sleep(0.002)      # being written (or never yet): read again
            continue
        text = raw[HEAD.size:HEAD.size + length].decode("utf-8", "replace")
        try:
            report = json.loads(text)
        except ValueError:
            time.sleep(0.002)
            continue
        return Sample(fpid, seq, updated_ns / 1e9, interval_ms / 1000.0, report)
    raise NoStatistics(f"{path}: no consistent copy in {tries} reads")


def stale_files():
    """(pid, path) of statistics files whose process is gone or no longer maps them and
    that have not been written for 5 s (a process creating its file is not stale)."""
    out = []
    try:
        names = os.listdir(SHM)
    except OSError:
        return out
    for name in names:
        if not name.startswith("folio.") or not name[6:].isdigit():
            continue
        pid, path = int(name[6:]), os.path.join(SHM, name)
        if not alive(pid):
            out.append((pid, path))
        elif publishes(pid) is False:
            try:
                with open(path, "rb") as f:
                    head = f.read(HEAD.size)
                updated = HEAD.unpack_from(head)[3] / 1e9 if len(head) == HEAD.size else 0
            except OSError:
                continue
            if time.monotonic() - updated > 5:
                out.append((pid, path))
    return out


def publishers():
    """Pids that publish statistics now."""
    pids = []
    try:
        names = os.listdir(SHM)
    except OSError:
        return pids
    for name in names:
        if name.startswith("folio.") and name[6:].isdigit():
            pid = int(name[6:])
            if alive(pid) and publishes(pid) is not False:
                pids.append(pid)
    return sorted(pids)
