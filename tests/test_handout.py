"""`make handout`: the handout and the answer key build from the repository, carry every code,
level and matrix cell of the kit itself, and refuse to build when docs/design.md drifts."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.boundary.errors import RETRYABLE, ErrorCode
from agentkit.boundary.spec import Effect
from agentkit.demo.matrix import load_matrix
from agentkit.demo.scenarios import CELLS, EFFECTS, FAILURES

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "handout.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("handout_tool", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    child = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True,
                           text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    assert "Traceback" not in child.stderr
    return out


def test_the_handout_holds_every_code_with_its_retryable_and_every_level(built):
    page = (built / "handout.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    rows = dict(re.findall(r"<tr><td><code>([a-z_]+)</code></td><td>([^<]+)</td>", page))
    for code in ErrorCode:
        said = rows[code.value]
        assert said in ("yes", "no", "reads yes, writes no")
        if said != "reads yes, writes no":
            assert (said == "yes") == RETRYABLE[code], code
    for effect in Effect:
        assert f"<code>{effect.value}</code>" in page
    for stage in ("Schema check", "Authorization", "Redact/truncate", "Stable error"):
        assert stage in page
    assert "content-addressed" in page and "id-addressed" in page
    assert "python -m agentkit matrix" in page


def test_the_prediction_grid_is_empty_where_a_cell_exists_and_a_dash_where_not(built):
    page = (built / "handout.html").read_text(encoding="utf-8")
    grid = page[page.index('<table class="grid">'):]
    grid = grid[: grid.index("</table>")]
    assert grid.count('class="blank"') == len(CELLS)
    assert grid.count('class="dash"') == len(FAILURES) * len(EFFECTS) - len(CELLS)
    for failure in FAILURES:
        assert f"<th>{failure.replace('_', ' ')}</th>" in grid
    assert "invalid_arguments" not in grid  # nothing given away


def test_the_answer_key_fills_the_grid_and_answers_the_guide_s_demo(built):
    page = (built / "answer_key.html").read_text(encoding="utf-8")
    for row in load_matrix():
        assert f"{row['expected']} · {row['handler_calls']} call(s)" in page
    assert "Detected key design: <b>content-addressed" in page
    assert "10 of 10 rows pass" in page  # save_brief behind its workspace policy
    for number in range(1, 8):
        assert f"Exercise {number}:" in page
    for notebook in ("00_start_here", "03_invocation_boundary", "07_your_own_tool"):
        assert f"<h3>{notebook}</h3>" in page
    assert "<details open>" in page


def test_a_design_page_that_drifts_from_the_code_refuses_to_build():
    tool = load_tool()
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    without = design.replace("| `in_progress` |", "| `in_progres` |")
    with pytest.raises(tool.Drift, match="in_progres"):
        tool.handout(without)
    flipped = design.replace("| `busy` | yes |", "| `busy` | no |")
    with pytest.raises(tool.Drift, match="busy retryable no"):
        tool.handout(flipped)


def test_make_has_a_handout_target():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^handout: install\n\t\$\(BIN\)/python tools/handout.py --out build$", makefile,
                     flags=re.MULTILINE)
