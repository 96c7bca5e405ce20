"""PostgreSQL's async connections and the event loops that use them (issue 26;
docs/design.md#stores, "Event loops and connections"; #drivers).

psycopg's async connections belong to one loop. A program that runs one ``asyncio.run`` per
request, or two threads each with its own loop taking turns on one store, must return every
time, never leave a task of the store pending when a loop closes ("Task was destroyed but it
is pending!"), and hold a bounded number of server connections, counted on the server
(``pg_stat_activity``, by the store's own ``application_name``). Every ``asyncio.run`` runs
on a thread joined with a generous watchdog, so a hang fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from test_stores import PgSchema  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import PostgresIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec

WATCHDOG = 30.0  # one asyncio.run, at most: far above what it takes, far below a hang
SETTLE = 5.0  # for the server to see closed sessions go
POOL_SIZE = 2
CALLS = 40
SYNC = 2 * POOL_SIZE  # the sync pools: two durability levels
TWO_LOOPS = SYNC + 2 * (2 * POOL_SIZE)  # and two live loops' own, each at two levels


class Server:
    """A fresh schema, and the connections the store under test holds on the server."""

    def __init__(self) -> None:
        from psycopg.conninfo import make_conninfo

        self.schema = PgSchema()
        self.name = f"agentkit-loops-{os.urandom(4).hex()}"
        self.dsn = make_conninfo(self.schema.dsn, application_name=self.name)

    def connections(self) -> int:
        rows = self.schema.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (self.name,)
        )
        return int(rows[0][0])

    def settled(self, at_most: int) -> int:
        """The store's connections, once at most ``at_most``; fails if they are not within
        a few seconds. (A session the client closed stays in ``pg_stat_activity`` until its
        server process has exited, a moment later, and nothing tells the client when.)"""
        deadline = time.monotonic() + SETTLE
        while (count := self.connections()) > at_most and time.monotonic() < deadline:
            time.sleep(0.01)  # polling the server's own view: no event of ours to wait on
        assert count <= at_most, f"{count} server connections, more than {at_most}"
        return count


@pytest.fixture
def server() -> Iterator[Server]:
    made = Server()
    yield made
    made.schema.drop()


def runner_on(store: PostgresIdempotencyStore) -> tuple[ToolRunner, list[str]]:
    ran: list[str] = []

    def save(name: str) -> dict[str, Any]:
        ran.append(name)
        return {"saved": name}

    spec = ToolSpec("save", "Save a note.", "reversible_write", 5.0, 1, 200, save)
    return ToolRunner(ToolRegistry([spec]), store=store), ran


def watched(target: Callable[[], Any]) -> Any:
    """``target()`` on a thread of its own; fails (never hangs) if it has not returned
    within the watchdog."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(target()), daemon=True)
    thread.start()
    thread.join(WATCHDOG)
    assert not thread.is_alive(), f"still running after {WATCHDOG:g} s: the loop never closed"
    assert out, "it raised (see the thread's exception above)"
    return out[0]


@pytest.fixture
def destroyed_tasks(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], list[str]]]:
    """What asyncio said of tasks destroyed while pending (after a garbage collection)."""

    def said() -> list[str]:
        gc.collect()
        return [r.getMessage() for r in caplog.records
                if "Task was destroyed but it is pending" in r.getMessage()]

    with caplog.at_level("ERROR", logger="asyncio"):
        yield said


def test_one_asyncio_run_per_request_always_returns(
    server: Server, destroyed_tasks: Callable[[], list[str]]
) -> None:
    store = PostgresIdempotencyStore(server.dsn, pool_size=POOL_SIZE)
    runner, ran = runner_on(store)
    try:
        for number in range(CALLS):
            call = runner.acall("save", {"name": f"note-{number}"})
            result = watched(partial(asyncio.run, call))
            assert result["ok"] and result["attempts"] == 1
            server.settled(SYNC)  # between requests only the sync pools': none outlives its loop
        assert watched(lambda: asyncio.run(runner.acall("save", {"name": "note-0"})))[
            "replayed"] is True
    finally:
        store.close()
    assert len(ran) == CALLS
    assert destroyed_tasks() == []
    server.settled(0)  # close() closed the rest


@pytest.mark.parametrize("loops", ["a loop per thread", "asyncio.run per call"])
def test_two_threads_taking_turns_on_one_store(
    server: Server, destroyed_tasks: Callable[[], list[str]], loops: str
) -> None:
    store = PostgresIdempotencyStore(server.dsn, pool_size=POOL_SIZE)
    runner, ran = runner_on(store)
    turns = [threading.Event(), threading.Event()]

    async def one(worker: int, number: int) -> None:
        assert turns[worker].wait(WATCHDOG)
        turns[worker].clear()
        result = await runner.acall("save", {"name": f"w{worker}-{number}"})
        assert result["ok"] and result["attempts"] == 1
        server.settled(TWO_LOOPS)
        turns[1 - worker].set()

    def worker(worker: int) -> bool:
        if loops == "a loop per thread":

            async def all_turns() -> None:
                for number in range(CALLS // 2):
                    await one(worker, number)

            asyncio.run(all_turns())
        else:
            for number in range(CALLS // 2):
                asyncio.run(one(worker, number))
        return True

    turns[0].set()
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WATCHDOG)
    try:
        assert not any(thread.is_alive() for thread in threads), "a loop never closed"
        assert len(ran) == CALLS
        server.settled(SYNC)  # the loops' own closed with them
    finally:
        store.close()
    assert destroyed_tasks() == []


def test_a_store_step_on_an_ending_loop_runs_on_a_thread(server: Server) -> None:
    """While ``asyncio.run`` cancels a loop's tasks, a call's cleanup may still ask for a
    store step after the loop's connections were closed: it runs through the sync pools,
    and no new connection is made for the ending loop."""
    store = PostgresIdempotencyStore(server.dsn, pool_size=POOL_SIZE)

    async def main() -> tuple[Any, Any, list[str]]:
        first = await store.aclaim("k", "fp", 300, may_take_over=False)
        (closer,) = [t for t in asyncio.all_tasks() if "closer" in t.get_name()]
        closer.cancel()  # what asyncio.run does as it ends the loop
        with pytest.raises(asyncio.CancelledError):
            await closer
        again = await store.aclaim("k", "fp", 300, may_take_over=False)
        left = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return first, again, left

    try:
        first, again, left = watched(lambda: asyncio.run(main()))
        assert isinstance(first, tuple) and again["error"] == "in_progress"
        assert left == []  # no new connections (nor closer) for a loop that is ending
    finally:
        store.close()
    server.settled(0)


def test_aclose_closes_the_loops_connections_and_the_store(server: Server) -> None:
    store = PostgresIdempotencyStore(server.dsn, pool_size=POOL_SIZE)
    runner, ran = runner_on(store)

    async def main() -> dict[str, Any]:
        result = await runner.acall("save", {"name": "n"})
        await store.aclose()
        return result

    assert watched(lambda: asyncio.run(main()))["ok"] and ran == ["n"]
    server.settled(0)
    refused = watched(lambda: asyncio.run(runner.acall("save", {"name": "m"})))
    assert refused["error"] == "busy" and ran == ["n"]  # a closed store runs nothing

