"""A child process for tests/faces/test_face_restarts.py: one step of a framework conversation.

Run as ``python _face_worker.py FACE STEP WORKDIR`` (FACE: ``langgraph``, ``openai-agents``,
``pydantic-ai``; STEP: ``start``, or the answer ``yes``/``no`` to the question the
conversation waits on). Every step is a process of its own, and everything a step leaves
for the next is durable: agentkit's store (SQLite in WORKDIR, or PostgreSQL when
``AGENTKIT_TEST_STORE_DSN`` is set), the framework's own state (LangGraph's SQLite or
PostgreSQL checkpointer; the Agents SDK's RunState JSON; Pydantic AI's message history), and
the payments, one line each in ``WORKDIR/payments.log`` (O_APPEND), so the parent counts real
payments across processes and across deaths.

Environment:
    AGENTKIT_TEST_PAYEES      who the model pays in its one turn, comma-separated ("ada")
    AGENTKIT_TEST_DIE_PAYING  a payee: paying them, the process dies (os._exit) after the
                              payment landed, before anything could record it
    AGENTKIT_TEST_LATER       seconds added to the runner's clock (a later process, after a
                              dead approver's lease has passed)
    AGENTKIT_TEST_ASYNC       "1": the async path (ainvoke / an async checkpointer)
    AGENTKIT_TEST_STORE_DSN   a PostgreSQL DSN for agentkit's store and LangGraph's checkpointer
    AGENTKIT_TEST_NO_LOOKUP   "1": the payment tool has no status lookup
    AGENTKIT_TEST_CONVERSATION  the conversation this step belongs to ("conversation-1"): the
                              LangGraph thread, the Pydantic AI conversation_id, the Agents
                              SDK host's context (its face's task_id); each keeps its own
                              framework state in WORKDIR

It prints one JSON line: the question now waiting (or null), the tool results the model read
(by tool-call id) and the payments so far. A step that ends the conversation keeps no new
framework state: a host that retries resumes from the question it saved.
"""

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from agentkit import SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec

WORK = Path(sys.argv[3])
LEDGER = WORK / "payments.log"
PAYEES = os.environ.get("AGENTKIT_TEST_PAYEES", "ada").split(",")
DIE_PAYING = os.environ.get("AGENTKIT_TEST_DIE_PAYING", "")
LATER = float(os.environ.get("AGENTKIT_TEST_LATER", "0"))
ASYNC = os.environ.get("AGENTKIT_TEST_ASYNC") == "1"
DSN = os.environ.get("AGENTKIT_TEST_STORE_DSN", "")
CONVERSATION = os.environ.get("AGENTKIT_TEST_CONVERSATION", "conversation-1")


def payments() -> list[str]:
    return LEDGER.read_text().splitlines() if LEDGER.exists() else []


def send_payment(to: str, cents: int) -> str:
    """Send a payment; it cannot be taken back."""
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(f"{to} {cents}\n")
    if to == DIE_PAYING:
        os._exit(1)  # the payment landed; the process dies before anything records it
    return f"paid {cents} cents to {to}"


def payment_status(to: str, cents: int) -> str | None:
    return f"paid {cents} cents to {to}" if f"{to} {cents}" in payments() else None


def runner() -> ToolRunner:
    lookup = None if os.environ.get("AGENTKIT_TEST_NO_LOOKUP") == "1" else payment_status
    spec = ToolSpec("send_payment", "Send a payment.", "irreversible_write", 10.0, 1, 2000,
                    send_payment, status_lookup=lookup)
    if DSN:
        from agentkit import PostgresIdempotencyStore

        store: Any = PostgresIdempotencyStore(DSN)
    else:
        store = SQLiteIdempotencyStore(WORK / "store.sqlite")
    return ToolRunner(ToolRegistry([spec]), store=store, sleep=lambda seconds: None,
                      clock=lambda: time.time() + LATER)


def calls() -> list[tuple[str, dict[str, Any]]]:
    return [(f"call_{to}", {"to": to, "cents": 100 * (n + 1)}) for n, to in enumerate(PAYEES)]


def report(question: Any, seen: dict[str, str]) -> None:
    print(json.dumps({"question": question, "seen": seen, "paid": payments()}))


# ---------------------------------------------------------------------- LangGraph


def langgraph(step: str) -> None:
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import Command

    from agentkit.faces.langgraph import tool_node

    def model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        if isinstance(state["messages"][-1], ToolMessage):
            return {"messages": [AIMessage("done")]}
        return {"messages": [AIMessage("", tool_calls=[
            {"name": "send_payment", "args": arguments, "id": call_id}
            for call_id, arguments in calls()])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", tool_node(runner()))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route)
    graph.add_edge("tools", "model")
    config = {"configurable": {"thread_id": CONVERSATION}}
    request: Any = ({"messages": [("user", "pay them")]} if step == "start"
                    else Command(resume=step == "yes"))

    def show(result: dict[str, Any]) -> None:
        pending = result.get("__interrupt__") or []
        seen = {m.tool_call_id: m.content for m in result["messages"] if m.type == "tool"}
        report(pending[0].value if pending else None, seen)

    if ASYNC:
        async def go() -> None:
            if DSN:
                from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

                async with AsyncPostgresSaver.from_conn_string(DSN) as saver:
                    await saver.setup()
                    show(await graph.compile(checkpointer=saver).ainvoke(request, config))
            else:
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

                async with AsyncSqliteSaver.from_conn_string(str(WORK / "graph.sqlite")) as saver:
                    show(await graph.compile(checkpointer=saver).ainvoke(request, config))

        asyncio.run(go())
        return
    if DSN:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(DSN) as saver:
            saver.setup()
            show(graph.compile(checkpointer=saver).invoke(request, config))
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(WORK / "graph.sqlite")) as saver:
        show(graph.compile(checkpointer=saver).invoke(request, config))


# ---------------------------------------------------------------------- OpenAI Agents SDK


def openai_agents(step: str) -> None:
    from agents import Agent, RunConfig, Runner, RunState
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentkit.faces import openai_agents as face

    state_file = WORK / f"run_state-{CONVERSATION}.json"
    first_turn = [function_call("send_payment", arguments, call_id=call_id)
                  for call_id, arguments in calls()]
    model = ScriptedModel([first_turn] if step == "start" else [[assistant_message("done")]])
    # the SDK hands a tool no conversation: the host's context names it
    tools = face.function_tools(runner(), task_id=lambda ctx: ctx.context["conversation"])
    agent = Agent(name="payer", model=model, tools=tools)
    config = RunConfig(tracing_disabled=True)

    async def go() -> None:
        if step == "start":
            result = await Runner.run(agent, "pay them", run_config=config,
                                      context={"conversation": CONVERSATION})
        else:
            state = await RunState.from_json(agent, json.loads(state_file.read_text()))
            for item in state.get_interruptions():
                (face.approve if step == "yes" else face.reject)(state, item)
            result = await Runner.run(agent, state, run_config=config)
        if result.interruptions:
            state_file.write_text(json.dumps(result.to_state().to_json()))
        seen = {item.raw_item.get("call_id", "") if isinstance(item.raw_item, dict)
                else getattr(item.raw_item, "call_id", ""): str(item.output)
                for item in result.new_items if getattr(item, "type", "") == "tool_call_output_item"}
        question = [item.raw_item.call_id for item in result.interruptions] or None
        report(question, seen)

    asyncio.run(go())


# ---------------------------------------------------------------------- Pydantic AI


def pydantic_ai(step: str) -> None:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agentkit.faces import pydantic_ai as face

    history_file = WORK / f"messages-{CONVERSATION}.json"

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest)
               for p in m.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("send_payment", arguments, tool_call_id=call_id)
                                    for call_id, arguments in calls()])

    agent = Agent(FunctionModel(respond), toolsets=[face.toolset(runner())],
                  output_type=[str, DeferredToolRequests])

    async def go() -> None:
        if step == "start":
            result = await agent.run("pay them", conversation_id=CONVERSATION)
        else:
            history = ModelMessagesTypeAdapter.validate_json(history_file.read_bytes())
            asked = [call.tool_call_id for call in _deferred(history)]
            answer = face.approved() if step == "yes" else face.denied()
            result = await agent.run(message_history=history, deferred_tool_results=DeferredToolResults(
                approvals={call_id: answer for call_id in asked}))
        if isinstance(result.output, DeferredToolRequests):  # the conversation waits: keep it
            history_file.write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
        seen = {p.tool_call_id: str(p.content) for m in result.all_messages()
                if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)}
        output = result.output
        question = ([c.tool_call_id for c in output.approvals]
                    if isinstance(output, DeferredToolRequests) else None)
        report(question, seen)

    def _deferred(history: list[ModelMessage]) -> list[ToolCallPart]:
        last = history[-1]
        return [p for p in last.parts if isinstance(p, ToolCallPart)] \
            if isinstance(last, ModelResponse) else []

    asyncio.run(go())


FACES = {"langgraph": langgraph, "openai-agents": openai_agents, "pydantic-ai": pydantic_ai}

if __name__ == "__main__":
    FACES[sys.argv[1]](sys.argv[2])
