"""The boundary's worker pool (docs/design.md#async-path): threads are reused, the worker
that became idle last takes the next task (a warm thread serves a steady stream of calls),
and an idle worker leaves after its idle time, after which a new one is started."""

from __future__ import annotations

import threading

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
