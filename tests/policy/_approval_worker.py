"""An approver in its own process, for tests/policy/test_approval_owner.py.

Run as ``python _approval_worker.py STORE WORKDIR APPROVAL_ID WHEN``, STORE being
``sqlite:PATH`` or ``postgres:DSN``: approve ``APPROVAL_ID`` (an irreversible
``send_invoice`` asked by the parent) in this process. Every real payment appends a line to
``WORKDIR/ledger`` (O_APPEND), so the parent counts them on disk across the kill. ``WHEN``
says where the handler stops and prints ``reached`` (the parent then kills this process with
SIGKILL, or closes stdin to let it go on):

    before   inside the handler, before the payment
    after    inside the handler, after the payment
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentkit import ToolRegistry, ToolRunner, ToolSpec

TIMEOUT = 120.0  # far beyond this process's life: the boundary never gives up first


def ledger_lines(workdir: Path) -> list[str]:
    try:
        return (workdir / "ledger").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def make_registry(workdir: Path, stop: Callable[[str], None] = lambda when: None) -> ToolRegistry:
    """``send_invoice`` (with a status lookup that reads the ledger) and ``send_blind`` (the
    same, with none). ``stop(when)`` is called before and after the payment."""

    def pay(to: str, cents: int) -> str:
        stop("before")
        with open(workdir / "ledger", "a", encoding="utf-8") as f:
            f.write(f"{to} {cents}\n")
        stop("after")
        return f"paid {cents} cents to {to}"

    def paid(to: str, cents: int) -> str | None:
        return f"paid {cents} cents to {to}" if f"{to} {cents}" in ledger_lines(workdir) else None

    def send_invoice(to: str, cents: int) -> str:
        """Send an invoice's payment."""
        return pay(to, cents)

    def send_blind(to: str, cents: int) -> str:
        """Send a payment (no status lookup)."""
        return pay(to, cents)

    return ToolRegistry([
        ToolSpec("send_invoice", "Send an invoice's payment.", "irreversible_write", TIMEOUT, 1,
                 200, send_invoice, status_lookup=paid),
        ToolSpec("send_blind", "Send a payment (no lookup).", "irreversible_write", TIMEOUT, 1,
                 200, send_blind),
    ])


def open_store(spec: str) -> Any:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        from agentkit import SQLiteIdempotencyStore

        return SQLiteIdempotencyStore(where)
    from agentkit.policy.stores import PostgresIdempotencyStore

    return PostgresIdempotencyStore(where)


def main() -> None:
    spec, workdir, approval_id, when = sys.argv[1:5]

    def stop(here: str) -> None:
        if here == when:
            print("reached", flush=True)
            sys.stdin.read()  # until the parent kills us, or lets us go on

    runner = ToolRunner(make_registry(Path(workdir), stop), store=open_store(spec))
    result = runner.approve(approval_id)
    print(result, flush=True)


if __name__ == "__main__":
    main()
