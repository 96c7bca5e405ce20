"""A child process for tests/policy/test_transactional.py: one transactional write, killed where
the test says.

Run as ``python _transactional_worker.py STORE WHERE DRIVER``, STORE being ``sqlite:PATH`` or
``postgres:DSN``, WHERE one of:

    before_handler   killed (SIGKILL) after the key's claim, before the handler starts
    after_insert     killed inside the handler, after its INSERT
    before_commit    killed after the handler returned, while its value is rendered: after the
                     effect and before the commit of the effect and the result
    none             not killed: the write commits, the answer is printed as JSON

and DRIVER ``sync`` or ``async`` (the runner's ``call`` or ``acall``). The tool inserts one row
into ``effects`` through ``current_call().connection``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from agentkit import (
    CallContext,
    PostgresIdempotencyStore,
    SQLiteIdempotencyStore,
    ToolRegistry,
    ToolRunner,
    ToolSpec,
    current_call,
)

TASK = "conv-tx"
ARGUMENTS = {"ref": "r-1", "note": "one row per key"}


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class DiesWhenRendered:
    """A handler's value whose rendering kills the process: the handler has returned, the
    transaction is still open."""

    def __str__(self) -> str:
        die()
        return "not reached"


def tool(placeholder: str, where: str) -> ToolSpec:
    def insert_effect(ref: str, note: str) -> Any:
        if where == "before_handler":
            die()
        call = current_call()
        assert call is not None and call.connection is not None
        sql = f"INSERT INTO effects (ref, note, key) VALUES ({placeholder}, {placeholder}, {placeholder})"
        call.connection.execute(sql, (ref, note, call.idempotency_key))
        if where == "after_insert":
            die()
        if where == "before_commit":
            return DiesWhenRendered()
        return {"ref": ref, "inserted": 1}

    return ToolSpec("insert_effect", "Insert one row.", "reversible_write", 30.0, 2, 500,
                    insert_effect, transactional=True)


def main() -> None:
    store_spec, where, driver = sys.argv[1:4]
    kind, _, target = store_spec.partition(":")
    store: Any = (SQLiteIdempotencyStore(target) if kind == "sqlite"
                  else PostgresIdempotencyStore(target))
    placeholder = "?" if kind == "sqlite" else "%s"
    runner = ToolRunner(ToolRegistry([tool(placeholder, where)]), store=store,
                        context=CallContext(task_id=TASK))
    if driver == "async":
        result = asyncio.run(runner.acall("insert_effect", dict(ARGUMENTS)))
    else:
        result = runner.call("insert_effect", dict(ARGUMENTS))
    print(json.dumps(result))
    store.close()


if __name__ == "__main__":
    main()
