"""The boundary's worker pool (docs/design.md#async-path): threads are reused, the worker
that became idle last takes the next task (a warm thread serves a steady stream of calls),
and an idle worker leaves after its idle time, after which a new one is started."""

from __future__ import annotations

import threading
from typing import Any

from agentkit.boundary.workers import WorkerPool

WAIT = 10.0  # an upper bound for events that come at once; never a sleep


def run(pool: WorkerPool) -> str:
    """Submit one task and return the name of the thread that ran it."""
    ran = threading.Event()
    names: list[str] = []

    def work() -> None:
        names.append(threading.current_thread().name)
        ran.set()

    pool.submit(work)
    assert ran.wait(WAIT)
    return names[0]


def wait_idle(pool: WorkerPool, count: int) -> None:
    """Until ``count`` workers are idle (each appends itself under the pool's lock)."""
    for _ in range(1_000_000):
        with pool._lock:
            if len(pool._idle) == count:
                return
    raise AssertionError("workers did not become idle")


def test_the_worker_idle_last_takes_the_next_task() -> None:
    pool = WorkerPool(name="lifo")
    release = threading.Event()
    started = threading.Barrier(3)

    def hold() -> None:
        started.wait(WAIT)
        release.wait(WAIT)

    pool.submit(hold)
    pool.submit(hold)  # both busy: a second thread
    started.wait(WAIT)
    release.set()
    wait_idle(pool, 2)
    names = set()
    for _ in range(20):
        wait_idle(pool, 2)  # both idle: the one that came back last is taken
        names.add(run(pool))
    assert len(names) == 1 and pool.threads_started == 2


def test_an_idle_worker_leaves_and_a_new_one_is_started() -> None:
    pool = WorkerPool(idle_seconds=0.01, name="short")
    first = run(pool)
    thread = next(t for t in threading.enumerate() if t.name == first)
    thread.join(WAIT)
    assert not thread.is_alive() and pool._idle == []
    second = run(pool)
    assert pool.threads_started == 2 and second != first


def test_a_task_s_caller_is_told_once_its_worker_is_idle_again() -> None:
    """What a task returns is called last, with its worker back among the idle ones: a call
    made at once by the caller it wakes finds that same worker (no second thread)."""
    pool = WorkerPool(name="told")
    seen: list[tuple[str, int, str]] = []
    second_ran = threading.Event()

    def second() -> None:
        seen.append(("second", pool.threads_started, threading.current_thread().name))
        second_ran.set()

    def tell() -> None:  # the caller, woken, calls again at once (here, on the worker itself)
        seen.append(("told", len(pool._idle), threading.current_thread().name))
        pool.submit(second)

    def first() -> object:
        seen.append(("first", len(pool._idle), threading.current_thread().name))
        return tell

    pool.submit(first)
    assert second_ran.wait(WAIT)
    worker = seen[0][2]
    assert seen == [("first", 0, worker), ("told", 1, worker), ("second", 1, worker)]


def test_a_tell_that_fails_is_logged_and_the_worker_serves_on(caplog: Any) -> None:
    pool = WorkerPool(name="failing-tell")

    def broken() -> None:
        raise RuntimeError("cannot tell")

    pool.submit(lambda: broken)
    wait_idle(pool, 1)
    names = {run(pool) for _ in range(3)}
    assert len(names) == 1 and pool.threads_started == 1
    assert "a worker could not tell its caller" in caplog.text
