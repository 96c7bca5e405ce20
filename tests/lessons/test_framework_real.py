"""Notebook 08's optional real-endpoint section: the same failure cases through the OpenAI Agents
SDK against an OpenAI-compatible endpoint, and one line (never a failure) when none is set.

The endpoint here is a small local HTTP server speaking ``/v1/chat/completions``, scripted as a
model that follows the case's prompt: the SDK, its OpenAI client and the HTTP round trips are
the real ones.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("agents")

from agentkit.lessons.framework_cases import CASES
from agentkit.lessons.framework_runs import (
    NO_ENDPOINT,
    Endpoint,
    real_prompt,
    real_table,
    run_real_case,
)


def test_no_base_url_means_no_endpoint_and_one_line() -> None:
    assert Endpoint.from_environment({}) is None
    assert Endpoint.from_environment({"OPENAI_BASE_URL": "  ", "OPENAI_MODEL": "m"}) is None
    assert "\n" not in NO_ENDPOINT and "OPENAI_BASE_URL" in NO_ENDPOINT


def test_the_endpoint_comes_from_the_environment() -> None:
    local = Endpoint.from_environment({"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"})
    assert local == Endpoint("http://127.0.0.1:8000/v1", "gpt-4o-mini", "unused")
    named = Endpoint.from_environment({"OPENAI_BASE_URL": "https://api.example/v1", "OPENAI_MODEL": "m",
                                       "OPENAI_API_KEY": "k"})
    assert named == Endpoint("https://api.example/v1", "m", "k")


def test_the_prompt_says_what_the_scripted_model_does() -> None:
    repeated = real_prompt(CASES[0])
    assert 'save_note with {"text": "hello"}' in repeated and "once more with the same arguments" in repeated
    assert "once more with the same" not in real_prompt(CASES[2])


class _Model(BaseHTTPRequestHandler):
    """A chat-completions endpoint that does what the prompt asks: the case's calls, ``repeats``
    times, then "done". Every request is kept (``server.requests``)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, body))  # type: ignore[attr-defined]
        case = self.server.case  # type: ignore[attr-defined]
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered < case.repeats * len(case.arguments):
            calls = [{"id": f"call_{answered + i}", "type": "function",
                      "function": {"name": case.tool, "arguments": json.dumps(arguments)}}
                     for i, arguments in enumerate(case.arguments)]
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
            reason = "tool_calls"
        else:
            message, reason = {"role": "assistant", "content": "done"}, "stop"
        reply = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                            "model": body["model"], "choices": [{"index": 0, "message": message,
                                                                 "finish_reason": reason}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def model_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_repeated_write_against_a_real_endpoint_writes_twice_alone_and_once_through_agentkit(model_server):
    model_server.case = CASES[0]  # repeated write
    endpoint = Endpoint(f"http://127.0.0.1:{model_server.server_address[1]}/v1", "local-model", "k")
    alone = asyncio.run(run_real_case(CASES[0], endpoint, agentkit=False))
    kit = asyncio.run(run_real_case(CASES[0], endpoint, agentkit=True))
    assert (alone.calls, alone.aborted) == (2, "")  # the handler's real calls: the note written twice
    assert (kit.calls, kit.aborted) == (1, "")
    assert len(kit.seen) == 2 and kit.seen[0] == kit.seen[1]  # the second read is the first's replay
    paths = {path for path, _ in model_server.requests}
    assert paths == {"/v1/chat/completions"}
    assert all(body["model"] == "local-model" for _, body in model_server.requests)
    first_prompt = model_server.requests[0][1]["messages"][-1]["content"]
    assert first_prompt == real_prompt(CASES[0])


def test_the_table_against_a_real_endpoint(model_server):
    model_server.case = CASES[0]
    endpoint = Endpoint(f"http://127.0.0.1:{model_server.server_address[1]}/v1")
    frame = asyncio.run(real_table(endpoint, cases=[CASES[0]]))
    assert frame.loc["repeated write"].to_dict() == {"alone": 2, "+ agentkit": 1, "ended, alone": "finished",
                                                     "ended, + agentkit": "finished"}


def test_an_endpoint_that_refuses_is_a_result_not_a_crash(model_server):
    port = model_server.server_address[1]
    model_server.shutdown()
    model_server.server_close()  # nothing listens on the port any more
    outcome = asyncio.run(run_real_case(CASES[0], Endpoint(f"http://127.0.0.1:{port}/v1"), agentkit=True))
    assert outcome.calls == 0 and outcome.aborted  # the handler never ran; the run says why it ended


def test_notebook_08_stores_the_skip_line_never_a_real_run() -> None:
    """The real-endpoint cell's stored output is the one line of a machine without an endpoint,
    and nbval does not compare it (a machine with one prints its own table)."""
    from pathlib import Path

    notebook = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "08_your_framework.ipynb")
                          .read_text(encoding="utf-8"))
    [cell] = [c for c in notebook["cells"] if c["cell_type"] == "code"
              and "Endpoint.from_environment()" in "".join(c["source"])]
    assert "nbval-ignore-output" in cell["metadata"].get("tags", [])
    assert [("".join(o.get("text", "")), o.get("name")) for o in cell["outputs"]] == [(NO_ENDPOINT + "\n", "stdout")]
