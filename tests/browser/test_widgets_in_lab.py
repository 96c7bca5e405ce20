"""The three widgets, used in JupyterLab the way a learner meets them after Run All Cells.

- ``FailureExplorer``: pick a failure and an effect in the dropdowns, press Run, read the result.
- ``ApprovalPanel``: press Approve on the pending ``send_message``; the call runs once.
- ``AgentStepper``: press Step until the final answer; Step is then disabled.

Screenshots of the explorer and the approval panel are kept in ``test-artifacts/``.
"""

from __future__ import annotations

import re
import time
from typing import Any

import labdriver as lab
import pytest

from agentkit.matrix import label

pytestmark = pytest.mark.browser

TIMEOUT_MS = lab.WIDGET_TIMEOUT * 1000


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def _widget(nb: lab.NotebookPage, css: str, needle: str) -> Any:
    """The first rendered widget with root class ``css`` in the page of ``nb``."""
    root = nb.page.locator(f"{lab.PANEL} .jp-OutputArea-output .{css}").first
    try:
        root.wait_for(state="attached", timeout=TIMEOUT_MS)
    except Exception:
        pytest.fail(
            f"{nb.name} shows no .{css} after Run All Cells (the cell with {needle!r} is cell "
            f"{nb.find_cell(needle)})",
            pytrace=False,
        )
    root.scroll_into_view_if_needed()
    return root


def _dropdown(root: Any, description: str) -> Any:
    """The ``<select>`` of the ipywidgets Dropdown whose ``<label>`` reads ``description``."""
    box = root.locator(".widget-dropdown").filter(
        has=root.page.locator("label.widget-label", has_text=re.compile(rf"^\s*{re.escape(description)}\s*$"))
    )
    return box.locator("select").first


def _choose(root: Any, description: str, option_text: str) -> None:
    """Pick an option by the text a learner reads (ipywidgets renders spaces as &nbsp;)."""
    select = _dropdown(root, description)
    texts = [t.replace("\xa0", " ").strip() for t in select.locator("option").all_text_contents()]
    assert option_text in texts, f"the {description!r} dropdown offers {texts}, not {option_text!r}"
    select.select_option(index=texts.index(option_text))
    _expect()(select).to_have_value(select.locator("option").nth(texts.index(option_text)).get_attribute("value"))


def _button(root: Any, name: str) -> Any:
    return root.locator("button.widget-button").filter(has_text=re.compile(rf"^\s*{re.escape(name)}\s*$"))


def test_failure_explorer(notebooks):
    expect = _expect()
    nb = notebooks.run(notebooks.displaying("FailureExplorer(", prefer=("05",)))
    root = _widget(nb, "agentkit-failure-explorer", "FailureExplorer(")
    result = root.locator(".agentkit-explorer-result")
    run = _button(root, "Run").first

    # A transient disconnect on a reversible write: retried under its key, written once.
    _choose(root, "Failure", label("transient_disconnect"))
    _choose(root, "Effect", label("reversible_write"))
    run.click()
    expect(result).to_contain_text("result: ok", timeout=TIMEOUT_MS)
    expect(result).to_contain_text(re.compile(r"handler calls: 1\b"))
    expect(result).to_contain_text("matches the matrix: yes")

    # A timeout on an irreversible write: the outcome is unknown, and it is never retried.
    _choose(root, "Failure", label("timeout_outcome_unknown"))
    _choose(root, "Effect", label("irreversible_write"))
    run.click()
    expect(result).to_contain_text("error: outcome_unknown", timeout=TIMEOUT_MS)
    expect(result).to_contain_text(re.compile(r"handler calls: 1\b"))
    expect(result).to_contain_text("matches the matrix: yes")
    expect(run).to_be_enabled()
    lab.shot(root, "explorer.png")


def test_approval_panel(notebooks):
    expect = _expect()
    name = notebooks.displaying("ApprovalPanel(", prefer=("05", "04"))
    nb = notebooks.run(name)
    panels = nb.page.locator(f"{lab.PANEL} .jp-OutputArea-output .agentkit-approval-panel")
    _widget(nb, "agentkit-approval-panel", "ApprovalPanel(")
    rows = panels.locator(".agentkit-approval-row").filter(has_text="send_message")
    if rows.count() == 0:
        shown = [t.strip() for t in panels.all_inner_texts()]
        pytest.fail(f"no ApprovalPanel of {name} lists a pending send_message; they show: {shown}", pytrace=False)
    panel = panels.filter(has=nb.page.locator(".agentkit-approval-row", has_text="send_message")).first
    row = panel.locator(".agentkit-approval-row").filter(has_text="send_message").first
    panel.scroll_into_view_if_needed()
    status = panel.locator(".agentkit-approval-status")
    approval_id = row.locator("small").first.inner_text().strip()

    _button(row, "Approve").first.click()
    expect(status).to_contain_text(f"approved {approval_id}: ok", timeout=TIMEOUT_MS)
    expect(status).to_contain_text(re.compile(r"handler calls: 1\b"))
    expect(panel.locator(".agentkit-approval-row").filter(has_text=approval_id)).to_have_count(0)
    lab.shot(panel, "approval-panel.png")


def test_agent_stepper(notebooks):
    expect = _expect()
    nb = notebooks.run(notebooks.displaying("AgentStepper(", prefer=("01", "05")))
    root = _widget(nb, "agentkit-agent-stepper", "AgentStepper(")
    log = root.locator(".agentkit-stepper-log")
    step = _button(root, "Step").first
    if step.is_disabled():  # a later cell already ran it to the end: start over, as a learner would
        _button(root, "Reset").first.click()
        expect(step).to_be_enabled(timeout=TIMEOUT_MS)

    presses = 0
    deadline = time.monotonic() + 60
    while step.is_enabled():
        assert presses < 12, f"still no final answer after {presses} presses of Step:\n{log.inner_text()}"
        assert time.monotonic() < deadline, f"stepping took over 60s:\n{log.inner_text()}"
        before = log.inner_text()
        step.click()
        presses += 1
        expect(log).not_to_have_text(before, timeout=TIMEOUT_MS)
    expect(log).to_contain_text("Final answer:")
    expect(step).to_be_disabled()
    assert presses >= 2, f"the run ended after {presses} press(es):\n{log.inner_text()}"
    lab.shot(root, "agent-stepper.png")
