"""The failure cases of notebook 08, for any framework: the tools, their counters, the model.

Each :class:`Bench` holds one case's tool twice over: as agentkit registers it (a
:class:`~agentkit.ToolRunner` over a registry) and as the handler a framework would run by
itself. Both count the handler's **real** calls.
:class:`ScriptedTurns` is the model's side, the same for every framework and both ways: it
sends the case's calls, and asks once more after a failure it is told to retry — as a model
reading "please try again" does. The framework drivers (in the tests and in notebook 08) feed
it the tool outputs their own fake model sees.

No framework is imported here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.policy.budget import Budget
from agentkit.policy.runner import ToolRunner

__all__ = ["CASES", "TIMEOUT_SECONDS", "Bench", "Case", "ScriptedTurns", "wants_retry"]

#: The wall-clock limit of the timed-out write, in agentkit and in each framework (seconds).
TIMEOUT_SECONDS = 0.2
#: The longest a timed-out write stays blocked if nobody calls :meth:`Bench.close`.
MAX_BLOCK_SECONDS = 30.0


@dataclass(frozen=True)
class Case:
    """One row of the table: the tool the model calls, with what, how often, and who decides."""

    name: str
    tool: str
    arguments: tuple[dict[str, Any], ...]  # one call per item, all in one model turn
    repeats: int = 1  # how many times the model sends the turn whatever it reads
    decision: str = ""  # "approve" / "reject" for the irreversible write
    budget: int | None = None  # the task's handler attempts through agentkit (None: unlimited)


CASES: tuple[Case, ...] = (
    Case("repeated write", "save_note", ({"text": "hello"},), repeats=2),
    Case("write commits, then times out", "save_note", ({"text": "hello"},)),
    Case("transient read", "search", ({"query": "retries"},)),
    # Two payments in one turn: LangGraph re-runs the whole tool node after each resume.
    Case("approval approved (2 payments)", "send_payment",
         ({"to": "ada", "cents": 500}, {"to": "bob", "cents": 700}), decision="approve"),
    Case("approval rejected", "send_payment", ({"to": "ada", "cents": 500},), decision="reject"),
    Case("budget spent", "search", ({"query": "retries"},), budget=0),
)


def wants_retry(output: str) -> bool:
    """Whether the scripted model asks again after reading ``output``: an agentkit result
    that says ``retryable: true``, or a framework's error text (which invites a retry)."""
    try:
        value = json.loads(output)
    except ValueError:
        value = None
    if isinstance(value, dict) and "ok" in value:
        return not value["ok"] and bool(value.get("retryable"))
    text = output.lower()
    return any(word in text for word in ("error", "timed out", "timeout", "try again"))


@dataclass
class ScriptedTurns:
    """The model's turns for one case: ``next(last_output)`` is the next tool call, or None."""

    case: Case
    seen: list[str] = field(default_factory=list)  # every tool output the model read
    _left: int = 0
    _retried: bool = False
    _number: int = 0

    def __post_init__(self) -> None:
        self._left = self.case.repeats

    def next(self, outputs: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
        """The next turn's calls, each ``(call_id, tool, arguments)``; empty when done.

        ``outputs`` are all the tool outputs in the conversation so far, oldest first."""
        new = outputs[len(self.seen):]
        self.seen.extend(new)
        if new and not self._retried and any(wants_retry(text) for text in new):
            self._retried = True
            return self._emit()
        if self._left:
            self._left -= 1
            return self._emit()
        return []

    def _emit(self) -> list[tuple[str, str, dict[str, Any]]]:
        calls = []
        for arguments in self.case.arguments:
            self._number += 1
            calls.append((f"call_{self._number}", self.case.tool, dict(arguments)))
        return calls


class Bench:
    """One case's tool: registered with agentkit (:attr:`registry`, :attr:`runner`), and as
    plain methods (:meth:`search`, :meth:`save_note` or its coroutine :meth:`asave_note`,
    :meth:`send_payment`) for a framework to run by itself.

    ``calls`` counts the handler's real calls either way; ``ledger`` holds what the writes
    left behind (a note or a payment per real write). Call :meth:`close` at the end: it
    releases a write still blocked, so no thread stays parked.
    """

    def __init__(self, case: Case) -> None:
        self.case = case
        self.ledger: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._calls = 0
        self._release = threading.Event()
        budget = Budget(case.budget)
        self.registry = ToolRegistry()
        self.registry.register(self._spec())
        self.runner = ToolRunner(self.registry, budget=budget, sleep=lambda _seconds: None)

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    # ------------------------------------------------------------------ the handlers

    def _count(self) -> int:
        with self._lock:
            self._calls += 1
            return self._calls

    def search(self, query: str) -> str:
        """Search the course notes for ``query``."""
        if self._count() == 1 and self.case.name == "transient read":
            raise ConnectionError("the search service dropped the connection")
        return f"3 notes mention {query!r}"

    def save_note(self, text: str) -> str:
        """Save a note with ``text``; returns the note's id."""
        self._count()
        with self._lock:
            self.ledger.append({"text": text})
            receipt = f"note-{len(self.ledger)}"
        if self.case.name == "write commits, then times out":
            self._release.wait(MAX_BLOCK_SECONDS)  # the answer never comes back in time
        return receipt

    def send_payment(self, to: str, cents: int) -> str:
        """Send ``cents`` to ``to``. Irreversible: money that left cannot be called back."""
        self._count()
        with self._lock:
            self.ledger.append({"to": to, "cents": cents})
        # The receipt names the payment, not its place in the ledger: LangGraph's stock
        # ToolNode (the "alone" runs) settles a node's calls on parallel threads, so two
        # payments may land either way. (The face's node runs them in the model's order.)
        return f"paid {cents} cents to {to}"

    async def asave_note(self, text: str) -> str:
        """:meth:`save_note` as a coroutine, for frameworks whose timeout needs one."""
        self._count()
        with self._lock:
            self.ledger.append({"text": text})
            receipt = f"note-{len(self.ledger)}"
        if self.case.name == "write commits, then times out":
            await asyncio.Event().wait()  # cancelled by the framework's timeout
        return receipt

    def rejected(self) -> str:
        """What a rejected payment returns in a framework that leaves the text to the tool."""
        return "The person rejected this payment."

    def note_status(self, text: str) -> str | None:
        """The status lookup: the receipt when a note with ``text`` exists, else None."""
        with self._lock:
            for number, entry in enumerate(self.ledger, 1):
                if entry.get("text") == text:
                    return f"note-{number}"
        return None

    def close(self) -> None:
        self._release.set()

    # ------------------------------------------------------------------ agentkit's spec

    def _spec(self) -> ToolSpec:
        tool = self.case.tool
        if tool == "search":
            return ToolSpec("search", "Search the course notes.", Effect.READ, 1.0, 3, 2000,
                            self.search)
        if tool == "save_note":
            return ToolSpec("save_note", "Save a note; returns its id.", Effect.REVERSIBLE_WRITE,
                            TIMEOUT_SECONDS, 2, 2000, self.save_note,
                            status_lookup=self.note_status)
        return ToolSpec("send_payment", "Send money. Irreversible.", Effect.IRREVERSIBLE_WRITE,
                        1.0, 1, 2000, self.send_payment)
