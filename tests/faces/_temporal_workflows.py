"""Workflows for tests/faces/test_face_temporal.py's time-skipping server tests, in a module of their
own: Temporal's sandbox re-imports a workflow's module, which must import nothing but the SDK.

Each saves one note with a 1-second start-to-close timeout and Temporal's default retry
policy (unlimited attempts): the engine alone through a plain activity, and through agentkit's
``agentkit_call``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

ONE_SECOND = timedelta(seconds=1)


@workflow.defn
class SaveAlone:
    @workflow.run
    async def run(self, name: str, text: str) -> Any:
        return await workflow.execute_activity("save_note_alone", args=[name, text],
                                               start_to_close_timeout=ONE_SECOND)


@workflow.defn
class SaveThroughAgentkit:
    @workflow.run
    async def run(self, name: str, text: str) -> Any:
        return await workflow.execute_activity(
            "agentkit_call", args=["save_note", {"name": name, "text": text}],
            start_to_close_timeout=ONE_SECOND)
