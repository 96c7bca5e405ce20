"""A fake model: deterministic tool calls, so agent behaviour can be tested like any code.

A real model is slow, costs money and answers differently each run; none of that helps a test
of the *executor*. ``FakeModel`` is a pure function of the question and the history of
(tool call, result) pairs: the same inputs always give the same next action, tool-call ids
included (``call_1``, ``call_2``, … by position). Its default policy is the chapter's happy
path: search → read the top hit → (optionally save a brief) → answer with a quote and a
citation. When a step fails it stops and says which tool failed with which code, as a
well-behaved model should.

The misbehaviour modes are the mistakes real models make, each one a row of the failure
matrix the boundary must absorb:

=====================  =========================================================
``"repeat"``           sends every request twice in a row (and saves a brief, so a
                       write is repeated too)
``"loop"``             searches the same query forever; only a step limit or the
                       budget ends it
``"oversized"``        sends a 100,000-character query
``"unknown_tool"``     calls ``web_search``, which no registry here has
``"missing_argument"`` calls ``search_local_sources`` without ``query``
=====================  =========================================================

The model reads both result shapes: the boundary's ``{"ok", "data" | "error"}`` dict and the
raw values of ``baseline.dispatch_tool``, so one model can drive the "before" and "after".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentkit.demo.corpus import plain_text

MISBEHAVIOURS = ("repeat", "loop", "oversized", "unknown_tool", "missing_argument")
OVERSIZED_CHARS = 100_000
UNKNOWN_TOOL = "web_search"


@dataclass(frozen=True)
class ToolCall:
    """One tool call as a model emits it. ``arguments`` is whatever the model sent (usually a
    dict; a misbehaving model may send anything)."""

    id: str
    name: str
    arguments: Any = field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        """The common function-calling shape: arguments travel as JSON *text*."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }

    @classmethod
    def from_openai(cls, call: dict[str, Any]) -> ToolCall:
        function = call["function"]
        arguments = function.get("arguments") or "{}"
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        return cls(call["id"], function["name"], arguments)


@dataclass(frozen=True)
class FinalAnswer:
    """The model's last word; ``citations`` are document ids, also cited as ``[doc:<id>]``."""

    text: str
    citations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "citations", tuple(self.citations))


Action = ToolCall | FinalAnswer
History = Sequence[tuple[ToolCall, Any]]


# --------------------------------------------------------------------------- reading results


def read_result(result: Any) -> tuple[bool, Any, str | None]:
    """``(ok, payload, error)`` from either result shape.

    Boundary result: ``data`` parsed as JSON when it is JSON, else kept as text. Baseline:
    a dict with an ``"error"`` key is a failure, anything else is the payload itself.
    """
    if isinstance(result, dict) and isinstance(result.get("ok"), bool):
        if not result["ok"]:
            return False, None, str(result.get("error"))
        data = result.get("data", "")
        try:
            return True, json.loads(data), None
        except (TypeError, ValueError):
            return True, data, None  # plain text, or JSON cut by truncation
    if isinstance(result, dict) and "error" in result:
        return False, None, str(result["error"])
    return True, result, None


def _field(payload: Any, name: str) -> str:
    """A str field of a dict payload, or pulled out of JSON text that truncation cut short."""
    if isinstance(payload, dict):
        value = payload.get(name)
        return value if isinstance(value, str) else ""
    if isinstance(payload, list):
        return _field(payload[0], name) if payload else ""
    if isinstance(payload, str):
        match = re.search(rf'"{name}":\s*"((?:[^"\\]|\\.)*)', payload)
        if match:
            try:
                return str(json.loads(f'"{match.group(1)}"'))
            except ValueError:
                return match.group(1)
    return ""


def first_sentence(markdown: str) -> str:
    """The first sentence of a note's prose (headings skipped)."""
    text = plain_text(markdown)
    match = re.match(r"(.+?[.!?])(?=\s|$)", text)
    return match.group(1) if match else text[:200]


# --------------------------------------------------------------------------- the model


class FakeModel:
    """Deterministic stand-in for an LLM; see the module docstring for its policy and modes."""

    def __init__(
        self,
        *,
        save_brief: bool = False,
        misbehave: str | None = None,
        limit: int = 3,
    ) -> None:
        if misbehave is not None and misbehave not in MISBEHAVIOURS:
            raise ValueError(f"misbehave must be one of {', '.join(MISBEHAVIOURS)} or None")
        self.save_brief = save_brief or misbehave == "repeat"
        self.misbehave = misbehave
        self.limit = limit
        self._script: tuple[Action, ...] | None = None

    @classmethod
    def scripted(cls, actions: Iterable[ToolCall | FinalAnswer | dict[str, Any]]) -> FakeModel:
        """A model that sends exactly ``actions`` in order (whatever the results), then
        finishes. Dicts are ``{"name", "arguments"}`` or the OpenAI tool-call shape."""
        model = cls()
        model._script = tuple(_as_action(a, n) for n, a in enumerate(actions, start=1))
        return model

    def __repr__(self) -> str:
        if self._script is not None:
            return f"FakeModel.scripted({len(self._script)} actions)"
        return f"FakeModel(save_brief={self.save_brief}, misbehave={self.misbehave!r})"

    def next_action(self, question: str, history: History) -> Action:
        """The next tool call or the final answer, from the question and the history alone."""
        call_id = f"call_{len(history) + 1}"
        if self._script is not None:
            if len(history) < len(self._script):
                return self._script[len(history)]
            return FinalAnswer(f"Scripted run finished after {len(history)} tool call(s).")
        if self.misbehave == "loop":
            return self._search(call_id, question)
        if not history:
            return self._first(call_id, question)
        if self.misbehave == "repeat" and not _is_repeat(history):
            last = history[-1][0]
            return ToolCall(call_id, last.name, last.arguments)
        return self._after(call_id, history)

    # ---- the policy

    def _search(self, call_id: str, query: str) -> ToolCall:
        return ToolCall(call_id, "search_local_sources", {"query": query, "limit": self.limit})

    def _first(self, call_id: str, question: str) -> ToolCall:
        if self.misbehave == "oversized":
            padded = (question + " ") * (OVERSIZED_CHARS // (len(question) + 1) + 1)
            return self._search(call_id, padded[:OVERSIZED_CHARS])
        if self.misbehave == "unknown_tool":
            return ToolCall(call_id, UNKNOWN_TOOL, {"query": question})
        if self.misbehave == "missing_argument":
            return ToolCall(call_id, "search_local_sources", {"limit": self.limit})
        return self._search(call_id, question)

    def _after(self, call_id: str, history: History) -> Action:
        call, result = history[-1]
        ok, payload, error = read_result(result)
        if not ok:
            return FinalAnswer(f"I could not finish: the tool {call.name} failed with {error}.")
        if call.name == "search_local_sources":
            doc_id = _field(payload, "id")
            if not doc_id:
                return FinalAnswer("I found no note about that in the local sources.")
            return ToolCall(call_id, "get_document", {"doc_id": doc_id})
        if call.name == "get_document":
            doc_id, title, sentence = _document(call, payload)
            if self.save_brief:
                content = f"# {title or doc_id}\n\n{sentence}\n\nSource: [doc:{doc_id}]\n"
                arguments = {"path": f"briefs/{doc_id}.md", "content": content}
                return ToolCall(call_id, "save_brief", arguments)
            return _answer(doc_id, sentence)
        if call.name == "save_brief":
            for earlier, earlier_result in reversed(history):
                ok, payload, _ = read_result(earlier_result)
                if earlier.name == "get_document" and ok:
                    doc_id, _, sentence = _document(earlier, payload)
                    return _answer(doc_id, sentence, saved=call.arguments.get("path"))
        return FinalAnswer(f"Done: {call.name} succeeded.")


def _document(call: ToolCall, payload: Any) -> tuple[str, str, str]:
    doc_id = _field(payload, "id") or str(call.arguments.get("doc_id", ""))
    return doc_id, _field(payload, "title"), first_sentence(_field(payload, "text"))


def _answer(doc_id: str, sentence: str, saved: str | None = None) -> FinalAnswer:
    text = f'"{sentence}" [doc:{doc_id}]'
    if saved:
        text += f" Brief saved to {saved}."
    return FinalAnswer(text, (doc_id,))


def _is_repeat(history: History) -> bool:
    """Was the last call already a repeat of the one before it?"""
    if len(history) < 2:
        return False
    (last, _), (before, _) = history[-1], history[-2]
    return (last.name, last.arguments) == (before.name, before.arguments)


def _as_action(action: Any, number: int) -> Action:
    if isinstance(action, (ToolCall, FinalAnswer)):
        return action
    if isinstance(action, dict) and "function" in action:
        return ToolCall.from_openai({"id": f"call_{number}", **action})
    if isinstance(action, dict) and "name" in action:
        return ToolCall(f"call_{number}", action["name"], action.get("arguments", {}))
    raise TypeError("a scripted action is a ToolCall, a FinalAnswer or a {'name', 'arguments'} dict")
