"""What ``make bench`` measures: the floors, agentkit's paths and the peers, group by group.

Every group is timed in interleaved rounds (see :mod:`benchmarks.harness`), and each path's
ratio is the median of its per-round ratios to the group's reference. All paths call the same
tool, ``search(query: str, limit: int = 3) -> list[str]``, with the same arguments
``{"query": "q"}``, each in the form its framework documents (a dict, or the JSON text a model
sends where that is the framework's input). A peer path is used as its documentation shows and
is never made heavier: no timeout is added where the peer has none by default.

A path that cannot be built (a peer not installed, an agentkit function not there yet) is a
row that says why, never a dropped row.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import os
from collections.abc import Callable
from typing import Any

from benchmarks.harness import Path, build, missing

ARGS: dict[str, Any] = {"query": "q"}
ARGS_JSON = json.dumps(ARGS)
TIMEOUT = 2.0
EXPECTED = ["q", "q", "q"]


def search(query: str, limit: int = 3) -> list[str]:
    """Search the notes."""
    return [query] * limit


async def asearch(query: str, limit: int = 3) -> list[str]:
    """Search the notes."""
    return [query] * limit


def save(name: str, text: str) -> dict[str, Any]:
    """Save a note."""
    return {"saved": name}


def _ok(result: Any) -> bool:
    return isinstance(result, dict) and result.get("ok") is True


def _expected(result: Any) -> bool:
    return result == EXPECTED


# --------------------------------------------------------------------------- agentkit setup


def agentkit_registry(extra: tuple[Any, ...] = ()) -> Any:
    from agentkit import ToolRegistry, ToolSpec

    specs = [
        ToolSpec("search", "Search the notes.", "read", TIMEOUT, 3, 2_000, search),
        ToolSpec("save", "Save a note.", "reversible_write", TIMEOUT, 3, 2_000, save),
        *extra,
    ]
    try:
        specs.append(ToolSpec("asearch", "Search the notes.", "read", TIMEOUT, 3, 2_000, asearch))
        return ToolRegistry(specs)
    except Exception:  # a registry that does not take coroutine handlers yet
        return ToolRegistry(specs[:-1])


def _ainvoke_tool() -> Callable[..., Any]:
    import agentkit

    fn = getattr(agentkit, "ainvoke_tool", None)
    if fn is None:
        from agentkit.boundary import invoke

        fn = getattr(invoke, "ainvoke_tool", None)
    if fn is None:
        raise LookupError("not available: agentkit has no ainvoke_tool yet")
    return fn  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- sync group


def ping_pong() -> Callable[[], Any]:
    """The floor of a sync call with a timeout (issue 31): a waiting thread runs the handler
    and hands its value back over two locks. The caller releases the lock the worker waits
    on, then waits with a timeout on the lock the worker releases: two thread wake-ups and
    nothing else (no queue, no future, no allocation per call)."""
    import threading

    go, back = threading.Lock(), threading.Lock()
    go.acquire()
    back.acquire()
    box: list[Any] = [None]

    def serve() -> None:
        while True:
            go.acquire()
            box[0] = search(**ARGS)
            back.release()

    threading.Thread(target=serve, name="bench-ping-pong", daemon=True).start()

    def call() -> Any:
        go.release()
        if not back.acquire(timeout=TIMEOUT):
            raise TimeoutError("the ping-pong's worker did not answer")
        return box[0]

    return call


def sync_paths() -> list[Path]:
    """Floors, agentkit's sync paths and its stages, and the peers' sync-tool paths.

    The reference is the two-lock ping-pong (:func:`ping_pong`): any timeout on a sync
    handler needs a hand-off to another thread and back, and this is the least one costs in
    CPython. ``ThreadPoolExecutor`` (a queue and a future per call), the previous floor, is a
    row beside it.
    """
    import fastjsonschema

    from agentkit import ToolRunner

    registry = agentkit_registry()
    schema = registry.get("search").parameters
    validator = fastjsonschema.compile(schema)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="bench-floor")
    runner = ToolRunner(registry)
    runner.call("save", {"name": "n1", "text": "t"})  # the key every replay below finds

    paths = [
        build("floor: bare call", lambda: lambda: search(**ARGS), check=_expected),
        build("floor: two-lock ping-pong with a waiting thread", ping_pong, check=_expected,
              note="release the worker's lock, acquire(timeout) the one it releases"),
        build(
            "floor: ThreadPoolExecutor.submit().result(timeout)",
            lambda: lambda: pool.submit(search, **ARGS).result(timeout=TIMEOUT),
            check=_expected,
        ),
        build("floor: fastjsonschema validator", lambda: lambda: validator(ARGS)),
        invoke_path(registry),
        read_path(runner),
        build(
            "agentkit: ToolRunner.call, replayed write",
            lambda: lambda: runner.call("save", {"name": "n1", "text": "t"}),
            check=lambda r: _ok(r) and r.get("replayed") is True,
        ),
        *stage_paths(registry),
        _openai_path(sync=True),
        _mcp_path(sync=True),
        build_langchain(sync=True),
        _pydantic_ai_path(sync=True),
    ]
    return paths


def stage_paths(registry: Any) -> list[Path]:
    """The boundary's own stages, without the thread hop: where invoke_tool's time goes."""

    def stages() -> Callable[[], Any]:
        from agentkit import CallContext
        from agentkit.boundary.invoke import preflight
        from agentkit.boundary.redaction import shape_output

        context = CallContext()
        spec = registry.get("search")

        def call() -> Any:
            entry, checked, _ = preflight(registry, "search", ARGS, context, "call-bench")
            value = entry.spec.handler(**checked)
            return shape_output(value, spec.max_output_chars, registry.redactor)

        return call

    def schema_check() -> Callable[[], Any]:
        from agentkit.boundary.schema import check_arguments

        entry = registry.entry("search")
        spec = entry.spec
        return lambda: check_arguments(ARGS, spec.parameters, entry.validator, spec.max_argument_chars)

    def authorization() -> Callable[[], Any]:
        from agentkit import CallContext
        from agentkit.boundary.authorization import authorize

        context = CallContext()
        spec = registry.get("search")
        return lambda: authorize(spec, ARGS, context, registry.policies)

    def shaping() -> Callable[[], Any]:
        from agentkit.boundary.redaction import shape_output

        spec = registry.get("search")
        return lambda: shape_output(EXPECTED, spec.max_output_chars, registry.redactor)

    return [
        build("agentkit stages: all but the hop", stages, check=_ok),
        build("agentkit stage: schema check", schema_check),
        build("agentkit stage: authorization", authorization),
        build("agentkit stage: redact/truncate", shaping, check=_ok),
        build("agentkit stage: the hop (run_limited)", hop, check=_expected),
    ]


def hop() -> Callable[[], Any]:
    """The boundary's hand-off alone: one attempt of the handler on a worker, under its
    timeout (no checks before it, no rendering after it)."""
    from agentkit.boundary.attempt import Attempt
    from agentkit.boundary.concurrency import run_limited

    def call() -> Any:
        attempt = Attempt(tool="search", call_id="call-bench")
        run_limited(search, ARGS, attempt=attempt, timeout=TIMEOUT, slot=None)
        return attempt.value

    return call


def one_cpu_paths() -> list[Path]:
    """The sync group's floor and agentkit's sync paths again, built and timed inside
    :func:`benchmarks.harness.on_one_cpu`: every thread on one CPU, so each hand-off is a
    switch on it and a ratio is the software's own cost. Unpinned, on a 2-vCPU machine, a
    waiting thread that shares the caller's CPU answers in ~15 µs and one on the other CPU in
    ~60 µs, whichever the scheduler gave it, so the sync group's ratios to the ping-pong
    can be read either way by several times."""
    from agentkit import ToolRunner

    registry = agentkit_registry()
    return [
        build("floor: two-lock ping-pong with a waiting thread", ping_pong, check=_expected),
        build("agentkit stage: the hop (run_limited)", hop, check=_expected),
        invoke_path(registry),
        read_path(ToolRunner(registry)),
    ]


def invoke_path(registry: Any) -> Path:
    """``invoke_tool`` of the sync read (the sync group, and again on one CPU)."""
    from agentkit import invoke_tool

    return build("agentkit: invoke_tool (sync handler)",
                 lambda: lambda: invoke_tool(registry, "search", ARGS), check=_ok)


def read_path(runner: Any) -> Path:
    """``ToolRunner.call`` of the sync read (the sync group, and again on one CPU)."""
    return build("agentkit: ToolRunner.call, read", lambda: lambda: runner.call("search", ARGS),
                 check=_ok)


# --------------------------------------------------------------------------- async group


def async_paths() -> list[Path]:
    """The asyncio floor, agentkit's async paths and the peers' async-tool paths.

    The reference is the asyncio floor: validation plus ``asyncio.timeout`` around the
    coroutine, which is what any async boundary with a timeout must at least do.
    """
    import fastjsonschema

    from agentkit import ToolRunner, invoke_tool

    registry = agentkit_registry()
    validator = fastjsonschema.compile(registry.get("search").parameters)
    runner = ToolRunner(registry)
    runner.call("save", {"name": "n1", "text": "t"})

    async def floor() -> Any:
        async with _timeout(TIMEOUT):
            validator(ARGS)
            return await asearch(**ARGS)

    def hop() -> Callable[[], Any]:
        # issue 19's floor for a sync handler called from a loop: a waiting thread runs it and
        # wakes the loop (no timeout, no checks): what any async call of a sync tool pays.
        import queue
        import threading

        tasks: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

        def serve() -> None:
            while True:
                tasks.get()()

        threading.Thread(target=serve, name="bench-async-hop", daemon=True).start()

        async def call() -> Any:
            loop = asyncio.get_running_loop()
            done = loop.create_future()

            def work() -> None:
                value = search(**ARGS)
                loop.call_soon_threadsafe(done.set_result, value)

            tasks.put(work)
            return await done

        return call

    def ainvoke() -> Callable[[], Any]:
        fn = _ainvoke_tool()
        if "asearch" not in registry:
            raise LookupError("not available: the registry refuses coroutine handlers")
        return lambda: fn(registry, "asearch", ARGS)

    def ainvoke_sync() -> Callable[[], Any]:
        fn = _ainvoke_tool()
        return lambda: fn(registry, "search", ARGS)

    def acall(name: str, arguments: dict[str, Any]) -> Callable[[], Callable[[], Any]]:
        def factory() -> Callable[[], Any]:
            method = getattr(runner, "acall", None)
            if method is None:
                raise LookupError("not available: ToolRunner has no acall yet")
            if name not in registry:
                raise LookupError("not available: the registry refuses coroutine handlers")
            return lambda: method(name, arguments)

        return factory

    return [
        build("floor: asyncio.timeout + validator + coroutine", lambda: floor, is_async=True,
              check=_expected),
        build("agentkit: ainvoke_tool (async handler)", ainvoke, is_async=True, check=_ok),
        build("agentkit: ToolRunner.acall, read", acall("asearch", ARGS), is_async=True, check=_ok),
        # The same sync handler both ways, timed in the same rounds: what async costs a sync tool.
        build("agentkit: ainvoke_tool (sync handler)", ainvoke_sync, is_async=True, check=_ok),
        build("floor: loop to a waiting thread and back (sync handler)", hop, is_async=True,
              check=_expected, note="call_soon_threadsafe wakes the loop; no timeout, no checks"),
        build("agentkit: invoke_tool (sync handler), in the async group",
              lambda: lambda: invoke_tool(registry, "search", ARGS), check=_ok),
        build(
            "agentkit: ToolRunner.acall, replayed write",
            acall("save", {"name": "n1", "text": "t"}),
            is_async=True,
            check=lambda r: _ok(r) and r.get("replayed") is True,
        ),
        build(  # the same replay through the sync driver, in the same rounds (issue 19's goal)
            "agentkit: ToolRunner.call, replayed write (sync, same rounds)",
            lambda: lambda: runner.call("save", {"name": "n1", "text": "t"}),
            check=lambda r: _ok(r) and r.get("replayed") is True,
        ),
        _openai_path(sync=False),
        _mcp_path(sync=False),
        build_langchain(sync=False),
        _pydantic_ai_path(sync=False),
    ]


def acall_threads(in_flight: int = 300) -> tuple[int | None, str]:
    """Extra OS threads while ``in_flight`` ``acall``s of a coroutine tool are all awaiting
    (docs/design.md#drivers: none is held per call). Counted by ``threading.active_count()`` once every
    handler has entered, so no timing is involved."""
    import threading

    from agentkit import ToolRegistry, ToolRunner, ToolSpec

    async def measure() -> int:
        release, all_in = asyncio.Event(), asyncio.Event()
        entered = 0

        async def wait(query: str) -> str:
            nonlocal entered
            entered += 1
            if entered == in_flight:
                all_in.set()
            await release.wait()
            return query

        runner = ToolRunner(ToolRegistry([ToolSpec("wait", "Wait.", "read", 60.0, 1, 100, wait)]))
        before = threading.active_count()
        calls = [asyncio.ensure_future(runner.acall("wait", {"query": "q"})) for _ in range(in_flight)]
        await asyncio.wait_for(all_in.wait(), 60)
        extra = threading.active_count() - before
        release.set()
        await asyncio.gather(*calls)
        return extra

    try:
        return asyncio.run(measure()), ""
    except Exception as exc:  # a kit without acall, or one that fails: say why
        return None, f"not measured: {type(exc).__name__}: {exc}"


def _timeout(seconds: float) -> Any:
    timeout = getattr(asyncio, "timeout", None)
    if timeout is None:  # Python 3.10: the same deadline, from the standard library's 3.10 form
        raise LookupError("asyncio.timeout needs Python 3.11")
    return timeout(seconds)


# --------------------------------------------------------------------------- peers


def _openai_path(*, sync: bool) -> Path:
    kind = "sync tool" if sync else "async tool"
    name = f"openai-agents: FunctionTool.on_invoke_tool ({kind})"

    def factory() -> Callable[[], Any]:
        from agents import function_tool
        from agents.tool_context import ToolContext

        tool = function_tool(search if sync else asearch)
        context = ToolContext(
            context=None, tool_name=tool.name, tool_call_id="call-1", tool_arguments=ARGS_JSON
        )
        return lambda: tool.on_invoke_tool(context, ARGS_JSON)

    note = "runs a sync tool with asyncio.to_thread; no timeout" if sync else "no timeout"
    return build(name, factory, is_async=True, check=_expected, note=note)


def _mcp_path(*, sync: bool) -> Path:
    kind = "sync tool" if sync else "async tool"
    name = f"MCP SDK: MCPServer.call_tool in process ({kind})"

    def factory() -> Callable[[], Any]:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer("bench")
        server.tool()(search if sync else asearch)
        tool = "search" if sync else "asearch"
        return lambda: server.call_tool(tool, ARGS)

    def check(result: Any) -> bool:
        return getattr(result, "is_error", True) is False

    note = "runs a sync tool with anyio.to_thread; no timeout" if sync else "no timeout"
    return build(name, factory, is_async=True, check=check, note=note)


def build_langchain(*, sync: bool) -> Path:
    name = "langchain-core: @tool .invoke (sync tool)" if sync else "langchain-core: @tool .ainvoke (async tool)"

    def factory() -> Callable[[], Any]:
        from langchain_core.tools import tool

        made = tool(search if sync else asearch)
        if sync:
            return lambda: made.invoke(ARGS)
        return lambda: made.ainvoke(ARGS)

    note = "runs in the caller's thread; no timeout" if sync else "no timeout"
    return build(name, factory, is_async=not sync, check=_expected, note=note)


def _pydantic_ai_path(*, sync: bool) -> Path:
    kind = "sync tool" if sync else "async tool"
    name = f"pydantic-ai: ToolManager.handle_call ({kind})"

    def factory() -> Callable[[], Any]:
        from pydantic_ai import RunContext
        from pydantic_ai.messages import ToolCallPart
        from pydantic_ai.models.test import TestModel
        from pydantic_ai.tool_manager import ToolManager
        from pydantic_ai.toolsets import FunctionToolset
        from pydantic_ai.usage import RunUsage

        fn = search if sync else asearch
        context = RunContext(deps=None, model=TestModel(), usage=RunUsage())
        manager = asyncio.run(ToolManager(FunctionToolset([fn])).for_run_step(context))
        tool = fn.__name__
        return lambda: manager.handle_call(ToolCallPart(tool, ARGS_JSON))

    note = ("the agent's tool call path (validate, run in a thread); no timeout" if sync
            else "the agent's tool call path; no timeout")
    return build(name, factory, is_async=True, check=_expected, note=note)


# --------------------------------------------------------------------------- output cost


def output_paths() -> list[Path]:
    """A tool returning 10 KB beside one returning 10 MB, both cut to 2,000 chars, redacted."""
    from agentkit import ToolRegistry, ToolSpec, invoke_tool

    small = "word " * 2_000  # 10 KB
    big = "word " * 2_000_000  # 10 MB

    def small_tool() -> str:
        return small

    def big_tool() -> str:
        return big

    registry = ToolRegistry([
        ToolSpec("small", "10 KB of text.", "read", TIMEOUT, 1, 2_000, small_tool, redact=True),
        ToolSpec("big", "10 MB of text.", "read", TIMEOUT, 1, 2_000, big_tool, redact=True),
    ])

    def truncated(result: Any) -> bool:
        return _ok(result) and result.get("truncated") is True and len(result["data"]) <= 2_000

    return [
        build("agentkit: invoke_tool, 10 KB str output", lambda: lambda: invoke_tool(registry, "small", {}),
              check=truncated),
        build("agentkit: invoke_tool, 10 MB str output", lambda: lambda: invoke_tool(registry, "big", {}),
              check=truncated),
    ]


# --------------------------------------------------------------------------- redaction (issue 17)

#: Benign prose, and what a hostile page can make a tool return: a secret's name every six
#: characters (the densest form of the name/value scan), an unclosed list after each name,
#: or ``token: x`` every nine characters on one line (each value is the line's rest; the text
#: ends in a blank, so the first value stops short of its end and every later name is one
#: more value inside it).
REDACTION_PROSE = "The quick brown fox jumps over the lazy dog, and then some more prose. "
REDACTION_ONE_LINE = " token: x"
REDACTION_HOSTILE = ('pwd=\\"', "token=[", REDACTION_ONE_LINE)
REDACTION_SIZES = (("10 KB", 10_000), ("100 KB", 100_000), ("1 MB", 1_000_000))


def _filled(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def redaction_paths() -> list[Path]:
    """``shape_output`` (render, redact, cut) on benign prose and on hostile text of the same
    length, shown whole, then hostile text cut at 2,000 characters: the scan is linear in the
    text, and bounded by the limit when there is one."""
    from agentkit.boundary.redaction import Redactor, shape_output

    redactor = Redactor()
    whole = 10**9

    def shaping(text: str, limit: int) -> Callable[[], Callable[[], Any]]:
        return lambda: lambda: shape_output(text, limit, redactor)

    def shown(result: Any) -> bool:
        return isinstance(result, dict) and result.get("ok") is True

    paths = []
    for label, size in REDACTION_SIZES:
        paths.append(build(f"benign prose, {label}, shown whole",
                           shaping(_filled(REDACTION_PROSE, size), whole), check=shown))
        for unit in REDACTION_HOSTILE:
            paths.append(build(f"hostile {unit!r}, {label}, shown whole",
                               shaping(_filled(unit, size), whole), check=shown))
    for label, size in REDACTION_SIZES[1:]:
        for unit in REDACTION_HOSTILE:
            paths.append(build(f"hostile {unit!r}, {label}, cut at 2,000",
                               shaping(_filled(unit, size), 2_000), check=shown))
    return paths


# --------------------------------------------------------------------------- durable writes


class _Keys:
    """Fresh keys for every call: each run_once and each raw insert is a new key."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._numbers = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}-{next(self._numbers)}"


def _raw_sqlite(path: str, journal_mode: str, synchronous: str) -> Callable[[], Any]:
    """The floor: one INSERT in its own ``BEGIN IMMEDIATE`` transaction (one commit), on a
    connection of its own to the file at ``path`` through the store's binding and SQLite
    (apsw), in the store's journal mode and at the ``synchronous`` level of its claims."""
    import apsw

    conn = apsw.Connection(path)
    conn.execute(f"PRAGMA journal_mode = {journal_mode}")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS t (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    keys = _Keys(f"raw-{synchronous}")
    value = json.dumps({"ok": True, "data": "x"})

    def call() -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (key, value) VALUES (?, ?)", (keys.next(), value))
        conn.execute("COMMIT")

    return call


def _run_once(store: Any, prefix: str, **kwargs: Any) -> Callable[[], Any]:
    keys = _Keys(prefix)

    def operation() -> dict[str, Any]:
        return {"ok": True, "data": "x"}

    return lambda: store.run_once(keys.next(), operation, "fingerprint", **kwargs)


def durable_paths(folder: str) -> list[tuple[str, list[Path]]]:
    """SQLite as the store runs it (on apsw's bundled SQLite), and the memory store; each
    sub-group has its raw floor first.

    The SQLite floor is the plain insert (issue 31): ``BEGIN IMMEDIATE; INSERT; COMMIT``, one
    commit, on a connection of its own (apsw's, the store's SQLite) to a file of its own, in
    the journal mode the store chose (issue 39: WAL on the bundled SQLite, which has the
    WAL-reset fix; a rollback journal on one that has the bug) at the level of its claims
    (every claim is flushed: FULL); each store has a file of its own too, so no path's
    checkpoints land in another's samples. Both run_once rows are the same work (every claim
    at FULL): the second shows that ``full_sync`` adds nothing."""
    from agentkit import IdempotencyStore, SQLiteIdempotencyStore
    from agentkit.policy.stores.sqlite import journal_choice

    choice = journal_choice()
    mode = choice.journal_mode.upper()

    def store(name: str) -> Any:
        return SQLiteIdempotencyStore(os.path.join(folder, f"store-{name}.sqlite"))

    sqlite = [
        build(f"floor: plain SQLite BEGIN IMMEDIATE; INSERT; COMMIT ({mode},"
              f" synchronous={choice.claims})",
              lambda: _raw_sqlite(os.path.join(folder, "plain.sqlite"), mode, choice.claims)),
        build(f"agentkit: SQLiteIdempotencyStore.run_once, new key (claim at {choice.claims},"
              f" result at {choice.results})",
              lambda: _run_once(store("plain"), "plain"), check=_ok),
        build("agentkit, full_sync=True: SQLiteIdempotencyStore.run_once, new key",
              lambda: _run_once(store("full"), "full", full_sync=True), check=_ok),
    ]
    memory = [
        build("floor: dict insert under a lock", _dict_floor),
        build("agentkit: IdempotencyStore.run_once, new key (memory)",
              lambda: _run_once(IdempotencyStore(), "memory"), check=_ok),
    ]
    return [(f"durable (SQLite, {mode}, synchronous={choice.claims})", sqlite),
            ("memory store", memory)]


def transactional_paths(folder: str) -> list[Path]:
    """A transactional write's new key (docs/design.md#transactional-writes) beside the plain
    write of the same row: the floor is ``BEGIN IMMEDIATE; INSERT; COMMIT`` of that row on
    the store's own connection (``store.transaction(write=True, full_sync=True)``: the
    connection, the journal mode and the durable commit a transactional handler gets); the
    kit's path is ``ToolRunner.call`` of a ``transactional=True`` tool that inserts it through
    ``current_call().connection``, each call a new key (its claim, the row and the result in
    one commit). Between them, the boundary alone around the same commit: ``ToolRunner.call``
    of a read whose handler runs the floor's transaction (a read has no key, no claim, no
    result): what any transactional design costs here before its own bookkeeping, since the
    handler runs on a worker thread so that its timeout holds. Each path has a store file of
    its own."""
    from agentkit import CallContext, SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
    from agentkit import current_call as _current_call

    table = "CREATE TABLE IF NOT EXISTS rows (ref TEXT PRIMARY KEY, value TEXT NOT NULL)"
    insert = "INSERT INTO rows (ref, value) VALUES (?, ?)"

    def store(name: str) -> Any:
        opened = SQLiteIdempotencyStore(os.path.join(folder, f"tx-{name}.sqlite"))
        with opened.transaction(write=True) as tx:
            tx.connection.execute(table)
        return opened

    def floor() -> Callable[[], Any]:
        plain, keys = store("floor"), _Keys("floor")

        def call() -> None:
            with plain.transaction(write=True, full_sync=True) as tx:
                tx.connection.execute(insert, (keys.next(), "x"))

        return call

    def boundary_only() -> Callable[[], Any]:
        plain = store("boundary")

        def add_row(ref: str) -> dict[str, Any]:
            with plain.transaction(write=True, full_sync=True) as tx:
                tx.connection.execute(insert, (ref, "x"))
            return {"ref": ref}

        spec = ToolSpec("add_row", "Add a row.", "read", 10.0, 1, 500, add_row)
        runner = ToolRunner(ToolRegistry([spec]), context=CallContext(task_id="bench"))
        keys = _Keys("boundary")
        return lambda: runner.call("add_row", {"ref": keys.next()})

    def transactional() -> Callable[[], Any]:
        def add_row(ref: str) -> dict[str, Any]:
            call = _current_call()
            assert call is not None and call.connection is not None
            call.connection.execute(insert, (ref, "x"))
            return {"ref": ref}

        spec = ToolSpec("add_row", "Add a row.", "reversible_write", 10.0, 1, 500, add_row,
                        transactional=True)
        runner = ToolRunner(ToolRegistry([spec]), store=store("kit"),
                            context=CallContext(task_id="bench"))
        keys = _Keys("kit")
        return lambda: runner.call("add_row", {"ref": keys.next()})

    return [
        build("floor: plain INSERT + COMMIT of the row, on the store's connection", floor),
        build("boundary only: ToolRunner.call of a read whose handler runs that INSERT + COMMIT",
              boundary_only, check=_ok),
        build("agentkit: ToolRunner.call, transactional write, new key", transactional,
              check=_ok),
    ]


def _dict_floor() -> Callable[[], Any]:
    import threading

    lock = threading.Lock()
    table: dict[str, str] = {}
    keys = _Keys("dict")

    def call() -> None:
        with lock:
            table[keys.next()] = '{"ok":true}'

    return call


def postgres_paths(dsn: str | None, why: str = "") -> list[Path]:
    """PostgreSQL store beside a raw insert (its own transaction) on the same server."""
    store_name = "agentkit: PostgresIdempotencyStore.run_once, new key"
    raw_name = "floor: raw PostgreSQL INSERT + COMMIT (own transaction)"
    if not dsn:
        why = why or "AGENTKIT_TEST_PG_DSN not set"
        return [missing(raw_name, why), missing(store_name, why)]

    def raw() -> Callable[[], Any]:
        import psycopg

        conn = psycopg.connect(dsn, autocommit=False)
        conn.execute("CREATE TABLE IF NOT EXISTS agentkit_bench_raw (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.commit()
        keys = _Keys(f"raw-{os.getpid()}-{id(conn)}")
        value = json.dumps({"ok": True, "data": "x"})

        def call() -> None:
            conn.execute("INSERT INTO agentkit_bench_raw (key, value) VALUES (%s, %s)", (keys.next(), value))
            conn.commit()

        return call

    def store() -> Callable[[], Any]:
        import agentkit

        cls = getattr(agentkit, "PostgresIdempotencyStore", None)
        if cls is None:
            from agentkit.policy import stores

            cls = getattr(stores, "PostgresIdempotencyStore", None)
        if cls is None:
            raise LookupError("not available: agentkit has no PostgresIdempotencyStore yet")
        return _run_once(cls(dsn), f"pg-{os.getpid()}")

    return [build(raw_name, raw), build(store_name, store, check=_ok)]


# --------------------------------------------------------------------------- tracing group


def tracing_paths() -> list[Path]:
    """ToolRunner.call on a read, plain and with OpenTelemetry spans (agentkit.faces.otel).

    The reference is the uninstrumented call. Instrumented with OpenTelemetry's no-op tracer
    provider it must stay within 1.1×; with the global provider and no SDK configured (the
    API's proxy, which still builds a no-op span per call) it is a figure; with the SDK,
    a SimpleSpanProcessor and an in-memory exporter (cleared after every call, so memory stays
    flat) it is a figure: the price of two real spans (the call and its attempt) per call.
    """
    from agentkit import ToolRunner

    plain = ToolRunner(agentkit_registry())

    def instrumented(provider: Any) -> Callable[[], Any]:
        from agentkit.faces.otel import instrument

        runner = ToolRunner(agentkit_registry())
        instrument(runner, tracer_provider=provider)
        return lambda: runner.call("search", ARGS)

    def proxy() -> Callable[[], Any]:
        return instrumented(None)  # the global provider: with no SDK configured, a proxy

    def noop() -> Callable[[], Any]:
        from opentelemetry.trace import NoOpTracerProvider

        return instrumented(NoOpTracerProvider())

    def sdk() -> Callable[[], Any]:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        call = instrumented(provider)

        def traced() -> Any:
            result = call()
            exporter.clear()
            return result

        return traced

    return [
        build("agentkit: ToolRunner.call, read", lambda: lambda: plain.call("search", ARGS), check=_ok),
        build("agentkit: ToolRunner.call, read, instrumented (no-op tracer provider)", noop, check=_ok),
        build("agentkit: ToolRunner.call, read, instrumented (global provider, no SDK set)", proxy,
              check=_ok),
        build("agentkit: ToolRunner.call, read, instrumented (SDK, in-memory exporter)", sdk,
              check=_ok),
    ]


# --------------------------------------------------------------------------- durable engines

#: Steps per workflow in the DBOS group: each timed call runs one workflow of this many steps,
#: so a workflow's own start (its status row) is 1/STEPS of what a path costs, alike on both.
DBOS_STEPS = 20


def dbos_paths(folder: str) -> tuple[list[Path], Callable[[], None]]:
    """A read as a DBOS step: a bare ``@DBOS.step`` running the handler (the floor: the step's
    own checkpoint in DBOS's SQLite system database), and ``DurableTools.call`` (the same
    checkpoint, around agentkit's runner). Each call is one workflow of :data:`DBOS_STEPS`
    steps. Returns the paths and the function that shuts DBOS down afterwards."""
    floor_name = f"floor: @DBOS.step running the handler ({DBOS_STEPS} per workflow)"
    kit_name = f"agentkit: DurableTools.call, read ({DBOS_STEPS} per workflow)"
    try:
        from dbos import DBOS

        from agentkit import SQLiteIdempotencyStore
        from agentkit.faces.dbos import DurableTools
    except ImportError as exc:
        why = f"not installed: {exc} (pip install -e '.[dbos]')"
        return [missing(floor_name, why), missing(kit_name, why)], lambda: None

    DBOS(config={"name": "agentkit-bench", "log_level": "WARNING",
                 "system_database_url": f"sqlite:///{os.path.join(folder, 'dbos.sqlite')}"})
    tools = DurableTools(agentkit_registry(),
                         SQLiteIdempotencyStore(os.path.join(folder, "agentkit.sqlite3")))

    @DBOS.step(name="bench_search")
    def bare_step() -> list[str]:
        return search(**ARGS)

    @DBOS.workflow(name="bench_bare")
    def bare() -> Any:
        return [bare_step() for _ in range(DBOS_STEPS)][-1]

    @DBOS.workflow(name="bench_agentkit")
    def through() -> Any:
        return [tools.call("search", ARGS) for _ in range(DBOS_STEPS)][-1]

    DBOS.launch()
    paths = [build(floor_name, lambda: bare, check=_expected),
             build(kit_name, lambda: through, check=_ok)]
    return paths, DBOS.destroy
