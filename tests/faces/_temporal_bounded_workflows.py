"""A workflow for tests/faces/test_durable_agents.py's retry-options test, in a module of its
own (Temporal's sandbox re-imports a workflow's module, which must import nothing but the SDK).

It saves one note through agentkit's ``agentkit_call`` with a 1-second start-to-close timeout,
shorter than the write, and a bounded ``maximum_attempts`` of 2: the retry options that
docs/engines/durable-agents.md warns against.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy


@workflow.defn
class SaveBounded:
    @workflow.run
    async def run(self, name: str, text: str) -> Any:
        return await workflow.execute_activity(
            "agentkit_call", args=["save_note", {"name": name, "text": text}],
            start_to_close_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(maximum_attempts=2))
