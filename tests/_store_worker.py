"""A child process for tests/test_stores.py: one store user in its own process.

Run as ``python _store_worker.py MODE DB KEY WORKDIR [N]``. Every real run of the operation
appends a line to ``WORKDIR/ops.log``, so the parent counts runs on disk, across processes
and across crashes, instead of trusting any result.

Modes:
    race                 N processes start together (a file barrier) and call run_once on one
                         key; the one that runs waits until the others have answered.
    crash_after_write    the write takes effect (atomic file write), then the process dies
                         before run_once can record the result.
    crash_before_write   the process dies inside the operation before the write.
    hold                 claims the key with an operation that blocks until stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from agentkit.policy.stores import SQLiteIdempotencyStore

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


def main() -> None:
    mode, db, key, workdir = sys.argv[1:5]
    work = Path(workdir)
    ops = work / "ops.log"
    store = SQLiteIdempotencyStore(db)

    if mode == "race":
        n = int(sys.argv[5])
        append(work / "ready", str(os.getpid()))
        wait_for_lines(work / "ready", n)

        def operation() -> dict:
            append(ops, str(os.getpid()))
            wait_for_lines(work / "answers", n - 1)  # hold the claim while the others ask
            return {"ok": True, "data": os.getpid()}

        result = store.run_once(key, operation, "fp")
        append(work / "answers", json.dumps(result))

    elif mode == "crash_after_write":

        def operation() -> dict:
            write_atomically(work / "sent.txt", "sent")
            append(ops, str(os.getpid()))
            os._exit(1)  # killed after the write landed, before the result is stored

        store.run_once(key, operation, "fp")

    elif mode == "crash_before_write":

        def operation() -> dict:
            append(work / "started", str(os.getpid()))
            os._exit(1)  # killed before the write

        store.run_once(key, operation, "fp")

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
