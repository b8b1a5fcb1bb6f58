"""The benchmark suites of ``folio bench``.

To add a suite: write one module here defining ``SUITE = Suite(...)`` (see
``base.py``; ``alloc.py`` is the model) and add it to ``SUITES`` below.
"""

from . import alloc, clear, faults, folios, instr, kbuild, pageset, programs, scaling

SUITES = {s.name: s for s in (alloc.SUITE, faults.SUITE, kbuild.SUITE, pageset.SUITE, clear.SUITE,
                              instr.SUITE, scaling.SUITE, folios.SUITE, programs.SUITE)}
