"""Durable agents, whole (issue 42): the documented Pydantic AI agent made durable by DBOS
(docs/engines/durable-agents.md), with agentkit's toolset on every tool, run in a worker
process that is really killed mid-run, then recovered in a new process.

The worker (``_durable_agent_worker.py``) runs the page's own block, so what is tested is what
the page says. Counted on disk, across the processes: the refunds the handler really made
(the recipe's ledger) and the model requests the model really answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")
pytest.importorskip("pydantic_ai.durable_exec.dbos")

WORKER = Path(__file__).with_name("_durable_agent_worker.py")
TIMEOUT = 180


def worker(mode: str, workdir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DBOS_", "REFUNDS_"))}
    return subprocess.run([sys.executable, str(WORKER), mode, str(workdir), *extra],
                          cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


def refunds(workdir: Path) -> list[dict[str, Any]]:
    ledger = workdir / "refunds.jsonl"
    lines = ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []
    return [json.loads(line) for line in lines]


def model_calls(workdir: Path) -> list[str]:
    calls = workdir / "model-calls"
    return calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []


def keys(workdir: Path) -> list[dict[str, Any]]:
    listed = subprocess.run(
        [sys.executable, "-m", "agentkit", "keys", "list", "--json",
         "--store", f"sqlite:///{workdir / 'agentkit.sqlite3'}"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert listed.returncode == 0, listed.stderr
    found: list[dict[str, Any]] = json.loads(listed.stdout)
    return found


def recovered(workdir: Path, *extra: str) -> dict[str, Any]:
    ran = worker("recover", workdir, *extra)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    answer: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return answer


def test_killed_while_waiting_for_a_person_the_turn_replays_and_the_approval_survives(
        tmp_path: Path) -> None:
    crashed = worker("crash-waiting", tmp_path)
    assert crashed.returncode == 1 and "crashing" in crashed.stdout, crashed.stdout + crashed.stderr
    assert refunds(tmp_path) == [] and model_calls(tmp_path) == ["crash-waiting"]

    answer = recovered(tmp_path, "--approve")
    assert answer["result"] == "Refunded o-1."
    assert refunds(tmp_path) == [{"order_id": "o-1", "cents": 500}]
    # the first turn was replayed from DBOS's record: the new worker asked only the second
    assert answer["model_calls"] == 1
    assert model_calls(tmp_path) == ["crash-waiting", "recover"]


def test_killed_inside_the_refund_the_status_lookup_settles_it_and_nothing_pays_twice(
        tmp_path: Path) -> None:
    crashed = worker("crash-paying", tmp_path)
    assert crashed.returncode == 1 and "crashing" in crashed.stdout, crashed.stdout + crashed.stderr
    assert refunds(tmp_path) == [{"order_id": "o-1", "cents": 500}]  # it landed, then the kill
    # agentkit's claim is still open (the worker died before the result was recorded), under
    # the workflow's id as the task id
    (key,) = keys(tmp_path)
    assert key["state"] == "claimed" and key["key"].startswith("refund-o-1:refund:"), key

    answer = recovered(tmp_path)
    assert answer["result"] == "Refunded o-1."
    assert refunds(tmp_path) == [{"order_id": "o-1", "cents": 500}]  # once, not twice
    assert answer["model_calls"] == 1  # only the answer after the refund; the first turn replayed
    assert model_calls(tmp_path) == ["crash-paying", "recover"]
    (key,) = keys(tmp_path)
    assert key["state"] == "completed", key


# --------------------------------------------------------------------------- Temporal

TEMPORAL_WORKER = Path(__file__).with_name("_durable_temporal_worker.py")


async def _started(mode: str, workdir: Path, env: Any) -> Any:
    """A worker process on the test server; returns once it serves."""
    import asyncio

    config = env.client.service_client.config
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(TEMPORAL_WORKER), mode, str(workdir), config.target_host,
        env.client.namespace, cwd=workdir, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "REFUNDS_"))})
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), TIMEOUT)
    if line != b"serving\n":
        stderr = await process.stderr.read() if process.stderr else b""
        raise AssertionError(f"the worker did not start: {line!r}\n{stderr.decode()}")
    return process


async def _waiting_for(handle: Any) -> list[str]:
    """The tool calls the conversation waits on a person for (a query: asked until it says)."""
    import asyncio

    for _ in range(int(TIMEOUT / 0.05)):
        waiting: list[str] = await handle.query("waiting_for")
        if waiting:
            return waiting
        await asyncio.sleep(0.05)  # a query answers the state now: ask again shortly
    raise AssertionError("the conversation never asked a person")


def _on_temporal(workdir: Path, crash_paying: bool) -> tuple[str, int]:
    """Start the conversation on a first worker, kill it (while it waits for a person, or
    inside the refund), finish it on a second worker; the result and the first worker's
    exit status."""
    import asyncio

    from temporalio.testing import WorkflowEnvironment
    from test_face_temporal import server_binary

    binary = server_binary()

    async def run() -> tuple[str, int]:
        async with await WorkflowEnvironment.start_time_skipping(
                test_server_existing_path=binary) as env:
            first = await _started("crash-paying" if crash_paying else "first", workdir, env)
            handle = await env.client.start_workflow(
                "RefundConversation", "Refund order o-1 (5 euros)", id="refund-o-1",
                task_queue="refunds")
            waiting = await _waiting_for(handle)
            if crash_paying:
                for tool_call_id in waiting:  # the person approves; the worker dies paying
                    await handle.signal("decide", args=[tool_call_id, True])
                status = await asyncio.wait_for(first.wait(), TIMEOUT)
            else:
                first.kill()  # SIGKILL while the conversation waits for the person
                status = await first.wait()
            second = await _started("second", workdir, env)
            try:
                if not crash_paying:
                    for tool_call_id in waiting:
                        await handle.signal("decide", args=[tool_call_id, True])
                result = await asyncio.wait_for(handle.result(), TIMEOUT)
            finally:
                second.kill()
                await second.wait()
            return str(result), status

    return asyncio.run(run())


def test_temporal_killed_while_waiting_for_a_person_the_new_worker_replays_and_pays_once(
        tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai.durable_exec.temporal")
    result, status = _on_temporal(tmp_path, crash_paying=False)
    assert status == -9  # really killed
    assert result == "Refunded o-1."
    assert refunds(tmp_path) == [{"order_id": "o-1", "cents": 500}]
    # the first turn was the first worker's; the second worker asked only for the answer
    assert model_calls(tmp_path) == ["first", "second"]


def test_temporal_killed_inside_the_refund_the_retry_settles_it_by_the_status_lookup(
        tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai.durable_exec.temporal")
    result, status = _on_temporal(tmp_path, crash_paying=True)
    assert status == 1  # died inside the refund, after it landed
    assert result == "Refunded o-1."
    assert refunds(tmp_path) == [{"order_id": "o-1", "cents": 500}]  # once, not twice
    assert model_calls(tmp_path) == ["crash-paying", "second"]
    (key,) = keys(tmp_path)
    assert key["state"] == "completed" and key["key"].startswith("refund-o-1:refund:"), key


def test_temporal_bounded_attempts_shorter_than_the_write_end_in_progress_after_it_landed(
        tmp_path: Path) -> None:
    """What the retry options page says, on the real server: attempt 1 writes and is timed out
    (1 s) while it still runs, attempt 2 finds its claim (in_progress), and with
    maximum_attempts=2 the workflow fails with in_progress although the write landed. (With
    unlimited attempts a later attempt replays it: test_face_temporal.py's server test.)"""
    import asyncio
    import importlib

    pytest.importorskip("temporalio")
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ApplicationError
    from test_face_temporal import Attempts, Bench, wait, with_server

    from agentkit.faces.temporal import activities

    bounded = importlib.import_module("_temporal_bounded_workflows")
    bench = Bench(tmp_path)
    seen = Attempts()

    async def run(client: Any) -> BaseException:
        try:
            with pytest.raises(WorkflowFailureError) as failed:
                await client.execute_workflow(bounded.SaveBounded.run, args=["n1", "hello"],
                                              id="bounded-1", task_queue="agentkit-tests")
            await wait(bench.wrote)
            return failed.value
        finally:
            bench.release.set()  # attempt 1 may now return: its write had landed long before

    failure = asyncio.run(with_server(run, activities=activities(bench.registry, bench.store),
                                      workflows=[bounded.SaveBounded],
                                      interceptors=[seen.interceptor]))
    cause: BaseException | None = failure
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.type == "in_progress", failure
    assert bench.writes == 1  # the write landed: the workflow's in_progress is not "not done"
    # attempt 2 found attempt 1's claim; attempt 1 itself may have returned before the worker
    # stopped (its result comes too late for the workflow)
    assert [(number, how) for _, number, how in seen.ended if how != "ok"] == [(2, "in_progress")]
