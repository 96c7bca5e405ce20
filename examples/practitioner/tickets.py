"""tickets.py: a practitioner's own two tools, every call through agentkit's policy.

- ``get_ticket`` (a read): retried on a transient failure; an unknown ticket is the model's
  mistake (``InvalidInput``: the model reads ``invalid_arguments`` with the message).
- ``create_ticket`` (a reversible write): id-addressed, one ticket per ``request_id`` (the same
  request again replays, the same id with another title is ``idempotency_conflict``), with a
  status lookup, ``ticket_status``, that the runner asks before it ever runs the write again.

The ticket system itself is a stand-in for the real one (a help desk's API): two files in the
folder ``$TICKETS_DIR`` (default ``~/.tickets``), ``tickets.jsonl`` (one line per ticket
made, numbered T-1, T-2, …) and ``requests.log`` (one line per request the system received:
the handlers' real calls, which ``first_hour.py`` counts).

Served over MCP by ``python -m agentkit serve-mcp --registry tickets:registry`` (the store
from ``AGENTKIT_STORE``), and given to a framework as ``ToolRunner(registry, ...)``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from agentkit import CallContext, InvalidInput, ToolRegistry, ToolSpec

__all__ = ["create_ticket", "get_ticket", "one_ticket_per_request", "real_calls", "received",
           "registry", "ticket_status", "tickets"]


def folder() -> Path:
    """The ticket system's folder (read on every call: a test or a script may point it elsewhere)."""
    path = Path(os.environ.get("TICKETS_DIR", "~/.tickets")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def tickets() -> list[dict[str, str]]:
    """Every ticket the system holds, in the order they were made."""
    ledger = folder() / "tickets.jsonl"
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]


def received() -> list[str]:
    """Every request the ticket system received, in order (``requests.log``): the handlers'
    real calls, e.g. ``"create_ticket r-1"``."""
    log = folder() / "requests.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def real_calls() -> Counter[str]:
    """How many requests of each kind the ticket system received."""
    return Counter(line.split(" ", 1)[0] for line in received())


def _received(request: str) -> None:
    with open(folder() / "requests.log", "a", encoding="utf-8") as log:
        log.write(request + "\n")


def get_ticket(ticket_id: str) -> dict[str, str]:
    """A read: the ticket ``ticket_id`` (T-1, T-2, …)."""
    _received(f"get_ticket {ticket_id}")
    for ticket in tickets():
        if ticket["ticket_id"] == ticket_id:
            return ticket
    raise InvalidInput(f"no such ticket: {ticket_id}")


def create_ticket(request_id: str, title: str) -> dict[str, str]:
    """A reversible write: opens a ticket. Without agentkit, every call makes a new one."""
    _received(f"create_ticket {request_id}")
    ticket = {"ticket_id": f"T-{len(tickets()) + 1}", "request_id": request_id, "title": title}
    with open(folder() / "tickets.jsonl", "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(ticket) + "\n")
    return ticket


def ticket_status(request_id: str, title: str) -> dict[str, str] | None:
    """create_ticket's status lookup, called with its arguments after a timeout or a lost
    connection: the ticket made for ``request_id`` (the receipt), None if there is none;
    raising means it cannot tell."""
    _received(f"ticket_status {request_id}")
    for ticket in tickets():
        if ticket["request_id"] == request_id:
            return ticket
    return None


def one_ticket_per_request(context: CallContext, arguments: dict[str, Any]) -> str:
    """The id-addressed key: one ``request_id`` is one ticket within a task, whatever the title."""
    return f"{context.task_id}:create_ticket:{arguments['request_id']}"


registry = ToolRegistry([
    ToolSpec("get_ticket", "Read a support ticket by its id (T-1, T-2, ...).", "read", 5.0, 3,
             2_000, get_ticket),
    ToolSpec("create_ticket", "Open a support ticket; request_id names this request.",
             "reversible_write", 10.0, 3, 2_000, create_ticket, status_lookup=ticket_status,
             idempotency_key=one_ticket_per_request),
])
