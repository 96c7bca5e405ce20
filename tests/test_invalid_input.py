"""InvalidInput: a handler's "your input was wrong". The boundary answers invalid_arguments with
the handler's own message as ``detail`` (bounded, control characters removed, logged), and the
runner never asks again: real handler call counts at every side-effect level."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentkit import (
    CallContext,
    Effect,
    InvalidInput,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    ainvoke_tool,
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
    assert "InvalidInput" in caplog.text  # the operator sees which exception said so


class NoSuchTicket(InvalidInput, LookupError):
    """A handler's own kind of "your input was wrong"."""


def get_ticket(ticket_id: str) -> dict:
    """Read a ticket."""
    raise NoSuchTicket(f"no ticket {ticket_id}: list the tickets first")


def test_the_models_mistake_is_logged_at_info_without_a_traceback_like_the_schemas(caplog):
    """Issue 30: every "no such ticket" was an ERROR with a whole traceback; it is the
    model's mistake, logged as the schema's own invalid_arguments is: INFO, one line."""
    counted = faults.count_calls(get_ticket)
    registry = ToolRegistry([ToolSpec("get_ticket", "Read a ticket.", "read", 2.0, 3, 300, counted)])
    with caplog.at_level(logging.DEBUG, logger="agentkit"):
        refused = invoke_tool(registry, "get_ticket", {"ticket": "T-9"})  # the schema's refusal
        mistaken = invoke_tool(registry, "get_ticket", {"ticket_id": "T-9"})  # the handler's
    assert refused["error"] == mistaken["error"] == "invalid_arguments"
    assert counted.calls == 1
    records = [r for r in caplog.records if r.name == "agentkit"]
    assert [r.levelno for r in records] == [logging.INFO, logging.INFO]
    assert all(r.exc_info is None for r in records)  # no traceback
    assert records[1].getMessage().endswith(
        "get_ticket: invalid arguments (the handler's NoSuchTicket): "
        "no ticket T-9: list the tickets first")
    assert "\n" not in records[1].getMessage()


@pytest.mark.parametrize("way", ["invoke_tool", "ainvoke_tool", "runner", "approved"])
def test_every_path_logs_it_at_info_and_a_real_failure_at_error_with_its_traceback(caplog, way):
    def broken(order_id: str) -> dict:
        """Look an order up."""
        raise RuntimeError("the order service has a bug")

    for handler, level in ((lookup_order, logging.INFO), (broken, logging.ERROR)):
        effect = Effect.IRREVERSIBLE_WRITE if way == "approved" else Effect.READ
        spec, counted = spec_of(effect, handler)
        registry = ToolRegistry([spec])
        runner = ToolRunner(registry, sleep=no_wait)
        asked = runner.call("order", {"order_id": "o-9"}) if way == "approved" else None
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="agentkit"):
            if way == "invoke_tool":
                result = invoke_tool(registry, "order", {"order_id": "o-9"})
            elif way == "ainvoke_tool":
                result = asyncio.run(ainvoke_tool(registry, "order", {"order_id": "o-9"}))
            elif way == "runner":
                result = runner.call("order", {"order_id": "o-9"})
            else:
                assert asked is not None
                result = runner.approve(asked["approval_id"])
        expected = "invalid_arguments" if level == logging.INFO else "tool_failure"
        assert result["error"] == expected
        assert counted.calls == 1  # neither is retried
        said = [r for r in caplog.records if r.name == "agentkit" and "order" in r.getMessage()
                and ("invalid arguments" in r.getMessage() or "handler raised" in r.getMessage())]
        assert [r.levelno for r in said] == [level]
        if level == logging.ERROR:
            assert said[0].exc_info is not None and said[0].exc_info[0] is RuntimeError
        else:
            assert said[0].exc_info is None


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
