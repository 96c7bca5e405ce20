"""agentkit.faces.dbos: the registry's tools as DBOS steps, on the real engine, offline.

DBOS runs a step at least once: a worker killed after a step's write and before DBOS recorded
the step runs the step again when a new process recovers the workflow (``DBOS.launch()``).
The crash tests kill real worker processes (tests/faces/_dbos_worker.py) and recover them in new
ones, on DBOS's SQLite system database and on PostgreSQL, and count the real writes in a
ledger file: the engine alone writes twice, through ``DurableTools`` once.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS, DBOSClient, SetWorkflowID

from agentkit import (
    Budget,
    IdempotencyStore,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)
from agentkit.faces.dbos import (
    DurableTools,
    decision_topic,
    route_decision,
    send_decision,
    send_decision_async,
)

WORKER = Path(__file__).with_name("_dbos_worker.py")
SCENARIOS = ["alone-after-write", "alone-before-write", "kit-replay", "kit-lookup",
             "kit-nolookup", "kit-before-write", "kit-approval", "kit-denial",
             "kit-approve-before-write", "kit-approve-after-write", "kit-approve-nolookup"]
PG_DSN = os.environ.get("AGENTKIT_TEST_PG_DSN", "")
IN_CI = os.environ.get("CI", "").lower() == "true"


def pg_unavailable(reason: str) -> None:
    """Skip, with the reason, where PostgreSQL is optional; fail in CI, where it is not
    (as tests/policy/test_stores.py does)."""
    if IN_CI:
        pytest.fail(f"CI=true, so the PostgreSQL tests must run, but {reason}")
    pytest.skip(reason)


def ledger(workdir: Path) -> Counter[str]:
    """Real handler runs per scenario and tool, from the ledger file the handlers append to."""
    try:
        lines = (workdir / "ledger").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return Counter()
    return Counter(" ".join(line.split()[:2]) for line in lines)


class Backend:
    """Where the engine and agentkit keep their state: one SQLite file each, or one fresh
    PostgreSQL schema each on the test server (the same server for both, as in production)."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.workdir = workdir
        self.schemas: list[str] = []
        if kind == "sqlite":
            self.system_db = f"sqlite:///{workdir / 'dbos.sqlite'}"
            self.dbos_schema = "dbos"
            self.store = f"sqlite:{workdir / 'agentkit.sqlite3'}"
            return
        if not PG_DSN:
            pg_unavailable("AGENTKIT_TEST_PG_DSN is not set: run `make test-postgres`, or"
                           ' eval "$(tools/pg_cluster.sh start)" first')
        import psycopg
        from test_stores import ServerUse

        # From its first connection until its schemas are dropped, this process uses the
        # server: a test that restarts it (or ends every session of the database) waits for
        # that, and this one waits for such a test to bring the server back first.
        ServerUse.enter()
        try:
            try:
                self.admin = psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5)
            except psycopg.Error as exc:
                pg_unavailable(f"no PostgreSQL server answers at AGENTKIT_TEST_PG_DSN ({exc})")
            tag = os.urandom(5).hex()
            self.dbos_schema, agentkit_schema = f"dbos_{tag}", f"agentkit_{tag}"
            self.admin.execute(f"CREATE SCHEMA {agentkit_schema}")
        except BaseException:
            ServerUse.leave()
            raise
        self.schemas = [self.dbos_schema, agentkit_schema]
        self.system_db = PG_DSN
        separator = "&" if "?" in PG_DSN else "?"
        self.store = f"postgres:{PG_DSN}{separator}options=-csearch_path%3D{agentkit_schema}"

    def open_store(self) -> Any:
        kind, _, where = self.store.partition(":")
        if kind == "sqlite":
            return SQLiteIdempotencyStore(where)
        from agentkit.policy.stores import PostgresIdempotencyStore

        return PostgresIdempotencyStore(where)

    def client(self) -> DBOSClient:
        return DBOSClient(system_database_url=self.system_db, dbos_system_schema=self.dbos_schema)

    def command(self, mode: str, scenarios: list[str]) -> list[str]:
        return [sys.executable, str(WORKER), mode, str(self.workdir), self.system_db,
                self.dbos_schema, self.store, *scenarios]

    def run(self, mode: str, scenarios: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(mode, scenarios), capture_output=True, text=True,
                              timeout=180, check=False)

    def drop(self) -> None:
        if self.schemas:
            from test_stores import ServerUse

            try:
                for schema in self.schemas:
                    self.admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                self.admin.close()
            finally:
                self.schemas = []
                ServerUse.leave()


def answers(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def send_pending_decisions(backend: Backend, decide: dict[str, bool]
                           ) -> tuple[list[dict[str, Any]], dict[str, list[tuple[int, str]]]]:
    """A person decides, through DBOS's own messages, while no worker runs: the pending
    approvals are read from agentkit's store (they survived the crash there), and each
    decision is routed to the workflow that owns it (``route_decision``, as the approvals
    CLI does), then contradicted, then given again: what each answered, by workflow."""
    store = backend.open_store()
    runner = ToolRunner(ToolRegistry([]), store=store)
    pending = runner.pending_approvals()
    answers: dict[str, list[tuple[int, str]]] = {}
    try:
        for record in pending:
            approved = decide[record["task_id"]]
            answers[record["task_id"]] = [
                route_decision(runner.approvals, record["approval_id"], decision,
                               system_database_url=backend.system_db,
                               dbos_system_schema=backend.dbos_schema)
                for decision in (approved, not approved, approved)]
    finally:
        store.close()
    return pending, answers


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def crashed_and_recovered(request, tmp_path_factory):
    """One worker process starts every scenario's workflow and is killed mid-step; a person
    decides the two pending approvals while no worker runs; a new process recovers them all."""
    workdir = tmp_path_factory.mktemp(f"dbos-{request.param}")
    backend = Backend(request.param, workdir)
    try:
        crashed = backend.run("crash", SCENARIOS)
        assert crashed.returncode == 1 and crashed.stdout.strip() == "crashing", (
            crashed.stdout + crashed.stderr)
        before = ledger(workdir)
        store = backend.open_store()
        try:
            running = {r["task_id"]: r for r in store.list_approvals() if r["state"] == "running"}
        finally:
            store.close()
        pending, decided = send_pending_decisions(backend, {"kit-approval": True,
                                                            "kit-denial": False})
        recovered = answers(backend.run("recover", SCENARIOS))
        yield {"before": before, "after": ledger(workdir), "answers": recovered,
               "pending": pending, "decided": decided, "running": running, "workdir": workdir}
    finally:
        backend.drop()


def test_the_engine_alone_runs_a_killed_step_twice(crashed_and_recovered):
    before, after = crashed_and_recovered["before"], crashed_and_recovered["after"]
    assert before["alone-after-write save_note"] == 1
    assert after["alone-after-write save_note"] == 2  # the write landed, then ran again
    # ... under one stable key, while DBOS lists the step once
    lines = (crashed_and_recovered["workdir"] / "ledger").read_text().splitlines()
    keys = [line.split()[2] for line in lines if line.startswith("alone-after-write ")]
    assert keys == ["alone-after-write:1", "alone-after-write:1"]
    answer = crashed_and_recovered["answers"]["alone-after-write"]
    assert answer["steps"] == ["alone_step"]
    assert answer["result"] == {"saved": "alone-after-write"}


def test_killed_before_the_write_the_engine_alone_writes_once(crashed_and_recovered):
    assert crashed_and_recovered["before"]["alone-before-write save_note"] == 0
    assert crashed_and_recovered["after"]["alone-before-write save_note"] == 1


def test_through_agentkit_a_recorded_write_replays(crashed_and_recovered):
    """Killed after agentkit recorded the result, before DBOS recorded the step."""
    assert crashed_and_recovered["before"]["kit-replay save_note"] == 1
    assert crashed_and_recovered["after"]["kit-replay save_note"] == 1
    answer = crashed_and_recovered["answers"]["kit-replay"]
    assert answer["result"] == {"ok": True, "data": '{"saved": "kit-replay"}', "attempts": 0,
                                "replayed": True}
    assert answer["steps"] == ["agentkit.call:save_note"]
    assert answer["call_ids"] == ["kit-replay:1"]  # "{workflow_id}:{step_id}"


def test_through_agentkit_the_status_lookup_settles_a_dead_workers_claim(crashed_and_recovered):
    """Killed inside the handler, after the write: agentkit's claim is open, its owner dead."""
    assert crashed_and_recovered["before"]["kit-lookup save_note"] == 1
    assert crashed_and_recovered["after"]["kit-lookup save_note"] == 1
    answer = crashed_and_recovered["answers"]["kit-lookup"]
    assert answer["result"] == {"ok": True, "data": '{"saved": "kit-lookup"}', "attempts": 0,
                                "replayed": False}
    assert answer["steps"] == ["agentkit.call:save_note"]


def test_through_agentkit_with_no_lookup_the_outcome_is_unknown_never_a_second_write(
        crashed_and_recovered):
    assert crashed_and_recovered["after"]["kit-nolookup save_note"] == 1
    result = crashed_and_recovered["answers"]["kit-nolookup"]["result"]
    assert result == {"ok": False, "error": "outcome_unknown", "retryable": False,
                      "attempts": 0, "replayed": False}


def test_through_agentkit_killed_before_the_write_writes_once_after_recovery(
        crashed_and_recovered):
    assert crashed_and_recovered["before"]["kit-before-write save_note"] == 0
    assert crashed_and_recovered["after"]["kit-before-write save_note"] == 1
    result = crashed_and_recovered["answers"]["kit-before-write"]["result"]
    assert result["ok"] is True and result["attempts"] == 1  # the lookup said not done


def test_an_approval_survives_the_crash_and_pays_once_after_the_decision(crashed_and_recovered):
    pending = {record["task_id"]: record for record in crashed_and_recovered["pending"]}
    assert set(pending) == {"kit-approval", "kit-denial"}  # in agentkit's store, after the crash
    assert pending["kit-approval"]["arguments"] == {"to": "kit-approval", "cents": 500}
    assert crashed_and_recovered["before"]["kit-approval send_payment"] == 0
    assert crashed_and_recovered["after"]["kit-approval send_payment"] == 1
    answer = crashed_and_recovered["answers"]["kit-approval"]
    result = answer["result"]
    # the recovered workflow replayed its first step: the same approval id
    assert result["asked"]["approval_id"] == pending["kit-approval"]["approval_id"]
    assert result["decision"] is True
    assert result["settled"] == {"ok": True, "data": "paid 500 cents to kit-approval",
                                 "attempts": 1, "replayed": False}
    assert answer["steps"][0] == "agentkit.call:send_payment"
    assert "DBOS.recv" in answer["steps"] and answer["steps"][-1] == "agentkit.approve"


def test_a_contradicting_decision_is_refused_while_no_worker_runs(crashed_and_recovered):
    """approve, then deny, then approve again, while the worker is down: the deny is refused
    (1, naming the first decision), the same decision again is sent again (DBOS keeps one
    message per approval), and the workflow pays once when recovered."""
    pending = {record["task_id"]: record for record in crashed_and_recovered["pending"]}
    approval = pending["kit-approval"]["approval_id"]
    (first, *_), (contradicted, line), (again, _) = crashed_and_recovered["decided"]["kit-approval"]
    assert first == 0 and contradicted == 1 and again == 0
    assert line.startswith(f"{approval}: already approved at ") and "contradict" in line
    assert crashed_and_recovered["decided"]["kit-denial"][1][0] == 1  # approve after deny
    assert crashed_and_recovered["after"]["kit-approval send_payment"] == 1
    assert crashed_and_recovered["after"]["kit-denial send_payment"] == 0


@pytest.mark.parametrize(("scenario", "paid", "expected"), [
    ("kit-approve-before-write", 1, {"ok": True, "data": "paid 500 cents to "
                                     "kit-approve-before-write", "attempts": 1, "replayed": False}),
    ("kit-approve-after-write", 1, {"ok": True, "data": "paid 500 cents to "
                                    "kit-approve-after-write", "attempts": 0, "replayed": False}),
    ("kit-approve-nolookup", 0, {"ok": False, "error": "outcome_unknown", "retryable": False,
                                 "attempts": 0, "replayed": False}),
])
def test_a_worker_killed_inside_the_approve_step_settles_on_recovery(crashed_and_recovered,
                                                                      scenario, paid, expected):
    """The face's own workflow shape (ask, wait, approve), killed inside the approve step:
    the approval was left running by a dead process; on recovery the owner check sees it
    gone at once and the status lookup settles the claim (it runs once, or the receipt), or
    with no lookup ``outcome_unknown``; never ``in_progress`` checkpointed as the output."""
    assert crashed_and_recovered["running"][scenario]["run_by"]["pid"] > 0  # who ran it
    before = 1 if scenario == "kit-approve-after-write" else 0
    assert crashed_and_recovered["before"][f"{scenario} send_payment"] == before
    assert crashed_and_recovered["after"][f"{scenario} send_payment"] == paid
    answer = crashed_and_recovered["answers"][scenario]
    assert answer["result"]["decision"] is True
    assert answer["result"]["settled"] == expected
    assert answer["steps"][-1] == "agentkit.approve"


def test_a_denial_after_the_crash_pays_nothing(crashed_and_recovered):
    assert crashed_and_recovered["after"]["kit-denial send_payment"] == 0
    result = crashed_and_recovered["answers"]["kit-denial"]["result"]
    assert result["decision"] is False
    assert result["settled"]["error"] == "forbidden" and result["settled"]["attempts"] == 0
    assert crashed_and_recovered["answers"]["kit-denial"]["steps"][-1] == "agentkit.deny"


def test_two_recoveries_racing_write_once(tmp_path):
    """Two new processes recover the same killed worker's workflows at once (they launch on
    the same signal): the engine's step ran twice in all (DBOS admits one runner per
    workflow), the write through agentkit once."""
    backend = Backend("sqlite", tmp_path)
    scenarios = ["alone-after-write", "kit-lookup", "kit-approve-before-write"]
    crashed = backend.run("crash", scenarios)
    assert crashed.returncode == 1, crashed.stdout + crashed.stderr
    racers = [subprocess.Popen(backend.command("race", scenarios), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        for racer in racers:  # both configured, neither launched yet
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        outputs = [racer.communicate(timeout=180) for racer in racers]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()
    for racer, (out, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, out + err
        seen = json.loads(out.strip().splitlines()[-1])
        assert seen["kit-lookup"]["result"]["ok"] is True  # each sees the one settled result
        assert seen["kit-approve-before-write"]["result"]["settled"]["ok"] is True
    counts = ledger(tmp_path)
    assert counts["alone-after-write save_note"] == 2
    assert counts["kit-lookup save_note"] == 1
    assert counts["kit-approve-before-write send_payment"] == 1


# --------------------------------------------------------------------------- in one process
#
# The workflows below are registered when this module is imported (DBOS wants them before
# launch); each test gives them its own DurableTools through HERE.

HERE: dict[str, Any] = {}


def _ledger_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@DBOS.workflow()
def one_call(name: Any, arguments: Any) -> dict[str, Any]:
    return HERE["tools"].call(name, arguments)  # type: ignore[no-any-return]


@DBOS.workflow()
async def one_acall(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return await HERE["tools"].acall(name, arguments)  # type: ignore[no-any-return]


@DBOS.workflow()
def ask_and_wait(to: str, timeout: float) -> dict[str, Any]:
    tools = HERE["tools"]
    asked = tools.call("send_payment", {"to": to, "cents": 1})
    HERE["asked"] = asked
    HERE["waiting"].set()
    decision = tools.wait_for_decision(asked["approval_id"], timeout)
    if decision is None:
        return {"asked": asked, "decision": None}
    settled = tools.approve(asked["approval_id"]) if decision else tools.deny(asked["approval_id"])
    return {"asked": asked, "decision": decision, "settled": settled,
            "call_ids": [r.call_id for r in tools.runner.trace.records]}


@DBOS.workflow()
async def ask_and_await(to: str) -> dict[str, Any]:
    tools = HERE["tools"]
    asked = await tools.acall("send_payment", {"to": to, "cents": 1})
    HERE["waiting"].set()
    decision = await tools.await_decision(asked["approval_id"], 30)
    settled = (await tools.aapprove(asked["approval_id"]) if decision
               else await tools.adeny(asked["approval_id"]))
    return {"decision": decision, "settled": settled}


@DBOS.step()
def step_that_calls_a_tool() -> dict[str, Any]:
    return HERE["tools"].call("save_note", {"name": "x", "text": "y"})  # type: ignore[no-any-return]


@DBOS.workflow()
def call_inside_a_step() -> dict[str, Any]:
    return step_that_calls_a_tool()


@pytest.fixture(scope="module")
def dbos_app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dbos-app")
    DBOS(config={"name": "agentkit-tests", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{folder / 'dbos.sqlite'}"})
    DBOS.launch()
    yield f"sqlite:///{folder / 'dbos.sqlite'}"
    DBOS.destroy()


class Tools:
    """Counted tools, their ledger file, and DurableTools over a fresh SQLite store."""

    def __init__(self, folder: Path, **options: Any) -> None:
        self.ledger = folder / "ledger"
        self.drops = 0
        self.hold: threading.Event | None = None
        self.entered = threading.Event()
        self.store = SQLiteIdempotencyStore(folder / "agentkit.sqlite3")

        def save_note(name: str, text: str) -> dict[str, str]:
            """Save a note."""
            _ledger_line(self.ledger, f"save_note {name}")
            return {"saved": name}

        def send_payment(to: str, cents: int) -> str:
            """Send a payment."""
            if self.hold is not None:  # a test holds the payment here until it lets go
                self.entered.set()
                assert self.hold.wait(30)
            _ledger_line(self.ledger, f"send_payment {to}")
            return f"paid {cents} cents to {to}"

        def search(query: str) -> str:
            """Search the notes."""
            _ledger_line(self.ledger, f"search {query}")
            if self.drops:
                self.drops -= 1
                raise ConnectionError("connection reset")
            return "3 notes"

        self.registry = ToolRegistry([
            ToolSpec("save_note", "Save a note.", "reversible_write", 10.0, 3, 200, save_note),
            ToolSpec("send_payment", "Send a payment.", "irreversible_write", 10.0, 1, 200,
                     send_payment),
            ToolSpec("search", "Search the notes.", "read", 10.0, 3, 200, search),
        ])
        self.tools = DurableTools(self.registry, self.store, sleep=lambda seconds: None, **options)
        HERE.clear()
        HERE.update(tools=self.tools, waiting=threading.Event())

    def count(self, prefix: str) -> int:
        if not self.ledger.exists():
            return 0
        return sum(line.startswith(prefix) for line in self.ledger.read_text().splitlines())


def start(workflow: Any, *args: Any, workflow_id: str | None = None) -> Any:
    with SetWorkflowID(workflow_id or f"wf-{uuid.uuid4().hex[:12]}"):
        return DBOS.start_workflow(workflow, *args)


def test_a_call_is_one_step_keyed_by_the_workflow_named_by_its_step(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    handle = start(one_call, "save_note", {"name": "n1", "text": "t"}, workflow_id="order-7")
    assert handle.get_result(polling_interval_sec=0.02)["ok"] is True
    steps = DBOS.list_workflow_steps("order-7")
    assert [s["function_name"] for s in steps] == ["agentkit.call:save_note"]
    runner = kit.tools.runner_for("order-7")
    assert runner.context.task_id == "order-7"
    assert [r.call_id for r in runner.trace.records] == [f"order-7:{steps[0]['function_id']}"]
    assert kit.count("save_note") == 1


def test_dbos_retries_are_off_agentkits_policy_retries_the_read(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    kit.drops = 2
    handle = start(one_call, "search", {"query": "q"})
    result = handle.get_result(polling_interval_sec=0.02)
    assert result == {"ok": True, "data": "3 notes", "attempts": 3, "replayed": False}
    assert kit.count("search") == 3  # agentkit's bounded retry, inside one step
    assert len(DBOS.list_workflow_steps(handle.get_workflow_id())) == 1


def test_model_input_never_raises_in_the_step(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    unknown = start(one_call, "drop_tables", {"x": 1}).get_result(polling_interval_sec=0.02)
    assert unknown["error"] == "unknown_tool"
    handle = start(one_call, "save_note", "not a dict")
    assert handle.get_result(polling_interval_sec=0.02)["error"] == "invalid_arguments"
    steps = DBOS.list_workflow_steps(handle.get_workflow_id())
    assert [s["function_name"] for s in steps] == ["agentkit.call:save_note"]
    assert kit.count("") == 0


def test_a_new_run_under_the_same_workflow_id_replays_what_the_earlier_one_settled(
        dbos_app, tmp_path):
    """The workflow id is the business identity: DBOS forgets the run (deleted here, as a
    lost system database would), and a new run under the same id does not write again."""
    kit = Tools(tmp_path)
    arguments = {"name": "invoice-42", "text": "paid"}
    first = start(one_call, "save_note", arguments, workflow_id="invoice-42")
    assert first.get_result(polling_interval_sec=0.02)["replayed"] is False
    client = DBOSClient(system_database_url=dbos_app)
    try:
        client.delete_workflow("invoice-42")
    finally:
        client.destroy()
    again = start(one_call, "save_note", arguments, workflow_id="invoice-42")
    assert again.get_result(polling_interval_sec=0.02)["replayed"] is True
    assert kit.count("save_note") == 1


def test_an_async_workflow_calls_and_settles_as_steps(dbos_app, tmp_path):
    import asyncio

    kit = Tools(tmp_path)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        with SetWorkflowID(f"wf-{uuid.uuid4().hex[:12]}"):
            saved = await (await DBOS.start_workflow_async(one_acall, "save_note",
                                                           {"name": "a", "text": "t"})).get_result()
        with SetWorkflowID("pay-async"):
            handle = await DBOS.start_workflow_async(ask_and_await, "ada")
        await asyncio.to_thread(HERE["waiting"].wait, 30)
        approval = kit.tools.runner_for("pay-async").pending_approvals()[0]["approval_id"]
        client = DBOSClient(system_database_url=dbos_app)
        try:
            await send_decision_async("pay-async", approval, True, client=client)
        finally:
            client.destroy()
        return saved, await handle.get_result()

    saved, paid = asyncio.run(run())
    assert saved["ok"] is True
    assert paid["decision"] is True and paid["settled"]["data"] == "paid 1 cents to ada"
    names = [s["function_name"] for s in DBOS.list_workflow_steps("pay-async")]
    assert names[0] == "agentkit.call:send_payment" and names[-1] == "agentkit.approve"
    assert kit.count("save_note") == 1 and kit.count("send_payment") == 1


def test_a_decision_wakes_the_waiting_workflow_and_the_settling_is_a_step(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "ada", 30.0, workflow_id="pay-1")
    assert HERE["waiting"].wait(30)
    approval_id = HERE["asked"]["approval_id"]
    assert kit.count("send_payment") == 0
    send_decision("pay-1", approval_id, True)  # from the application itself: DBOS.send
    result = handle.get_result(polling_interval_sec=0.02)
    assert result["settled"] == {"ok": True, "data": "paid 1 cents to ada", "attempts": 1,
                                 "replayed": False}
    steps = DBOS.list_workflow_steps("pay-1")
    approve_step = next(s for s in steps if s["function_name"] == "agentkit.approve")
    assert result["call_ids"] == ["pay-1:1", f"pay-1:{approve_step['function_id']}"]
    assert kit.count("send_payment") == 1


def test_only_the_first_decision_counts(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "eve", 30.0, workflow_id="pay-2")
    assert HERE["waiting"].wait(30)
    approval_id = HERE["asked"]["approval_id"]
    client = DBOSClient(system_database_url=dbos_app)
    try:
        send_decision("pay-2", approval_id, False, client=client)
        send_decision("pay-2", approval_id, True, client=client)  # too late: one message per approval
    finally:
        client.destroy()
    result = handle.get_result(polling_interval_sec=0.02)
    assert result["decision"] is False and result["settled"]["error"] == "forbidden"
    assert kit.count("send_payment") == 0


def test_no_decision_in_time_is_none_and_runs_nothing(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    result = start(ask_and_wait, "bob", 0.2).get_result(polling_interval_sec=0.02)
    assert result["decision"] is None
    assert kit.count("send_payment") == 0
    pending = kit.tools.runner_for("anyone").pending_approvals()  # still waiting, in the store
    assert [p["approval_id"] for p in pending] == [HERE["asked"]["approval_id"]]


def test_a_message_that_is_not_a_clear_yes_is_a_refusal(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "mallory", 30.0, workflow_id="pay-3")
    assert HERE["waiting"].wait(30)
    DBOS.send("pay-3", "yes", decision_topic(HERE["asked"]["approval_id"]))
    result = handle.get_result(polling_interval_sec=0.02)
    assert result["decision"] is False and result["settled"]["error"] == "forbidden"
    assert kit.count("send_payment") == 0


def test_outside_a_workflow_or_inside_a_step_the_tools_refuse(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    with pytest.raises(RuntimeError, match="inside a @DBOS.workflow"):
        kit.tools.call("save_note", {"name": "x", "text": "y"})
    with pytest.raises(RuntimeError, match="no DBOS workflow"):
        kit.tools.runner  # noqa: B018
    with pytest.raises(RuntimeError, match="inside a @DBOS.workflow"):
        kit.tools.wait_for_decision("apr-1", 1)
    handle = start(call_inside_a_step)
    with pytest.raises(RuntimeError, match="not from inside another step"):
        handle.get_result(polling_interval_sec=0.02)
    assert kit.count("") == 0


def test_a_budget_per_workflow(dbos_app, tmp_path):
    budgets: dict[str, Budget] = {}

    def budget(workflow_id: str) -> Budget:
        return budgets.setdefault(workflow_id, Budget(max_attempts=1))

    kit = Tools(tmp_path, budget=budget)
    kit.drops = 1
    first = start(one_call, "search", {"query": "a"}, workflow_id="budget-1")
    assert first.get_result(polling_interval_sec=0.02)["error"] == "budget_exhausted"
    second = start(one_call, "search", {"query": "b"}, workflow_id="budget-2")
    assert second.get_result(polling_interval_sec=0.02)["ok"] is True
    assert budgets["budget-1"].used == 1 and budgets["budget-2"].used == 1
    assert kit.count("search") == 2


def test_bad_setup_is_refused_when_made(tmp_path, caplog):
    registry = ToolRegistry([])
    with pytest.raises(ValueError, match="durable store"):
        DurableTools(registry, None)
    with caplog.at_level("WARNING", logger="agentkit"):
        DurableTools(registry, IdempotencyStore())  # works in one process, says what it risks
    assert "its keys die with this process" in caplog.text
    store = SQLiteIdempotencyStore(tmp_path / "s.sqlite3")
    with pytest.raises(TypeError):
        DurableTools(registry, store, slep=lambda s: None)  # a misspelled runner option
    with pytest.raises(TypeError, match="budget"):
        DurableTools(registry, store, budget=3)
    with pytest.raises(TypeError, match="approved"):
        send_decision("wf", "apr-1", "yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="approval_id"):
        decision_topic("")
    store.close()


# --------------------------------------------------------------------------- the approvals CLI


def cli_decide(capsys, *argv: str) -> tuple[int, str, str]:
    from agentkit.faces import cli

    status = cli.main(["approvals", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_cli_sends_a_persons_decision_to_the_waiting_workflow(dbos_app, tmp_path, capsys):
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "ada", 30.0, workflow_id="cli-pay")
    assert HERE["waiting"].wait(30)
    approval_id = HERE["asked"]["approval_id"]
    status, out, err = cli_decide(capsys, "approve", approval_id, "--store", str(kit.store.path),
                                  "--dbos-workflow", "cli-pay", "--dbos-system-database", dbos_app)
    assert (status, err) == (0, "")
    assert out == f"sent: approve {approval_id} to DBOS workflow cli-pay (its own step settles the call)\n"
    result = handle.get_result(polling_interval_sec=0.02)
    assert result["settled"]["data"] == "paid 1 cents to ada"
    assert kit.count("send_payment") == 1  # paid by the workflow's step, not by the CLI
    # a second decision that contradicts the first is refused, one line, exit 1
    status, out, err = cli_decide(capsys, "deny", approval_id, "--store", str(kit.store.path),
                                  "--dbos-workflow", "cli-pay", "--dbos-system-database", dbos_app)
    assert status == 1 and out == "" and err.count("\n") == 1
    assert f"{approval_id}: already approved at " in err and "would contradict it" in err
    # the same decision again replays what happened: exit 0, nothing sent, nothing paid
    status, out, err = cli_decide(capsys, "approve", approval_id, "--store", str(kit.store.path),
                                  "--dbos-system-database", dbos_app)
    assert (status, err) == (0, "") and "already approved at " in out and "outcome: ok" in out
    assert kit.count("send_payment") == 1


def test_the_cli_refuses_bad_dbos_input_in_one_line(dbos_app, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DBOS_SYSTEM_DATABASE_URL", raising=False)
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "eve", 30.0, workflow_id="cli-pay-2")
    assert HERE["waiting"].wait(30)
    approval_id = HERE["asked"]["approval_id"]
    store = ["--store", str(kit.store.path)]
    url = ["--dbos-system-database", dbos_app]
    cases = [
        (["list", *store, "--dbos-workflow", "cli-pay-2"], "go with approve or deny"),
        (["list", *store, *url], "go with approve or deny"),
        (["approve", approval_id, *store, "--dbos-workflow", "cli-pay-2"],
         "give --dbos-system-database"),
        (["approve", approval_id, *store], "belongs to DBOS workflow cli-pay-2: its decision "
         "goes to that workflow; give --dbos-system-database URL"),
        (["approve", approval_id, *store, "--dbos-schema", "other"],
         "--dbos-schema goes with --dbos-system-database"),
        (["approve", "apr-nope", *store, *url, "--dbos-workflow", "cli-pay-2"],
         "no pending approval apr-nope"),
        (["approve", approval_id, *store, *url, "--dbos-workflow", "another"],
         "was asked by workflow cli-pay-2, not another"),
        (["approve", approval_id, "--store", str(tmp_path / "missing.sqlite3"), *url,
          "--dbos-workflow", "cli-pay-2"], "no such store"),
        (["approve", approval_id, *store, "--dbos-workflow", "cli-pay-2",
          "--dbos-system-database", f"sqlite:///{tmp_path / 'nothing.sqlite'}"],
         "no such DBOS system database"),
        (["approve", approval_id, *store, "--dbos-workflow", "cli-pay-2",
          "--dbos-system-database", "postgresql://agent:s3cret-pw@127.0.0.1:1/none"],
         "cannot open the DBOS system database"),
        (["approve", approval_id, *store, "--dbos-workflow", "cli-pay-2",
          "--dbos-system-database", f"sqlite:///{kit.store.path}"],  # not DBOS's database
         "cannot read DBOS workflow"),
    ]
    for argv, expected in cases:
        status, out, err = cli_decide(capsys, *argv)
        assert status == 2, (argv, out, err)
        assert out == "" and err.count("\n") == 1 and expected in err, (argv, err)
        assert "Traceback" not in err and "s3cret-pw" not in err
    assert not (tmp_path / "nothing.sqlite").exists()  # nothing was created
    # the workflow still waits: the right decision still reaches it
    status, _, _ = cli_decide(capsys, "deny", approval_id, *store, *url,
                              "--dbos-workflow", "cli-pay-2")
    assert status == 0
    assert handle.get_result(polling_interval_sec=0.02)["settled"]["error"] == "forbidden"
    assert kit.count("send_payment") == 0


# --------------------------------------------------------------------------- owned by a workflow
#
# docs/design.md#approvals: an approval belongs to the workflow that asked; a decision goes to that
# workflow; a workflow that ended leaves none pending; only settled answers are checkpointed.

ENDING_DIR = Path(tempfile.mkdtemp(prefix="agentkit-dbos-ending-"))
# (made at import, as DBOS registers workflows then: every process that imports this module
# makes one, also an xdist worker that runs none of these tests; each removes its own)
atexit.register(shutil.rmtree, ENDING_DIR, True)


def _ending_payment(to: str, cents: int) -> str:
    """Send a payment."""
    _ledger_line(ENDING_DIR / "ledger", f"send_payment {to}")
    return f"paid {cents} cents to {to}"


ENDING = DurableTools(
    ToolRegistry([ToolSpec("send_payment", "Send a payment.", "irreversible_write", 10.0, 1, 200,
                           _ending_payment)]),
    SQLiteIdempotencyStore(ENDING_DIR / "agentkit.sqlite3"), sleep=lambda seconds: None)


@ENDING.workflow()
def ask_then_give_up(to: str) -> dict[str, Any]:
    asked = ENDING.call("send_payment", {"to": to, "cents": 2})
    return {"asked": asked, "decision": ENDING.wait_for_decision(asked["approval_id"], 0.05)}


@ENDING.workflow()
def ask_then_fail(to: str) -> dict[str, Any]:
    ENDING.call("send_payment", {"to": to, "cents": 2})
    raise ValueError("the order was withdrawn")


@ENDING.workflow()
async def ask_then_give_up_async(to: str) -> dict[str, Any]:
    asked = await ENDING.acall("send_payment", {"to": to, "cents": 2})
    return {"asked": asked, "decision": await ENDING.await_decision(asked["approval_id"], 0.05)}


@pytest.fixture(scope="module")
def ending(dbos_app):
    yield ENDING
    ENDING.store.close()
    shutil.rmtree(ENDING_DIR, ignore_errors=True)


def ending_payments() -> int:
    path = ENDING_DIR / "ledger"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_record_names_the_workflow_that_owns_it(dbos_app, tmp_path):
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "ada", 0.05, workflow_id="owner-1")
    asked = handle.get_result(polling_interval_sec=0.02)["asked"]
    record = kit.store.get_approval(asked["approval_id"])
    assert record["task_id"] == "owner-1"
    assert record["workflow"] == {"engine": "dbos", "id": "owner-1"}


@pytest.mark.parametrize("how", ["returns", "raises", "returns (async)"])
def test_a_workflow_that_ended_leaves_none_of_its_approvals_pending(ending, how):
    workflow_id = f"ending-{how.split()[0]}-{'async' if 'async' in how else 'sync'}"
    function = {"returns": ask_then_give_up, "raises": ask_then_fail,
                "returns (async)": ask_then_give_up_async}[how]
    handle = start(function, workflow_id, workflow_id=workflow_id)
    if how == "raises":
        with pytest.raises(ValueError, match="withdrawn"):
            handle.get_result(polling_interval_sec=0.02)
    else:
        assert handle.get_result(polling_interval_sec=0.02)["decision"] is None
    [record] = [r for r in ENDING.store.list_approvals() if r["task_id"] == workflow_id]
    assert record["state"] == "settled" and record["result"]["error"] == "forbidden"
    assert record["closed"] == "workflow ended"
    assert ENDING.runner_for("anyone").pending_approvals() == []
    # nothing can pay it any more, not even its own workflow's runner
    again = ENDING.runner_for(workflow_id).approve(record["approval_id"])
    assert again["error"] == "forbidden" and again["replayed"] is True
    assert ending_payments() == 0


def test_an_in_progress_answer_is_retried_never_checkpointed(dbos_app, tmp_path):
    """The workflow's approve step meets the same approval running elsewhere (a live
    approver of the same workflow, in another thread): the step raises StillRunning, DBOS
    retries it, and what it checkpoints is the settled result: one payment."""
    kit = Tools(tmp_path)
    kit.tools.RETRY = {"interval_seconds": 0.02, "backoff_rate": 1.0, "max_attempts": 1000}
    kit.hold = threading.Event()
    handle = start(ask_and_wait, "gil", 30.0, workflow_id="still-1")
    assert HERE["waiting"].wait(30)
    approval_id = HERE["asked"]["approval_id"]
    runner = kit.tools.runner_for("still-1")
    answered: list[str] = []
    retried = threading.Event()

    def watch(event: Any) -> None:
        if event.kind == "call_ended" and event.operation == "approve":
            answered.append(str(event.result.get("error") or "ok"))
            if answered.count("in_progress") >= 2:
                retried.set()

    runner.add_observer(watch)
    elsewhere = threading.Thread(target=lambda: answered.append(
        "elsewhere:" + str(runner.approve(approval_id).get("ok"))))
    elsewhere.start()
    assert kit.entered.wait(30)  # the live approver holds the payment
    send_decision("still-1", approval_id, True)
    assert retried.wait(30)  # the step met in_progress, and DBOS ran it again
    kit.hold.set()
    elsewhere.join(30)
    result = handle.get_result(polling_interval_sec=0.02)
    assert result["settled"] == {"ok": True, "data": "paid 1 cents to gil", "attempts": 0,
                                 "replayed": True}
    assert "elsewhere:True" in answered
    assert kit.count("send_payment") == 1


def test_a_cancelled_workflows_approval_pays_nothing_until_it_is_resumed(dbos_app, tmp_path,
                                                                          capsys, monkeypatch):
    monkeypatch.delenv("DBOS_SYSTEM_DATABASE_URL", raising=False)
    kit = Tools(tmp_path)
    handle = start(ask_and_wait, "cyd", 30.0, workflow_id="cancel-1")
    assert HERE["waiting"].wait(30)
    approval_id = HERE["asked"]["approval_id"]
    DBOS.cancel_workflow("cancel-1")
    store = ["--store", str(kit.store.path)]
    # a plain decision is refused: by the runner (forbidden) and by the CLI (exit 2, the route)
    plain = ToolRunner(kit.registry, store=kit.store)
    assert plain.approve(approval_id)["error"] == "forbidden"
    status, out, err = cli_decide(capsys, "approve", approval_id, *store)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "belongs to DBOS workflow cancel-1" in err and "--dbos-system-database" in err
    # routed to the cancelled workflow: nothing waits there; it stays pending (exit 2)
    status, out, err = cli_decide(capsys, "approve", approval_id, *store,
                                  "--dbos-system-database", dbos_app)
    assert status == 2 and "is CANCELLED" in err and "stays pending" in err
    assert kit.store.get_approval(approval_id)["state"] == "pending"
    assert kit.count("send_payment") == 0
    # resumed, it receives the decision and pays, once
    HERE["waiting"].clear()
    DBOS.resume_workflow("cancel-1")
    assert HERE["waiting"].wait(30)
    status, out, err = cli_decide(capsys, "approve", approval_id, *store,
                                  "--dbos-system-database", dbos_app)
    assert (status, err) == (0, "") and out.startswith(f"sent: approve {approval_id}")
    result = DBOS.retrieve_workflow("cancel-1").get_result(polling_interval_sec=0.02)
    assert result["settled"]["data"] == "paid 1 cents to cyd"
    assert kit.count("send_payment") == 1
    del handle


def test_a_decision_routed_to_an_ended_workflow_settles_its_approval(dbos_app, tmp_path, capsys,
                                                                      monkeypatch):
    """A workflow under a plain DBOS.workflow() that ended without a decision: its approval
    is still pending in the store; a decision routed to it (``$DBOS_SYSTEM_DATABASE_URL``
    set, no flag) settles it forbidden (exit 1), and nothing pays."""
    kit = Tools(tmp_path)
    result = start(ask_and_wait, "dee", 0.05, workflow_id="ended-1").get_result(
        polling_interval_sec=0.02)
    approval_id = result["asked"]["approval_id"]
    assert kit.store.get_approval(approval_id)["state"] == "pending"
    monkeypatch.setenv("DBOS_SYSTEM_DATABASE_URL", dbos_app)
    status, out, err = cli_decide(capsys, "approve", approval_id, "--store", str(kit.store.path))
    assert status == 1 and out == "" and err.count("\n") == 1
    assert "DBOS workflow ended-1 has ended (SUCCESS) without a decision" in err
    record = kit.store.get_approval(approval_id)
    assert record["state"] == "settled" and record["result"]["error"] == "forbidden"
    status, out, err = cli_decide(capsys, "approve", approval_id, "--store", str(kit.store.path),
                                  "--dbos-system-database", dbos_app)
    assert status == 1 and "ended without a decision; nothing ran" in err
    assert kit.count("send_payment") == 0
