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

from agentkit.demo.matrix import label

pytestmark = pytest.mark.browser

TIMEOUT_MS = lab.WIDGET_TIMEOUT * 1000


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def _widget(nb: lab.NotebookPage, css: str, needle: str) -> Any:
    """The first rendered widget with root class ``css`` in the page of ``nb``."""
    try:
        return lab.widget_root(nb, css)
    except lab.PlaywrightTimeout:
        pass
    pytest.fail(
        f"{nb.name} shows no .{css} widget after Run All Cells (its first cell with {needle!r} "
        f"is cell {nb.find_cell(needle)}); see the error above it in the page",
        pytrace=False,
    )


def _press_and_wait_fresh(run: Any, result: Any) -> None:
    """Press Run and wait for a result rendered by this press. A later cell of the notebook may
    have played the same pair already, so the page's copy of the old result is blanked first
    (in the DOM only): text that shows up again was re-rendered from the kernel's answer."""
    result.evaluate("e => { for (const c of e.querySelectorAll('.widget-html-content')) c.innerHTML = ''; }")
    run.click()
    _expect()(result).to_contain_text("handler calls:", timeout=TIMEOUT_MS)


def test_failure_explorer(notebooks):
    expect = _expect()
    nb = notebooks.run(notebooks.displaying("FailureExplorer(", prefer=("05",)))
    root = _widget(nb, "agentkit-failure-explorer", "FailureExplorer(")
    result = root.locator(".agentkit-explorer-result")
    run = lab.button(root, "Run").first

    # A transient disconnect on a reversible write: retried under its key, written once.
    lab.choose(root, "Failure", label("transient_disconnect"))
    lab.choose(root, "Effect", label("reversible_write"))
    _press_and_wait_fresh(run, result)
    expect(result).to_contain_text("result: ok", timeout=TIMEOUT_MS)
    expect(result).to_contain_text(re.compile(r"handler calls: 1\b"))
    expect(result).to_contain_text("matches the matrix: yes")

    # A timeout on an irreversible write: the outcome is unknown, and it is never retried.
    lab.choose(root, "Failure", label("timeout_outcome_unknown"))
    lab.choose(root, "Effect", label("irreversible_write"))
    _press_and_wait_fresh(run, result)
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
    # Pin the panel by position: the row leaves the panel once approved.
    index = next(i for i in range(panels.count())
                 if panels.nth(i).locator(".agentkit-approval-row").filter(has_text="send_message").count())
    panel = panels.nth(index)
    row = panel.locator(".agentkit-approval-row").filter(has_text="send_message").first
    panel.scroll_into_view_if_needed()
    status = panel.locator(".agentkit-approval-status")
    approval_id = row.locator("small").first.inner_text().strip()
    lab.shot(panel, "approval-panel-pending.png")

    lab.button(row, "Approve").first.click()
    expect(status).to_contain_text(f"approved {approval_id}: ok", timeout=TIMEOUT_MS)
    expect(status).to_contain_text(re.compile(r"handler calls by this approval: 1\b"))
    expect(panel.locator(".agentkit-approval-row").filter(has_text=approval_id)).to_have_count(0)
    lab.shot(panel, "approval-panel.png")

    # Ask again: the model sends the approved call once more; the kept result, nothing runs.
    again = panel.locator(".agentkit-approval-again")
    lab.button(panel, "Ask again").first.click()
    expect(again).to_contain_text("replayed: the kept result; nothing ran", timeout=TIMEOUT_MS)
    expect(again).to_contain_text(re.compile(r"handler calls by this call: 0\b"))

    # Deny the other message (04 asks for two): nothing runs, and each count says what it counts.
    others = panel.locator(".agentkit-approval-row").filter(has_text="send_message")
    if others.count() == 0:
        pytest.fail(f"{name}'s panel has no second send_message to deny", pytrace=False)
    denied_id = others.first.locator("small").first.inner_text().strip()
    lab.button(others.first, "Deny").first.click()
    expect(status).to_contain_text(f"denied {denied_id}: forbidden", timeout=TIMEOUT_MS)
    expect(status).to_contain_text(re.compile(r"handler calls by this denial: 0\b"))
    expect(status).to_contain_text(re.compile(r"send_message's handler calls on this runner, every call so far: 1\b"))
    expect(status).not_to_contain_text(re.compile(r"^handler calls: 1", re.MULTILINE))
    expect(panel.locator(".agentkit-approval-row")).to_have_count(0)
    lab.shot(panel, "approval-panel-denied.png")


def test_agent_stepper(notebooks):
    expect = _expect()
    nb = notebooks.run(notebooks.displaying("AgentStepper(", prefer=("01", "05")))
    root = _widget(nb, "agentkit-agent-stepper", "AgentStepper(")
    log = root.locator(".agentkit-stepper-log")
    status = root.locator(".agentkit-stepper-status")
    step = lab.button(root, "Step").first
    if step.is_disabled():  # a later cell already ran it to the end: start over, as a learner would
        lab.button(root, "Reset").first.click()
        expect(step).to_be_enabled(timeout=TIMEOUT_MS)

    presses = 0
    deadline = time.monotonic() + 60
    while step.is_enabled():
        assert presses < 12, f"still no final answer after {presses} presses of Step:\n{log.inner_text()}"
        assert time.monotonic() < deadline, f"stepping took over 60s:\n{log.inner_text()}"
        before, said = log.inner_text(), status.inner_text()
        step.click()
        presses += 1
        expect(log).not_to_have_text(before, timeout=TIMEOUT_MS)
        # The status line is the last thing a step updates (after the log, and after Step is
        # disabled when the run ends): once it changed, Step's state is this press's.
        expect(status).not_to_have_text(said, timeout=TIMEOUT_MS)
    expect(log).to_contain_text("Final answer:")
    expect(step).to_be_disabled()
    assert presses >= 2, f"the run ended after {presses} press(es):\n{log.inner_text()}"
    lab.shot(root, "agent-stepper.png")
