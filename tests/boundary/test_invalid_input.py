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
        if way == "approved" and level == logging.ERROR:
            expected = "outcome_unknown"  # a write's exception is doubt, and it has no lookup
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


OPENAI_KEY = "sk-proj-" + "A1b2C3d4" * 4
PEM_BLOCK = ("-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEowIBAAKCAQEA\n" * 4
             + "-----END RSA PRIVATE KEY-----")


def _both_paths(handler, **extra) -> tuple[list[dict], faults.Fault]:
    """The answer through invoke_tool, runner.call and runner.acall, and the counted handler."""
    import asyncio

    from agentkit import ainvoke_tool

    spec, counted = spec_of(Effect.READ, handler, **extra)
    registry = ToolRegistry([spec])
    runner = ToolRunner(registry, sleep=no_wait)
    answers = [
        invoke_tool(registry, "order", {"order_id": "o-1"}),
        asyncio.run(ainvoke_tool(registry, "order", {"order_id": "o-1"})),
        runner.call("order", {"order_id": "o-1"}),
        asyncio.run(runner.acall("order", {"order_id": "o-1"})),
    ]
    return answers, counted


@pytest.mark.parametrize("secret", [OPENAI_KEY, f"api_key={OPENAI_KEY}", PEM_BLOCK])
def test_a_secret_in_the_message_is_redacted_as_output_is(secret):
    """Before, the detail carried the key whole to the model (an output with the same text was
    redacted)."""
    def leaky(order_id: str) -> dict:
        """Look an order up."""
        raise InvalidInput(f"the upstream refused {secret} for this order")

    answers, counted = _both_paths(leaky)
    for answer in answers:
        assert answer["error"] == "invalid_arguments" and answer["retryable"] is False
        assert answer["detail"].startswith("the upstream refused ")
        assert "[REDACTED]" in answer["detail"]
        assert "A1b2C3d4" not in answer["detail"] and "MIIEow" not in answer["detail"]
    assert counted.calls == 4  # one attempt each: never asked again


@pytest.mark.parametrize("at", range(MAX_DETAIL_CHARS - 40, MAX_DETAIL_CHARS + 2))
def test_the_cut_never_shows_a_keys_head(at):
    """A key across the 200-character cut: before, the cut showed "sk-proj-A1b2…"."""
    message = "x" * at + " " + OPENAI_KEY + " and more text after it"

    def cut(order_id: str) -> dict:
        """Look an order up."""
        raise InvalidInput(message)

    answers, counted = _both_paths(cut)
    for answer in answers:
        detail = answer["detail"]
        assert len(detail) <= MAX_DETAIL_CHARS
        assert "sk-" not in detail and "A1b2" not in detail
        assert "[REDACTE" not in detail or "[REDACTED]" in detail  # never half a marker
    assert counted.calls == 4


def test_a_tool_that_does_not_redact_its_output_does_not_redact_its_message():
    def plain(order_id: str) -> dict:
        """Look an order up."""
        raise InvalidInput(f"key {OPENAI_KEY}")

    answers, _ = _both_paths(plain, redact=False)
    assert {answer["detail"] for answer in answers} == {f"key {OPENAI_KEY}"}


class OrderMissing(InvalidInput):
    """A subclass that keeps its own fields and never calls ``super().__init__``."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id


class Unprintable(InvalidInput):
    def __init__(self) -> None:
        pass

    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize(("raised", "detail"), [
    (OrderMissing("o-404"), "o-404"),
    (Unprintable(), "the tool refused this input"),
])
def test_a_subclass_that_skips_super_init_gives_one_answer_on_every_path(raised, detail):
    """Before: ``outcome_unknown`` (retryable) through the runner, ``tool_failure`` through
    invoke_tool. Now ``invalid_arguments`` everywhere, its text from ``str(exc)``."""
    def missing(order_id: str) -> dict:
        """Look an order up."""
        raise raised

    answers, counted = _both_paths(missing)
    for answer in answers:
        assert (answer["error"], answer["retryable"], answer["detail"]) == (
            "invalid_arguments", False, detail)
    assert [answer.get("attempts") for answer in answers] == [None, None, 1, 1]
    assert counted.calls == 4
