"""A pytest plugin for the suite's own runs (``-p tests._lean_pytest`` in ``make test``, ``make
test-notebooks`` and the bench's nbval row), loaded before the installed plugins, in the
controller and in every xdist worker: less work at each pytest process's start and end.

At the start, one import is kept out. nbval imports nbformat, which imports jsonschema, whose
optional IRI format check imports ``rfc3987_syntax`` (installed beside JupyterLab, by
jupyter-events' ``jsonschema[format-nongpl]``). That module compiles an Earley grammar when it
is imported: ~1.6 s of CPU in each pytest process, four of them in ``make test``. No test here
checks a JSON Schema ``iri`` format: the kit validates with fastjsonschema, and nbformat's
notebook schema has no such format. Marked missing, jsonschema leaves the ``iri`` check out, as
it does where the package is not installed.

At the end, an xdist worker skips the interpreter's final teardown: freeing every object of a
process that imported every framework took 1-8 s at the end of ``make test``, while the
controller waited for the slowest worker to exit. Its results are with the controller already;
Python has joined its threads; every ``atexit`` handler still runs, in its usual order.
"""

from __future__ import annotations

import atexit
import os
import sys

import pytest

sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker
        atexit.register(_exit_after_the_handlers)  # registered last: the first to run


def _exit_after_the_handlers() -> None:
    atexit.unregister(_exit_after_the_handlers)
    atexit._run_exitfuncs()  # the others, registered before this one
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
