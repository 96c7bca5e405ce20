"""Every lesson, opened in JupyterLab and run with Run → Run All Cells, shows no error.

nbval proves the kernel side; this is the learner's side: the notebook renders, every code
cell gets an execution count, no cell shows a traceback (except the cells tagged
``raises-exception``, which are meant to), no new stderr appears, and every widget renders.
"""

from __future__ import annotations

import labdriver as lab
import pytest

pytestmark = pytest.mark.browser

NAMES = lab.notebook_names()
# Notebooks whose widgets or cells test_widgets_in_lab.py and test_lessons_in_lab.py drive:
# their pages stay open for them.
WIDGETS = ("FailureExplorer(", "ApprovalPanel(", "AgentStepper(", "audit(")


def test_there_are_notebooks():
    assert NAMES, f"no {lab.NOTEBOOK_GLOB} in {lab.NOTEBOOKS}"


@pytest.mark.parametrize("name", NAMES)
def test_run_all_cells_shows_no_error(notebooks, name):
    nb = notebooks.run(name)
    found = lab.problems(nb)
    if found:
        pytest.fail(
            f"{name}, opened in JupyterLab and run with Run All Cells ({nb.run_seconds:.1f}s):\n- "
            + "\n- ".join(found),
            pytrace=False,
        )
    if not any(w in nb.source(i) for i in range(len(nb.cells)) for w in WIDGETS):
        notebooks.close(name)
