"""Approvals: an irreversible write waits for a person, and the person approves one exact call.

An approval names the tool and the exact arguments that asked for it, so approving it can
never run anything else. The same intent (the same idempotency key) asking twice gets the
same approval id; an approval is used once, expires after a set time, and keeps its settled
result so that approving again returns what happened instead of acting again. Records live in
the idempotency store: with the durable store they survive a restart.

States: ``pending`` → ``running`` (approved, the write is under way) → ``settled``;
``pending`` → ``settled`` on deny; ``pending`` → ``expired``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from agentkit.boundary.context import CallContext

PENDING, RUNNING, SETTLED, EXPIRED = "pending", "running", "settled", "expired"


class Approvals:
    """The approval records of one store, with their time-to-live."""

    def __init__(self, store: Any, ttl_seconds: float, clock: Callable[[], float] = time.time):
        if ttl_seconds <= 0:
            raise ValueError("approval_ttl_seconds must be > 0")
        self.store = store
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.known: list[str] = []  # ids opened by this process, for panels

    def open(
        self, key: str, fingerprint: str, tool: str, arguments: dict[str, Any], context: CallContext
    ) -> dict[str, Any]:
        """The live record for this intent: an existing one, or a new ``pending`` one.

        An expired approval is not revived: the intent gets a new id (``-2``, ``-3`` …), so an
        id once refused as expired stays refused.
        """
        base = "apr-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
        generation = 1
        while True:
            approval_id = base if generation == 1 else f"{base}-{generation}"
            record = self.get(approval_id)
            if record is None:
                record = {
                    "approval_id": approval_id,
                    "key": key,
                    "fingerprint": fingerprint,
                    "tool": tool,
                    "arguments": arguments,
                    "task_id": context.task_id,
                    "principal": context.principal,
                    "state": PENDING,
                    "expires_at": self.clock() + self.ttl_seconds,
                    "result": None,
                }
                self.store.put_approval(approval_id, record)
                self.known.append(approval_id)
                return record
            if record["state"] != EXPIRED:
                return record
            generation += 1

    def get(self, approval_id: Any) -> dict[str, Any] | None:
        """The record, with a pending one past its time marked ``expired`` on the way."""
        if not isinstance(approval_id, str):
            return None
        record = self.store.get_approval(approval_id)
        if record and record["state"] == PENDING and self.clock() >= record["expires_at"]:
            expired = {**record, "state": EXPIRED}
            self.store.update_approval(approval_id, PENDING, expired)
            record = self.store.get_approval(approval_id)
        return record

    def move(
        self, record: dict[str, Any], state: str, result: dict[str, Any] | None = None, **fields: Any
    ) -> bool:
        """Compare-and-swap the record from its current state to ``state``."""
        new = {**record, **fields, "state": state}
        if result is not None:
            new["result"] = result
        return bool(self.store.update_approval(record["approval_id"], record["state"], new))

    def pending(self) -> list[dict[str, Any]]:
        """Records opened here that still wait for a decision."""
        records = (self.get(i) for i in self.known)
        return [r for r in records if r and r["state"] == PENDING]
