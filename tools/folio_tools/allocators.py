"""The allocators ``folio bench`` compares, and how each is loaded.

folio is build/libfolio.so (built with make if missing); glibc is the system
malloc (no preload); jemalloc, TCMalloc (gperftools, minimal) and mimalloc
come from Debian's packages, installed with apt-get when missing only when asked
(``folio bench --install``, as root).  An allocator that cannot be had is
skipped with the reason and the command that installs it; it is never
replaced by another.

Variants: an allocator with extra environment variables, compared as an
allocator of its own.  Built in: ``folio-fixed`` (pageset ``high`` fixed,
``FOLIO_PCP_AUTOTUNE=0``), ``folio-auto`` (auto-tuned, ``FOLIO_PCP_AUTOTUNE=1``) and
``folio-nokeep`` (no purge delay, no huge-extent cache: every free goes back to the kernel).
Any other is written ``NAME=BASE:VAR=VALUE[:VAR=VALUE...]`` in ``--allocators``,
e.g. ``folio-nopurge=folio:FOLIO_PURGE_THREAD=0`` or ``je-bg=jemalloc:MALLOC_CONF=background_thread:true``
(values cannot contain ``:`` or ``,``).

Libraries from a path: ``NAME=/path/to/lib.so`` (a value with a ``/``; it may be followed by
``:VAR=VALUE...`` too) preloads that file, e.g. a build of an earlier commit or another version
of an allocator; a run counts when its malloc came from that very file.  Built in:
``mimalloc-3.4.3``, mimalloc 3.4.3 built from source in ``../shared/anchors/`` beside the
repository (its README says how); a missing file is skipped with a note.
"""

import glob
import os
import subprocess
import sys
from dataclasses import dataclass, field

from . import paths

LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/usr/local/lib"]


@dataclass(frozen=True)
class Spec:
    name: str
    package: str = None     # Debian package providing the library
    soname: str = None      # file name to find in LIB_DIRS
    marker: str = None      # the prefix of the file name that must provide malloc in the run


SPECS = {
    "folio": Spec("folio", marker="libfolio"),
    "glibc": Spec("glibc", package="libc6", marker="libc.so"),
    "jemalloc": Spec("jemalloc", "libjemalloc2", "libjemalloc.so.2", "libjemalloc"),
    "tcmalloc": Spec("tcmalloc", "libtcmalloc-minimal4", "libtcmalloc_minimal.so.4",
                     "libtcmalloc"),
    "mimalloc": Spec("mimalloc", "libmimalloc2.0", "libmimalloc.so.2", "libmimalloc"),
}
DEFAULT = ["folio", "glibc", "jemalloc", "tcmalloc", "mimalloc"]

# name -> (base allocator, environment)
VARIANTS = {
    "folio-fixed": ("folio", {"FOLIO_PCP_AUTOTUNE": "0"}),
    "folio-auto": ("folio", {"FOLIO_PCP_AUTOTUNE": "1"}),
    # freed memory goes back to the kernel at once: the fault path itself, like for like
    "folio-nokeep": ("folio", {"FOLIO_PURGE_DELAY_MS": "0", "FOLIO_HUGE_CACHE_MIB": "0"}),
    # no huge pages: what folio's THP policy buys (suite folios)
    "folio-thp-never": ("folio", {"FOLIO_THP": "never"}),
}

# Libraries loaded from a path: name -> (path, version label, environment).  The anchors are
# outside the repository (../shared/anchors/): the project must build and benchmark without them.
ANCHORS = os.path.join(os.path.dirname(paths.REPO), "shared", "anchors")
PATHS = {
    "mimalloc-3.4.3": (os.path.join(ANCHORS, "libmimalloc-3.4.3.so"),
                       "3.4.3 (built from source, ../shared/anchors/)", {}),
}


def _is_path(value):
    return "/" in value


def with_anchor(names):
    """names, then mimalloc 3.4.3 from ../shared/anchors unless it is there already, by its
    name or as a library given by path (``mimalloc3=../shared/anchors/libmimalloc-3.4.3.so``
    would otherwise run the same library twice)."""
    anchor = os.path.realpath(PATHS["mimalloc-3.4.3"][0])
    same = any(n in PATHS and not PATHS[n][2] and os.path.realpath(PATHS[n][0]) == anchor for n in names)
    return list(dict.fromkeys(list(names) + ([] if same else ["mimalloc-3.4.3"])))


def parse_names(text):
    """Split an --allocators value into names, registering ``NAME=BASE:VAR=VAL...`` variants.

    Returns the list of names; raises ValueError for a malformed variant."""
    names = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if "=" in item.split(":", 1)[0]:
            name, _, rest = item.partition("=")
            base, *assigns = rest.split(":")
            if _is_path(base):
                if not name or name in SPECS or name in PATHS:
                    raise ValueError(f"bad library {item!r}: needs a new name, NAME=/path/to/lib.so")
                path = os.path.abspath(os.path.expanduser(base))
            env = {}
            for a in assigns:
                k, sep, v = a.partition("=")
                if not sep or not k:
                    raise ValueError(f"bad variant {item!r}: expected NAME=BASE:VAR=VALUE[:VAR=VALUE...]")
                env[k] = v
            if _is_path(base):
                PATHS[name] = (path, None, env)
            else:
                if not name or not base or name in SPECS:
                    raise ValueError(f"bad variant {item!r}: needs a new name and a base allocator")
                VARIANTS[name] = (base, env)
            item = name
        names.append(item)
    return names


def base_of(name):
    """The allocator a name loads: itself, or a variant's base."""
    return VARIANTS[name][0] if name in VARIANTS else name


def is_folio(name):
    return base_of(name) == "folio"


@dataclass
class Allocator:
    name: str
    preload: str            # absolute path for LD_PRELOAD, None for glibc
    version: str
    marker: str
    env: dict = field(default_factory=dict)
    base: str = None        # the allocator a variant is built on (its own name otherwise)
    exact: bool = False     # loaded from a path: malloc must come from that very file

    @property
    def family(self):
        return self.base or self.name

    def environment(self, base):
        """The environment of a run under this allocator (any inherited preload removed)."""
        env = {k: v for k, v in base.items() if k not in ("LD_PRELOAD", "FOLIO_REPORT")}
        if self.preload:
            env["LD_PRELOAD"] = self.preload
        env.update(self.env)
        return env

    def loaded(self, malloc_lib):
        """Did the run's malloc come from this allocator? (malloc_lib is printed by the benchmark)."""
        if not malloc_lib:
            return False
        if self.exact:
            return os.path.realpath(malloc_lib) == os.path.realpath(self.preload)
        return os.path.basename(malloc_lib).startswith(self.marker)


def _is_folio_build(lib):
    """A library given by path is a build of folio when it exports folio's own calls: it is
    then folio's family (not a 'best other' allocator, and its runs keep folio's reports)."""
    try:
        with open(lib, "rb") as f:
            return b"folio_report_json" in f.read()
    except OSError:
        return False


def _find(soname):
    for d in LIB_DIRS:
        hits = sorted(glob.glob(os.path.join(d, soname)))
        if hits:
            return os.path.realpath(hits[0])
    return None


def _pkg_version(package):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, timeout=20)
        return (out.stdout.strip() or "unknown") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _apt_install(packages, log):
    """apt-get install packages quietly; on failure refresh the lists once and retry.

    Returns True on success.  Output is appended to log (a list of lines)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends"] + packages
    for attempt in range(2):
        if attempt == 1:
            upd = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True,
                                 env=env, timeout=600)
            log.extend(upd.stdout.splitlines()[-3:] + upd.stderr.splitlines()[-3:])
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        except (OSError, subprocess.SubprocessError) as e:
            log.append(str(e))
            return False
        log.extend(res.stderr.strip().splitlines()[-3:])
        if res.returncode == 0:
            return True
    return False


def resolve(names, install=False, build_folio=True, say=None):
    """Turn allocator names into Allocators.  Returns (allocators, skipped) where skipped
    is a list of (name, reason)."""
    say = say or (lambda msg: print(msg, file=sys.stderr))
    found, skipped = {}, []
    known = set(SPECS) | set(PATHS)
    unknown = [n for n in names if base_of(n) not in known]
    for n in unknown:
        skipped.append((n, "unknown allocator (known: "
                           f"{', '.join(list(SPECS) + list(VARIANTS) + list(PATHS))}, "
                           "or NAME=/path/to/lib.so)"))
    requested = list(dict.fromkeys(n for n in names if base_of(n) in known))
    for n in dict.fromkeys(base_of(n) for n in requested if base_of(n) in PATHS):
        lib, version, env = PATHS[n]
        if n == "mimalloc-3.4.3" and not os.path.isdir(ANCHORS):
            skipped.append((n, f"{ANCHORS} is absent (the anchors beside the repository)"))
        elif not os.path.isfile(lib):
            skipped.append((n, f"{lib}: no such file"))
        else:
            found[n] = Allocator(n, lib, version or f"from {lib}", os.path.basename(lib),
                                 dict(env), exact=True,
                                 base="folio" if _is_folio_build(lib) else None)
    requested_specs = [n for n in requested if base_of(n) in SPECS]
    names = list(dict.fromkeys(base_of(n) for n in requested_specs))

    missing = [n for n in names if SPECS[n].soname and _find(SPECS[n].soname) is None]
    if missing:
        pkgs = [SPECS[n].package for n in missing]
        if install and os.geteuid() == 0:
            say(f"installing {', '.join(missing)} with apt-get ({' '.join(pkgs)}) ...")
            log = []
            if not _apt_install(pkgs, log):
                # one failure must not block the others: try them one by one
                for n in missing:
                    _apt_install([SPECS[n].package], log)
        for n in missing:
            if _find(SPECS[n].soname) is None:
                pkg = SPECS[n].package
                why = ("apt-get install failed" if install and os.geteuid() == 0
                       else "not installed (--install needs root to apt-get install)" if install
                       else "not installed")
                skipped.append((n, f"{why}: {SPECS[n].soname} not found; `apt-get install {pkg}` "
                                   "installs it (or folio bench --install, as root)"))

    for n in names:
        spec = SPECS[n]
        if n == "folio":
            if not build_folio and not os.path.exists(paths.LIBRARY):
                skipped.append((n, f"{paths.LIBRARY} does not exist"))
                continue
            try:
                lib = paths.ensure_library()
            except paths.BuildError as e:
                skipped.append((n, " / ".join(str(e).splitlines()[:4])))
                continue
            found[n] = Allocator(n, lib, f"git {paths.git_describe()}", spec.marker)
        elif n == "glibc":
            ver = os.confstr("CS_GNU_LIBC_VERSION") if "CS_GNU_LIBC_VERSION" in os.confstr_names \
                else _pkg_version("libc6")
            found[n] = Allocator(n, None, ver, spec.marker)
        else:
            lib = _find(spec.soname)
            if lib:
                found[n] = Allocator(n, lib, _pkg_version(spec.package), spec.marker)
    ordered = []
    for n in requested:
        b = base_of(n)
        if b not in found:
            if n != b:
                skipped.append((n, f"variant of {b}, which is not available"))
            continue
        if n == b:
            ordered.append(found[b])
        else:
            a = found[b]
            ordered.append(Allocator(n, a.preload, a.version, a.marker,
                                     dict(a.env, **VARIANTS[n][1]), base=b, exact=a.exact))
    return ordered, skipped


def describe_env(alloc):
    """The variant's environment as text ("" for a plain allocator)."""
    return " ".join(f"{k}={v}" for k, v in alloc.env.items())
