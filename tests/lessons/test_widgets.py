"""The three widgets, driven headless through ``Button.click()`` and their state: what a learner
clicks gives the right numbers, a "—" cell or a crashing handler shows a clear line, never a
traceback, and every repr is short and deterministic (nbval compares it)."""

from __future__ import annotations

import json
import logging
import re
from html import unescape as html_unescape
from pathlib import Path

import pytest

pytest.importorskip("ipywidgets")
import ipywidgets

import agentkit
from agentkit import CallContext, ToolRunner, matrix
from agentkit.demo.agent import run_agent
from agentkit.demo.corpus import Corpus
from agentkit.demo.fake_model import FakeModel, ToolCall
from agentkit.demo.tools import make_demo_registry, outbox_lines
from agentkit.lessons.widgets import AgentStepper, ApprovalPanel, FailureExplorer

QUESTION = "idempotency key retry"


def _runner(workspace: Path, corpus: Corpus) -> ToolRunner:
    registry = make_demo_registry(workspace, corpus)
    return ToolRunner(registry, context=CallContext(task_id="t1"), sleep=lambda s: None)


def _classes(widget: ipywidgets.DOMWidget) -> list[str]:
    return list(widget._dom_classes)


def _buttons(widget: ipywidgets.Widget) -> list[ipywidgets.Button]:
    found = []
    if isinstance(widget, ipywidgets.Button):
        found.append(widget)
    for child in getattr(widget, "children", ()):
        found.extend(_buttons(child))
    return found


# =============================================================================== FailureExplorer


def test_explorer_offers_the_matrix_failures_with_human_labels():
    explorer = FailureExplorer()
    assert isinstance(explorer, ipywidgets.VBox)
    assert "agentkit-failure-explorer" in _classes(explorer)
    assert "agentkit-explorer-result" in _classes(explorer.result_html)
    assert "agentkit-explorer-trace" in _classes(explorer.trace_html)
    assert explorer.failure_picker.description == "Failure"
    assert explorer.effect_picker.description == "Effect"
    assert explorer.run_button.description == "Run"
    failures = [value for _, value in explorer.failure_picker.options]
    assert failures == list(dict.fromkeys(row["failure"] for row in _sorted_rows()))
    assert ("transient disconnect", "transient_disconnect") in explorer.failure_picker.options
    assert [value for _, value in explorer.effect_picker.options] == [
        "read", "reversible_write", "irreversible_write"]
    assert explorer.last is None


def _sorted_rows():
    order = {f: i for i, f in enumerate(matrix.FAILURES)}
    return sorted(matrix.load_matrix(), key=lambda r: order[r["failure"]])


def test_explorer_runs_a_write_that_disconnects_after_landing():
    explorer = FailureExplorer()
    explorer.choose("transient_disconnect", "reversible_write")
    explorer.run_button.click()
    text = explorer.result_html.value
    assert "result: ok" in text
    assert "handler calls: 1" in text
    assert "attempts: 1" in text
    assert "budget used: 2" in text  # the attempt and the status lookup
    assert "matches the matrix: yes" in text
    assert "save_draft" in text  # the step transcript
    assert explorer.last is not None and explorer.last.handler_calls == 1
    trace = explorer.trace_html.value
    assert "<table" in trace and "status_lookup" in trace
    # headers over their columns: left-aligned like the cells, not pandas's right-aligned <th>
    assert 'text-align: right' not in trace
    for tag in ("th", "td"):  # inline: no stylesheet can override it
        cells = re.findall(rf"<{tag}[\s>][^>]*>", trace)
        assert cells and all('style="text-align: left' in cell for cell in cells)
    assert not explorer.run_button.disabled


def test_explorer_timeout_on_an_irreversible_write_is_outcome_unknown():
    explorer = FailureExplorer()
    explorer.choose("timeout_outcome_unknown", "irreversible_write")
    explorer.run_button.click()
    text = explorer.result_html.value
    assert "error: outcome_unknown" in text
    assert "handler calls: 1" in text
    assert "matches the matrix: yes" in text
    # what the model sees, as JSON (escaped for the page)
    assert "&quot;retryable&quot;: false" in text


def test_explorer_says_why_a_dash_cell_does_not_run(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("play() must not be called for a '—' cell")

    monkeypatch.setattr(matrix, "play", must_not_run)
    explorer = FailureExplorer()
    explorer.choose("same_write_repeated", "read")
    assert "not a cell of the failure matrix" in explorer.status_html.value  # before Run, too
    explorer.run_button.click()
    status = explorer.status_html.value
    assert "same write repeated × read is not a cell of the failure matrix" in status
    assert "reversible write or irreversible write" in status
    assert explorer.result_html.value == ""
    assert explorer.last is None


def test_explorer_shows_an_exception_as_one_clear_line_and_logs_it(monkeypatch, caplog):
    def broken(failure, effect, **kwargs):
        raise RuntimeError("the bench fell over")

    monkeypatch.setattr(matrix, "play", broken)
    explorer = FailureExplorer()
    explorer.choose("budget_spent", "read")
    with caplog.at_level(logging.ERROR, logger="agentkit"):
        explorer.run_button.click()  # must not raise
    status = explorer.status_html.value
    assert "Could not run this cell: RuntimeError: the bench fell over" in status
    assert "Traceback" not in status
    assert any(r.name == "agentkit" and r.exc_info for r in caplog.records)
    assert not explorer.run_button.disabled  # the learner can try again
    assert explorer.run() is None  # the method itself is as safe as the button


def test_explorer_can_be_restricted_and_refuses_unknown_ids():
    explorer = FailureExplorer(failures=["budget_spent"], effects=["read", "reversible_write"])
    assert explorer.failure_picker.options == (("budget spent", "budget_spent"),)
    assert len(explorer.effect_picker.options) == 2
    with pytest.raises(ValueError, match="not in the failure matrix"):
        FailureExplorer(failures=["gremlins"])


def test_explorer_repr_is_short_and_deterministic():
    explorer = FailureExplorer()
    assert repr(explorer) == "FailureExplorer(failure='missing_argument', effect='read')"
    explorer.choose("timeout_outcome_unknown", "reversible_write")
    assert repr(explorer) == "FailureExplorer(failure='timeout_outcome_unknown', effect='reversible_write')"
    assert explorer._repr_mimebundle_()["text/plain"] == repr(explorer)


# =============================================================================== ApprovalPanel


def _ask_to_send(runner: ToolRunner) -> str:
    asked = runner.call("send_message", {"to": "Ana", "body": "The report is ready."})
    assert asked["error"] == "approval_required"
    return asked["approval_id"]


def test_approval_panel_approves_one_call_exactly_once(tmp_path, corpus):
    runner = _runner(tmp_path, corpus)
    panel = ApprovalPanel(runner)
    assert "agentkit-approval-panel" in _classes(panel)
    assert "agentkit-approval-status" in _classes(panel.status_html)
    assert repr(panel) == "ApprovalPanel(pending=0, decided=0)"
    approval_id = _ask_to_send(runner)
    assert outbox_lines(tmp_path) == 0  # nothing is sent before a person approves

    [refresh] = [b for b in _buttons(panel) if b.description == "Refresh"]
    refresh.click()
    assert len(panel.pending) == 1
    assert repr(panel) == "ApprovalPanel(pending=1, decided=0)"
    [row] = panel.list_box.children
    assert "agentkit-approval-row" in _classes(row)
    assert approval_id in row.children[0].value
    assert "send_message" in row.children[0].value
    assert '{"body": "The report is ready.", "to": "Ana"}' in html_unescape(row.children[0].value)

    [approve] = [b for b in _buttons(panel) if b.description == "Approve"]
    approve.click()
    status = html_unescape(panel.status_html.value)
    assert f"approved {approval_id}: ok" in status
    assert "handler calls by this approval: 1" in status
    assert "send_message's handler calls on this runner, every call so far: 1" in status
    assert outbox_lines(tmp_path) == 1
    assert panel.pending == [] and runner.pending_approvals() == []
    assert not [b for b in _buttons(panel) if b.description == "Approve"]
    assert panel.last_result is not None and panel.last_result["ok"] is True
    assert panel.history == [("approved", approval_id, panel.last_result)]

    # Approving again (say, a stale button) replays the settled result: nothing is sent twice.
    again = panel.approve(approval_id)
    assert again["replayed"] is True
    assert outbox_lines(tmp_path) == 1
    assert "handler calls by this approval: 0" in panel.status_html.value
    assert "every call so far: 1" in panel.status_html.value


def test_approval_panel_shows_what_will_run_with_invisible_characters_escaped(tmp_path, corpus):
    """docs/design.md#mcp (rev 3): the person approving sees exactly what runs: a bidi override
    or a zero-width character is shown as its escape, never applied to the text."""
    runner = _runner(tmp_path, corpus)
    asked = runner.call("send_message", {"to": "Ada\u202eeve@evil.example", "body": "a\u200bb"})
    assert asked["error"] == "approval_required"
    panel = ApprovalPanel(runner)
    [row] = panel.list_box.children
    shown = html_unescape(row.children[0].value)
    assert "\u202e" not in shown and "\u200b" not in shown
    assert "Ada\\u202eeve@evil.example" in shown and "a\\u200bb" in shown
    assert outbox_lines(tmp_path) == 0


def test_approval_panel_deny_runs_nothing(tmp_path, corpus):
    runner = _runner(tmp_path, corpus)
    approval_id = _ask_to_send(runner)
    panel = ApprovalPanel(runner)  # lists what is already pending
    assert len(panel.pending) == 1
    [deny] = [b for b in _buttons(panel) if b.description == "Deny"]
    deny.click()
    status = panel.status_html.value
    assert f"denied {approval_id}: forbidden" in status
    assert "handler calls by this denial: 0" in status
    assert "every call so far: 0" in status
    assert outbox_lines(tmp_path) == 0
    assert panel.pending == []
    assert panel.history[-1][:2] == ("denied", approval_id)
    assert panel.approve(approval_id)["error"] == "forbidden"  # denied stays denied
    assert outbox_lines(tmp_path) == 0


def test_approval_panel_ask_again_shows_the_replay_and_no_second_send(tmp_path, corpus):
    runner = _runner(tmp_path, corpus)
    approval_id = _ask_to_send(runner)
    panel = ApprovalPanel(runner)
    [again] = [b for b in _buttons(panel) if b.description == "Ask again"]
    assert again.disabled and panel.ask_again() is None  # nothing decided yet
    assert "Approve or deny a call first" in panel.again_html.value
    next(b for b in _buttons(panel) if b.description == "Approve").click()
    assert outbox_lines(tmp_path) == 1 and not again.disabled
    again.click()
    text = html_unescape(panel.again_html.value)
    assert "asked again: ok, replayed: the kept result; nothing ran" in text
    assert "handler calls by this call: 0" in text
    assert "send_message's handler calls on this runner, every call so far: 1" in text
    assert outbox_lines(tmp_path) == 1  # the model asked twice; the message went out once
    assert panel.pending == []  # the repeat asked no person again
    assert approval_id in panel.history[0]


def test_approval_panel_counts_a_denial_per_call_after_an_approved_message(tmp_path, corpus):
    """The room's case: one message approved and sent, then another denied. The denial ran
    nothing: its own count says 0, and the tool's count on the runner (still 1, the earlier
    message) is labelled as that, never as the denial's."""
    runner = _runner(tmp_path, corpus)
    first = _ask_to_send(runner)
    second = runner.call("send_message", {"to": "everyone@example.com", "body": "Ship it!"})["approval_id"]
    panel = ApprovalPanel(runner)
    assert [record["approval_id"] for record in panel.pending] == [first, second]
    panel.approve(first)
    assert "handler calls by this approval: 1" in panel.status_html.value
    [deny] = [b for b in _buttons(panel) if b.description == "Deny"]  # the one row left
    deny.click()
    status = html_unescape(panel.status_html.value)
    assert f"denied {second}: forbidden" in status
    assert "handler calls by this denial: 0\n" in status
    assert "send_message's handler calls on this runner, every call so far: 1" in status
    assert "handler calls: 1" not in status
    assert outbox_lines(tmp_path) == 1
    panel.ask_again()  # the denied call sent again: still forbidden, still nothing run
    again = html_unescape(panel.again_html.value)
    assert "asked again: forbidden" in again and "handler calls by this call: 0" in again
    assert outbox_lines(tmp_path) == 1


def test_approval_panel_denial_is_not_shown_as_success_and_its_id_does_not_wrap(tmp_path, corpus):
    runner = _runner(tmp_path, corpus)
    _ask_to_send(runner)
    panel = ApprovalPanel(runner)
    [row] = panel.list_box.children
    assert 'white-space: nowrap' in row.children[0].value
    next(b for b in _buttons(panel) if b.description == "Deny").click()
    status = panel.status_html.value
    assert "agentkit-message-denied" in status
    assert "agentkit-message-ok" not in status and "#1a7f37" not in status
    next(b for b in _buttons(panel) if b.description == "Ask again").click()
    assert "asked again: forbidden" in panel.again_html.value
    assert outbox_lines(tmp_path) == 0


def test_json_data_is_shown_parsed_not_as_an_escaped_string(tmp_path, corpus):
    from agentkit.lessons.widgets import result_text

    runner = _runner(tmp_path, corpus)
    approval_id = _ask_to_send(runner)
    panel = ApprovalPanel(runner)
    panel.approve(approval_id)
    text = html_unescape(panel.status_html.value)
    assert '\\"' not in text  # no escaped quotes: data is shown as JSON, indented
    assert '"data": {\n    "sent": true,' in text
    assert '("data" reaches the model as one JSON string; shown parsed here)' in text
    assert result_text({"ok": True, "data": "plain text"}) == '{\n  "ok": true,\n  "data": "plain text"\n}'
    assert result_text({"ok": True, "data": "[1, 2"}).endswith('"data": "[1, 2"\n}')  # not JSON: as is
    explorer = FailureExplorer()
    explorer.choose("oversized_output", "reversible_write")
    explorer.run()
    assert "shown parsed here" not in explorer.result_html.value  # truncated: not valid JSON
    explorer.choose("transient_disconnect", "reversible_write")
    explorer.run()
    assert "&quot;draft_id&quot;: &quot;draft-7&quot;" in explorer.result_html.value


def test_approval_panel_shows_a_failing_runner_clearly(tmp_path, corpus, caplog):
    runner = _runner(tmp_path, corpus)
    approval_id = _ask_to_send(runner)
    panel = ApprovalPanel(runner)

    def broken(approval_id):
        raise OSError("the store is gone")

    runner.approve = broken
    with caplog.at_level(logging.ERROR, logger="agentkit"):
        next(b for b in _buttons(panel) if b.description == "Approve").click()
    assert "Could not approve: OSError: the store is gone" in panel.status_html.value
    assert any(r.name == "agentkit" and r.exc_info for r in caplog.records)
    assert panel.pending and panel.pending[0]["approval_id"] == approval_id  # still listed
    assert panel.history == []


# =============================================================================== AgentStepper


def _click_until_done(stepper: AgentStepper, limit: int = 20) -> int:
    clicks = 0
    while not stepper.step_button.disabled and clicks < limit:
        stepper.step_button.click()
        clicks += 1
    return clicks


def test_stepper_matches_run_agent_step_for_step(tmp_path, corpus):
    expected = run_agent(FakeModel(), _runner(tmp_path / "a", corpus), QUESTION)
    stepper = AgentStepper(FakeModel(), _runner(tmp_path / "b", corpus), QUESTION)
    assert "agentkit-agent-stepper" in _classes(stepper)
    assert "agentkit-stepper-log" in _classes(stepper.log_html)
    assert [b.description for b in _buttons(stepper)] == ["Step", "Reset"]
    assert repr(stepper) == f"AgentStepper(question={QUESTION!r}, steps=0, done=False)"

    stepper.step_button.click()
    assert len(stepper.transcript_steps) == 1
    assert "1. search_local_sources" in stepper.log_html.value
    assert not stepper.done

    clicks = 1 + _click_until_done(stepper)
    assert clicks == len(expected.steps) + 1  # one click per tool call, one for the answer
    assert stepper.done and stepper.step_button.disabled
    assert stepper.transcript_steps == expected.steps
    assert stepper.final_answer == expected.final_answer
    assert stepper.stop_reason == "final_answer"
    log_text = html_unescape(stepper.log_html.value)
    assert f"Final answer: {expected.final_answer}" in log_text
    # One short readable line per step, the full JSON behind a toggle (a <details> element).
    assert stepper.log_html.value.count("<details") == len(expected.steps)
    for step in expected.steps:
        assert '<summary class="agentkit-step-line"' in stepper.log_html.value
        assert step.line(40) in log_text and len(step.line(40)) < 140
    assert '"ok": true' in log_text
    assert '\\"id\\"' not in log_text  # data laid out as JSON, not escaped inside a string
    assert repr(stepper) == f"AgentStepper(question={QUESTION!r}, steps={len(expected.steps)}, done=True)"

    assert stepper.step() is None  # a step after the end does nothing, and says so
    assert "press Reset" in stepper.status_html.value


def test_stepper_reset_starts_over_and_writes_replay(tmp_path, corpus):
    runner = _runner(tmp_path, corpus)
    model = FakeModel(save_brief=True)
    stepper = AgentStepper(model, runner, QUESTION)
    _click_until_done(stepper)
    first = list(stepper.transcript_steps)
    assert first[-1].tool_call.name == "save_brief" and first[-1].result["replayed"] is False

    [reset] = [b for b in _buttons(stepper) if b.description == "Reset"]
    reset.click()
    assert stepper.transcript_steps == [] and not stepper.done and not stepper.step_button.disabled
    assert stepper.final_answer is None and "Final answer" not in stepper.log_html.value
    _click_until_done(stepper)
    again = stepper.transcript_steps
    assert again[-1].result["replayed"] is True  # the runner's store: the brief is not written twice
    assert runner.trace.call_counts()["save_brief"] == 1
    assert '"replayed": true' in html_unescape(stepper.log_html.value)


def test_stepper_stops_like_run_agent_on_max_steps(tmp_path, corpus):
    expected = run_agent(FakeModel(misbehave="loop"), _runner(tmp_path / "a", corpus), "loop", max_steps=2)
    stepper = AgentStepper(FakeModel(misbehave="loop"), _runner(tmp_path / "b", corpus), "loop", max_steps=2)
    _click_until_done(stepper)
    assert expected.stop_reason == stepper.stop_reason == "max_steps"
    assert stepper.transcript_steps == expected.steps
    assert "Stopped: max_steps" in stepper.log_html.value


def test_stepper_stops_like_run_agent_on_a_spent_budget(tmp_path, corpus):
    def runner(where: Path) -> ToolRunner:
        return ToolRunner(make_demo_registry(where, corpus), budget=agentkit.Budget(max_attempts=1))

    expected = run_agent(FakeModel(), runner(tmp_path / "a"), QUESTION)
    stepper = AgentStepper(FakeModel(), runner(tmp_path / "b"), QUESTION)
    _click_until_done(stepper)
    assert expected.stop_reason == stepper.stop_reason == "budget_exhausted"
    assert stepper.transcript_steps == expected.steps
    assert "Stopped: budget_exhausted" in stepper.log_html.value


def test_stepper_shows_a_broken_model_clearly(tmp_path, corpus, caplog):
    class Broken:
        def next_action(self, question, history):
            if history:
                raise ValueError("the model's server hung up")
            return ToolCall("call_1", "search_local_sources", {"query": "retry"})

    stepper = AgentStepper(Broken(), _runner(tmp_path, corpus), "retry")
    with caplog.at_level(logging.ERROR, logger="agentkit"):
        stepper.step_button.click()
        stepper.step_button.click()  # must not raise
    assert "Could not take the next step: ValueError: the model&#x27;s server hung up" in stepper.status_html.value
    assert any(r.name == "agentkit" and r.exc_info for r in caplog.records)
    assert len(stepper.transcript_steps) == 1 and not stepper.done
    assert not stepper.step_button.disabled  # the learner may try again, or Reset


def test_text_is_escaped(tmp_path, corpus):
    runner = _runner(tmp_path, corpus)
    runner.call("send_message", {"to": "<script>alert(1)</script>", "body": "x"})
    panel = ApprovalPanel(runner)
    value = panel.list_box.children[0].children[0].value
    assert "<script>" not in value and "&lt;script&gt;" in value
    json.dumps(panel.pending)  # plain data


def test_the_widgets_text_wraps_between_words_never_inside_one():
    """The explorer's "why:" line, the stepper's JSON and every status line: JupyterLab's own
    output style breaks a ``<pre>`` at any character ("outc|ome_unknown")."""
    from agentkit.lessons import widgets

    block = widgets._pre("why: outcome_unknown")
    line = widgets._message("error: outcome_unknown", "error")
    for page in (block, line):
        assert "word-break: normal" in page and "overflow-wrap: anywhere" in page, page
