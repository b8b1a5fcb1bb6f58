"""Python helpers behind the ``folio`` command-line tool (repo root ``./folio``).

Modules, one concern each:

- ``paths``       where the repository, the library and the benchmark binaries are; building them
- ``proc``        spawning a child with a clean signal state and collecting its rusage
- ``report``      reading, aggregating and printing folio's ``FOLIO_REPORT`` JSON
- ``run``         ``folio run`` and ``folio report``
- ``allocators``  the allocators compared by ``folio bench`` (finding / installing them)
- ``suites``      the benchmark suites: one module per suite plus the table ``SUITES``
- ``runner``      ``folio bench``: planning, interleaving and measuring runs, results.json
- ``summary``     medians, ratios and geometric means over the runs
- ``tables``      plain-text and Markdown table layout
- ``render``      REPORT.md and the headline table
- ``plots``       PNG bar charts (matplotlib, installed with pip when missing)
"""
