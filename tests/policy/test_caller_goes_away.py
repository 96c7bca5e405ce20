"""The caller goes away mid-write (issue 26; docs/design.md#drivers, #stores, #error-codes):
every way out of an attempt keeps the key's claim live while the attempt really runs.

A Ctrl-C (``KeyboardInterrupt``), a ``SystemExit`` from a signal handler, a cancelled task,
an ``asyncio.run`` that ends while a sync handler still runs on its worker: the caller stops
waiting, the handler does not stop. The same call made again answers ``in_progress`` while
the first handler runs, and replays its result once it has returned: one real handler run.
An approved irreversible write interrupted the same way is never run again beside its
attempt, and its approval records what the attempt did.

Every test runs on the memory, SQLite and PostgreSQL stores (``make_store``: PostgreSQL is
skipped without ``AGENTKIT_TEST_PG_DSN``, as in tests/test_stores.py). Waits are events: the
handler blocks on one, interrupts its caller by a real signal sent to the main thread, and
the store tells the test when the late attempt's result was recorded.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_stores import Backend  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import IdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
from agentkit.boundary import workers
from agentkit.policy.stores import StoreError

WAIT = 10.0  # generous: every wait below ends on an event long before this
MAIN = threading.main_thread().ident


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    backend = Backend(request.param, tmp_path)
    yield backend
    backend.close()


class Interrupt:
    """The caller goes away: ``signum`` sent to the main thread by the handler once it runs,
    where a handler of the test's raises ``error`` (once: a signal that follows is ignored).

    CPython runs a signal's Python handler in the main thread, between bytecodes; a signal
    that lands while that thread waits (on a lock, in an event loop's ``select``) ends the
    wait at once. One that lands in the instant *before* the thread starts to wait is only
    seen when the wait returns (a real Ctrl-C there is as late), so the signal is sent again
    until the caller is gone.
    """

    def __init__(self, signum: int, error: type[BaseException]) -> None:
        self.signum, self.error = signum, error
        self.raised = False
        self.gone, self.sending, self.stopped = threading.Event(), threading.Event(), threading.Event()

    def handle(self, signum: int, frame: Any) -> None:
        if not self.raised:
            self.raised = True
            raise self.error

    def send(self) -> None:
        """From the handler's thread: until the caller has gone away."""
        self.sending.set()
        try:
            signal.pthread_kill(MAIN, self.signum)
            while not self.gone.wait(0.02):
                signal.pthread_kill(MAIN, self.signum)
        finally:
            self.stopped.set()


def installed(way: Interrupt) -> Iterator[Interrupt]:
    previous = signal.signal(way.signum, way.handle)
    yield way
    way.gone.set()
    if way.sending.is_set():  # no signal of ours may meet the handler restored below
        assert way.stopped.wait(WAIT)
    signal.signal(way.signum, previous)


@pytest.fixture(params=["KeyboardInterrupt", "SystemExit"])
def interrupt(request: pytest.FixtureRequest) -> Iterator[Interrupt]:
    """Ctrl-C (SIGINT: ``KeyboardInterrupt``), or a server's SIGTERM handler (``sys.exit``)."""
    if request.param == "KeyboardInterrupt":
        yield from installed(Interrupt(signal.SIGINT, KeyboardInterrupt))
    else:
        yield from installed(Interrupt(signal.SIGTERM, SystemExit))


@pytest.fixture
def ctrl_c() -> Iterator[Interrupt]:
    yield from installed(Interrupt(signal.SIGINT, KeyboardInterrupt))


class Write:
    """A write whose first run blocks until released (after telling its caller to go away,
    if asked), and a status lookup that reports what landed."""

    def __init__(self, interrupt: Interrupt | None = None) -> None:
        self.calls = 0
        self.lookups = 0
        self.landed: dict[str, str] = {}
        self.started, self.release = threading.Event(), threading.Event()
        self.interrupt = interrupt  # how the caller goes away once the first run started
        self.fail: BaseException | None = None  # raised by the first run once released

    def handler(self, item: str, text: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            if self.interrupt is not None:
                self.interrupt.send()
            assert self.release.wait(WAIT)
        self.landed[item] = text
        if self.calls == 1 and self.fail is not None:
            raise self.fail
        return {"item": item}

    def lookup(self, item: str, text: str) -> dict[str, Any] | None:
        self.lookups += 1
        return {"item": item} if self.landed.get(item) == text else None


class Watch:
    """The store's steps as they are made (on whatever thread, or awaited as the store's
    async twin ``a<step>``), to wait for one."""

    def __init__(self, store: Any, *names: str) -> None:
        self.seen: list[str] = []
        self.changed = threading.Condition()
        for name in names:
            setattr(store, name, self._watched(name, getattr(store, name)))
            twin = getattr(store, "a" + name, None)
            if twin is not None:
                setattr(store, "a" + name, self._awaited(name, twin))

    def _saw(self, name: str) -> None:
        with self.changed:
            self.seen.append(name)
            self.changed.notify_all()

    def _watched(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            finally:
                self._saw(name)

        return step

    def _awaited(self, name: str, twin: Callable[..., Any]) -> Callable[..., Any]:
        async def step(*args: Any, **kwargs: Any) -> Any:
            try:
                return await twin(*args, **kwargs)
            finally:
                self._saw(name)

        return step

    def wait_for(self, *names: str) -> None:
        """Until ``names`` were the last steps made, in that order."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.seen[-len(names):] == list(names), WAIT), \
                self.seen


SETTLING = ("complete", "drop", "abandon_claim")


def spec_of(write: Write, *, effect: str = "reversible_write", lookup: bool = True) -> ToolSpec:
    return ToolSpec("write", "Write an item.", effect, WAIT, 1 if effect == "irreversible_write" else 3,
                    500, write.handler, status_lookup=write.lookup if lookup else None,
                    idempotency_key=lambda context, arguments: f"item:{arguments['item']}")


ARGS = {"item": "d-1", "text": "hello"}


def outcome(result: dict[str, Any]) -> str:
    return "ok" if result["ok"] else str(result["error"])


def released_then_replayed(write: Write, runner: ToolRunner, watch: Watch,
                           call: Callable[[], dict[str, Any]], step: str = "complete") -> None:
    """While the first handler runs, the same call is ``in_progress`` (nothing runs); once
    it has returned and its result is recorded, the same call replays it: 1 run."""
    again = call()
    assert outcome(again) == "in_progress" and again["attempts"] == 0
    assert write.calls == 1
    write.release.set()
    watch.wait_for(step)
    replay = call()
    assert replay["ok"] and replay["replayed"] is True and replay["attempts"] == 0
    assert replay["data"] == '{"item": "d-1"}'
    assert write.calls == 1 and write.lookups == 0


# --------------------------------------------------------------------------- the sync driver


def interrupted_call(interrupt: Interrupt, call: Callable[[], Any]) -> None:
    with pytest.raises(interrupt.error):
        call()
    interrupt.gone.set()


@pytest.mark.parametrize("lookup", [True, False], ids=["lookup", "no-lookup"])
def test_an_interrupted_sync_write_keeps_its_claim_until_the_handler_returns(
    make_store: Backend, interrupt: Interrupt, lookup: bool
) -> None:
    """Ctrl-C (or SIGTERM's ``sys.exit``) while the handler runs on its worker; then the
    same call, as a notebook cell run again."""
    write = Write(interrupt)
    store = make_store()
    watch = Watch(store, *SETTLING)
    runner = ToolRunner(ToolRegistry([spec_of(write, lookup=lookup)]), store=store)
    try:
        interrupted_call(interrupt, lambda: runner.call("write", ARGS))
        assert write.started.is_set() and write.calls == 1
        released_then_replayed(write, runner, watch, lambda: runner.call("write", ARGS))
    finally:
        write.release.set()
    assert watch.seen == ["complete"]  # the late result was recorded, nothing else


def test_an_interrupted_write_that_ends_in_doubt_is_settled_by_the_lookup(
    make_store: Backend, ctrl_c: Interrupt
) -> None:
    """The late attempt drops its connection after the write landed: its claim goes stale,
    and the next call asks the status lookup, which finds the write (1 run)."""
    write = Write(ctrl_c)
    write.fail = ConnectionError("the connection dropped after the write")
    store = make_store()
    watch = Watch(store, *SETTLING)
    runner = ToolRunner(ToolRegistry([spec_of(write)]), store=store, sleep=lambda s: None)
    try:
        interrupted_call(ctrl_c, lambda: runner.call("write", ARGS))
        assert outcome(runner.call("write", ARGS)) == "in_progress"
    finally:
        write.release.set()
    watch.wait_for("abandon_claim")
    settled = runner.call("write", ARGS)
    assert settled["ok"] and settled["data"] == '{"item": "d-1"}' and settled["attempts"] == 0
    assert write.calls == 1 and write.lookups == 1


def test_an_interrupt_before_the_handler_started_frees_the_key(
    make_store: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C lands as the attempt is handed to a worker: nothing ran, nothing will, and the
    key is free at once (not ``in_progress``, not ``outcome_unknown``)."""
    write = Write()
    write.release.set()
    store = make_store()
    watch = Watch(store, *SETTLING)
    runner = ToolRunner(ToolRegistry([spec_of(write)]), store=store)
    submit = workers.POOL.submit

    def interrupted(task: Callable[[], None]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(workers.POOL, "submit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.call("write", ARGS)
    monkeypatch.setattr(workers.POOL, "submit", submit)
    assert write.calls == 0 and watch.seen == ["drop"]
    first = runner.call("write", ARGS)
    assert first["ok"] and first["attempts"] == 1 and write.calls == 1


# --------------------------------------------------------------------------- the async driver


def test_a_loop_that_ends_while_a_sync_write_runs_keeps_the_claim(make_store: Backend) -> None:
    """``asyncio.run`` returns (its leftover tasks cancelled, the loop closed) while the
    sync handler still runs on its worker."""
    write = Write()
    store = make_store()
    watch = Watch(store, *SETTLING)
    runner = ToolRunner(ToolRegistry([spec_of(write)]), store=store)

    async def leave_early() -> None:
        asyncio.ensure_future(runner.acall("write", ARGS))
        await asyncio.get_running_loop().run_in_executor(None, write.started.wait, WAIT)

    try:
        asyncio.run(leave_early())
        assert write.calls == 1 and not write.release.is_set()
        released_then_replayed(write, runner, watch,
                               lambda: asyncio.run(runner.acall("write", ARGS)))
    finally:
        write.release.set()


def test_ctrl_c_during_asyncio_run_keeps_the_claim(make_store: Backend, ctrl_c: Interrupt) -> None:
    """Ctrl-C while ``asyncio.run`` waits for a sync handler: the ``KeyboardInterrupt`` comes
    out of the loop (as on Python 3.10, or under any SIGINT handler of the program's own),
    and ``asyncio.run`` cancels the call's tasks before it closes the loop."""
    write = Write(ctrl_c)
    store = make_store()
    watch = Watch(store, *SETTLING)
    runner = ToolRunner(ToolRegistry([spec_of(write)]), store=store)
    try:
        interrupted_call(ctrl_c, lambda: asyncio.run(runner.acall("write", ARGS)))
        released_then_replayed(write, runner, watch,
                               lambda: asyncio.run(runner.acall("write", ARGS)))
    finally:
        write.release.set()


def test_a_cancelled_task_keeps_the_claim(make_store: Backend) -> None:
    write = Write()
    store = make_store()
    watch = Watch(store, *SETTLING)
    runner = ToolRunner(ToolRegistry([spec_of(write)]), store=store)

    async def cancel_then_ask_again() -> tuple[dict[str, Any], dict[str, Any]]:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(runner.acall("write", ARGS))
        await loop.run_in_executor(None, write.started.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        again = await runner.acall("write", ARGS)
        write.release.set()
        await loop.run_in_executor(None, watch.wait_for, "complete")
        return again, await runner.acall("write", ARGS)

    try:
        again, replay = asyncio.run(cancel_then_ask_again())
    finally:
        write.release.set()
    assert outcome(again) == "in_progress" and again["attempts"] == 0
    assert replay["ok"] and replay["replayed"] is True and write.calls == 1


# --------------------------------------------------------------------------- approvals


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("way", ["ctrl-c", "loop-ends"])
def test_an_interrupted_approved_write_is_never_run_again_beside_its_attempt(
    make_store: Backend, way: str, ctrl_c: Interrupt
) -> None:
    """The approver goes away while the payment runs. Long after the approval's own lease
    (the handler hangs), approving again is ``in_progress``: its first attempt may still
    run. Once it returns, the approval is settled with its receipt: 1 run."""
    write = Write(ctrl_c if way == "ctrl-c" else None)
    store = make_store()
    watch = Watch(store, *SETTLING, "update_approval")
    clock = Clock()
    runner = ToolRunner(ToolRegistry([spec_of(write, effect="irreversible_write")]),
                        store=store, clock=clock)
    asked = runner.call("write", ARGS)
    approval_id = asked["approval_id"]

    async def leave_early() -> None:
        asyncio.ensure_future(runner.aapprove(approval_id))
        await asyncio.get_running_loop().run_in_executor(None, write.started.wait, WAIT)

    try:
        if way == "ctrl-c":
            interrupted_call(ctrl_c, lambda: runner.approve(approval_id))
        else:
            asyncio.run(leave_early())
        clock.now += 10 * 3600  # far past the run's lease: the handler still hangs
        assert outcome(runner.approve(approval_id)) == "in_progress"
        assert outcome(asyncio.run(runner.aapprove(approval_id))) == "in_progress"
        assert outcome(runner.call("write", ARGS)) == "in_progress"
        assert runner.pending_approvals() == [] and write.calls == 1
    finally:
        write.release.set()
    watch.wait_for("complete", "update_approval")
    (record,) = store.list_approvals()
    assert record["state"] == "settled" and record["result"]["ok"] is True
    again = runner.approve(approval_id)
    assert again["ok"] and again["replayed"] is True and again["data"] == '{"item": "d-1"}'
    asked_again = runner.call("write", ARGS)
    assert asked_again["ok"] and asked_again["replayed"] is True
    assert write.calls == 1 and write.lookups == 0


def test_an_approved_write_interrupted_before_it_started_stays_pending(
    make_store: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing ran: the approval is not used up, and approving it again runs it once."""
    write = Write()
    write.release.set()
    store = make_store()
    runner = ToolRunner(ToolRegistry([spec_of(write, effect="irreversible_write")]), store=store)
    approval_id = runner.call("write", ARGS)["approval_id"]
    submit = workers.POOL.submit

    def interrupted(task: Callable[[], None]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(workers.POOL, "submit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.approve(approval_id)
    monkeypatch.setattr(workers.POOL, "submit", submit)
    assert write.calls == 0
    assert [a["approval_id"] for a in runner.pending_approvals()] == [approval_id]
    result = runner.approve(approval_id)
    assert result["ok"] and result["attempts"] == 1 and write.calls == 1


def test_a_store_failing_as_the_caller_leaves_never_replaces_the_interrupt(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The key is freed while the ``KeyboardInterrupt`` is on its way out; a store failing
    right then is logged (with the key), and the interrupt still reaches the caller."""

    class FailingDrop(IdempotencyStore):
        def drop(self, key: str, mine: Any) -> None:
            raise StoreError("memory store: disk on fire")

    write = Write()
    runner = ToolRunner(ToolRegistry([spec_of(write)]), store=FailingDrop())

    def interrupted(task: Callable[[], None]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(workers.POOL, "submit", interrupted)
    with caplog.at_level("ERROR", logger="agentkit"), pytest.raises(KeyboardInterrupt):
        runner.call("write", ARGS)
    assert write.calls == 0
    assert "could not be settled (drop)" in caplog.text and "disk on fire" in caplog.text
