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

ROOT = Path(__file__).resolve().parents[2]
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
    assert "agentkit matrix" not in page and "Pre-flight" not in page  # the instructor's, not the room's


def test_the_prediction_grid_is_empty_where_a_cell_exists_and_a_dash_where_not(built):
    page = (built / "handout.html").read_text(encoding="utf-8")
    grid = page[page.index('<table class="grid blanks">'):]
    grid = grid[: grid.index("</table>")]
    assert grid.count('class="blank"') == len(CELLS)
    assert grid.count('class="dash"') == len(FAILURES) * len(EFFECTS) - len(CELLS)
    for failure in FAILURES:
        assert f"<th>{failure.replace('_', ' ')}" in grid
    assert "invalid_arguments" not in grid  # nothing given away
    assert grid.count('<span class="line">code</span><span class="line">handler calls</span>') == len(CELLS)


def test_the_grid_rows_are_tall_enough_to_write_in_and_on_the_back(built):
    """`outcome_unknown+retryable` by hand needs room: each blank cell is two written lines,
    each at least 8 mm, on the sheet's back with the exit question."""
    page = (built / "handout.html").read_text(encoding="utf-8")
    height = float(re.search(r"\.blanks td\.blank \{[^}]*height: ([\d.]+)mm", page)[1])
    lines = [float(h) for h in re.findall(r"\.blanks td\.blank \.line[^{]*\{[^}]*height: ([\d.]+)mm", page)]
    assert height >= 16 and lines and min(lines) >= 8
    back = page[page.index('<div class="back">'):]
    assert '<table class="grid blanks">' in back and "Exit question" in back
    assert re.search(r"\.back \{[^}]*break-before: page", page)


def test_the_grid_says_the_key_design_of_the_matrix_s_tools(built):
    """"Same key, other payload" has one answer: the matrix's writes are id-addressed (as the
    audit detects it), so both pages say so, and the key expects idempotency_conflict."""
    tool = load_tool()
    designs = tool.matrix_key_designs()
    assert [(t, d) for t, d, _, _ in designs] == [("save_draft", "id-addressed"), ("send_payment", "id-addressed")]
    assert [kept[0] for _, _, kept, _ in designs] == ["draft_id", "payment_id"]
    for name in ("handout.html", "answer_key.html"):
        page = (built / name).read_text(encoding="utf-8")
        assert ("<code>save_draft</code> (same <code>draft_id</code>, other <code>text</code>): "
                "<b>id-addressed</b>") in page
        assert "keys: id-addressed</span>" in page
    expected = {r["expected"] for r in load_matrix() if r["failure"] == "same_key_other_payload"}
    assert expected == {"idempotency_conflict"}


def test_the_exit_question_is_on_the_handout_and_answered_in_the_key(built):
    guide = (ROOT / "notebooks" / "INSTRUCTOR.md").read_text(encoding="utf-8")
    question, answer = load_tool().exit_question(guide)
    assert question.startswith("A `save_draft` call timed out.")
    assert "`outcome_unknown`" in answer
    handout = (built / "handout.html").read_text(encoding="utf-8")
    key = (built / "answer_key.html").read_text(encoding="utf-8")
    shown = "A <code>save_draft</code> call timed out."
    assert shown in handout and shown in key
    assert "outcome_unknown</code>" in key[key.index(shown):] and "idempotency key" in key
    assert "never 2" not in handout  # the answer stays on the key


def test_the_answer_key_renders_markdown_wraps_code_and_starts_without_a_blank_page(built):
    key = (built / "answer_key.html").read_text(encoding="utf-8")
    prose = re.sub(r"<(pre|code)>.*?</\1>", "", key, flags=re.DOTALL)
    assert "`" not in prose, re.findall(r".{40}`.{40}", prose)[:3]  # no raw Markdown backticks
    assert re.search(r"pre \{[^}]*white-space: pre-wrap", key)  # long code lines wrap
    assert "page-break-after" not in key and "break-after" not in key
    first = key[: key.index("The guide's live demo")]
    assert '<table class="grid">' in first and "The exit question" in first
    assert "Pre-flight" in first and "python -m agentkit matrix" in first
    assert "Hint: The write took effect only if <code>drafts</code>" in key


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
    assert re.search(r"^handout: \$\(LAB_STAMP\)\n\t\$\(BIN\)/python tools/handout.py --out build$",
                     makefile, flags=re.MULTILINE)
