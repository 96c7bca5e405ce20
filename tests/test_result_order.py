"""A read's result is stamped in place (agentkit/policy/steps.py, ``Policy.call``): ``attempts``
and ``replayed`` are written into the boundary's fresh result dict instead of through
``finish()``. For every result a read can end with, through ``call`` and ``acall``, the keys
come in the order ``finish()`` gives them (docs/design.md#result-shape), and every call returns
a fresh dict that no later call shares."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentkit import Budget, InvalidInput, ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.results import finish

TIMEOUT = 5.0  # for handlers that answer at once
SHORT = 0.05  # the boundary's timeout, for a handler that does not answer until released
SECRET = "sk-" + "x" * 24  # shaped like an API key: the default redactor hides it

OK = ["ok", "data", "attempts", "replayed"]
FAILED = ["ok", "error", "retryable", "attempts", "replayed"]
DETAILED = ["ok", "error", "retryable", "detail", "attempts", "replayed"]


class Case:
    """One way a read ends: its tool's handler, the arguments sent, and what comes back."""

    def __init__(self, name: str, body: Callable[[str], Any] | None, keys: list[str],
                 error: str = "", *, arguments: Any = None, tool: str = "read",
                 timeout: float = TIMEOUT, attempts: int = 1, max_output_chars: int = 100,
                 budget: int | None = None, scopes: frozenset[str] = frozenset(),
                 holds_slot: bool = False, blocks: bool = False) -> None:
        self.name = name
        self.body = body
        self.keys = keys
        self.error = error
        self.arguments = {"query": "q"} if arguments is None else arguments
        self.tool = tool
        self.timeout = timeout
        self.attempts = attempts
        self.max_output_chars = max_output_chars
        self.budget = budget
        self.scopes = scopes
        self.holds_slot = holds_slot  # another call holds the tool's one slot first
        self.blocks = blocks  # the handler waits for the test's release

    def __repr__(self) -> str:
        return self.name


def _raise(exc: BaseException) -> Callable[[str], Any]:
    def body(query: str) -> Any:
        raise exc

    return body


CASES = [
    Case("ok", lambda query: "found", OK),
    Case("ok_truncated", lambda query: "a" * 500,
         ["ok", "data", "truncated", "original_chars", "attempts", "replayed"]),
    Case("ok_redacted", lambda query: f"key {SECRET} here",
         ["ok", "data", "redactions", "attempts", "replayed"], max_output_chars=1_000),
    Case("ok_redacted_and_truncated", lambda query: f"key {SECRET} " + "b" * 500,
         ["ok", "data", "truncated", "original_chars", "redactions", "attempts", "replayed"]),
    Case("invalid_input", _raise(InvalidInput("no note has this id: search first")), DETAILED,
         "invalid_arguments"),
    Case("invalid_schema", lambda query: "found", DETAILED, "invalid_arguments",
         arguments={"query": 5}),
    Case("forbidden_by_handler", _raise(PermissionError("no")), FAILED, "forbidden"),
    Case("forbidden_by_scope", lambda query: "found", FAILED, "forbidden",
         scopes=frozenset({"admin"})),
    Case("unknown_tool", lambda query: "found", FAILED, "unknown_tool", tool="nope"),
    Case("transient_failure", _raise(ConnectionError("dropped")), FAILED, "transient_failure",
         attempts=2),
    Case("outcome_unknown", None, FAILED, "outcome_unknown", timeout=SHORT, blocks=True),
    Case("busy", None, FAILED, "busy", timeout=SHORT, blocks=True, holds_slot=True),
    Case("budget_exhausted", lambda query: "found", FAILED, "budget_exhausted", budget=0),
    Case("tool_failure", _raise(RuntimeError("bug")), FAILED, "tool_failure"),
]
# what runs on the event loop itself (acall of a coroutine handler): every case that does not
# block its handler
ON_LOOP = [case for case in CASES if not case.blocks]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # nothing stays hung, whatever the test did


def _runner(case: Case, release: threading.Event, coroutine: bool) -> ToolRunner:
    body = case.body

    def sync_handler(query: str) -> Any:
        if body is None:
            release.wait(10)
            return "late"
        return body(query)

    async def async_handler(query: str) -> Any:
        assert body is not None
        return body(query)

    spec = ToolSpec("read", "Read something.", "read", case.timeout, case.attempts,
                    case.max_output_chars, async_handler if coroutine else sync_handler,
                    required_scopes=case.scopes,
                    max_concurrency=1 if case.holds_slot else None)
    budget = None if case.budget is None else Budget(case.budget)
    runner = ToolRunner(ToolRegistry([spec]), budget=budget, sleep=lambda seconds: None)
    if case.holds_slot:  # a first call times out and keeps the one slot while it runs
        assert runner.call("read", {"query": "holder"})["error"] == "outcome_unknown"
    return runner


def _call(how: str, runner: ToolRunner, case: Case) -> dict[str, Any]:
    if how == "call":
        return runner.call(case.tool, case.arguments)
    return asyncio.run(runner.acall(case.tool, case.arguments))


def _finished(result: dict[str, Any]) -> dict[str, Any]:
    bare = {k: v for k, v in result.items() if k not in ("attempts", "replayed")}
    return finish(bare, result["attempts"], False, "read")


def _check(result: dict[str, Any], case: Case) -> None:
    assert result.get("error", "ok") == (case.error or "ok")
    assert list(result) == list(_finished(result))
    assert result == _finished(result)
    assert list(result) == case.keys
    assert result["replayed"] is False


def _check_fresh(how: str, runner: ToolRunner, case: Case) -> None:
    first = _call(how, runner, case)
    _check(first, case)
    kept = copy.deepcopy(first)
    first.clear()  # the model's host may do anything with what it was given
    first["junk"] = True
    second = _call(how, runner, case)
    assert second is not first
    _check(second, case)
    assert second == kept and list(second) == list(kept)
    third = _call(how, runner, case)
    assert third is not second and third == second


@pytest.mark.parametrize("how", ["call", "acall"])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_read_s_result_keys_come_in_finish_s_order_and_each_call_gets_a_fresh_dict(
    case: Case, how: str, release: threading.Event
) -> None:
    runner = _runner(case, release, coroutine=False)
    _check_fresh(how, runner, case)


@pytest.mark.parametrize("case", ON_LOOP, ids=repr)
def test_a_coroutine_read_s_result_keys_come_in_finish_s_order_and_are_fresh(
    case: Case, release: threading.Event
) -> None:
    runner = _runner(case, release, coroutine=True)
    _check_fresh("acall", runner, case)


def test_the_invalid_input_detail_is_the_handler_s_message() -> None:
    case = next(c for c in CASES if c.name == "invalid_input")
    runner = _runner(case, threading.Event(), coroutine=False)
    assert runner.call("read", {"query": "q"}) == {
        "ok": False, "error": "invalid_arguments", "retryable": False,
        "detail": "no note has this id: search first", "attempts": 1, "replayed": False}


def test_a_result_an_observer_was_given_is_not_the_next_call_s_result() -> None:
    """The call_ended event carries the result the model sees; changing it in the observer
    after the call changes no later result."""
    case = CASES[0]
    runner = _runner(case, threading.Event(), coroutine=False)
    ended: list[Any] = []
    runner.add_observer(lambda e: ended.append(e.result) if e.kind == "call_ended" else None)
    first = runner.call("read", {"query": "q"})
    assert ended[0] is first
    ended[0]["data"] = "changed"
    second = runner.call("read", {"query": "q"})
    assert second == {"ok": True, "data": "found", "attempts": 1, "replayed": False}
    assert ended[1] is second and second is not first
