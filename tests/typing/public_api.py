"""Typing test of the public API: every name in ``agentkit.__all__``, used as a user would.

``make typecheck`` runs ``mypy --strict`` over this file (as hynek/stamina does with its
``tests/typing``): a change that makes ordinary use of the API stop type-checking, or that
turns a precise return type into ``Any``, fails CI. The file is not a pytest module (its name
does not start with ``test_``); ``tests/test_layers.py`` imports it and calls
:func:`use_the_api` so that what mypy checks also runs.

When a name is added to ``agentkit.__all__``, use it here: ``tests/test_layers.py`` fails
while a name of ``__all__`` does not appear in this file.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from typing_extensions import assert_type

import agentkit
from agentkit import (
    Budget,
    CallContext,
    CallInfo,
    Effect,
    ErrorCode,
    IdempotencyStore,
    InvalidInput,
    NotApplied,
    PostgresIdempotencyStore,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    ainvoke_tool,
    current_call,
    invoke_tool,
    open_store,
    set_testing,
)


def search(query: str, limit: int = 3) -> list[str]:
    """A read tool, typed as a user would type one."""
    return [f"{query} #{i}" for i in range(limit)]


def build_registry() -> ToolRegistry:
    registry = ToolRegistry()
    spec = ToolSpec(
        name="search",
        description="Search the notes.",
        effect=Effect.READ,
        timeout_seconds=1.0,
        max_attempts=2,
        max_output_chars=2_000,
        handler=search,
        required_scopes=frozenset({"notes:read"}),
    )
    assert_type(registry.register(spec), ToolSpec)
    # As people write them (issue 30): the effect's plain name, a set of scopes; a made spec
    # still holds an Effect and a frozenset.
    named = ToolSpec("search_again", "Search the notes.", "read", 1.0, 2, 2_000, search,
                     required_scopes={"notes:read"})
    assert_type(named.effect, Effect)
    assert_type(named.required_scopes, frozenset[str])
    assert_type(CallContext(scopes={"notes:read"}).scopes, frozenset[str])
    registry.register(ToolSpec("search_notes", "Search the notes (async).", Effect.READ,
                               1.0, 1, 2_000, search_notes))
    assert_type(registry.get("search"), ToolSpec | None)
    assert_type(registry.names(), list[str])
    assert_type(registry.describe("openai"), list[dict[str, Any]])
    assert_type(registry.describe("anthropic"), list[dict[str, Any]])
    assert_type(registry.describe("mcp"), list[dict[str, Any]])
    for registered in registry:
        assert_type(registered, ToolSpec)
        assert_type(registered.effect, Effect)
        assert_type(registered.effect.is_write, bool)
    return registry


async def search_notes(query: str) -> list[str]:
    """A coroutine handler: the same registry serves sync and async callers."""
    await asyncio.sleep(0)
    return [query]


async def use_the_async_api(
    registry: ToolRegistry, runner: ToolRunner, context: CallContext
) -> None:
    result = await ainvoke_tool(registry, "search_notes", {"query": "async"}, context)
    assert_type(result, dict[str, Any])
    assert result["ok"] is True
    answer = await runner.acall("search", {"query": "async"})
    assert_type(answer, dict[str, Any])
    assert_type(await runner.aapprove("no-such-approval"), dict[str, Any])
    assert_type(await runner.adeny("no-such-approval"), dict[str, Any])
    assert_type(await runner.arecheck("no-such-approval", approver="ops"), dict[str, Any])


def save_keyed(note: str) -> str:
    """A write that forwards its idempotency key downstream (an ``Idempotency-Key`` header)."""
    call: CallInfo | None = current_call()
    assert call is not None and call.effect == "reversible_write"
    assert_type(call.idempotency_key, str | None)
    assert_type(call.attempt, int)
    assert_type(call.report_progress(1, total=2, message="half way"), None)
    return f"saved {note} under {call.idempotency_key}"


def read_note(note_id: str) -> str:
    """A read whose handler says "your input was wrong" for an id it does not hold."""
    if note_id != "n-1":
        raise InvalidInput("no note has this id: search first")
    return "the note"


def shared_runner(registry: ToolRegistry, dsn: str) -> ToolRunner:
    """A runner whose store workers on several hosts share (optional extra ``postgres``).

    Type-checked, not run by :func:`use_the_api`: it needs psycopg and, on first use, a server.
    """
    store = PostgresIdempotencyStore(dsn, claim_ttl_seconds=60, busy_timeout_seconds=2.0)
    assert_type(store.run_once("k1", lambda: {"ok": True}), dict[str, Any])
    assert_type(store.address, str)  # the DSN without its password; the DSN itself is private
    return ToolRunner(registry, store=store)


async def shared_store_on_a_loop(store: PostgresIdempotencyStore) -> None:
    """The PostgreSQL store's async twins (type-checked, not run: they need a server)."""
    assert_type(await store.alist_approvals("pending"), list[dict[str, Any]])
    assert_type(await store.aget_approval("a1"), dict[str, Any] | None)
    await store.aclose()


def use_the_api() -> None:
    with set_testing(True) as mode:  # backoff waits are 0 inside, restored after
        assert_type(mode.previous, bool)
        registry = build_registry()
        context = CallContext(task_id="t1", principal="ada", scopes=frozenset({"notes:read"}))

        result = invoke_tool(registry, "search", {"query": "idempotency"}, context)
        assert_type(result, dict[str, Any])
        assert result["ok"] is True

        refused = invoke_tool(registry, "no_such_tool", {})
        assert refused["error"] == ErrorCode.UNKNOWN_TOOL
        code: ErrorCode = ErrorCode(refused["error"])
        assert_type(code.value, str)

        notes = ToolRegistry([ToolSpec("read_note", "Read a note.", Effect.READ, 1.0, 2, 500, read_note)])
        wrong = invoke_tool(notes, "read_note", {"note_id": "n-2"})
        assert wrong["error"] == ErrorCode.INVALID_ARGUMENTS and isinstance(wrong["detail"], str)
        error: InvalidInput = InvalidInput("a message")
        assert_type(error.detail, str)
        declined: Exception = NotApplied("the card was declined")  # nothing took effect
        assert isinstance(declined, NotApplied)

        assert current_call() is None  # outside a handler
        conversation: ToolRunner = ToolRunner(registry, context=context).for_task("conv-2")
        assert conversation.context.task_id == "conv-2"
        keyed = ToolRegistry([ToolSpec("save_keyed", "Save a note.", "reversible_write", 1.0, 1,
                                       500, save_keyed)])
        saved = ToolRunner(keyed, context=context).call("save_keyed", {"note": "n"})
        assert saved["ok"] and "under t1:save_keyed:" in saved["data"]

        budget = Budget(max_attempts=10)
        runner = ToolRunner(registry, budget=budget, context=context, sleep=lambda _s: None)
        answer = runner.call("search", {"query": "retries", "limit": 1})
        assert_type(answer, dict[str, Any])
        assert_type(budget.used, int)
        assert_type(budget.remaining, int | None)
        assert_type(runner.pending_approvals(), list[dict[str, Any]])
        assert_type(runner.approve("no-such-approval"), dict[str, Any])
        assert_type(runner.approve("no-such-approval", call_id="host-1"), dict[str, Any])
        assert_type(runner.deny("no-such-approval", call_id="host-1"), dict[str, Any])
        assert_type(runner.deny("no-such-approval"), dict[str, Any])
        assert_type(runner.trace.call_counts(), dict[str, int])
        asyncio.run(use_the_async_api(registry, runner, context))

        memory = IdempotencyStore(claim_ttl_seconds=60)
        first = memory.run_once("k1", lambda: {"ok": True, "result": 1})
        assert_type(first, dict[str, Any])
        with tempfile.TemporaryDirectory() as folder:
            durable = SQLiteIdempotencyStore(Path(folder) / "store.db", claim_ttl_seconds=60)
            try:
                again = durable.run_once("k1", lambda: {"ok": True, "result": 2}, "fp")
                assert_type(again, dict[str, Any])
            finally:
                durable.close()
            # One address per store; retention and purge on every backend.
            with open_store(f"sqlite:///{folder}/named.db", retention_seconds=86_400) as named:
                assert_type(named.retention_seconds, float | None)
                assert_type(named.purge(), int)
                assert_type(named.purge(now=2e9), int)
                assert_type([entry.key for entry in named.entries()], list[str])
        assert_type(open_store("memory:", claim_ttl_seconds=60).purge(), int)

    set_testing(False)  # a plain call works as well
    assert_type(agentkit.__all__, list[str])


if __name__ == "__main__":
    use_the_api()
