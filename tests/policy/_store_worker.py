"""A child process for tests/policy/test_stores.py: one store user in its own process.

Run as ``python _store_worker.py MODE STORE KEY WORKDIR [N]``, STORE being ``sqlite:PATH`` or
``postgres:DSN``. Every real run of the operation appends a line to ``WORKDIR/ops.log``
(O_APPEND), so the parent counts runs on disk, across processes and across crashes, instead
of trusting any result.

Modes:
    race                 N processes start together (a file barrier) and call run_once on one
                         key; the one that runs waits until the others have answered.
    many                 N processes start together and each calls run_once on 50 keys
                         (KEY-0 … KEY-49, each process in its own order); every answer is
                         logged to WORKDIR/answers.
    crash_after_write    the write takes effect (atomic file write), then the process is
                         killed (SIGKILL) before run_once can record the result.
    crash_before_write   the process is killed (SIGKILL) inside the operation, before the write.
    crash_before_claim   the process is killed (SIGKILL) just before it would claim the key.
    crash_after_result   the write runs and its result is stored, then the process is killed
                         (SIGKILL) before it answers anyone.
    recover              a new process: run_once with a status lookup that reads the write
                         back from disk; its answer is logged to WORKDIR/answers.
    open_approval        creates a pending approval record with id KEY.
    hold                 claims the key with an operation that blocks until stdin closes.

With ``AGENTKIT_TEST_DRIVER=async`` the crash and recover modes drive the store's steps from
an event loop, in run_once's order: the store's async twins where it has them (PostgreSQL),
else each sync step on a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agentkit.policy.stores import PostgresIdempotencyStore, SQLiteIdempotencyStore
from agentkit.policy.stores.algorithm import TAKEN_OVER

KEYS = 50

WAIT_SECONDS = 10.0


def append(path: Path, line: str) -> None:
    # O_APPEND: concurrent small appends from several processes never interleave.
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def wait_for_lines(path: Path, count: int) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if len(lines(path)) >= count:
            return True
        time.sleep(0.005)
    return False


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def open_store(spec: str) -> Any:
    kind, _, where = spec.partition(":")
    if kind == "postgres":
        return PostgresIdempotencyStore(where)
    return SQLiteIdempotencyStore(where)


DRIVER = os.environ.get("AGENTKIT_TEST_DRIVER", "sync")


def run_once(store: Any, key: str, operation: Any, recover: Any = None) -> dict:
    if DRIVER == "sync":
        result: dict = store.run_once(key, operation, "fp", recover=recover)
        return result
    return asyncio.run(arun_once(store, key, operation, recover))


async def arun_once(store: Any, key: str, operation: Any, recover: Any) -> dict:
    """The store's steps from an event loop, in run_once's order."""

    async def step(name: str, *args: Any, **kwargs: Any) -> Any:
        twin = getattr(store, "a" + name, None)
        if twin is not None:
            return await twin(*args, **kwargs)
        return await asyncio.to_thread(getattr(store, name), *args, **kwargs)

    try:
        decision = await step(
            "claim", key, "fp", store.claim_ttl_seconds, may_take_over=recover is not None
        )
        if isinstance(decision, dict):
            return decision
        kind, mine = decision
        if kind == TAKEN_OVER:
            receipt = recover()
            if receipt is not None:
                await step("complete", key, mine, receipt)
                return receipt
        result: dict = operation()
        if result.get("ok") is True:
            await step("complete", key, mine, result)
        else:
            await step("drop", key, mine)
        return result
    finally:
        if hasattr(store, "aclose"):
            await store.aclose()


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: as a crash would


def main() -> None:
    mode, spec, key, workdir = sys.argv[1:5]
    work = Path(workdir)
    ops = work / "ops.log"
    store = open_store(spec)

    if mode == "race":
        n = int(sys.argv[5])
        append(work / "ready", str(os.getpid()))
        wait_for_lines(work / "ready", n)

        def operation() -> dict:
            append(ops, str(os.getpid()))
            wait_for_lines(work / "answers", n - 1)  # hold the claim while the others ask
            return {"ok": True, "data": os.getpid()}

        result = run_once(store, key, operation)
        append(work / "answers", json.dumps(result))

    elif mode == "many":
        n = int(sys.argv[5])
        append(work / "ready", str(os.getpid()))
        wait_for_lines(work / "ready", n)
        keys = [f"{key}-{i}" for i in range(KEYS)]
        random.Random(os.getpid()).shuffle(keys)
        for k in keys:

            def operation(k: str = k) -> dict:
                append(ops, k)
                return {"ok": True, "data": k}

            result = store.run_once(k, operation, "fp")
            append(work / "answers", json.dumps({"key": k, **result}))

    elif mode == "crash_after_write":

        def operation() -> dict:
            write_atomically(work / "sent.txt", "sent")
            append(ops, str(os.getpid()))
            die()  # killed after the write landed, before the result is stored
            raise AssertionError("not reached")

        run_once(store, key, operation)

    elif mode == "crash_before_write":

        def operation() -> dict:
            append(work / "started", str(os.getpid()))
            die()  # killed before the write
            raise AssertionError("not reached")

        run_once(store, key, operation)

    elif mode == "crash_before_claim":
        store.result(key)  # the store is open and reachable ...
        die()  # ... and the process dies before it claims anything

    elif mode == "crash_after_result":

        def operation() -> dict:
            write_atomically(work / "sent.txt", "sent")
            append(ops, str(os.getpid()))
            return {"ok": True, "data": "sent"}

        run_once(store, key, operation)
        die()  # the result is stored; nobody heard the answer

    elif mode == "recover":
        sent = work / "sent.txt"

        def lookup() -> dict | None:
            return {"ok": True, "data": sent.read_text()} if sent.exists() else None

        def operation() -> dict:
            write_atomically(sent, "sent")
            append(ops, str(os.getpid()))
            return {"ok": True, "data": "sent"}

        result = run_once(store, key, operation, recover=lookup)
        append(work / "answers", json.dumps(result))

    elif mode == "open_approval":
        record = store.create_approval(key, {"state": "pending", "opened_by": os.getpid()})
        append(work / "answers", json.dumps(record))

    elif mode == "hold":

        def operation() -> dict:
            print("claimed", flush=True)
            sys.stdin.readline()
            return {"ok": False, "error": "outcome_unknown", "retryable": False}

        store.run_once(key, operation, "fp")

    else:
        raise SystemExit(f"unknown mode {mode!r}")
    store.close()


if __name__ == "__main__":
    main()
