"""The agent loop: ask the model, run its tool call through the runner, repeat.

The loop is deliberately dumb. Everything that makes a call safe (schema, authorization,
limits, retries, idempotency, approval, budget) lives below it in the :class:`ToolRunner`,
so the loop cannot forget any of it. What the loop owns is when to stop: the model's final
answer, a step limit, or a spent budget. It never raises for anything the model does.

``run_baseline`` runs the same model against the old ``dispatch_tool`` so the chapter can show
that moving to the registry did not change the happy path: compare ``Transcript.signature()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentkit.boundary.canonical import json_text
from agentkit.boundary.errors import ErrorCode
from agentkit.boundary.redaction import render_value
from agentkit.demo import baseline
from agentkit.demo.fake_model import FinalAnswer, ToolCall

if TYPE_CHECKING:
    import pandas

    from agentkit.policy.runner import ToolRunner

STOP_REASONS = ("final_answer", "max_steps", "budget_exhausted")
PREVIEW_CHARS = 60


class Model(Protocol):
    def next_action(self, question: str, history: list[tuple[ToolCall, Any]]) -> ToolCall | FinalAnswer: ...


@dataclass(frozen=True)
class Step:
    """One tool call and its result exactly as the model saw it."""

    number: int
    tool_call: ToolCall
    result: Any

    def line(self, preview_chars: int = PREVIEW_CHARS) -> str:
        """The step as one short readable line: ``N. tool({arguments}) -> ok: preview…``,
        the data cut to about ``preview_chars`` characters."""
        call = self.tool_call
        arguments = _short(json_text(call.arguments), 80)
        return f"{self.number}. {call.name}({arguments}) -> {_outcome(self.result, preview_chars)}"


@dataclass
class Transcript:
    """What happened in one run. ``stop_reason`` is one of :data:`STOP_REASONS`."""

    question: str
    steps: list[Step] = field(default_factory=list)
    final_answer: str | None = None
    stop_reason: str = "final_answer"
    citations: tuple[str, ...] = ()

    def signature(self) -> tuple[tuple[tuple[str, str], ...], str | None]:
        """What must not change when the executor changes: each call's tool name and
        canonical JSON arguments, in order, and the final answer. Result shapes are left out
        on purpose: the registry returns ``{"ok", "data"}`` where the baseline returned raw
        values, and that difference is the point of the chapter."""
        calls = tuple(
            (s.tool_call.name, json_text(s.tool_call.arguments, canonical=True)) for s in self.steps
        )
        return calls, self.final_answer

    def to_text(self) -> str:
        """Readable and deterministic: one line per step, then the answer or the stop reason."""
        lines = [f"Question: {self.question}"]
        lines += [step.line() for step in self.steps]
        if self.final_answer is not None:
            lines.append(f"Answer: {self.final_answer}")
        else:
            lines.append(f"Stopped: {self.stop_reason}")
        return "\n".join(lines)

    def to_frame(self) -> pandas.DataFrame:
        """One row per step: step, tool, arguments (JSON text), ok, error, data (a
        :func:`preview` of about 60 characters), attempts, replayed. Baseline steps have no
        attempts/replayed (None)."""
        import pandas as pd

        rows = []
        for step in self.steps:
            ok, error, data = _parts(step.result)
            result = step.result if isinstance(step.result, dict) else {}
            rows.append({
                "step": step.number,
                "tool": step.tool_call.name,
                "arguments": json_text(step.tool_call.arguments),
                "ok": ok,
                "error": error,
                "data": None if data is None else preview(data),
                "attempts": result.get("attempts"),
                "replayed": result.get("replayed"),
            })
        columns = ["step", "tool", "arguments", "ok", "error", "data", "attempts", "replayed"]
        frame: pandas.DataFrame = pd.DataFrame(rows, columns=columns)  # see Trace.to_frame
        return frame


def run_agent(model: Model, runner: ToolRunner, question: str, max_steps: int = 8) -> Transcript:
    """Run ``model`` on ``question`` with every tool call going through ``runner.call``.

    ``max_steps`` caps the tool calls: after that many, the model is asked once more and only
    a final answer is accepted; another tool call ends the run with ``max_steps``. A result
    ``budget_exhausted`` ends it at once: nothing more can run for this task.
    """
    return _loop(model, question, max_steps, runner.call)


def run_baseline(
    model: Model,
    question: str,
    max_steps: int = 8,
    dispatch: Callable[[str, Any], Any] = baseline.dispatch_tool,
) -> Transcript:
    """The same loop over the pre-registry ``dispatch_tool`` (raw values, no boundary).

    Faithful to the "before" code: an exception from a tool (an unknown document id, say)
    propagates out of this function and ends the run.
    """
    return _loop(model, question, max_steps, dispatch)


def _loop(model: Model, question: str, max_steps: int, execute: Callable[[str, Any], Any]) -> Transcript:
    transcript = Transcript(question)
    while not take_turn(model, transcript, execute, max_steps):
        pass
    return transcript


def take_turn(
    model: Model, transcript: Transcript, execute: Callable[[str, Any], Any], max_steps: int = 8
) -> bool:
    """One turn of the loop: ask the model, run its tool call, record the step.

    Returns True when the run is over, with ``transcript.stop_reason`` saying why. The agent
    stepper widget calls this once per click, so stepping and ``run_agent`` cannot differ.
    """
    history = [(step.tool_call, step.result) for step in transcript.steps]
    action = model.next_action(transcript.question, history)
    if isinstance(action, FinalAnswer):
        transcript.final_answer = action.text
        transcript.citations = action.citations
        transcript.stop_reason = "final_answer"
        return True
    if not isinstance(action, ToolCall):
        raise TypeError(f"next_action returned {type(action).__name__}, not ToolCall or FinalAnswer")
    if len(transcript.steps) >= max_steps:
        transcript.stop_reason = "max_steps"
        return True
    result = execute(action.name, action.arguments)
    transcript.steps.append(Step(len(transcript.steps) + 1, action, result))
    if isinstance(result, dict) and result.get("error") == ErrorCode.BUDGET_EXHAUSTED.value:
        transcript.stop_reason = "budget_exhausted"
        return True
    return False


# --------------------------------------------------------------------------- rendering


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at the last word boundary
    before the limit (mid-word only when a word fills more than half of it), then ``…``."""
    text = text.replace("\n", " ")
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    boundary = max(head.rfind(" "), head.rfind(","))
    if boundary >= limit // 2:
        head = head[: boundary + 1]
    return head.rstrip() + "…"


def _short(text: str, limit: int) -> str:
    text = text.replace("\n", "\\n")
    if len(text) <= limit:
        return text
    return f"{preview(text, limit)} ({len(text)} chars)"


def _parts(result: Any) -> tuple[bool, str | None, str | None]:
    """``(ok, error, data text)`` of a boundary result or a raw baseline value."""
    if isinstance(result, dict) and isinstance(result.get("ok"), bool):
        if result["ok"]:
            return True, None, str(result.get("data", ""))
        return False, str(result.get("error")), None
    if isinstance(result, dict) and "error" in result:
        return False, str(result["error"]), None
    return True, None, render_value(result)


def _outcome(result: Any, preview_chars: int = PREVIEW_CHARS) -> str:
    ok, error, data = _parts(result)
    notes = []
    if isinstance(result, dict):
        if result.get("replayed"):
            notes.append("replayed")
        if isinstance(result.get("attempts"), int) and result["attempts"] != 1:
            notes.append(f"{result['attempts']} attempts")
        if result.get("truncated"):
            notes.append("truncated")
    suffix = f" ({', '.join(notes)})" if notes else ""
    if ok:
        return f"ok{suffix}: {_short(data or '', preview_chars)}"
    text = f"{error}{suffix}"
    if isinstance(result, dict) and result.get("detail"):
        text += f": {result['detail']}"
    if isinstance(result, dict) and result.get("approval_id"):
        text += f" [{result['approval_id']}]"
    return text
