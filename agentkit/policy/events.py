"""Policy events (provisional copy of interface C from COORD.md; h1's module replaces it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentkit.boundary.concurrency import Attempt


@dataclass(frozen=True, slots=True)
class CallEvent:
    kind: str          # one of KINDS
    call_id: str
    tool: str          # the tool's name (safe_name(name) when unknown)
    effect: str        # Effect value; "" when the tool is unknown
    at: float          # time.monotonic()
    number: int = 0    # attempt / lookup number within the call (1-based); 0 otherwise
    outcome: str = ""  # "ok", an ErrorCode value, or for lookups "done"/"not_done"/"unknown"
    handler_ran: bool = False  # attempt_ended: the handler really started
    approval_id: str = ""      # approval_asked / approval_settled
    operation: str = "call"    # call_started/call_ended: "call" | "approve" | "deny"
    result: Mapping[str, Any] | None = None  # call_ended: the final result dict the model sees
    attempt: Attempt | None = field(default=None, repr=False, compare=False)


KINDS = ("call_started", "call_ended", "attempt_started", "attempt_ended",
         "lookup_started", "lookup_ended", "replay", "refused",
         "approval_asked", "approval_settled")
