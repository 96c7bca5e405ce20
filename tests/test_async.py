"""The async path (docs/design.md#async-path): ``ainvoke_tool`` and ``ToolRunner.acall`` give
the same results as the sync path, for every row of the failure matrix, with real handler
call counts.

Two matrices run here through both paths:

- the demo matrix's own scenarios (``agentkit.demo.scenarios``, sync handlers behind faults),
  once through ``call``/``approve`` and once through ``acall``/``aapprove``;
- the same rows with ``async def`` handlers, once from the sync path (the coroutine runs on a
  worker thread's own loop) and once from async code (it runs on the caller's loop).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any

import pytest

from agentkit import (
    Budget,
    CallContext,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    ainvoke_tool,
    invoke_tool,
)
from agentkit.demo import matrix, scenarios

SHORT = 0.2  # the timeout rows: their handler never answers, so this is what they wait


def arun(coroutine: Awaitable[Any]) -> Any:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the demo matrix


def _ask_async(self: scenarios.Bench, arguments: Any) -> dict[str, Any]:
    """``Bench.ask`` through the async path: ``acall``, then ``aapprove`` when asked."""
    result = arun(self.runner.acall(self.spec.name, dict(arguments)))
    self.steps.append((f"call {self.spec.name} {scenarios.compact(arguments)}", result))
    if result.get("error") == "approval_required":
        approval_id = result["approval_id"]
        result = arun(self.runner.aapprove(approval_id))
        self.steps.append((f"approve {approval_id}", result))
    return result


EXPECTED = {(row["failure"], row["effect"]): row for row in matrix.load_matrix()}


@pytest.mark.parametrize(("failure", "effect"), scenarios.CELLS, ids=[f"{f}-{e}" for f, e in scenarios.CELLS])
def test_demo_matrix_through_acall_matches_call(
    failure: str, effect: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    sync = matrix.play(failure, effect, workdir=tmp_path / "sync")
    monkeypatch.setattr(scenarios.Bench, "ask", _ask_async)
    asynchronous = matrix.play(failure, effect, workdir=tmp_path / "async")
    row = EXPECTED[(failure, effect)]
    assert asynchronous.observed == row["expected"]
    assert asynchronous.handler_calls == int(row["handler_calls"])
    assert asynchronous.result == sync.result
    assert asynchronous.handler_calls == sync.handler_calls
    assert asynchronous.writes == sync.writes
    assert [step for step, _ in asynchronous.steps] == [step for step, _ in sync.steps]


# --------------------------------------------------------------------------- coroutine handlers


class AsyncTools:
    """One ``async def`` tool per effect, with a scripted fault and real call counts."""

    def __init__(self, fault: str = "none") -> None:
        self.fault = fault
        self.calls = 0
        self.lookups = 0
        self.cancelled = 0
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[str] = []
        self.ledger: dict[str, Any] = {}

    async def _enter(self) -> None:
        self.calls += 1
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.current_thread().name)
        if self.fault == "deny":
            raise PermissionError("not allowed here")

    async def _leave(self, value: Any) -> Any:
        if self.fault == "fail_first" and self.calls == 1:
            raise ConnectionError("dropped")
        if self.fault == "hang":
            try:
                await asyncio.Event().wait()  # nobody sets it: only the deadline ends this
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.fault == "huge":
            return "x" * 1_000_000
        return value

    async def search(self, query: str) -> str:
        await self._enter()
        if self.fault == "hang":  # a read lands nothing: it just hangs
            return str(await self._leave(query))
        return str(await self._leave(f"notes about {query}"))

    async def save_draft(self, draft_id: str, text: str) -> dict[str, Any]:
        await self._enter()
        self.ledger[draft_id] = text  # the write lands, then the fault strikes
        return await self._leave({"draft_id": draft_id, "chars": len(text)})  # type: ignore[no-any-return]

    async def draft_status(self, draft_id: str, text: str) -> dict[str, Any] | None:
        self.lookups += 1
        await asyncio.sleep(0)
        if self.ledger.get(draft_id) != text:
            return None
        return {"draft_id": draft_id, "chars": len(text)}

    async def send_payment(self, payment_id: str, to: str, amount: int) -> dict[str, Any]:
        await self._enter()
        self.ledger[payment_id] = amount
        return await self._leave({"paid": amount, "to": to})  # type: ignore[no-any-return]


ARGS = {
    "read": ("search", {"query": "timeouts"}),
    "reversible_write": ("save_draft", {"draft_id": "d-1", "text": "Hello."}),
    "irreversible_write": ("send_payment", {"payment_id": "p-1", "to": "ACME", "amount": 5}),
}
OTHER = {
    "reversible_write": {"draft_id": "d-1", "text": "Other."},
    "irreversible_write": {"payment_id": "p-1", "to": "ACME", "amount": 9},
}


def async_registry(tools: AsyncTools, timeout: float = 2.0, scope: str | None = None) -> ToolRegistry:
    scopes = frozenset({scope}) if scope else frozenset()
    return ToolRegistry([
        ToolSpec("search", "Search notes.", "read", timeout, 3, 100, tools.search,
                 required_scopes=scopes),
        ToolSpec("save_draft", "Save a draft.", "reversible_write", timeout, 3, 100,
                 tools.save_draft, status_lookup=tools.draft_status, required_scopes=scopes,
                 idempotency_key=lambda context, arguments: f"draft:{arguments['draft_id']}"),
        ToolSpec("send_payment", "Pay.", "irreversible_write", timeout, 1, 100, tools.send_payment,
                 required_scopes=scopes,
                 idempotency_key=lambda context, arguments: f"pay:{arguments['payment_id']}"),
    ])


class Path_:
    """One way of calling the runner: plain calls, or awaited ones on an event loop."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def ask(self, runner: ToolRunner, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        """The model calls; when asked for approval, a person approves. Every result seen."""
        if self.kind == "sync":
            first = runner.call(name, arguments)
            if first.get("error") != "approval_required":
                return [first]
            return [first, runner.approve(first["approval_id"])]

        async def go() -> list[dict[str, Any]]:
            first = await runner.acall(name, arguments)
            if first.get("error") != "approval_required":
                return [first]
            return [first, await runner.aapprove(first["approval_id"])]

        return list(arun(go()))


def play_async_row(row: str, effect: str, path: Path_) -> tuple[list[dict[str, Any]], AsyncTools]:
    fault = {"transient_disconnect": "fail_first", "timeout_outcome_unknown": "hang",
             "oversized_output": "huge"}.get(row, "none")
    tools = AsyncTools(fault)
    timeout = SHORT if row == "timeout_outcome_unknown" else 2.0
    scope = "tools:use" if row == "authorization_denial" else None
    registry = async_registry(tools, timeout, scope)
    budget = Budget(max_attempts=0) if row == "budget_spent" else None
    runner = ToolRunner(registry, budget=budget, sleep=lambda seconds: None)
    name, arguments = ARGS[effect]
    if row == "missing_argument":
        arguments = dict(list(arguments.items())[1:])
    seen = path.ask(runner, name, arguments)
    if row == "same_write_repeated":
        seen += path.ask(runner, name, arguments)
    if row == "same_key_other_payload":
        seen += path.ask(runner, name, OTHER[effect])
    return seen, tools


#: row -> effect -> (what the model sees last, real handler calls): docs/design.md#failure-matrix.
ASYNC_MATRIX: dict[str, dict[str, tuple[str, int]]] = {
    "missing_argument": {"read": ("invalid_arguments", 0), "reversible_write": ("invalid_arguments", 0),
                         "irreversible_write": ("invalid_arguments", 0)},
    "transient_disconnect": {"read": ("ok", 2), "reversible_write": ("ok", 1),
                             "irreversible_write": ("outcome_unknown", 1)},  # rev 3: no lookup
    "authorization_denial": {"read": ("forbidden", 0), "reversible_write": ("forbidden", 0),
                             "irreversible_write": ("forbidden", 0)},
    "timeout_outcome_unknown": {"read": ("outcome_unknown+retryable", 3),
                                "reversible_write": ("ok", 1),
                                "irreversible_write": ("outcome_unknown", 1)},
    "oversized_output": {"read": ("ok+truncated", 1), "reversible_write": ("ok+truncated", 1),
                         "irreversible_write": ("ok+truncated", 1)},
    "same_write_repeated": {"reversible_write": ("ok+replayed", 1),
                            "irreversible_write": ("ok+replayed", 1)},
    "same_key_other_payload": {"reversible_write": ("idempotency_conflict", 1),
                               "irreversible_write": ("idempotency_conflict", 1)},
    "budget_spent": {"read": ("budget_exhausted", 0), "reversible_write": ("budget_exhausted", 0),
                     "irreversible_write": ("budget_exhausted", 0)},
}
ASYNC_CELLS = [(row, effect) for row, cells in ASYNC_MATRIX.items() for effect in cells]


@pytest.mark.parametrize(("row", "effect"), ASYNC_CELLS, ids=[f"{r}-{e}" for r, e in ASYNC_CELLS])
def test_coroutine_handlers_give_the_same_matrix_on_both_paths(row: str, effect: str) -> None:
    seen_sync, sync_tools = play_async_row(row, effect, Path_("sync"))
    seen_async, async_tools = play_async_row(row, effect, Path_("async"))
    expected, calls = ASYNC_MATRIX[row][effect]
    assert matrix.observe(seen_async[-1]) == expected
    assert async_tools.calls == calls
    assert seen_async == seen_sync
    assert sync_tools.calls == async_tools.calls
    assert sync_tools.ledger == async_tools.ledger
    if row == "timeout_outcome_unknown":  # the deadline really cancelled each hung coroutine
        assert async_tools.cancelled == calls and sync_tools.cancelled == calls


def test_a_timed_out_reversible_write_asks_its_async_status_lookup() -> None:
    for kind in ("sync", "async"):
        seen, tools = play_async_row("timeout_outcome_unknown", "reversible_write", Path_(kind))
        assert seen[-1]["ok"] and tools.calls == 1 and tools.lookups == 1


# --------------------------------------------------------------------------- where things run


def test_a_coroutine_handler_runs_on_the_callers_loop_from_async_code() -> None:
    tools = AsyncTools()
    registry = async_registry(tools)

    async def go() -> tuple[dict[str, Any], dict[str, Any], asyncio.AbstractEventLoop]:
        one = await ainvoke_tool(registry, "search", {"query": "q"})
        two = await ToolRunner(registry).acall("search", {"query": "q"})
        return one, two, asyncio.get_running_loop()

    one, two, loop = arun(go())
    assert one == invoke_tool(registry, "search", {"query": "q"})
    assert two["ok"] and two["data"] == one["data"]
    assert tools.loops[0] is loop and tools.loops[1] is loop
    assert tools.threads[0] == tools.threads[1] == threading.current_thread().name


def test_a_coroutine_handler_from_the_sync_path_runs_on_a_workers_own_loop() -> None:
    tools = AsyncTools()
    registry = async_registry(tools)
    assert invoke_tool(registry, "search", {"query": "q"}) == {"ok": True, "data": "notes about q"}
    assert ToolRunner(registry).call("search", {"query": "q"})["ok"]
    assert tools.calls == 2
    assert all(name.startswith("agentkit-worker") for name in tools.threads)
    assert all(not loop.is_running() for loop in tools.loops)  # its own loop, idle between


def test_tasks_a_coroutine_handler_leaves_behind_do_not_outlive_its_attempt() -> None:
    cancelled: list[str] = []

    async def forgetful(query: str) -> str:
        async def background() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(query)
                raise

        asyncio.ensure_future(background())  # never awaited: as asyncio.run would, cancel it
        await asyncio.sleep(0)
        return "ok"

    registry = ToolRegistry([ToolSpec("forgetful", "d", "read", 2.0, 1, 100, forgetful)])
    assert invoke_tool(registry, "forgetful", {"query": "one"})["ok"]
    assert invoke_tool(registry, "forgetful", {"query": "two"})["ok"]
    assert cancelled == ["one", "two"]


def test_sync_handlers_called_from_async_code_use_the_same_worker_threads() -> None:
    threads: list[str] = []

    def where(query: str) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    registry = ToolRegistry([ToolSpec("where", "Where it runs.", "read", 2.0, 1, 100, where)])

    async def go() -> dict[str, Any]:
        return await ToolRunner(registry).acall("where", {"query": "q"})

    assert arun(go())["ok"]
    invoke_tool(registry, "where", {"query": "q"})
    assert len(threads) == 2
    assert all(name.startswith("agentkit-worker") for name in threads)


def test_a_handlers_own_timeout_error_is_transient_not_outcome_unknown() -> None:
    async def flaky(query: str) -> str:
        raise TimeoutError("the upstream said so")

    registry = ToolRegistry([ToolSpec("flaky", "d", "read", 2.0, 1, 100, flaky)])
    expected = {"ok": False, "error": "transient_failure", "retryable": True}
    assert arun(ainvoke_tool(registry, "flaky", {"query": "q"})) == expected
    assert invoke_tool(registry, "flaky", {"query": "q"}) == expected


def test_ainvoke_tool_never_raises_for_model_input() -> None:
    tools = AsyncTools()
    registry = async_registry(tools)
    for name, arguments in [("nope", {}), ("search", None), ("search", {"query": 3}), (7, [])]:
        assert arun(ainvoke_tool(registry, name, arguments)) == invoke_tool(registry, name, arguments)
    assert tools.calls == 0


def test_a_cancelled_coroutine_write_is_outcome_unknown_on_both_paths() -> None:
    tools = AsyncTools("hang")
    registry = async_registry(tools, timeout=SHORT)
    arguments = {"draft_id": "d-9", "text": "landed?"}
    expected = {"ok": False, "error": "outcome_unknown", "retryable": False}
    assert invoke_tool(registry, "save_draft", arguments) == expected
    assert arun(ainvoke_tool(registry, "save_draft", arguments)) == expected
    assert tools.calls == 2 and tools.ledger == {"d-9": "landed?"}


# --------------------------------------------------------------------------- one limit, one loop


def test_one_concurrency_limit_is_shared_by_sync_and_async_callers() -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def blocking(query: str) -> str:
        calls.append(query)
        entered.set()
        release.wait(10)
        return "done"

    spec = ToolSpec("one", "One at a time.", "read", SHORT, 1, 100, blocking, max_concurrency=1)
    registry = ToolRegistry([spec])
    holder: list[dict[str, Any]] = []
    thread = threading.Thread(target=lambda: holder.append(invoke_tool(registry, "one", {"query": "sync"})))
    try:
        thread.start()
        assert entered.wait(10)
        busy = arun(ainvoke_tool(registry, "one", {"query": "async"}))
        assert busy == {"ok": False, "error": "busy", "retryable": True}
        # The sync call gives up after SHORT while its handler still holds the slot; wait for
        # that answer before releasing the handler, so a slow scheduler cannot turn it into ok.
        thread.join(10)
        assert holder and holder[0]["error"] == "outcome_unknown"
    finally:
        release.set()
        thread.join(10)
    assert calls == ["sync"]


def test_an_async_holder_of_the_slot_makes_a_sync_caller_busy() -> None:
    from agentkit.boundary.attempt import Attempt
    from agentkit.boundary.concurrency import run_limited

    def sync_caller(registry: ToolRegistry) -> str:
        """A sync attempt on the same entry (the same slot), waiting only SHORT for it."""
        entry = registry.entry("one")
        assert entry is not None
        return run_limited(entry.spec.handler, {"query": "sync"}, slot=entry.slot, timeout=SHORT,
                           attempt=Attempt(tool="one", call_id="sync-side"))

    async def go() -> tuple[str, dict[str, Any], list[str]]:
        entered, gate = asyncio.Event(), asyncio.Event()
        seen: list[str] = []

        async def waits(query: str) -> str:
            seen.append(query)
            entered.set()
            await gate.wait()
            return "done"

        registry = ToolRegistry([ToolSpec("one", "One at a time.", "read", 5.0, 1, 100, waits,
                                          max_concurrency=1)])
        holder = asyncio.ensure_future(ainvoke_tool(registry, "one", {"query": "async"}))
        await entered.wait()
        status = await asyncio.get_running_loop().run_in_executor(None, sync_caller, registry)
        gate.set()
        return status, await holder, seen

    status, held, seen = arun(go())
    assert status == "busy"
    assert held == {"ok": True, "data": "done"}
    assert seen == ["async"]  # the sync caller's handler never ran


def test_the_loop_keeps_running_while_acall_waits_on_a_sync_handler() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(query: str) -> str:
        entered.set()
        release.wait(10)
        return "late"

    runner = ToolRunner(ToolRegistry([ToolSpec("slow", "d", "read", 5.0, 1, 100, slow)]))

    async def go() -> tuple[dict[str, Any], list[str]]:
        ticks: list[str] = []
        call = asyncio.ensure_future(runner.acall("slow", {"query": "q"}))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        ticks.append("the loop ran while the handler was blocked")  # it would hang otherwise
        release.set()
        return await call, ticks

    result, ticks = arun(go())
    assert result["ok"] and result["data"] == "late" and ticks


def test_store_calls_run_off_the_loop(tmp_path: Any) -> None:
    store = SQLiteIdempotencyStore(tmp_path / "store.sqlite")
    threads: list[str] = []
    for step in ("claim", "complete", "drop", "abandon_claim"):
        original = getattr(store, step)

        def spy(*args: Any, original: Any = original, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return original(*args, **kwargs)

        setattr(store, step, spy)
    tools = AsyncTools()
    runner = ToolRunner(async_registry(tools), store=store)

    async def go() -> tuple[dict[str, Any], str]:
        first = await runner.acall(*ARGS["reversible_write"])
        return first, threading.current_thread().name

    result, loop_thread = arun(go())
    store.close()
    assert result["ok"] and threads and all(name != loop_thread for name in threads)
    assert all(name.startswith("agentkit-worker") for name in threads)


def test_cancelling_acall_does_not_stop_the_write_and_its_result_is_kept() -> None:
    entered, release, stored = threading.Event(), threading.Event(), threading.Event()
    writes: list[str] = []

    def write(draft_id: str) -> dict[str, Any]:
        entered.set()
        release.wait(10)
        writes.append(draft_id)
        return {"saved": draft_id}

    spec = ToolSpec("write", "d", "reversible_write", 5.0, 1, 100, write)
    runner = ToolRunner(ToolRegistry([spec]))
    original = runner.store.complete

    def complete(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            stored.set()  # the policy has finished with the store: the outcome is recorded

    runner.store.complete = complete  # type: ignore[method-assign]

    async def go() -> dict[str, Any]:
        task = asyncio.ensure_future(runner.acall("write", {"draft_id": "d"}))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await asyncio.get_running_loop().run_in_executor(None, stored.wait, 10)
        return await runner.acall("write", {"draft_id": "d"})

    again = arun(go())
    assert writes == ["d"]
    assert again["ok"] and again["replayed"] is True and again["attempts"] == 0


def test_approve_and_deny_have_async_twins() -> None:
    tools = AsyncTools()
    runner = ToolRunner(async_registry(tools))

    async def go() -> list[dict[str, Any]]:
        asked = await runner.acall(*ARGS["irreversible_write"])
        other = await runner.acall("send_payment", {"payment_id": "p-2", "to": "B", "amount": 1})
        return [asked, await runner.aapprove(asked["approval_id"]),
                await runner.adeny(other["approval_id"]), await runner.aapprove(other["approval_id"])]

    asked, approved, denied, late = arun(go())
    assert asked["error"] == "approval_required"
    assert approved["ok"] and approved["attempts"] == 1
    assert denied["error"] == "forbidden" and late["error"] == "forbidden"
    assert tools.calls == 1


def test_acall_uses_the_callers_context_not_the_models() -> None:
    tools = AsyncTools()
    registry = async_registry(tools, scope="tools:use")
    allowed = ToolRunner(registry, context=CallContext(scopes=frozenset({"tools:use"})))
    refused = ToolRunner(registry)
    assert arun(allowed.acall("search", {"query": "q"}))["ok"]
    assert arun(refused.acall("search", {"query": "q"}))["error"] == "forbidden"
    assert tools.calls == 1



# --------------------------------------------------------------------------- one attempt, both ways

ATTEMPT_ROWS = ["none", "fail_first", "hang", "huge", "deny", "missing", "unknown_tool"]


@pytest.mark.parametrize("limited", [False, True], ids=["no-limit", "max_concurrency"])
@pytest.mark.parametrize("effect", list(ARGS))
@pytest.mark.parametrize("row", ATTEMPT_ROWS)
def test_ainvoke_tool_matches_invoke_tool_for_coroutine_handlers(row: str, effect: str, limited: bool) -> None:
    """One attempt of an ``async def`` handler, sync and async: the same dict, the same calls
    (with a free slot the async side runs on the caller's loop, with a limit through a worker)."""
    import dataclasses

    def world() -> tuple[ToolRegistry, AsyncTools]:
        tools = AsyncTools("none" if row in ("missing", "unknown_tool") else row)
        registry = async_registry(tools, timeout=SHORT if row == "hang" else 2.0)
        if limited:
            registry = ToolRegistry([dataclasses.replace(spec, max_concurrency=1) for spec in registry])
        return registry, tools

    name, arguments = ARGS[effect]
    if row == "missing":
        arguments = dict(list(arguments.items())[1:])
    if row == "unknown_tool":
        name = name + "_v2"
    sync_registry, sync_tools = world()
    async_registry_, async_tools = world()
    expected = invoke_tool(sync_registry, name, arguments)
    assert arun(ainvoke_tool(async_registry_, name, arguments)) == expected
    assert async_tools.calls == sync_tools.calls
    assert async_tools.ledger == sync_tools.ledger


def test_a_coroutine_handler_may_call_a_sync_entry_point_without_deadlocking_its_loop() -> None:
    """The outer handler runs on the caller's loop and calls sync ``invoke_tool``; the inner
    coroutine handler cannot run on that (now blocked) loop, so it runs on a worker's own."""
    inner_tools = AsyncTools()
    inner = async_registry(inner_tools)

    async def outer(query: str) -> str:
        result = invoke_tool(inner, "search", {"query": query})  # blocks this loop, on purpose
        return str(result["data"])

    registry = ToolRegistry([ToolSpec("outer", "d", "read", 2.0, 1, 100, outer)])
    result = arun(ToolRunner(registry).acall("outer", {"query": "q"}))
    assert result["ok"] and result["data"] == "notes about q"
    assert inner_tools.calls == 1 and inner_tools.threads[0].startswith("agentkit-worker")


# --------------------------------------------------------------------------- no thread per call


def test_300_awaiting_acalls_hold_no_thread_each() -> None:
    """docs/design.md#drivers: a coroutine handler awaited through ``acall`` holds no OS thread."""
    in_flight = 300
    entered = 0

    async def go() -> tuple[int, int, list[dict[str, Any]]]:
        nonlocal entered
        release = asyncio.Event()
        all_in = asyncio.Event()

        async def wait(query: str) -> str:
            nonlocal entered
            entered += 1
            if entered == in_flight:
                all_in.set()
            await release.wait()
            return query

        spec = ToolSpec("wait", "Wait.", "read", 30.0, 1, 100, wait)
        runner = ToolRunner(ToolRegistry([spec]))
        before = threading.active_count()
        calls = [asyncio.ensure_future(runner.acall("wait", {"query": str(n)}))
                 for n in range(in_flight)]
        await all_in.wait()
        during = threading.active_count()
        release.set()
        return before, during, list(await asyncio.gather(*calls))

    before, during, results = arun(go())
    assert entered == in_flight and all(r["ok"] for r in results)
    assert during - before <= 8


def test_a_replayed_write_through_acall_stays_on_the_loop_with_the_memory_store() -> None:
    tools = AsyncTools()
    runner = ToolRunner(async_registry(tools))
    threads: list[str] = []
    original = runner.store.claim

    def claim(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    runner.store.claim = claim  # type: ignore[method-assign]

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        first = await runner.acall(*ARGS["reversible_write"])
        return first, await runner.acall(*ARGS["reversible_write"])

    first, again = arun(go())
    assert first["ok"] and again["replayed"] is True and tools.calls == 1
    assert threads == [threading.current_thread().name] * 2  # no hop: the loop's own thread


def test_acall_aapprove_and_adeny_return_coroutines_that_do_nothing_until_awaited() -> None:
    """They return the async driver's own coroutine: awaited, gathered or made a task as any
    coroutine; until then nothing runs (no handler, no budget, no record), and a coroutine
    closed unawaited leaves nothing behind (docs/design.md#public-api)."""
    import inspect

    ran: list[str] = []

    async def asearch(query: str) -> str:
        ran.append(query)
        return "found"

    runner = ToolRunner(ToolRegistry([ToolSpec("asearch", "S.", "read", 2.0, 1, 100, asearch)]))
    pending = runner.acall("asearch", {"query": "q"}, call_id="host-1")
    approve, deny = runner.aapprove("no-such-approval"), runner.adeny("no-such-approval")
    assert all(inspect.iscoroutine(c) for c in (pending, approve, deny))
    assert ran == [] and runner.budget.used == 0 and len(runner.trace) == 0
    for unawaited in (approve, deny):
        unawaited.close()
    pending.close()
    assert ran == [] and runner.budget.used == 0 and len(runner.trace) == 0

    async def main() -> list[dict[str, Any]]:
        first = asyncio.ensure_future(runner.acall("asearch", {"query": "a"}))
        return [await first, *await asyncio.gather(runner.acall("asearch", {"query": "b"}),
                                                    runner.acall("asearch", {"query": "c"}))]

    results = arun(main())
    assert [r["data"] for r in results] == ["found"] * 3 and sorted(ran) == ["a", "b", "c"]
    assert runner.trace.call_counts() == {"asearch": 3}
