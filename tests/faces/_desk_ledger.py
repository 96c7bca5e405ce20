"""A payment tool whose every real run is a line in a ledger file ($DESK_LEDGER), so that
several processes (the desk, the CLI, the model's runner) count one set of payments: the
desk's command tests and the browser suite start ``agentkit desk --registry
_desk_ledger:registry`` with this folder on ``PYTHONPATH``."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from agentkit import ToolRegistry, ToolSpec


def ledger() -> Path:
    return Path(os.environ["DESK_LEDGER"])


def payments() -> list[dict[str, Any]]:
    """Every real payment so far, in order."""
    path = ledger()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def pay(to: str, cents: int, memo: str = "") -> str:
    """Pay ``cents`` to ``to``: one line in the ledger, flushed before it answers. A slow
    bank ($DESK_PAY_SECONDS) keeps the payment under way while others try to decide."""
    import time

    time.sleep(float(os.environ.get("DESK_PAY_SECONDS", "0")))
    with ledger().open("a", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(json.dumps({"to": to, "cents": cents, "pid": os.getpid()}) + "\n")
        file.flush()
        os.fsync(file.fileno())
    return f"paid {cents} to {to}"


def registry() -> ToolRegistry:
    return ToolRegistry([
        ToolSpec("pay", "Pay an invoice from the company account.", "irreversible_write", 10.0,
                 1, 500, pay, max_argument_chars=2_000_000),
        ToolSpec("refund", "Refund a customer's order.", "irreversible_write", 10.0, 1, 500,
                 lambda order: {"refunded": order}),
    ])
