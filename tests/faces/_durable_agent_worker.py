"""A worker process for tests/faces/test_durable_agents.py: the documented durable agent
(docs/engines/durable-agents.md, the block between its ``durable-dbos`` markers), run as
written, killed, and recovered.

Run as ``python _durable_agent_worker.py MODE WORKDIR``. The recipe's text is saved as
``WORKDIR/durable_refunds.py`` and imported with ``REFUNDS_FOLDER=WORKDIR``, so its ledger of
refunds, its agentkit store and DBOS's system database all live in WORKDIR and outlive the
process. Every real model request appends a line to ``WORKDIR/model-calls`` (O_APPEND).

Modes:
    crash-waiting  start the conversation, wait until it waits for a person (after the
                   model's first turn), then die with ``os._exit(1)``.
    crash-paying   start it, approve as the person would, and die inside the refund: its
                   handler has returned (the refund is in the ledger), agentkit has not
                   recorded the result (an observer of ``attempt_ended``).
    recover        ``DBOS.launch()`` recovers the conversation; with ``--approve``, send the
                   person's decision first; print one JSON line: the conversation's result and
                   the model requests this process made.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

MODE, WORK = sys.argv[1:3]
APPROVE = "--approve" in sys.argv[3:]
WORKDIR = Path(WORK)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines" / "durable-agents.md"
WORKFLOW = "refund-o-1"


def recipe_text() -> str:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- durable-dbos:start -->\s*```python\n(.*?)```\s*<!-- durable-dbos:end -->",
                      text, re.DOTALL)
    assert found, f"{DOCS} lost its durable-dbos recipe"
    return found.group(1)


def main() -> None:
    (WORKDIR / "durable_refunds.py").write_text(recipe_text(), encoding="utf-8")
    os.environ["REFUNDS_FOLDER"] = str(WORKDIR)
    sys.path.insert(0, str(WORKDIR))
    recipe: Any = importlib.import_module("durable_refunds")
    from dbos import DBOS, SetWorkflowID

    from agentkit.faces.dbos import send_decision

    here = {"model_calls": 0}
    answer = recipe.model.function

    def counted(*args: Any) -> Any:
        here["model_calls"] += 1
        with open(WORKDIR / "model-calls", "a", encoding="utf-8") as calls:
            calls.write(f"{MODE}\n")
        return answer(*args)

    recipe.model.function = counted
    DBOS(config={"name": "refunds", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{WORKDIR / 'dbos.sqlite'}"})
    if MODE == "crash-paying":
        def die_inside_the_refund(event: Any) -> None:
            if event.kind == "attempt_ended" and event.tool == "refund":
                print("crashing", flush=True)
                os._exit(1)

        recipe.runner.add_observer(die_inside_the_refund)
    DBOS.launch()
    if MODE.startswith("crash"):
        with SetWorkflowID(WORKFLOW):
            DBOS.start_workflow(recipe.refund_conversation, "Refund order o-1 (5 euros)")
        asked = DBOS.get_event(WORKFLOW, "waiting_for", timeout_seconds=60)
        assert asked, "the conversation never asked a person"
        if MODE == "crash-waiting":
            print("crashing", flush=True)
            os._exit(1)
        send_decision(WORKFLOW, asked, True)
        threading.Event().wait(60)  # the observer ends this process
        print("the refund never ran", flush=True)
        os._exit(2)
    if APPROVE:
        asked = DBOS.get_event(WORKFLOW, "waiting_for", timeout_seconds=60)
        send_decision(WORKFLOW, asked, True)
    result = DBOS.retrieve_workflow(WORKFLOW).get_result(polling_interval_sec=0.05)
    print(json.dumps({"result": result, "model_calls": here["model_calls"]}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
