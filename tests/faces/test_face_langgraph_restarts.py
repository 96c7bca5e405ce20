"""LangGraph conversations across process restarts on the checkpointers people deploy:
LangGraph's own SQLite and PostgreSQL savers, with agentkit's store beside them (as durable),
one process per step (tests/faces/_face_worker.py, forked by tests/faces/_zygote.py), payments
counted on disk."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from test_face_restarts import LATER, step


def _checkpointers() -> list[Any]:
    return [
        pytest.param({}, id="sqlite-sync"),
        pytest.param({"AGENTKIT_TEST_ASYNC": "1"}, id="sqlite-async"),
        pytest.param({"postgres": "1"}, id="postgres-sync"),
        pytest.param({"postgres": "1", "AGENTKIT_TEST_ASYNC": "1"}, id="postgres-async"),
    ]


@pytest.fixture
def pg_schema():
    from test_stores import PgSchema

    schema = PgSchema()
    yield schema
    schema.drop()


@pytest.mark.parametrize("env", _checkpointers())
def test_langgraph_answers_keep_their_calls_across_restarts(env, tmp_path, request,
                                                            face_processes):
    """Bob: no; Carol: yes, and the process dies paying her; Dave: yes; five processes, on
    LangGraph's own SQLite and PostgreSQL checkpointers (agentkit's store beside them, as
    durable). Each answer goes to the call it was shown for, Carol is paid once and her
    receipt read, Bob reads ``forbidden``."""
    env = dict(env)
    if env.pop("postgres", None):
        env["AGENTKIT_TEST_STORE_DSN"] = request.getfixturevalue("pg_schema").dsn
    env["AGENTKIT_TEST_PAYEES"] = "bob,carol,dave"

    def answer(text: str, **more: str) -> dict[str, Any]:
        return step(face_processes, "langgraph", text, tmp_path, **more, **env)

    shown = [answer("start")["question"]["tool_call_id"]]
    shown.append(answer("no")["question"]["tool_call_id"])
    died = answer("yes", AGENTKIT_TEST_DIE_PAYING="carol")
    assert died["died"] == 1 and died["paid"] == ["carol 200"]
    waiting = answer("yes", **LATER)  # the answer to Carol, again
    shown.append(waiting["question"]["tool_call_id"])
    assert waiting["paid"] == ["carol 200"]
    done = answer("yes", **LATER)
    assert shown == ["call_bob", "call_carol", "call_dave"]
    assert done["question"] is None
    seen = {call: text if not text.startswith("{") else json.loads(text)["error"]
            for call, text in done["seen"].items()}
    assert seen == {"call_bob": "forbidden", "call_carol": "paid 200 cents to carol",
                    "call_dave": "paid 300 cents to dave"}
    assert done["paid"] == ["carol 200", "dave 300"]
