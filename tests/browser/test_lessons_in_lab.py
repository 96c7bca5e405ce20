"""Lesson cells a learner drives in JupyterLab, beyond the three widgets' buttons.

- 01's ``AgentStepper``: each step is one short readable line; its full JSON unfolds on a click.
- 05's matrix table fits the page at 1280 px (the file browser open), without horizontal scrolling.
- 07's audit: the stored table passes every row; re-run with the id-only lookup, it does not;
  the learner's exercise 6, typed into its skeleton cell, is judged Correct by the audit.
"""

from __future__ import annotations

import re
from typing import Any

import labdriver as lab
import pytest

pytestmark = pytest.mark.browser

TIMEOUT_MS = lab.WIDGET_TIMEOUT * 1000
AUDIT_TIMEOUT_MS = 60_000  # one audit plays ten rows, a child process among them


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def _cell(nb: lab.NotebookPage, index: int) -> Any:
    return nb.page.locator(f"{lab.PANEL} .jp-Notebook .jp-Cell").nth(index)


def _output(nb: lab.NotebookPage, index: int) -> Any:
    return _cell(nb, index).locator(".jp-OutputArea")


def _run_cell(nb: lab.NotebookPage, index: int, source: str | None = None) -> None:
    """Click into cell ``index``, optionally replace its code with ``source`` (as a paste would),
    press Shift+Enter and wait for its new execution count."""
    expect = _expect()
    cell = _cell(nb, index)
    cell.scroll_into_view_if_needed()
    prompt = cell.locator(".jp-InputArea-prompt").first
    before = prompt.inner_text().strip()
    cell.locator(".cm-content").first.click()
    if source is not None:
        nb.page.keyboard.press("Control+A")
        nb.page.keyboard.insert_text(source)  # no auto-indent, no auto-closed brackets
    nb.page.keyboard.press("Shift+Enter")
    expect(prompt).not_to_have_text(before, timeout=AUDIT_TIMEOUT_MS)
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=AUDIT_TIMEOUT_MS)


def test_stepper_shows_one_readable_line_per_step_and_the_json_on_a_click(notebooks):
    expect = _expect()
    nb = notebooks.run(notebooks.displaying("AgentStepper(", prefer=("01",)))
    root = lab.widget_root(nb, "agentkit-agent-stepper")
    step, reset = lab.button(root, "Step").first, lab.button(root, "Reset").first
    reset.click()  # whatever ran before: start from the question, as a learner would
    entries = root.locator("details.agentkit-step")
    expect(entries).to_have_count(0, timeout=TIMEOUT_MS)
    step.click()
    expect(entries).to_have_count(1, timeout=TIMEOUT_MS)

    entry = entries.first
    line = entry.locator("summary.agentkit-step-line")
    text = line.inner_text().strip()
    assert re.match(r'1\. search_local_sources\(\{"query": "idempotency key retry", "limit": 3\}\) -> ok: \[', text), text
    assert len(text) < 200 and '\\"' not in text, f"not a short readable line: {text!r}"
    assert text.endswith("chars)"), f"the data preview should end with its size: {text!r}"

    full = entry.locator(".agentkit-step-json")
    expect(full).to_be_hidden()
    line.click()
    expect(full).to_be_visible(timeout=TIMEOUT_MS)
    expect(full).to_contain_text('"ok": true')
    expect(full).to_contain_text('"id": "idempotency-keys"')  # data laid out as JSON, not escaped
    lab.shot(root, "agent-stepper-line.png")


def _assert_fits(table: Any, what: str) -> None:
    """No horizontal scrolling: the output's box is as wide as its content (a pixel of rounding
    allowed, as a table that wraps its cells fills the box exactly)."""
    table.scroll_into_view_if_needed()
    scroll, room = table.evaluate(
        "t => { const o = t.closest('.jp-OutputArea-output'); return [o.scrollWidth, o.clientWidth]; }"
    )
    assert scroll <= room + 1, f"{what} needs {scroll} px in an output {room} px wide: it scrolls"


def test_the_matrix_table_fits_the_page_at_1280_px(notebooks):
    nb = notebooks.run(notebooks.displaying("matrix.run_matrix(workdir", prefer=("05",)))
    index = nb.find_cell("matrix.run_matrix(workdir")
    table = _output(nb, index).locator("table").first
    _assert_fits(table, "the matrix table")
    assert table.locator("tbody tr").count() == 25  # 23 cells and the two killed-after-payment rows (04 §11)


def test_own_tool_audit_cell(notebooks):
    from agentkit.lessons.exercises import q6

    expect = _expect()
    nb = notebooks.run(notebooks.displaying("audit(", prefer=("07",)))
    index = nb.find_cell("note_tool = dataclasses.replace(with_key, status_lookup=note_status)")
    output = _output(nb, index)
    expect(output).to_contain_text("every row passes: True", timeout=TIMEOUT_MS)
    rows = output.locator("table tbody tr")
    expect(rows).to_have_count(10)
    assert rows.filter(has_text=re.compile(r"\bFalse\b")).count() == 0
    _assert_fits(output.locator("table").first, "the audit table")
    lab.shot(output, "own-tool-audit.png")

    # The learner swaps in the lookup that only checks the id, and runs the cell again.
    _run_cell(nb, index, nb.source(index).replace("status_lookup=note_status", "status_lookup=note_exists"))
    expect(output).to_contain_text("every row passes: False", timeout=AUDIT_TIMEOUT_MS)
    failed = output.locator("table tbody tr").filter(has_text="disconnect_before_write")
    expect(failed).to_contain_text("False")

    # Exercise 6: the learner's answer, typed into the skeleton, then the check cell.
    answer = nb.find_cell("def reminder_key(context, arguments):")
    check = nb.find_cell("correct = q6.check(reminder)")
    expect(_output(nb, check)).to_contain_text("Not attempted yet")
    _run_cell(nb, answer, q6.solution_code)
    _run_cell(nb, check)
    expect(_output(nb, check)).to_contain_text("Correct: every row of the audit passes", timeout=AUDIT_TIMEOUT_MS)


def test_explorer_trace_table_headers_sit_over_their_columns(notebooks):
    expect = _expect()
    nb = notebooks.run(notebooks.displaying("FailureExplorer(", prefer=("05",)))
    root = lab.widget_root(nb, "agentkit-failure-explorer")
    lab.button(root, "Run").first.click()
    table = root.locator(".agentkit-explorer-trace table")
    expect(table).to_be_visible(timeout=TIMEOUT_MS)
    lefts = table.evaluate(
        """t => [Array.from(t.querySelectorAll('thead th')).map(c => c.getBoundingClientRect().left),
                 Array.from(t.querySelector('tbody tr').children).map(c => c.getBoundingClientRect().left)]"""
    )
    headers, cells = lefts
    assert len(headers) == len(cells) >= 5
    for header, cell in zip(headers, cells, strict=True):
        assert abs(header - cell) < 1, f"a header starts {header - cell:+.0f} px off its column: {lefts}"
    aligns = table.evaluate(
        "t => [...new Set([...t.querySelectorAll('th, td')].map(c => c.tagName + ':' + getComputedStyle(c).textAlign))]"
    )
    assert all(a.endswith((":left", ":start")) for a in aligns), f"every header and cell reads from the left: {aligns}"
