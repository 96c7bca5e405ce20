"""One conformance suite, two drivers (docs/design.md#drivers): every test here runs through
the sync driver (``call``/``approve``/``deny``) and the async one (``acall``/``aapprove``/
``adeny`` under ``asyncio.run``), by the ``drive`` fixture, never copied.

It covers the failure matrix, the lookup race, a hung write past its lease, kill -9 recovery,
the rev-3 irreversible write after a failed attempt, the risks of the drivers (cleanup that
writes inside an error path, a cancelled caller, a blocking store, the injected sleep and the
per-attempt context), and callers on one key from threads and tasks at once. Handler calls
are the handlers' real calls; waits are events, never sleeps.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentkit
from agentkit import (
    IdempotencyStore,
    NotApplied,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
)
from agentkit.boundary.concurrency import mark_landed
from agentkit.demo import matrix, scenarios
from agentkit.policy.stores import StoreError

TIMEOUT = 5.0  # generous: nothing here waits for it unless the test is about a timeout
SHORT = 0.05  # the boundary's own timeout, for rows about a handler that does not answer


class Drive:
    """One way of calling a runner: the sync driver, or the async one on a fresh loop."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def call(self, runner: ToolRunner, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.kind == "sync":
            return runner.call(name, arguments)
        return asyncio.run(runner.acall(name, arguments))  # type: ignore[no-any-return]

    def approve(self, runner: ToolRunner, approval_id: str) -> dict[str, Any]:
        if self.kind == "sync":
            return runner.approve(approval_id)
        return asyncio.run(runner.aapprove(approval_id))  # type: ignore[no-any-return]

    def deny(self, runner: ToolRunner, approval_id: str) -> dict[str, Any]:
        if self.kind == "sync":
            return runner.deny(approval_id)
        return asyncio.run(runner.adeny(approval_id))  # type: ignore[no-any-return]

    def ask(self, runner: ToolRunner, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The model calls; when asked for approval, a person approves."""
        first = self.call(runner, name, arguments)
        if first.get("error") != "approval_required":
            return first
        return self.approve(runner, first["approval_id"])


@pytest.fixture(params=["sync", "async"])
def drive(request: pytest.FixtureRequest) -> Drive:
    return Drive(request.param)


class Ledger:
    """A write tool's world: what landed, how many real calls, and its status lookup."""

    def __init__(self) -> None:
        self.landed: dict[str, str] = {}
        self.calls = 0
        self.lookups = 0
        self.lock = threading.Lock()

    def status(self, item: str, text: str) -> dict[str, Any] | None:
        with self.lock:
            self.lookups += 1
        return {"item": item} if self.landed.get(item) == text else None


def write_spec(handler: Callable[..., Any], *, effect: str = "reversible_write",
               lookup: Callable[..., Any] | None = None, timeout: float = TIMEOUT,
               attempts: int = 3) -> ToolSpec:
    return ToolSpec("write", "Write an item.", effect, timeout,
                    1 if effect == "irreversible_write" else attempts, 500, handler,
                    status_lookup=lookup,
                    idempotency_key=lambda context, arguments: f"item:{arguments['item']}")


# --------------------------------------------------------------------------- the failure matrix


def _ask_through(drive: Drive) -> Callable[[scenarios.Bench, Any], dict[str, Any]]:
    def ask(self: scenarios.Bench, arguments: Any) -> dict[str, Any]:
        result = drive.call(self.runner, self.spec.name, dict(arguments))
        self.steps.append((f"call {self.spec.name} {scenarios.compact(arguments)}", result))
        if result.get("error") == "approval_required":
            approval_id = result["approval_id"]
            result = drive.approve(self.runner, approval_id)
            self.steps.append((f"approve {approval_id}", result))
        return result

    return ask


EXPECTED = {(row["failure"], row["effect"]): row for row in matrix.load_matrix()}


@pytest.mark.parametrize(("failure", "effect"), scenarios.CELLS,
                         ids=[f"{f}-{e}" for f, e in scenarios.CELLS])
def test_every_row_of_the_failure_matrix(drive: Drive, failure: str, effect: str,
                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(scenarios.Bench, "ask", _ask_through(drive))
    cell = matrix.play(failure, effect, workdir=tmp_path)
    row = EXPECTED[(failure, effect)]
    assert cell.observed == row["expected"]
    assert cell.handler_calls == int(row["handler_calls"])


# --------------------------------------------------------------------------- rev 3: irreversible


@pytest.mark.parametrize(("landed", "lookup", "expected"), [
    (True, "answers", ("ok", None)),  # done: the receipt
    (False, "answers", ("transient_failure", False)),  # not done: nothing was sent
    (True, "raises", ("outcome_unknown", False)),  # unknown
    (True, "none", ("outcome_unknown", False)),  # no lookup: never transient_failure
])
def test_an_approved_write_whose_attempt_failed_asks_its_status_lookup(
    drive: Drive, landed: bool, lookup: str, expected: tuple[str, bool | None]
) -> None:
    ledger = Ledger()

    def send(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        if landed:
            ledger.landed[item] = text
        raise ConnectionError("the connection dropped")

    def broken(item: str, text: str) -> None:
        raise RuntimeError("the status service is down")

    status = {"answers": ledger.status, "raises": broken, "none": None}[lookup]
    runner = ToolRunner(ToolRegistry([write_spec(send, effect="irreversible_write", lookup=status)]))
    result = drive.ask(runner, "write", {"item": "p-1", "text": "5 EUR"})
    code, retryable = expected
    assert (result["error"] if not result["ok"] else "ok") == code
    if retryable is not None:
        assert result["retryable"] is retryable
    else:
        assert result["data"] == '{"item": "p-1"}'
    assert ledger.calls == 1 and result["attempts"] == 1
    again = drive.approve(runner, _approval_of(runner))
    assert again["replayed"] is True and ledger.calls == 1  # the settled result is kept
    assert again["attempts"] == 0  # a replay runs nothing
    assert {k: v for k, v in again.items() if k not in ("replayed", "attempts")} == \
        {k: v for k, v in result.items() if k not in ("replayed", "attempts")}


def _approval_of(runner: ToolRunner) -> str:
    found = runner.store.list_approvals()
    assert len(found) == 1
    return str(found[0]["approval_id"])


def test_an_approved_write_that_timed_out_and_then_landed_is_never_transient(drive: Drive) -> None:
    """The attempt is still running when the lookup starts: its "not done" proves nothing."""
    release, landed = threading.Event(), threading.Event()
    ledger = Ledger()

    def send(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        release.wait(TIMEOUT)
        ledger.landed[item] = text
        landed.set()
        return {"item": item}

    def racing_status(item: str, text: str) -> None:
        ledger.lookups += 1  # asked while the write is still under way: "not done"

    runner = ToolRunner(ToolRegistry([write_spec(send, effect="irreversible_write",
                                                 lookup=racing_status, timeout=SHORT)]))
    try:
        result = drive.ask(runner, "write", {"item": "p-1", "text": "5 EUR"})
    finally:
        release.set()
    assert landed.wait(TIMEOUT)
    assert (result["error"], result["retryable"]) == ("outcome_unknown", False)
    assert ledger.calls == 1 and ledger.lookups == 1


# --------------------------------------------------------------------------- the lookup race


def test_a_write_landing_while_the_lookup_runs_is_never_repeated(drive: Drive) -> None:
    release, landed = threading.Event(), threading.Event()
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        release.wait(TIMEOUT)  # hangs past the boundary's timeout ...
        ledger.landed[item] = text  # ... then lands
        landed.set()
        return {"item": item}

    def status(item: str, text: str) -> None:
        ledger.lookups += 1
        release.set()  # the write lands while the lookup is looking ...
        landed.wait(TIMEOUT)  # ... and the lookup's "not done" (None) is already stale

    runner = ToolRunner(ToolRegistry([write_spec(save, lookup=status, timeout=SHORT)]))
    result = drive.call(runner, "write", {"item": "d-1", "text": "hello"})
    assert (result["error"], result["retryable"]) == ("outcome_unknown", False)
    assert ledger.calls == 1 and ledger.lookups == 1 and ledger.landed == {"d-1": "hello"}


# --------------------------------------------------------------------------- a hung write


def test_a_hung_write_past_its_lease_is_never_run_beside_itself(drive: Drive) -> None:
    now = [1_000.0]
    store = IdempotencyStore(claim_ttl_seconds=1, clock=lambda: now[0])
    release, abandoned = threading.Event(), threading.Event()
    original = store.abandon

    def abandon(key: str, token: str) -> None:
        original(key, token)
        abandoned.set()

    store.abandon = abandon  # type: ignore[method-assign]
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        release.wait(TIMEOUT)
        ledger.landed[item] = text
        return {"item": item}

    runner = ToolRunner(ToolRegistry([write_spec(save, lookup=ledger.status, timeout=SHORT)]),
                        store=store)
    arguments = {"item": "d-1", "text": "hello"}
    try:
        first = drive.call(runner, "write", arguments)
        assert first["error"] == "outcome_unknown"
        now[0] += 10_000  # far past any lease: the claim's attempt still runs here
        second = drive.call(runner, "write", arguments)
        assert second["error"] == "in_progress" and ledger.calls == 1
    finally:
        release.set()
    assert abandoned.wait(TIMEOUT)  # the late attempt returned and handed its claim back
    third = drive.call(runner, "write", arguments)
    assert third["ok"] and third["data"] == '{"item": "d-1"}' and third["attempts"] == 0
    assert ledger.calls == 1


# --------------------------------------------------------------------------- kill -9


CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from pathlib import Path
    from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec

    work, mode, driver = Path(sys.argv[1]), sys.argv[2], sys.argv[3]

    def save(name: str, text: str) -> dict:
        with open(work / "runs.log", "a") as log:
            log.write("run\\n")
        (work / name).write_text(text)               # the write takes effect ...
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)     # ... and the process dies, kill -9
        return {"saved": name}

    def status(name: str, text: str):
        target = work / name
        return {"saved": name} if target.exists() and target.read_text() == text else None

    spec = ToolSpec("save", "Save a file.", "reversible_write", 5.0, 3, 200, save,
                    status_lookup=status)
    runner = ToolRunner(ToolRegistry([spec]), store=SQLiteIdempotencyStore(work / "s.sqlite"),
                        sleep=lambda s: None)
    arguments = {"name": "brief.md", "text": "hello"}
    if driver == "sync":
        print(runner.call("save", arguments))
    else:
        print(asyncio.run(runner.acall("save", arguments)))
    """
)


def test_a_write_killed_mid_way_is_recovered_not_repeated(drive: Drive, tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)

    def child(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(script), str(tmp_path), mode, drive.kind],
                              capture_output=True, text=True, timeout=120, check=False)

    killed = child("kill")
    assert killed.returncode == -9 and (tmp_path / "brief.md").read_text() == "hello"
    restarted = child("normal")
    assert restarted.returncode == 0, restarted.stderr
    assert "'ok': True" in restarted.stdout and "'attempts': 0" in restarted.stdout
    assert (tmp_path / "runs.log").read_text().count("run") == 1, "the write ran again"


# --------------------------------------------------------------------------- the drivers' risks


class FailingComplete(IdempotencyStore):
    """A store that cannot record a result: the cleanup (abandon the claim) must still run."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[str] = []

    def complete(self, key: str, mine: Any, result: Any, full_sync: bool = False) -> None:
        self.steps.append("complete")
        raise StoreError("disk full")

    def abandon_claim(self, key: str, mine: Any) -> None:
        self.steps.append("abandon_claim")
        super().abandon_claim(key, mine)

    def drop(self, key: str, mine: Any) -> None:
        self.steps.append("drop")
        super().drop(key, mine)


def test_cleanup_that_writes_runs_inside_the_error_path(drive: Drive) -> None:
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        return {"item": item}

    store = FailingComplete()
    runner = ToolRunner(ToolRegistry([write_spec(save, lookup=ledger.status)]), store=store)
    result = drive.call(runner, "write", {"item": "d-1", "text": "hello"})
    assert (result["error"], result["retryable"]) == ("outcome_unknown", False)
    assert store.steps == ["complete", "abandon_claim"] and ledger.calls == 1


def test_a_handler_failure_frees_the_key_through_a_store_step(drive: Drive) -> None:
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        raise NotApplied("bad draft")  # nothing took effect (any other exception is doubt)

    store = FailingComplete()
    runner = ToolRunner(ToolRegistry([write_spec(save)]), store=store)
    assert drive.call(runner, "write", {"item": "d-1", "text": "x"})["error"] == "tool_failure"
    assert drive.call(runner, "write", {"item": "d-1", "text": "x"})["error"] == "tool_failure"
    assert store.steps == ["drop", "drop"] and ledger.calls == 2  # the key was free again


def test_a_cancelled_approver_does_not_cancel_the_approvals_bookkeeping(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()
    ledger = Ledger()

    def send(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        entered.set()
        release.wait(TIMEOUT)
        return {"item": item}

    store = SQLiteIdempotencyStore(tmp_path / "s.sqlite")
    runner = ToolRunner(ToolRegistry([write_spec(send, effect="irreversible_write")]), store=store)
    asked = runner.call("write", {"item": "p-1", "text": "5"})
    settled = threading.Event()
    runner.add_observer(lambda e: settled.set() if e.kind == "approval_settled" else None)

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(runner.aapprove(asked["approval_id"]))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, TIMEOUT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await asyncio.get_running_loop().run_in_executor(None, settled.wait, TIMEOUT)
        return await runner.aapprove(asked["approval_id"])

    again = asyncio.run(go())
    store.close()
    assert again["ok"] and again["replayed"] is True and ledger.calls == 1


def test_a_blocking_store_never_blocks_the_loop(tmp_path: Path) -> None:
    store = SQLiteIdempotencyStore(tmp_path / "s.sqlite")
    original = store.claim
    in_claim, loop_ran = threading.Event(), threading.Event()
    waited: list[bool] = []

    def claim(*args: Any, **kwargs: Any) -> Any:
        in_claim.set()
        waited.append(loop_ran.wait(TIMEOUT))  # if this ran on the loop, nobody could set it
        return original(*args, **kwargs)

    store.claim = claim  # type: ignore[method-assign]
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        return {"item": item}

    runner = ToolRunner(ToolRegistry([write_spec(save)]), store=store)

    async def go() -> dict[str, Any]:
        call = asyncio.ensure_future(runner.acall("write", {"item": "d", "text": "t"}))
        while not in_claim.is_set():
            await asyncio.sleep(0)  # the loop keeps turning while the store step waits
        loop_ran.set()
        return await call

    result = asyncio.run(go())
    store.close()
    assert result["ok"] and waited == [True] and ledger.calls == 1


def test_the_async_sleep_is_injected_and_set_testing_covers_both() -> None:
    failures = [ConnectionError("a"), ConnectionError("b")]

    def search(query: str) -> str:
        if failures:
            raise failures.pop()
        return "found"

    slept: list[float] = []
    aslept: list[float] = []

    async def asleep(seconds: float) -> None:
        aslept.append(seconds)

    spec = ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, search)
    runner = ToolRunner(ToolRegistry([spec]), sleep=slept.append, asleep=asleep)
    with agentkit.set_testing(False):
        assert asyncio.run(runner.acall("search", {"query": "q"}))["ok"]
        assert aslept and all(s > 0 for s in aslept) and slept == []
        failures[:] = [ConnectionError("c")]
        with agentkit.set_testing(True):
            assert runner.call("search", {"query": "q"})["ok"]
            failures[:] = [ConnectionError("d")]
            assert asyncio.run(runner.acall("search", {"query": "q"}))["ok"]
        assert slept == [0.0] and aslept[-1] == 0.0
        failures[:] = [ConnectionError("e")]
        assert runner.call("search", {"query": "q"})["ok"]
        assert slept[-1] > 0  # the block restored the switch as it was


def test_a_fake_sleep_serves_the_async_path_when_no_asleep_is_given() -> None:
    failures = [ConnectionError("a")]

    def search(query: str) -> str:
        if failures:
            raise failures.pop()
        return "found"

    slept: list[float] = []
    spec = ToolSpec("search", "Search.", "read", TIMEOUT, 3, 100, search)
    runner = ToolRunner(ToolRegistry([spec]), sleep=slept.append)
    assert asyncio.run(runner.acall("search", {"query": "q"}))["ok"] and slept == [0.0]


@pytest.mark.parametrize("kind", ["sync", "coroutine"])
def test_the_attempt_context_marks_a_write_landed_on_both_drivers(drive: Drive, kind: str) -> None:
    def save(item: str, text: str) -> dict[str, Any]:
        mark_landed()
        return {"item": item}

    async def asave(item: str, text: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        mark_landed()
        return {"item": item}

    runner = ToolRunner(ToolRegistry([write_spec(save if kind == "sync" else asave)]))
    assert drive.call(runner, "write", {"item": "d", "text": "t"})["ok"]
    (record,) = [r for r in runner.trace.records if r.step == "attempt"]
    assert record.landed_at is not None and record.started_at <= record.landed_at


# --------------------------------------------------------------------------- one key, many callers


def test_callers_on_one_key_from_threads_and_tasks_at_once_run_it_once(tmp_path: Path) -> None:
    callers = 8  # 4 threads (sync driver) and 4 tasks (async driver)
    release = threading.Event()
    answered: list[dict[str, Any]] = []
    lock = threading.Lock()
    all_but_one = threading.Event()
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        release.wait(TIMEOUT)  # hold the claim until every other caller has answered
        return {"item": item}

    def seen(result: dict[str, Any]) -> None:
        with lock:
            answered.append(result)
            if len(answered) == callers - 1:
                all_but_one.set()

    store = SQLiteIdempotencyStore(tmp_path / "s.sqlite")
    runner = ToolRunner(ToolRegistry([write_spec(save)]), store=store)
    arguments = {"item": "d-1", "text": "hello"}
    start = threading.Barrier(callers // 2 + 1)

    def thread_caller() -> None:
        start.wait(TIMEOUT)
        seen(runner.call("write", arguments))

    async def tasks() -> None:
        async def one() -> None:
            seen(await runner.acall("write", arguments))

        await asyncio.get_running_loop().run_in_executor(None, start.wait, TIMEOUT)
        await asyncio.gather(*(one() for _ in range(callers // 2)))

    threads = [threading.Thread(target=thread_caller) for _ in range(callers // 2)]
    for thread in threads:
        thread.start()
    loop_thread = threading.Thread(target=asyncio.run, args=(tasks(),))
    loop_thread.start()
    try:
        assert all_but_one.wait(TIMEOUT)
    finally:
        release.set()
    for thread in [*threads, loop_thread]:
        thread.join(TIMEOUT)
    store.close()
    assert ledger.calls == 1
    codes = sorted("ok" if r["ok"] else r["error"] for r in answered)
    assert codes.count("ok") == 1 and set(codes) <= {"ok", "in_progress"}


def test_an_interrupted_write_keeps_its_claim_stale_for_the_lookup(drive: Drive) -> None:
    """An interrupt (not an Exception) mid-write is thrown into the steps: the claim is kept
    and marked stale (a store write in the error path), then the interrupt goes on."""
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        ledger.landed[item] = text
        raise KeyboardInterrupt

    store = FailingComplete()
    runner = ToolRunner(ToolRegistry([write_spec(save, lookup=ledger.status)]), store=store)
    with pytest.raises(KeyboardInterrupt):
        drive.call(runner, "write", {"item": "d-1", "text": "hello"})
    assert store.steps == ["abandon_claim"] and ledger.calls == 1
    again = drive.call(runner, "write", {"item": "d-1", "text": "hello"})  # the lookup settles it
    assert again["ok"] and again["attempts"] == 0 and ledger.calls == 1 and ledger.lookups == 1


class Twins(IdempotencyStore):
    """A store with async twins of its steps (as PostgreSQL's): the async driver awaits them."""

    blocking = True  # its sync steps would block: they must not run on the loop

    def __init__(self) -> None:
        super().__init__()
        self.awaited: list[str] = []

    async def aclaim(self, *args: Any, **kwargs: Any) -> Any:
        self.awaited.append("claim")
        return self.claim(*args, **kwargs)

    async def acomplete(self, *args: Any, **kwargs: Any) -> None:
        self.awaited.append("complete")
        self.complete(*args, **kwargs)


def test_the_async_driver_awaits_a_stores_async_twins() -> None:
    ledger = Ledger()

    def save(item: str, text: str) -> dict[str, Any]:
        ledger.calls += 1
        return {"item": item}

    store = Twins()
    runner = ToolRunner(ToolRegistry([write_spec(save)]), store=store)
    first = asyncio.run(runner.acall("write", {"item": "d", "text": "t"}))
    again = asyncio.run(runner.acall("write", {"item": "d", "text": "t"}))
    assert first["ok"] and again["replayed"] is True and ledger.calls == 1
    assert store.awaited == ["claim", "complete", "claim"]
    assert runner.call("write", {"item": "d", "text": "t"})["replayed"] is True
    assert store.awaited == ["claim", "complete", "claim"]  # the sync driver uses the sync steps
