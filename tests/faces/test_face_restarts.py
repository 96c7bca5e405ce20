"""The framework faces across process restarts and a process killed mid-payment.

Every step of a conversation is a process of its own (tests/faces/_face_worker.py, forked from
one that has only imported the frameworks: tests/faces/_zygote.py): what one step
leaves for the next is only what is durable (agentkit's store, the framework's saved state:
LangGraph's SQLite or PostgreSQL checkpointer, the Agents SDK's RunState JSON, Pydantic AI's
message history), and payments are counted as lines on disk, across processes and deaths.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from _zygote import Zygote

pytest.importorskip("langgraph.checkpoint.sqlite")

WORKER = Path(__file__).resolve().parent / "_face_worker.py"

#: A later process: past the dead approver's lease (its worst case), so the claim it left may
#: be recovered.
LATER = {"AGENTKIT_TEST_LATER": "600"}


def step(processes: Zygote, face: str, answer: str, work: Path, **env: str) -> dict[str, Any]:
    """One step of the conversation in a fresh process; its report, and ``died`` when it was
    killed mid-payment."""
    done = processes.run([sys.executable, str(WORKER), face, answer, str(work)],
                         env={**os.environ, **env}, folder=work, timeout=180)
    if done.returncode != 0:
        assert done.stdout == "", done.stdout
        return {"died": done.returncode, "paid": _paid(work), "stderr": done.stderr[-2000:]}
    return json.loads(done.stdout.splitlines()[-1])


def _paid(work: Path) -> list[str]:
    ledger = work / "payments.log"
    return ledger.read_text().splitlines() if ledger.exists() else []


FACES = [
    pytest.param("langgraph", {}, id="langgraph-sync"),
    pytest.param("langgraph", {"AGENTKIT_TEST_ASYNC": "1"}, id="langgraph-async"),
    pytest.param("openai-agents", {}, id="openai-agents"),
    pytest.param("pydantic-ai", {}, id="pydantic-ai"),
]


@pytest.mark.parametrize(("face", "env"), FACES)
def test_a_payment_killed_mid_write_is_settled_by_the_next_resume(face, env, tmp_path,
                                                                  face_processes):
    """A person approves; the process dies after the payment landed, before anything
    recorded it. Before, every later resume read ``in_progress`` (retryable) for ever and
    the approval was in nobody's list. Now the next resume, once the dead approver's lease
    has passed, is settled by the status lookup: the receipt, and one payment."""
    asked = step(face_processes, face, "start", tmp_path, **env)
    assert asked["question"] and asked["paid"] == []
    died = step(face_processes, face, "yes", tmp_path, AGENTKIT_TEST_DIE_PAYING="ada", **env)
    assert died["died"] == 1 and died["paid"] == ["ada 100"]
    done = step(face_processes, face, "yes", tmp_path, **LATER, **env)
    assert done["question"] is None
    assert done["seen"] == {"call_ada": "paid 100 cents to ada"}
    assert done["paid"] == ["ada 100"]  # the handler ran once, in the process that died


def test_without_a_lookup_the_next_resume_reads_outcome_unknown(tmp_path, face_processes):
    env = {"AGENTKIT_TEST_NO_LOOKUP": "1"}
    step(face_processes, "langgraph", "start", tmp_path, **env)
    died = step(face_processes, "langgraph", "yes", tmp_path, AGENTKIT_TEST_DIE_PAYING="ada", **env)
    assert died["died"] == 1
    done = step(face_processes, "langgraph", "yes", tmp_path, **LATER, **env)
    answer = json.loads(done["seen"]["call_ada"])
    assert (answer["error"], answer["retryable"]) == ("outcome_unknown", False)
    assert done["paid"] == ["ada 100"]


@pytest.mark.parametrize(("face", "env"), FACES)
def test_each_conversation_pays_its_own_and_a_restart_keeps_its_task(face, env, tmp_path,
                                                                     face_processes):
    """Two conversations, one store, a process per step. Before, both ran under task
    "default": conversation 2's identical payment found conversation 1's settled approval
    (LangGraph: no question at all; the others: the person's approval replayed 1's receipt),
    and nobody paid 2. Now each conversation's task id is its own (the thread, the
    conversation_id, the host's context), and conversation 1 asking again in a later process
    reads its own receipt."""
    one = {**env, "AGENTKIT_TEST_CONVERSATION": "conversation-1"}
    two = {**env, "AGENTKIT_TEST_CONVERSATION": "conversation-2"}
    assert step(face_processes, face, "start", tmp_path, **one)["question"]
    assert step(face_processes, face, "yes", tmp_path, **one)["paid"] == ["ada 100"]
    asked = step(face_processes, face, "start", tmp_path, **two)
    assert asked["question"] and asked["paid"] == ["ada 100"]  # 2 is asked for its own
    done = step(face_processes, face, "yes", tmp_path, **two)
    assert done["seen"] == {"call_ada": "paid 100 cents to ada"}
    assert done["paid"] == ["ada 100", "ada 100"]
    again = step(face_processes, face, "start", tmp_path, **one)
    if again["question"]:  # the SDK and Pydantic AI ask before the face can see the receipt
        again = step(face_processes, face, "yes", tmp_path, **one)
    assert again["seen"] == {"call_ada": "paid 100 cents to ada"}
    assert again["paid"] == ["ada 100", "ada 100"]  # conversation 1 replayed its own
