"""InvalidInput: a handler's "your input was wrong". The boundary answers invalid_arguments with
the handler's own message as ``detail`` (bounded, control characters removed, logged), and the
runner never asks again: real handler call counts at every side-effect level."""

from __future__ import annotations

import logging

import pytest

from agentkit import (
    CallContext,
    Effect,
    InvalidInput,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    invoke_tool,
)
from agentkit.boundary.errors import (
    MAX_DETAIL_CHARS,
    classify_exception,
    handler_failure,
    safe_detail,
)
from agentkit.demo import faults
from agentkit.policy.backoff import no_wait


def lookup_order(order_id: str) -> dict:
    """Look an order up."""
    raise InvalidInput("no order has this id: list the orders first")


def spec_of(effect: Effect, handler=lookup_order, **extra) -> tuple[ToolSpec, faults.Fault]:
    counted = faults.count_calls(handler)
    attempts = 1 if effect is Effect.IRREVERSIBLE_WRITE else 3
    return ToolSpec("order", "An order tool.", effect, 2.0, attempts, 300, counted, **extra), counted


def test_the_boundary_maps_it_to_invalid_arguments_with_the_message_as_detail(caplog):
    spec, counted = spec_of(Effect.READ)
    with caplog.at_level(logging.INFO, logger="agentkit"):
        result = invoke_tool(ToolRegistry([spec]), "order", {"order_id": "o-9"})
    assert result == {"ok": False, "error": "invalid_arguments", "retryable": False,
                      "detail": "no order has this id: list the orders first"}
    assert counted.calls == 1
    assert "InvalidInput" in caplog.text  # the operator sees the exception


@pytest.mark.parametrize("effect", [Effect.READ, Effect.REVERSIBLE_WRITE])
def test_the_runner_never_asks_again(effect):
    spec, counted = spec_of(effect)
    runner = ToolRunner(ToolRegistry([spec]), sleep=no_wait)
    result = runner.call("order", {"order_id": "o-9"})
    assert (result["error"], result["retryable"], result["attempts"]) == ("invalid_arguments", False, 1)
    assert counted.calls == 1  # max_attempts is 3: a wrong input is not retried
    assert runner.budget.used == 1
    again = runner.call("order", {"order_id": "o-9"})  # a failure is not stored: it runs again
    assert again["error"] == "invalid_arguments" and not again["replayed"]
    assert counted.calls == 2


def test_an_approved_irreversible_write_answers_it_once():
    spec, counted = spec_of(Effect.IRREVERSIBLE_WRITE)
    runner = ToolRunner(ToolRegistry([spec]), sleep=no_wait)
    asked = runner.call("order", {"order_id": "o-9"})
    assert asked["error"] == "approval_required" and counted.calls == 0
    settled = runner.approve(asked["approval_id"])
    assert (settled["error"], settled["retryable"], settled["detail"]) == (
        "invalid_arguments", False, "no order has this id: list the orders first")
    assert counted.calls == 1
    again = runner.approve(asked["approval_id"])  # the settled result, kept with the approval
    assert (again["error"], again["detail"], again["replayed"]) == ("invalid_arguments", settled["detail"], True)
    assert counted.calls == 1


def test_the_detail_is_bounded_and_holds_no_control_or_invisible_characters():
    def noisy(order_id: str) -> dict:
        """Look an order up."""
        raise InvalidInput("line one\nline\ttwo\x1b[31m \u202eevil\u200b " + "x" * 1000)

    spec, counted = spec_of(Effect.READ, noisy)
    result = ToolRunner(ToolRegistry([spec]), sleep=no_wait).call("order", {"order_id": "o"})
    detail = result["detail"]
    assert len(detail) == MAX_DETAIL_CHARS and detail.endswith("…")
    assert detail.startswith("line one line two [31m evil ")
    assert not any(ch in detail for ch in "\n\t\x1b\u202e\u200b")
    assert counted.calls == 1
    assert safe_detail("") == "the tool refused this input"
    assert safe_detail("   \n ") == "the tool refused this input"


def test_other_exceptions_keep_their_codes_and_say_nothing():
    assert classify_exception(InvalidInput("x")).value == "invalid_arguments"
    assert handler_failure(ValueError("secret=hunter2")) == {
        "ok": False, "error": "tool_failure", "retryable": False}
    assert handler_failure(PermissionError("no"))["error"] == "forbidden"
    assert "detail" not in handler_failure(ConnectionError("drop"))


def test_a_forbidden_caller_never_reaches_the_handler_that_would_raise_it():
    spec, counted = spec_of(Effect.READ, required_scopes=frozenset({"orders:read"}))
    result = ToolRunner(ToolRegistry([spec]), context=CallContext(), sleep=no_wait).call(
        "order", {"order_id": "o-9"})
    assert result["error"] == "forbidden" and counted.calls == 0
