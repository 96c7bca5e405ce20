"""A DBOS worker process for tests/faces/test_face_dbos.py: the engine alone and through agentkit.

Run as ``python _dbos_worker.py MODE WORKDIR SYSTEM_DB_URL DBOS_SCHEMA STORE SCENARIO...``,
STORE being ``sqlite:PATH`` or ``postgres:DSN`` (agentkit's store; the workers share it).
Every real run of a tool's handler appends a line ``SCENARIO TOOL`` to ``WORKDIR/ledger``
(O_APPEND), so the parent counts real writes on disk, across processes and crashes.

Modes:
    crash     start one workflow per scenario (its id is the scenario's name), wait until every
              one has reached its crash point, then die with ``os._exit(1)``: nothing is
              cleaned up, nothing more is recorded, as when a worker is killed.
    recover   ``DBOS.launch()`` recovers the pending workflows; wait for each scenario's result
              and print one JSON line: {scenario: {"result": ..., "steps": [...], ...}}.
    race      as recover, but print ``ready`` first and launch only when a line arrives on
              stdin, so that two recoverers launch together.

Scenarios (the crash point of each, in crash mode; in the other modes nothing stops):
    alone-after-write    a plain ``@DBOS.step`` (retries off) writes, then the worker dies
                         before DBOS records the step: the engine alone.
    alone-before-write   the same step dies before it writes.
    kit-replay           ``tools.call`` writes and agentkit records the result; the worker dies
                         before DBOS records the step (an observer of the call's end).
    kit-lookup           the write lands, the worker dies inside the handler (agentkit's claim
                         is open); the tool has a status lookup.
    kit-nolookup         the same, for a tool with no status lookup.
    kit-before-write     the worker dies inside the handler before the write (lookup: not done).
    kit-approval         an irreversible call asks for approval (one step); the worker dies
                         while the workflow waits for a person's decision.
    kit-denial           the same; the person will deny.
    kit-approve-before-write
                         an irreversible call asks for approval, the worker itself sends the
                         person's "yes" (DBOS.send), and dies inside the approve step's handler,
                         before the payment; the tool has a status lookup (the ledger).
    kit-approve-after-write
                         the same, dying after the payment.
    kit-approve-nolookup the same as before-write, for a tool with no status lookup.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from dbos import DBOS, SetWorkflowID

from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolSpec
from agentkit.faces.dbos import DurableTools, send_decision

MODE, WORK, SYSTEM_DB, SCHEMA, STORE = sys.argv[1:6]
SCENARIOS = sys.argv[6:]
WORKDIR = Path(WORK)
CRASHING = MODE == "crash"
#: every scenario's crash point, set when reached (crash mode)
REACHED = {name: threading.Event() for name in SCENARIOS}
#: the approval each scenario asked for (crash mode), for this worker to approve it itself
ASKED: dict[str, str] = {}
ASKED_EVENT = {name: threading.Event() for name in SCENARIOS}
APPROVED_HERE = ("kit-approve-before-write", "kit-approve-after-write", "kit-approve-nolookup")
NEVER = threading.Event()
#: A tool's own time limit, far beyond this process's life: the boundary never gives up on an
#: attempt before the worker dies (that would be another test).
TIMEOUT = 120.0


def ledger(scenario: str, tool: str) -> None:
    with open(WORKDIR / "ledger", "a", encoding="utf-8") as f:
        f.write(f"{scenario} {tool}\n")


def crash_point(scenario: str, *, block: bool = True) -> None:
    """In crash mode: say so, and (``block``) wait here until the process dies."""
    if CRASHING:
        REACHED[scenario].set()
        if block:
            NEVER.wait()


def save_note(name: str, text: str) -> dict[str, str]:
    """Save a note (the write lands as a file, atomically)."""
    if name == "kit-before-write":
        crash_point(name)
    ledger(name, "save_note")
    target = WORKDIR / "notes" / name
    target.parent.mkdir(exist_ok=True)
    temporary = target.with_suffix(".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    if name in ("kit-lookup", "kit-nolookup"):
        crash_point(name)
    return {"saved": name}


def note_saved(name: str, text: str) -> dict[str, str] | None:
    """The status lookup: the receipt when the note is on disk with this text."""
    target = WORKDIR / "notes" / name
    return {"saved": name} if target.exists() and target.read_text(encoding="utf-8") == text else None


def send_payment(to: str, cents: int) -> str:
    """Send a payment."""
    if to in ("kit-approve-before-write", "kit-approve-nolookup"):
        crash_point(to)
    ledger(to, "send_payment")
    if to == "kit-approve-after-write":
        crash_point(to)
    return f"paid {cents} cents to {to}"


def payment_sent(to: str, cents: int) -> str | None:
    """The status lookup of a payment: the receipt when the ledger has it."""
    try:
        lines = (WORKDIR / "ledger").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    return f"paid {cents} cents to {to}" if f"{to} send_payment" in lines else None


def open_store() -> Any:
    kind, _, where = STORE.partition(":")
    if kind == "sqlite":
        return SQLiteIdempotencyStore(where)
    from agentkit.policy.stores import PostgresIdempotencyStore

    return PostgresIdempotencyStore(where)


REGISTRY = ToolRegistry([
    ToolSpec("save_note", "Save a note.", "reversible_write", TIMEOUT, 3, 200, save_note,
             status_lookup=note_saved),
    ToolSpec("save_blind", "Save a note (no status lookup).", "reversible_write", TIMEOUT, 3,
             200, save_note),
    ToolSpec("send_payment", "Send a payment.", "irreversible_write", TIMEOUT, 1, 200,
             send_payment),
    ToolSpec("send_checked", "Send a payment (with a status lookup).", "irreversible_write",
             TIMEOUT, 1, 200, send_payment, status_lookup=payment_sent),
])
TOOLS = DurableTools(REGISTRY, open_store(), sleep=lambda seconds: None)


@DBOS.step(retries_allowed=False)
def alone_step(scenario: str) -> dict[str, str]:
    if scenario == "alone-before-write":
        crash_point(scenario)
    with open(WORKDIR / "ledger", "a", encoding="utf-8") as f:  # the key DBOS gives the step
        f.write(f"{scenario} save_note {DBOS.workflow_id}:{DBOS.step_id}\n")
    if scenario == "alone-after-write":
        crash_point(scenario)
    return {"saved": scenario}


@DBOS.workflow()
def alone(scenario: str) -> Any:
    return alone_step(scenario)


@DBOS.workflow()
def through(scenario: str, tool: str) -> dict[str, Any]:
    if scenario == "kit-replay" and CRASHING:
        def die_after_agentkit_recorded(event: Any) -> None:
            if event.kind == "call_ended":
                crash_point(scenario)

        TOOLS.runner.add_observer(die_after_agentkit_recorded)
    return TOOLS.call(tool, {"name": scenario, "text": "hello"})


@DBOS.workflow()
def payment(scenario: str, tool: str = "send_payment") -> dict[str, Any]:
    asked = TOOLS.call(tool, {"to": scenario, "cents": 500})
    if asked.get("error") != "approval_required":
        return {"asked": asked}
    # the worker may die from here on: the approval is in agentkit's store, its id in DBOS's
    # checkpoint of the step above
    if scenario in APPROVED_HERE:
        ASKED[scenario] = asked["approval_id"]
        ASKED_EVENT[scenario].set()
    else:
        crash_point(scenario, block=False)
    decision = TOOLS.wait_for_decision(asked["approval_id"], 60)
    if decision is None:
        return {"asked": asked, "decision": None}
    settled = TOOLS.approve(asked["approval_id"]) if decision else TOOLS.deny(asked["approval_id"])
    return {"asked": asked, "decision": decision, "settled": settled}


WORKFLOWS: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "alone-after-write": (alone, ()),
    "alone-before-write": (alone, ()),
    "kit-replay": (through, ("save_note",)),
    "kit-lookup": (through, ("save_note",)),
    "kit-nolookup": (through, ("save_blind",)),
    "kit-before-write": (through, ("save_note",)),
    "kit-approval": (payment, ()),
    "kit-denial": (payment, ()),
    "kit-approve-before-write": (payment, ("send_checked",)),
    "kit-approve-after-write": (payment, ("send_checked",)),
    "kit-approve-nolookup": (payment, ("send_payment",)),
}


def main() -> None:
    DBOS(config={"name": "agentkit-tests", "system_database_url": SYSTEM_DB,
                 "dbos_system_schema": SCHEMA, "log_level": "WARNING",
                 "application_version": "agentkit-tests-1"})
    if MODE == "race":
        print("ready", flush=True)
        sys.stdin.readline()
    DBOS.launch()
    if CRASHING:
        for scenario in SCENARIOS:
            workflow, args = WORKFLOWS[scenario]
            with SetWorkflowID(scenario):
                DBOS.start_workflow(workflow, scenario, *args)
        for scenario in SCENARIOS:  # a person says yes while this worker runs
            if scenario in APPROVED_HERE:
                if not ASKED_EVENT[scenario].wait(60):
                    print(f"{scenario} never asked", flush=True)
                    os._exit(2)
                send_decision(scenario, ASKED[scenario], True)
        for scenario in SCENARIOS:
            if not REACHED[scenario].wait(60):
                print(f"{scenario} never reached its crash point", flush=True)
                os._exit(2)
        print("crashing", flush=True)
        os._exit(1)
    answers = {}
    for scenario in SCENARIOS:
        result = DBOS.retrieve_workflow(scenario).get_result(polling_interval_sec=0.05)
        steps = [step["function_name"] for step in DBOS.list_workflow_steps(scenario)]
        records = TOOLS.runner_for(scenario).trace.records
        answers[scenario] = {"result": result, "steps": steps,
                             "call_ids": sorted({r.call_id for r in records})}
    print(json.dumps(answers), flush=True)
    sys.stderr.flush()
    # Every workflow has ended and is recorded; this worker's job is done. It leaves without
    # DBOS.destroy(), which would wait up to a second for DBOS's pollers to notice.
    os._exit(0)


if __name__ == "__main__":
    main()
