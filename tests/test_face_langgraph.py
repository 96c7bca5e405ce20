"""agentkit.faces.langgraph: the registry as a LangGraph ToolNode, driven by LangChain's
GenericFakeChatModel (a subclass that binds tools) through the failure cases, counting the
handler's real calls; interrupt() re-runs the node on resume, and the write still runs once."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("langgraph")
pytest.importorskip("agents")  # framework_runs drives all three frameworks
pytest.importorskip("pydantic_ai")

from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command

from agentkit.faces import langgraph as face
from agentkit.faces.framework_cases import CASES, Bench
from agentkit.faces.framework_runs import run_case

#: case -> (real calls alone, real calls through agentkit, how the run ended alone)
EXPECTED = {
    "repeated write": (2, 1, ""),
    "write commits, then times out": (2, 1, ""),
    "transient read": (2, 2, ""),
    # Alone, the second interrupt re-runs the node from its top: ada is paid twice.
    "approval approved (2 payments)": (3, 2, ""),
    "approval rejected": (0, 0, ""),
    "budget spent": (1, 0, ""),
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_calls_alone_and_through_agentkit(case):
    alone = asyncio.run(run_case("langgraph", case, agentkit=False))
    kit = asyncio.run(run_case("langgraph", case, agentkit=True))
    assert (alone.calls, kit.calls, alone.aborted) == EXPECTED[case.name]
    assert kit.aborted == ""
    assert not any("try again" in text.lower() for text in kit.seen)


def test_two_approved_payments_each_land_once_and_the_model_reads_their_receipts():
    case = next(c for c in CASES if c.name.startswith("approval approved"))
    kit = asyncio.run(run_case("langgraph", case, agentkit=True))
    assert sorted(kit.seen) == ["payment-1", "payment-2"]


def _bench(name: str) -> Bench:
    return Bench(next(c for c in CASES if c.name == name))


def _graph(bench: Bench, calls: list[dict]):
    """A one-step graph: the given tool calls, then the node (no model needed)."""

    def model(state: MessagesState) -> dict:
        return {"messages": [AIMessage("", tool_calls=calls)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", face.tool_node(bench.runner))
    graph.add_edge(START, "model")
    graph.add_edge("model", "tools")
    return graph.compile(checkpointer=InMemorySaver())


def test_sync_path_approve_runs_once_reject_runs_nothing():
    for resume, calls, error in [(True, 1, None), (False, 0, "forbidden")]:
        bench = _bench("approval rejected")
        app = _graph(bench, [{"name": "send_payment", "args": {"to": "ada", "cents": 1}, "id": "c1"}])
        config = {"configurable": {"thread_id": "t"}}
        first = app.invoke({"messages": [("user", "go")]}, config)
        [pending] = first["__interrupt__"]
        assert pending.value == {"tool": "send_payment", "arguments": {"to": "ada", "cents": 1},
                                 "tool_call_id": "c1"}
        assert bench.calls == 0  # nobody approved yet
        done = app.invoke(Command(resume=resume), config)
        message = done["messages"][-1]
        assert message.tool_call_id == "c1"
        assert bench.calls == calls
        if error:
            assert json.loads(message.content)["error"] == error and message.status == "error"
        else:
            assert message.content == "payment-1"
        bench.close()


def test_a_truthy_resume_that_is_not_true_does_not_approve():
    bench = _bench("approval rejected")
    app = _graph(bench, [{"name": "send_payment", "args": {"to": "ada", "cents": 1}, "id": "c1"}])
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [("user", "go")]}, config)
    done = app.invoke(Command(resume="yes"), config)
    assert json.loads(done["messages"][-1].content)["error"] == "forbidden"
    assert bench.calls == 0


def test_tools_carry_the_registry_names_descriptions_and_schemas():
    bench = _bench("repeated write")
    [tool] = face.tools(bench.runner)
    [described] = bench.registry.describe("openai")
    assert tool.name == "save_note"
    assert tool.description == described["function"]["description"]
    assert tool.args_schema == described["function"]["parameters"]


def test_the_tool_call_id_names_the_call_in_the_trace():
    bench = _bench("repeated write")
    app = _graph(bench, [{"name": "save_note", "args": {"text": "x"}, "id": "lg-call-3"}])
    app.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "t"}})
    assert {r.call_id for r in bench.runner.trace.records} == {"lg-call-3"}
    assert bench.calls == 1


def test_bad_arguments_are_a_tool_message_not_an_exception():
    bench = _bench("repeated write")
    app = _graph(bench, [{"name": "save_note", "args": {"text": 5}, "id": "c1"},
                         {"name": "no_such_tool", "args": {}, "id": "c2"}])
    done = app.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "t"}})
    errors = [json.loads(m.content)["error"] for m in done["messages"] if m.type == "tool"]
    assert errors == ["invalid_arguments", "unknown_tool"]
    assert bench.calls == 0
