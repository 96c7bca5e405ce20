"""A Temporal worker process for tests/faces/test_durable_agents.py: the documented durable
agent on Temporal (docs/engines/durable-agents.md, the two blocks between its
``durable-temporal`` markers), run as written, killed, and replaced by another worker.

Run as ``python _durable_temporal_worker.py MODE WORKDIR TARGET NAMESPACE``, against the
time-skipping test server the test started at TARGET. The blocks are saved as
``WORKDIR/refunds_agent.py`` and ``WORKDIR/refunds_workflow.py`` and imported with
``REFUNDS_FOLDER=WORKDIR`` (the ledger of refunds and agentkit's store live there). Every real
model request appends a line ``MODE`` to ``WORKDIR/model-calls``.

Modes:
    crash-paying  serve until the refund's handler has returned (the refund is in the ledger)
                  and agentkit has not recorded it (an observer of ``attempt_ended``), then die
                  with ``os._exit(1)``.
    serve         serve until killed by the test (prints ``serving`` once the worker runs).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any

MODE, WORK, TARGET, NAMESPACE = sys.argv[1:5]
WORKDIR = Path(WORK)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines" / "durable-agents.md"


def save_blocks() -> None:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- durable-temporal:start -->(.*?)<!-- durable-temporal:end -->",
                      text, re.DOTALL)
    assert found, f"{DOCS} lost its durable-temporal recipe"
    for block in re.findall(r"```python\n(.*?)```", found.group(1), re.DOTALL):
        name = re.match(r'"""([\w]+\.py):', block)
        assert name, "each durable-temporal block names its file"
        (WORKDIR / name.group(1)).write_text(block, encoding="utf-8")


async def main() -> None:
    save_blocks()
    os.environ["REFUNDS_FOLDER"] = str(WORKDIR)
    sys.path.insert(0, str(WORKDIR))
    agent_module: Any = importlib.import_module("refunds_agent")
    workflows: Any = importlib.import_module("refunds_workflow")
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporalio.client import Client
    from temporalio.worker import Worker

    answer = agent_module.model.function

    def counted(*args: Any) -> Any:
        with open(WORKDIR / "model-calls", "a", encoding="utf-8") as calls:
            calls.write(f"{MODE}\n")
        return answer(*args)

    agent_module.model.function = counted
    if MODE == "crash-paying":
        def die_inside_the_refund(event: Any) -> None:
            if event.kind == "attempt_ended" and event.tool == "refund":
                print("crashing", flush=True)
                os._exit(1)

        agent_module.runner.add_observer(die_inside_the_refund)
    client = await Client.connect(TARGET, namespace=NAMESPACE, plugins=[PydanticAIPlugin()])
    # No workflow cache: no sticky queue either, so a workflow task of the killed worker goes
    # to the other one at once (the test server would hold it for the sticky timeout, on a
    # clock it only moves while a result is awaited), and every task replays the history.
    async with Worker(client, task_queue="refunds", workflows=[workflows.RefundConversation],
                      max_cached_workflows=0):
        print("serving", flush=True)
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main())
