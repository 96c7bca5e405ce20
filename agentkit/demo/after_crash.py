"""Three ways to be safe after a crash, side by side (notebook 04 §11, docs/design.md#current-call).

A worker asks for a write, the write lands, and the worker is killed before the store records
its result. A new runner on the same durable store finds the dead worker's claim (or, for one
transaction on SQLite, nothing at all), and what it can do depends on what the tool gives
it. Each way is one tool here, and :data:`WAYS` names them (with the mistake that shows why
the key matters):

- ``status_lookup``: ``send_payment`` charges with its ``payment_id`` as a reference, and a
  status lookup of its own asks the payment service for that reference: the payment is found,
  the receipt, nothing sent again. It costs a second function, and a service that can be
  searched by something you sent.
- ``forwarded_key``: ``send_payment`` forwards the runner's key as the payment's idempotency
  key (``current_call().idempotency_key``); sending the same request again is then a truthful
  lookup, so the tool's lookup is that resend: the service answers the original charge. It
  costs one line, and a service that deduplicates by key.
- ``key_not_forwarded``: the same resend without the key: a second payment.
- ``one_transaction``: ``add_credit`` writes its row through ``current_call().connection``,
  the store's own connection, with ``transactional=True``: the row and the result commit
  together, so the kill left neither and the next caller writes it, once. It costs nothing
  extra, but only where the effect lives in the store's own database.

:func:`kill_after_write` plays the dead worker for real, in a child process (the payments are
irreversible writes: a person approves them there first); :func:`tool` builds the same tool
again for the runner that recovers, and :func:`effects` counts what really happened (payments
made, rows committed), on disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentkit.boundary.concurrency import current_call
from agentkit.boundary.context import CallContext
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo.payments import PaymentService
from agentkit.demo.scenarios import ARGUMENTS as MATRIX_ARGUMENTS
from agentkit.demo.scenarios import (
    OUTPUT_LIMIT,
    TIMEOUT,
    Bench,
    ExitAfterCall,
    make_payment_tool,
    payment_key,
    run_child,
)
from agentkit.policy.stores import SQLiteIdempotencyStore

__all__ = [
    "ARGUMENTS",
    "TASK",
    "WAYS",
    "add_credit_tool",
    "die_after_write",
    "effects",
    "kill_after_write",
    "looked_up_payment_tool",
    "store",
    "tool",
]

WAYS = ("status_lookup", "forwarded_key", "key_not_forwarded", "one_transaction")

#: The caller in every way: granted what the tools require.
TASK = CallContext(task_id="task-11", principal="learner",
                   scopes=frozenset({"payments:send", "credits:write"}))

#: What the model sends, per way.
ARGUMENTS: dict[str, dict[str, Any]] = {
    "status_lookup": dict(MATRIX_ARGUMENTS[Effect.IRREVERSIBLE_WRITE]),
    "forwarded_key": dict(MATRIX_ARGUMENTS[Effect.IRREVERSIBLE_WRITE]),
    "key_not_forwarded": dict(MATRIX_ARGUMENTS[Effect.IRREVERSIBLE_WRITE]),
    "one_transaction": {"credit_id": "cr-7", "customer": "ACME Ltd", "amount": 120},
}

CREDITS = ("CREATE TABLE IF NOT EXISTS credits (credit_id TEXT NOT NULL, customer TEXT NOT NULL,"
           " amount INTEGER NOT NULL)")


def looked_up_payment_tool(service: PaymentService) -> ToolSpec:
    """``send_payment`` with a status lookup of its own: it asks the service for the charge
    made with this ``payment_id`` as its reference."""

    def send_payment(payment_id: str, to: str, amount: int) -> dict[str, Any]:
        """Send money through the payment service. It cannot be undone."""
        return {"payment_id": payment_id, **service.charge(to, amount, reference=payment_id)}

    def payment_status(payment_id: str, to: str, amount: int) -> dict[str, Any] | None:
        """The receipt when this payment was made, None when it was not."""
        found = service.find(payment_id)
        if found is None or (found["to"], found["amount"]) != (to, amount):
            return None
        return {"payment_id": payment_id, **found}

    return ToolSpec(
        "send_payment", "Send a payment; it cannot be undone.", Effect.IRREVERSIBLE_WRITE,
        TIMEOUT, 1, OUTPUT_LIMIT, send_payment, required_scopes=frozenset({"payments:send"}),
        idempotency_key=payment_key, status_lookup=payment_status,
    )


def add_credit_tool() -> ToolSpec:
    """``add_credit``: one row in the ``credits`` table of the store's own database, written
    in the store's transaction (``transactional=True``), so it commits with the result."""

    def add_credit(credit_id: str, customer: str, amount: int) -> dict[str, Any]:
        """Credit a customer's account."""
        call = current_call()
        assert call is not None and call.connection is not None
        call.connection.execute(
            "INSERT INTO credits (credit_id, customer, amount) VALUES (?, ?, ?)",
            (credit_id, customer, amount),
        )
        return {"credit_id": credit_id, "customer": customer, "amount": amount}

    return ToolSpec(
        "add_credit", "Credit a customer's account.", Effect.REVERSIBLE_WRITE, TIMEOUT, 2,
        OUTPUT_LIMIT, add_credit, required_scopes=frozenset({"credits:write"}),
        idempotency_key=lambda context, arguments: (
            f"{context.task_id}:add_credit:{arguments['credit_id']}"),
        transactional=True,
    )


def tool(way: str, workdir: str | os.PathLike[str]) -> ToolSpec:
    """The tool of ``way`` (one of :data:`WAYS`), on the payment service in ``workdir``."""
    if way not in WAYS:
        raise ValueError(f"unknown way {way!r}; known: {', '.join(WAYS)}")
    if way == "one_transaction":
        return add_credit_tool()
    service = PaymentService(Path(workdir) / "payments.sqlite3")
    if way == "status_lookup":
        return looked_up_payment_tool(service)
    return make_payment_tool(service, forward_key=way == "forwarded_key")


def store(workdir: str | os.PathLike[str]) -> SQLiteIdempotencyStore:
    """The durable store in ``workdir``, with the ``credits`` table beside its own, made
    through the store's own connection (a second SQLite library in one process would not see
    the store's file locks)."""
    opened = SQLiteIdempotencyStore(Path(workdir) / "store.sqlite")
    with opened.transaction(write=True) as tx:
        tx.connection.execute(CREDITS)
    return opened


def effects(way: str, workdir: str | os.PathLike[str]) -> int:
    """What really happened, on disk: payments made, or credit rows committed."""
    if way != "one_transaction":
        return PaymentService(Path(workdir) / "payments.sqlite3").payments
    opened = store(workdir)
    try:
        with opened.transaction(write=False) as tx:
            row = tx.connection.execute("SELECT COUNT(*) FROM credits").fetchone()
        assert row is not None  # COUNT(*) always answers one row
        return int(row[0])
    finally:
        opened.close()


def kill_after_write(way: str, workdir: str | os.PathLike[str]) -> None:
    """A child process asks for the write of ``way`` (a person approves a payment), the
    handler writes, and the process dies before the store records the result. Raises
    ``RuntimeError`` when the child did not die there."""
    if way not in WAYS:
        raise ValueError(f"unknown way {way!r}; known: {', '.join(WAYS)}")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    run_child("die_after_write", way, str(workdir), module=__name__)


def die_after_write(way: str, workdir: str) -> None:
    """The child's whole life (:func:`kill_after_write`): its handler writes, then the
    process ends at once; a transactional handler's write is still uncommitted then."""
    spec = tool(way, workdir)
    bench = Bench(spec.effect, spec=spec, fault=ExitAfterCall, store=store(workdir),
                  context=TASK)
    bench.ask(ARGUMENTS[way])
    os._exit(3)  # not reached: the handler ended the process
