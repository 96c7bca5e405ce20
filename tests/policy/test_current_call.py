"""``agentkit.current_call()`` (docs/design.md#current-call): the call a handler or status lookup
runs for, with the write's idempotency key, the same on every attempt, in the lookup, after
recovery in another process, and through both drivers.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import agentkit
from agentkit import (
    CallContext,
    CallInfo,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    ainvoke_tool,
    current_call,
    invoke_tool,
)

ROOT = Path(__file__).resolve().parents[2]


class Seen:
    """What each handler and lookup call saw of current_call(), in order."""

    def __init__(self) -> None:
        self.infos: list[tuple[str, CallInfo | None]] = []
        self.lock = threading.Lock()

    def note(self, where: str) -> CallInfo | None:
        info = current_call()
        with self.lock:
            self.infos.append((where, info))
        return info


def test_outside_any_call_it_is_none() -> None:
    assert current_call() is None
    assert agentkit.current_call is current_call


def test_a_plain_invoke_tells_the_tool_task_and_call_id_without_a_key() -> None:
    seen = Seen()

    def search(query: str) -> str:
        seen.note("handler")
        return "found"

    async def asearch(query: str) -> str:
        seen.note("async handler")
        return "found"

    registry = ToolRegistry([ToolSpec("search", "Search.", "read", 1.0, 1, 100, search),
                             ToolSpec("asearch", "Search.", "read", 1.0, 1, 100, asearch)])
    context = CallContext(task_id="conv-7")
    assert invoke_tool(registry, "search", {"query": "q"}, context, call_id="c-1")["ok"]
    assert asyncio.run(ainvoke_tool(registry, "asearch", {"query": "q"}, context, call_id="c-2"))["ok"]
    assert [info for _, info in seen.infos] == [
        CallInfo("c-1", "conv-7", "search", "read", None, 1),
        CallInfo("c-2", "conv-7", "asearch", "read", None, 1),
    ]
    assert current_call() is None  # it never leaks to the caller


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("coroutine", [False, True])
def test_a_write_sees_one_key_on_every_attempt_and_in_its_lookup(driver: str, coroutine: bool) -> None:
    seen = Seen()
    landed: dict[str, str] = {}

    def write(ref: str) -> str:
        info = seen.note("handler")
        assert info is not None
        if info.attempt == 1:
            raise ConnectionError("reset before the request was sent")
        landed[ref] = str(info.idempotency_key)
        return "written"

    async def awrite(ref: str) -> str:
        return write(ref)

    def status(ref: str) -> str | None:
        seen.note("lookup")
        return None  # not done: the runner tries again under the same key

    spec = ToolSpec("write", "Write.", "reversible_write", 5.0, 3, 100,
                    awrite if coroutine else write, status_lookup=status)
    runner = ToolRunner(ToolRegistry([spec]), context=CallContext(task_id="conv-1"),
                        sleep=lambda _s: None)
    if driver == "sync":
        result = runner.call("write", {"ref": "r1"}, call_id="call-9")
    else:
        result = asyncio.run(runner.acall("write", {"ref": "r1"}, call_id="call-9"))
    assert result["ok"] and result["attempts"] == 2
    wheres = [where for where, _ in seen.infos]
    assert wheres == ["handler", "lookup", "handler"]
    infos = [info for _, info in seen.infos]
    assert all(info is not None for info in infos)
    keys = {info.idempotency_key for info in infos if info is not None}
    assert len(keys) == 1 and landed == {"r1": keys.pop()}
    assert [(i.attempt, i.call_id, i.task_id, i.tool, i.effect) for i in infos if i is not None] == [
        (1, "call-9", "conv-1", "write", "reversible_write"),
        (1, "call-9", "conv-1", "write", "reversible_write"),  # the lookup asks about attempt 1
        (2, "call-9", "conv-1", "write", "reversible_write"),
    ]


def test_a_read_has_no_key_and_counts_its_attempts() -> None:
    seen = Seen()

    def flaky(query: str) -> str:
        info = seen.note("handler")
        if info is not None and info.attempt < 3:
            raise ConnectionError("flaky")
        return "ok"

    spec = ToolSpec("search", "Search.", "read", 1.0, 3, 100, flaky)
    runner = ToolRunner(ToolRegistry([spec]), sleep=lambda _s: None)
    assert runner.call("search", {"query": "q"})["ok"]
    assert [(i.attempt, i.idempotency_key, i.task_id) for _, i in seen.infos if i is not None] == [
        (1, None, "default"), (2, None, "default"), (3, None, "default")]


def test_an_approved_write_sees_the_key_of_the_call_that_asked_for_it() -> None:
    seen = Seen()

    def pay(invoice: str) -> str:
        seen.note("handler")
        return "paid"

    spec = ToolSpec("pay", "Pay.", "irreversible_write", 1.0, 1, 100, pay,
                    idempotency_key=lambda context, args: f"invoice:{args['invoice']}")
    asker = ToolRunner(ToolRegistry([spec]), context=CallContext(task_id="conv-3"))
    approval_id = asker.call("pay", {"invoice": "inv-1"})["approval_id"]
    approver = ToolRunner(ToolRegistry([spec]), store=asker.store,
                          context=CallContext(task_id="desk", principal="ada"))
    assert approver.approve(approval_id, call_id="approve-1")["ok"]
    (_where, info), = seen.infos
    assert info == CallInfo("approve-1", "conv-3", "pay", "irreversible_write", "invoice:inv-1", 1)


_CHILD = r"""
import os, sys
from agentkit import CallContext, SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec, current_call

def write(ref):
    info = current_call()
    with open(sys.argv[2], "w") as f:
        f.write(info.idempotency_key)  # the write lands downstream under this key...
    os._exit(9)  # ... and the process dies before the runner records it

def status(ref):
    return None

spec = ToolSpec("write", "Write.", "reversible_write", 5.0, 2, 100, write, status_lookup=status)
runner = ToolRunner(ToolRegistry([spec]), store=SQLiteIdempotencyStore(sys.argv[1]),
                    context=CallContext(task_id="conv-5"))
runner.call("write", {"ref": "r1"})
"""


def test_the_key_is_the_same_after_recovery_in_another_process(tmp_path: Path) -> None:
    store_path, key_file = tmp_path / "store.sqlite", tmp_path / "key"
    child = subprocess.run([sys.executable, "-c", _CHILD, str(store_path), str(key_file)],
                           check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode == 9, child.stderr
    first_key = key_file.read_text()
    seen = Seen()

    def status(ref: str) -> dict[str, Any] | None:
        info = seen.note("lookup")
        assert info is not None
        # a service that deduplicates by key answers for it: the write it holds
        return {"ref": ref, "key": info.idempotency_key} if info.idempotency_key == first_key else None

    def write(ref: str) -> str:
        raise AssertionError("the write must not run again")

    spec = ToolSpec("write", "Write.", "reversible_write", 5.0, 2, 500, write, status_lookup=status)
    with SQLiteIdempotencyStore(store_path) as store:
        runner = ToolRunner(ToolRegistry([spec]), store=store, context=CallContext(task_id="conv-5"))
        result = runner.call("write", {"ref": "r1"})
    assert result["ok"] and json.loads(result["data"])["key"] == first_key
    assert result["attempts"] == 0
    (_where, info), = seen.infos
    assert info is not None and info.attempt == 0 and info.task_id == "conv-5"
