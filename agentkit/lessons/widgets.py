"""The lessons layer: three ipywidgets panels for the notebooks.

==================  ==========================================================================
``FailureExplorer`` pick a failure and a side-effect level, press Run, see what the model saw,
                    the real handler call count, and the runner's trace
``ApprovalPanel``   the pending approvals of a runner, each with Approve and Deny
``AgentStepper``    the agent loop one turn at a time: one short line per tool call and the
                    result as the model saw it, the full JSON behind a toggle
==================  ==========================================================================

Each is an ``ipywidgets.VBox``: leave it as a cell's last expression, or ``display()`` it.

Three rules keep them safe in a classroom and under nbval:

- results are rendered into ``HTML`` widgets (escaped with :func:`html.escape`), never printed
  into an ``Output`` widget, whose prints from top-level code leak to the cell's stdout;
- every action (each button, and the public method it calls) catches ``Exception``, logs it
  to the ``agentkit`` logger and shows one clear line in the panel's status: ipywidgets would
  otherwise swallow the exception, and a learner should never face a traceback;
- ``repr()`` is short and deterministic, because nbval compares a widget output's text.

The CSS classes (``agentkit-failure-explorer`` …), button and dropdown descriptions are pinned:
the browser tests find the widgets by them.

``import agentkit`` never imports this module (it imports ipywidgets at once).
"""

from __future__ import annotations

import functools
import html
import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import ipywidgets as widgets

from agentkit.boundary.canonical import approval_text, json_text
from agentkit.demo import matrix
from agentkit.demo.agent import Step, Transcript, take_turn
from agentkit.demo.fake_model import FinalAnswer
from agentkit.lessons.notebook import WORD_WRAP

__all__ = ["AgentStepper", "ApprovalPanel", "FailureExplorer", "result_text"]

log = logging.getLogger("agentkit")

F = TypeVar("F", bound=Callable[..., Any])

#: Wrapped between words, never inside one ("outc|ome_unknown"): JupyterLab's own output
#: style breaks a ``<pre>`` at any character.
_PRE = f'<pre style="{WORD_WRAP}; margin: 0.3em 0">{{}}</pre>'


_CELL_STYLE = "text-align: left; vertical-align: top; padding: 0.15em 0.8em 0.15em 0"


def _table(frame: Any) -> str:
    """A DataFrame as an HTML table whose headers sit over their columns: every header and cell
    left-aligned by an inline style (pandas and JupyterLab's stylesheets right-align headers
    and left-align cells, and an inline style is the one their selectors cannot override)."""
    text = str(frame.to_html(index=False, border=0, justify="left", classes="agentkit-table"))
    return re.sub(r"<(th|td)(?=[\s>])", rf'<\1 style="{_CELL_STYLE}"', text)


def _pre(text: str) -> str:
    return _PRE.format(html.escape(text))


def _message(text: str, kind: str = "info") -> str:
    """One status line; ``kind`` is ``info``, ``ok``, ``denied`` or ``error`` (a CSS class and
    a colour: a denial is a person's decision carried out, neither a success nor a failure)."""
    colour = {"ok": "#1a7f37", "error": "#b42318", "denied": "#9a6700"}.get(kind, "inherit")
    return (
        f'<div class="agentkit-message agentkit-message-{kind}" style="color: {colour}; {WORD_WRAP}">'
        f"{html.escape(text)}</div>"
    )


def result_text(result: Any) -> str:
    """A result dict as indented JSON for a person to read. ``data`` is the text the model
    reads; when that text is itself JSON (a dict or list rendered by the boundary), it is shown
    parsed and indented, with a note saying so, instead of as one escaped string."""
    if isinstance(result, dict) and isinstance(result.get("data"), str):
        try:
            parsed = json.loads(result["data"])
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            shown = {key: (parsed if key == "data" else value) for key, value in result.items()}
            return (json_text(shown, indent=2)
                    + '\n("data" reaches the model as one JSON string; shown parsed here)')
    return json_text(result, indent=2)


def _safe(what: str) -> Callable[[F], F]:
    """Make an action never raise: log the exception, show one clear line in ``self.status_html``."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                log.exception("%s: %s failed", type(self).__name__, what)
                self.status_html.value = _message(
                    f"Could not {what}: {type(exc).__name__}: {exc} "
                    "(the details are in the 'agentkit' log).",
                    "error",
                )
                self._after_error()
                return None

        return wrapper  # type: ignore[return-value]

    return decorate


class _Panel(widgets.VBox):  # type: ignore[misc]  # ipywidgets is untyped: VBox is Any
    """Shared plumbing: a status line and the error hook."""

    status_html: widgets.HTML

    def _after_error(self) -> None:
        """Put the panel back in a usable state after an action failed."""


# =============================================================================== FailureExplorer


class FailureExplorer(_Panel):
    """Pick a failure and a side-effect level, press Run: the cell is played on fresh tools.

    ``failures`` and ``effects`` restrict the choices (ids, in the matrix's order); by default
    every failure of the matrix CSV and all three effects are offered. A pair that is not a
    cell of the matrix ("cannot happen" in docs/design.md#failure-matrix, such as *same write
    repeated* × *read*) shows why instead of running.
    """

    def __init__(self, failures: Iterable[str] | None = None, effects: Iterable[str] | None = None) -> None:
        self.rows = {(row["failure"], row["effect"]): row for row in matrix.load_matrix()}
        known_failures = [f for f in matrix.FAILURES if any(f == cell[0] for cell in self.rows)]
        chosen_failures = known_failures if failures is None else list(failures)
        chosen_effects = list(matrix.EFFECTS) if effects is None else [str(e) for e in effects]
        unknown = [f for f in chosen_failures if f not in known_failures]
        unknown += [e for e in chosen_effects if e not in matrix.EFFECTS]
        if unknown:
            raise ValueError(
                f"not in the failure matrix: {', '.join(map(str, unknown))}; "
                f"failures: {', '.join(known_failures)}; effects: {', '.join(matrix.EFFECTS)}"
            )
        if not chosen_failures or not chosen_effects:
            raise ValueError("FailureExplorer needs at least one failure and one effect")

        self.failure_picker = widgets.Dropdown(
            description="Failure",
            options=[(matrix.label(f), f) for f in chosen_failures],
            value=chosen_failures[0],
        )
        self.effect_picker = widgets.Dropdown(
            description="Effect",
            options=[(matrix.label(e), e) for e in chosen_effects],
            value=chosen_effects[0],
        )
        self.run_button = widgets.Button(description="Run", button_style="primary",
                                         tooltip="Provoke this failure at this level, on fresh tools")
        self.status_html = widgets.HTML()
        self.status_html.add_class("agentkit-explorer-status")
        self.result_html = widgets.HTML()
        self.result_html.add_class("agentkit-explorer-result")
        self.trace_html = widgets.HTML()
        self.trace_html.add_class("agentkit-explorer-trace")
        self.last: matrix.CellResult | None = None

        super().__init__([
            widgets.HBox([self.failure_picker, self.effect_picker, self.run_button]),
            self.status_html,
            self.result_html,
            self.trace_html,
        ])
        self.add_class("agentkit-failure-explorer")
        self.run_button.on_click(lambda _button: self.run())
        self.failure_picker.observe(self._on_pick, names="value")
        self.effect_picker.observe(self._on_pick, names="value")
        self._show_choice()

    def __repr__(self) -> str:
        return f"FailureExplorer(failure={self.failure!r}, effect={self.effect!r})"

    @property
    def failure(self) -> str:
        return str(self.failure_picker.value)

    @property
    def effect(self) -> str:
        return str(self.effect_picker.value)

    def choose(self, failure: str, effect: str) -> None:
        """Select a failure and an effect, as a learner would with the dropdowns."""
        self.failure_picker.value = failure
        self.effect_picker.value = effect

    @_safe("run this cell")
    def run(self) -> matrix.CellResult | None:
        """What Run does: play the chosen cell and show it. Returns the ``CellResult``, or None
        when the pair is not a cell (or the play failed: see the status line)."""
        failure, effect = self.failure, self.effect
        self.result_html.value = ""
        self.trace_html.value = ""
        if (failure, effect) not in self.rows:
            self.last = None
            self.status_html.value = _message(self._not_a_cell(failure, effect), "error")
            return None
        self.run_button.disabled = True
        self.status_html.value = _message(f"Running {matrix.label(failure)} × {matrix.label(effect)} …")
        try:
            cell = matrix.play(failure, effect)
        finally:
            self.run_button.disabled = False
        self.last = cell
        row = self.rows[(failure, effect)]
        matches = cell.observed == row["expected"] and cell.handler_calls == row["handler_calls"]
        self.result_html.value = self._render(cell, row, matches)
        self.trace_html.value = (
            "<div><b>The runner's trace</b> (one row per step)</div>"
            + _table(cell.runner.trace.to_frame())
        )
        self.status_html.value = _message(
            f"Played {matrix.label(failure)} × {matrix.label(effect)}: "
            + ("as the matrix says." if matches else "NOT as the matrix says."),
            "ok" if matches else "error",
        )
        return cell

    # ---- helpers

    def _on_pick(self, _change: Any) -> None:
        try:
            self._show_choice()
        except Exception:  # an observer must not raise into ipywidgets either
            log.exception("FailureExplorer: showing the choice failed")

    def _show_choice(self) -> None:
        failure, effect = self.failure, self.effect
        if (failure, effect) in self.rows:
            self.status_html.value = _message(
                f"{matrix.label(failure)} × {matrix.label(effect)}: press Run to provoke it."
            )
        else:
            self.status_html.value = _message(self._not_a_cell(failure, effect), "error")

    def _not_a_cell(self, failure: str, effect: str) -> str:
        possible = [matrix.label(e) for f, e in self.rows if f == failure]
        return (
            f"{matrix.label(failure)} × {matrix.label(effect)} is not a cell of the failure "
            f"matrix (—): that failure cannot happen at that level. Try the effect "
            f"{' or '.join(possible) or 'of another failure'}."
        )

    @staticmethod
    def _render(cell: matrix.CellResult, row: dict[str, Any], matches: bool) -> str:
        result = cell.result
        outcome = "result: ok" if result.get("ok") else f"error: {result.get('error')}"
        lines = [
            outcome,
            f"handler calls: {cell.handler_calls}",
            *([f"writes landed: {cell.writes}"] if cell.writes is not None else []),
            f"attempts: {cell.attempts}",
            f"budget used: {cell.budget_used}",
            f"expected: {row['expected']} with {row['handler_calls']} handler call(s)",
            f"observed: {cell.observed} with {cell.handler_calls} handler call(s)",
            f"matches the matrix: {'yes' if matches else 'no'}",
        ]
        if row.get("note"):
            lines.append(f"why: {row['note']}")
        return (
            "<div><b>What the model sees</b></div>"
            + _pre(result_text(result))
            + "<div><b>What really happened</b></div>"
            + _pre("\n".join(lines))
            + "<div><b>Step by step</b></div>"
            + _pre(cell.text)
        )


# =============================================================================== ApprovalPanel


class ApprovalPanel(_Panel):
    """The approvals a runner is waiting for, one row each, with Approve and Deny.

    Approve runs exactly the call that asked for approval, once (``runner.approve``); Deny
    settles it as ``forbidden`` (``runner.deny``). The list refreshes after each decision;
    Refresh picks up approvals asked for since. After a decision, **Ask again** sends the same
    call once more, as the model would (``runner.call``), and shows what comes back: the kept
    result with ``replayed: true`` and no new handler call.

    Each answer counts the handler's real calls twice, each with its name: those made by this
    click (``handler calls by this approval/denial/call``: 1 for an approval that ran, 0 for a
    denial or a replay) and the tool's on this runner so far, every call included (the
    trace's ``call_counts()``), so a denial after an approved message reads 0, then 1.
    """

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.refresh_button = widgets.Button(description="Refresh", tooltip="Show the approvals waiting now")
        self.list_box = widgets.VBox()
        self.list_box.add_class("agentkit-approval-list")
        self.status_html = widgets.HTML()
        self.status_html.add_class("agentkit-approval-status")
        self.again_button = widgets.Button(
            description="Ask again", disabled=True,
            tooltip="Send the decided call once more, as the model would: it is replayed")
        self.again_html = widgets.HTML()
        self.again_html.add_class("agentkit-approval-again")
        self.last_result: dict[str, Any] | None = None
        self.last_call: tuple[str, dict[str, Any]] | None = None  # (tool, arguments) decided last
        self.history: list[tuple[str, str, dict[str, Any]]] = []
        self.pending: list[dict[str, Any]] = []
        super().__init__([self.refresh_button, self.list_box, self.status_html,
                          self.again_button, self.again_html])
        self.add_class("agentkit-approval-panel")
        self.refresh_button.on_click(lambda _button: self.refresh())
        self.again_button.on_click(lambda _button: self.ask_again())
        self.refresh()

    def __repr__(self) -> str:
        return f"ApprovalPanel(pending={len(self.pending)}, decided={len(self.history)})"

    @_safe("list the pending approvals")
    def refresh(self) -> list[dict[str, Any]]:
        """Read ``runner.pending_approvals()`` again and redraw the list."""
        self.pending = list(self.runner.pending_approvals())
        if not self.pending:
            empty = widgets.HTML(_message("No approvals waiting."))
            empty.add_class("agentkit-approval-empty")
            self.list_box.children = [empty]
        else:
            self.list_box.children = [self._row(record) for record in self.pending]
        return self.pending

    @_safe("approve")
    def approve(self, approval_id: str) -> dict[str, Any] | None:
        """What Approve does: run the approved call once and show its result."""
        return self._decide("approved", approval_id, self.runner.approve)

    @_safe("deny")
    def deny(self, approval_id: str) -> dict[str, Any] | None:
        """What Deny does: settle the approval as ``forbidden``; nothing runs."""
        return self._decide("denied", approval_id, self.runner.deny)

    @_safe("ask again")
    def ask_again(self) -> dict[str, Any] | None:
        """What Ask again does: the decided call sent once more through ``runner.call``, as
        the model would send it; returns what the model sees (or None before any decision)."""
        if self.last_call is None:
            self.again_html.value = _message("Approve or deny a call first.")
            return None
        tool, arguments = self.last_call
        before = self._calls(tool)
        result: dict[str, Any] = self.runner.call(tool, dict(arguments))
        outcome = "ok" if result.get("ok") else str(result.get("error"))
        if result.get("replayed"):
            outcome += ", replayed: the kept result; nothing ran"
        self.again_html.value = (
            _message(f"asked again: {outcome}")
            + _pre(f"{self._counted(tool, 'call', before)}\n{result_text(result)}"))
        self.refresh()
        return result

    # ---- helpers

    def _decide(self, decision: str, approval_id: str, act: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        tool = self._tool_of(approval_id)
        arguments = next((record.get("arguments") for record in self.pending
                          if record.get("approval_id") == approval_id), None)
        before = self._calls(tool)
        try:
            result = act(approval_id)
        finally:
            self.refresh()
        if tool and isinstance(arguments, dict):
            self.last_call = (tool, dict(arguments))
            self.again_button.disabled = False
            self.again_html.value = ""
        self.last_result = result
        self.history.append((decision, approval_id, result))
        outcome = "ok" if result.get("ok") else str(result.get("error"))
        counted = self._counted(tool, "denial" if decision == "denied" else "approval", before)
        lines = [f"{decision} {approval_id}: {outcome}", counted, result_text(result)]
        kind = "denied" if decision == "denied" else ("ok" if result.get("ok") else "error")
        self.status_html.value = _message(lines[0], kind) + _pre("\n".join(lines[1:]))
        return result

    def _calls(self, tool: str) -> int:
        """The tool's handler calls on this runner so far, every call included (0 without a tool)."""
        return int(self.runner.trace.call_counts().get(tool, 0)) if tool else 0

    def _counted(self, tool: str, by: str, before: int) -> str:
        """Two counts, each named: this click's handler calls, and the tool's in all."""
        now = self._calls(tool)
        return (f"handler calls by this {by}: {now - before}\n"
                f"{tool or 'the tool'}'s handler calls on this runner, every call so far: {now}")

    def _tool_of(self, approval_id: str) -> str:
        for record in self.pending:
            if record.get("approval_id") == approval_id:
                return str(record.get("tool", ""))
        approvals = getattr(self.runner, "approvals", None)
        found = approvals.get(approval_id) if approvals is not None else None
        return str(found.get("tool", "")) if found else ""

    def _row(self, record: dict[str, Any]) -> widgets.HBox:
        approval_id = str(record["approval_id"])
        text = widgets.HTML(
            f"<code>{html.escape(str(record.get('tool', '')))}</code> "
            f"<code>{html.escape(approval_text(record.get('arguments')))}</code> "
            f'<small style="white-space: nowrap">{html.escape(approval_id)}</small>'
        )
        text.layout = widgets.Layout(flex="1 1 auto", min_width="0")
        approve = widgets.Button(description="Approve", button_style="success",
                                 tooltip=f"Run this exact call once ({approval_id})")
        deny = widgets.Button(description="Deny", button_style="danger",
                              tooltip=f"Refuse it: nothing runs ({approval_id})")
        approve.on_click(lambda _button: self.approve(approval_id))
        deny.on_click(lambda _button: self.deny(approval_id))
        row = widgets.HBox([text, approve, deny])
        row.add_class("agentkit-approval-row")
        return row


# =============================================================================== AgentStepper


class AgentStepper(_Panel):
    """The agent loop of :func:`agentkit.demo.agent.run_agent`, one model turn per click of Step.

    Each turn asks ``model.next_action(question, history)``; a tool call goes through
    ``runner.call`` and the log shows the call and the result as the model saw it. The stop
    rules are run_agent's: the final answer; a tool call after ``max_steps`` of them
    (``max_steps``); a ``budget_exhausted`` result (``budget_exhausted``). Reset starts a fresh
    history on the same runner: a write sent again is the runner's business, so an idempotent
    write comes back with ``"replayed": true`` instead of running twice.
    """

    done: bool  # True once the run has stopped (final answer, step limit or budget)

    def __init__(self, model: Any, runner: Any, question: str, max_steps: int = 8) -> None:
        self.model = model
        self.runner = runner
        self.question = question
        self.max_steps = max_steps
        self.step_button = widgets.Button(description="Step", button_style="primary",
                                          tooltip="Ask the model for its next action")
        self.reset_button = widgets.Button(description="Reset", tooltip="Start the run over")
        self.status_html = widgets.HTML()
        self.status_html.add_class("agentkit-stepper-status")
        self.log_html = widgets.HTML()
        self.log_html.add_class("agentkit-stepper-log")
        super().__init__([
            widgets.HBox([self.step_button, self.reset_button]),
            self.status_html,
            self.log_html,
        ])
        self.add_class("agentkit-agent-stepper")
        self.step_button.on_click(lambda _button: self.step())
        self.reset_button.on_click(lambda _button: self.reset())
        self._start()

    def __repr__(self) -> str:
        return (
            f"AgentStepper(question={self.question!r}, steps={len(self.transcript.steps)}, "
            f"done={self.done})"
        )

    @property
    def transcript_steps(self) -> list[Step]:
        return self.transcript.steps

    @property
    def final_answer(self) -> str | None:
        return self.transcript.final_answer

    @property
    def stop_reason(self) -> str | None:
        """One of ``agent.STOP_REASONS`` once done, else None."""
        return self.transcript.stop_reason if self.done else None

    @_safe("take the next step")
    def step(self) -> Step | FinalAnswer | None:
        """What Step does: one turn of the loop. Returns the new Step, the FinalAnswer, or None
        when the run stopped (or was already over)."""
        if self.done:
            self.status_html.value = _message("The run is over: press Reset to start again.")
            return None
        steps_before = len(self.transcript.steps)
        finished = take_turn(self.model, self.transcript, self.runner.call, self.max_steps)
        outcome: Step | FinalAnswer | None = None
        if len(self.transcript.steps) > steps_before:
            outcome = self.transcript.steps[-1]
            self._lines.append(_step_entry(outcome))
        elif self.transcript.stop_reason == "final_answer":
            outcome = FinalAnswer(self.transcript.final_answer or "", self.transcript.citations)
        if finished:
            self.done = True
            self.step_button.disabled = True
            if self.transcript.final_answer is not None:
                self._lines.append(_line(f"Final answer: {self.transcript.final_answer}"))
            else:
                self._lines.append(_line(f"Stopped: {self.transcript.stop_reason}"))
        self._show()
        return outcome

    @_safe("reset the run")
    def reset(self) -> None:
        """What Reset does: forget the history and start over (the runner, its store and its
        budget are kept)."""
        self._start()

    # ---- helpers

    def _start(self) -> None:
        self.transcript = Transcript(self.question)
        self._lines: list[str] = []
        self.done = False
        self.step_button.disabled = False
        self._show()

    def _show(self) -> None:
        self.log_html.value = "".join([_line(f"Question: {self.question}"), *self._lines])
        steps = len(self.transcript.steps)
        if self.done:
            text = f"Done after {steps} tool call(s): {self.transcript.stop_reason}."
        else:
            text = f"{steps} tool call(s) so far; press Step for the model's next action."
        self.status_html.value = _message(text, "ok" if self.done else "info")

    def _after_error(self) -> None:
        self.step_button.disabled = self.done


_LINE = '<div class="agentkit-step-line" style="margin: 0.2em 0">{}</div>'


#: The data preview of a stepper line: short enough that a step fits on one line of the page.
STEP_PREVIEW_CHARS = 40


def _line(text: str) -> str:
    return _LINE.format(html.escape(text))


def _step_entry(step: Step) -> str:
    """One step: its short readable line (tool, arguments, ok or the error, a one-line preview
    of the data), and behind a toggle (a ``<details>``) the full call and result as JSON, with
    ``data`` (a string for the model) laid out on its own instead of escaped inside it."""
    call = {"name": step.tool_call.name, "arguments": step.tool_call.arguments}
    result = step.result
    parts = [f"call: {json_text(call, indent=2)}"]
    if isinstance(result, dict) and isinstance(result.get("data"), str):
        rest = {key: value for key, value in result.items() if key != "data"}
        try:
            data = json_text(json.loads(result["data"]), indent=2)
        except ValueError:
            data = result["data"]
        parts += [f"result, data aside: {json_text(rest, indent=2)}",
                  f"data (the model receives it as one string):\n{data}"]
    else:
        parts.append(f"result: {json_text(result, indent=2)}")
    return (
        '<details class="agentkit-step" style="margin: 0.2em 0">'
        '<summary class="agentkit-step-line" style="cursor: pointer">'
        f"{html.escape(step.line(STEP_PREVIEW_CHARS))}</summary>"
        f'<div class="agentkit-step-json">{_pre(chr(10).join(parts))}</div></details>'
    )
