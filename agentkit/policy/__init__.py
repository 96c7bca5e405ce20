"""The policy layer: what the side-effect level of a tool allows, above one attempt.

- :mod:`~agentkit.policy.runner`: ``ToolRunner``, the public face of the policy;
- :mod:`~agentkit.policy.steps`: the policy, written once as steps that ask for effects: a
  call's entry and its frame, and a read's bounded retries; a write's steps are in
  :mod:`~agentkit.policy.writes` (idempotency key, attempts under the key's claim, the
  status lookup) and :mod:`~agentkit.policy.irreversible` (approval, one run, deny), both
  running once per key through :mod:`~agentkit.policy.once` (the store's claim → run →
  complete, and every store's ``run_once``); :mod:`~agentkit.policy.calls`: a call in
  progress and one attempt of it; :mod:`~agentkit.policy.results`: every result's stamp
  and key order;
- :mod:`~agentkit.policy.effects`: what the steps may ask for; :mod:`~agentkit.policy.drivers`:
  the sync and the async driver that perform it (``docs/design.md#drivers``);
- :mod:`~agentkit.policy.events`: what a call tells its observers (``docs/design.md#events``);
- :mod:`~agentkit.policy.approvals`: the approval state machine of irreversible writes;
- :mod:`~agentkit.policy.budget`: the task's budget, spent by every attempt and lookup;
- :mod:`~agentkit.policy.backoff`: jittered waits between attempts, and the testing switch;
- :mod:`~agentkit.policy.trace`: every attempt, kept for tables and timelines;
- :mod:`~agentkit.policy.stores`: idempotency stores, one algorithm over several backends.

This layer imports only the boundary below it (see ``docs/design.md#layers``).
"""

from __future__ import annotations

from agentkit.policy.backoff import set_testing
from agentkit.policy.budget import Budget
from agentkit.policy.runner import ToolRunner
from agentkit.policy.stores import IdempotencyStore, SQLiteIdempotencyStore
from agentkit.policy.trace import Trace, TraceRecord

__all__ = [
    "Budget",
    "IdempotencyStore",
    "SQLiteIdempotencyStore",
    "ToolRunner",
    "Trace",
    "TraceRecord",
    "set_testing",
]
