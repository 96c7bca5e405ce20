"""first_hour.py: a practitioner's first hour with agentkit, end to end, as one script.

Two tools of your own (``tickets.py``: ``get_ticket``, a read; ``create_ticket``, an
id-addressed reversible write with its status lookup) on a ``ToolRegistry``, then:

1. served over MCP by ``python -m agentkit serve-mcp --registry tickets:registry`` and driven
   by the official ``mcp`` client over stdio, the store named by ``AGENTKIT_STORE`` (SQLite);
   the server is restarted once and the same write replays;
2. used from openai-agents, Pydantic AI and LangGraph, each with its own offline model (a
   comment says what a real model takes), on the same store;
3. moved from SQLite to PostgreSQL with ``python -m agentkit keys copy``, the server started
   again on PostgreSQL: the same ``create_ticket`` call replays (no second ticket).

Run it from anywhere (``make install`` has everything it needs, or
``pip install -e '.[mcp,frameworks,postgres]'`` from a clone: the distribution is
``agentkit-boundary``, see docs/install.md)::

    python examples/practitioner/first_hour.py
    TICKETS_PG_URL=postgresql://agent@localhost/agents python examples/practitioner/first_hour.py

Without ``TICKETS_PG_URL`` the move to PostgreSQL is skipped, and says so in one line; with it,
give a database (or a schema, via ``?options=-c%20search_path%3D...``) that holds no agentkit
keys yet. Everything else lives in a temporary folder deleted at the end, so the script prints
the same every time: that folder is shown as ``$WORK``, the PostgreSQL URL as
``$TICKETS_PG_URL`` and the times ``keys list`` shows as ``<time>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import tickets  # your own module, beside this script (python puts the script's folder on sys.path)
from mcp import Client, StdioServerParameters

from agentkit import CallContext, ToolRunner, open_store
from agentkit.policy.stores import public_address

HERE = Path(__file__).resolve().parent

TICKET = {"request_id": "r-1", "title": "Printer on fire"}
#: The frameworks' runner: one task, one agent (the MCP server's is task "mcp", host "mcp-host").
AGENT = CallContext(task_id="support", principal="support-agent")


def section(title: str) -> None:
    print(f"\n== {title}")


def counted(action: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``action``; what it returned, and the requests the ticket system received meanwhile
    (the handlers' real calls)."""
    before = len(tickets.received())
    value = action()
    return value, tickets.received()[before:]


def calls_text(calls: list[str]) -> str:
    return ", ".join(calls) or "none"


# ---------------------------------------------------------------- 1. the registry


def the_registry() -> None:
    section("1. Two tools of your own on a ToolRegistry (tickets.py)")
    for name in tickets.registry.names():
        spec = tickets.registry.get(name)
        assert spec is not None
        extra = f"up to {spec.max_attempts} attempts"
        if spec.idempotency_key is not None:
            extra += f"; key {spec.idempotency_key.__name__}"
        if spec.status_lookup is not None:
            extra += f"; status lookup {spec.status_lookup.__name__}"
        print(f"{spec.name:<14} {spec.effect.value:<17} {extra}")


# ---------------------------------------------------------------- 2. MCP over stdio


def server(env: dict[str, str]) -> StdioServerParameters:
    """``python -m agentkit serve-mcp --registry tickets:registry``, as a host would start it
    (from the folder that holds tickets.py; the store from AGENTKIT_STORE)."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkit", "serve-mcp", "--registry", "tickets:registry",
              "--approvals", "cli", "--log-level", "WARNING"],
        env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, cwd=str(HERE),
    )


def mcp_session(env: dict[str, str], calls: list[tuple[str, dict[str, Any]]],
                list_tools: bool = False) -> None:
    """One server process, one client session: each call and what the client got back."""

    async def session() -> None:
        async with Client(server(env), read_timeout_seconds=60) as client:
            if list_tools:
                listed = await client.list_tools()
                print("tools/list:", ", ".join(sorted(tool.name for tool in listed.tools)))
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                print(f"-> {name} {json.dumps(arguments)}")
                print(f"   {answer(dict(result.structured_content or {}))}")

    asyncio.run(session())


def answer(result: dict[str, Any]) -> str:
    """A result dict as one line: what the model reads, and how it came about."""
    how = f"(attempts {result.get('attempts')}, replayed {result.get('replayed')})"
    if result.get("ok"):
        return f"ok {result['data']} {how}"
    detail = f": {result['detail']}" if result.get("detail") else ""
    return f"{result.get('error')}{detail} {how}"


def over_mcp(env: dict[str, str], shown: Callable[[str], str]) -> None:
    section("2. Over MCP: serve-mcp --registry tickets:registry, the official mcp client, stdio")
    print(f"$ export AGENTKIT_STORE={shown(env['AGENTKIT_STORE'])}")
    _, calls = counted(lambda: mcp_session(env, [
        ("create_ticket", TICKET),
        ("create_ticket", TICKET),  # the host sends it again: replayed
        ("create_ticket", {**TICKET, "title": "Printer on fire!!"}),  # same id, other title
        ("get_ticket", {"ticket_id": "T-1"}),
        ("get_ticket", {"ticket_id": "T-9"}),  # the model's mistake: invalid_arguments
    ], list_tools=True))
    print(f"real calls: {calls_text(calls)}")
    print("-- the server is stopped and started again --")
    _, calls = counted(lambda: mcp_session(env, [("create_ticket", TICKET)]))
    print(f"real calls: {calls_text(calls)}")


# ---------------------------------------------------------------- 3. three frameworks


Turns = list[list[tuple[str, dict[str, Any]]]]


def ask(request_id: str, title: str) -> Turns:
    """What each offline model asks for, turn by turn: read T-1 and open a ticket, then (as a
    model may) open the same ticket again; its third turn is the answer."""
    ticket = {"request_id": request_id, "title": title}
    return [[("get_ticket", {"ticket_id": "T-1"}), ("create_ticket", ticket)],
            [("create_ticket", ticket)]]


async def with_openai_agents(runner: ToolRunner, turns: Turns, answer_text: str) -> list[str]:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentkit.faces.openai_agents import function_tools

    set_tracing_disabled(True)  # offline: no traces sent to OpenAI
    # Offline: a scripted model. With a real one: Agent(..., model="gpt-5-mini") and OPENAI_API_KEY.
    model = ScriptedModel([
        *[[function_call(name, arguments, call_id=f"call-{turn}-{index}")
           for index, (name, arguments) in enumerate(calls)] for turn, calls in enumerate(turns)],
        [assistant_message(answer_text)],
    ])
    # [*...]: a new list, which mypy reads as the list of the SDK's Tool union Agent asks for
    agent = Agent(name="support", model=model, tools=function_tools(runner))
    result = await Runner.run(agent, "Is T-1 still open? And open a ticket for this request.")
    read = [str(item.output) for item in result.new_items if item.type == "tool_call_output_item"]
    return [*read, str(result.final_output)]


async def with_pydantic_ai(runner: ToolRunner, turns: Turns, answer_text: str) -> list[str]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from agentkit.faces.pydantic_ai import toolset

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Offline: the scripted turns. With a real model: Agent("openai:gpt-5-mini", ...)."""
        turn = sum(isinstance(message, ModelResponse) for message in messages)
        if turn < len(turns):
            return ModelResponse(parts=[ToolCallPart(name, arguments) for name, arguments in turns[turn]])
        return ModelResponse(parts=[TextPart(answer_text)])

    agent = Agent(FunctionModel(scripted), toolsets=[toolset(runner)])
    # The conversation names the task (its keys and approvals); without one Pydantic AI makes
    # a new id per run, so a run could never replay the writes of the one before it.
    result = await agent.run("Is T-1 still open? And open a ticket for this request.",
                             conversation_id="support")
    read = [part.model_response_str() for message in result.all_messages()
            for part in message.parts if isinstance(part, ToolReturnPart)]
    return [*read, result.output]


async def with_langgraph(runner: ToolRunner, turns: Turns, answer_text: str) -> list[str]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import tools_condition

    from agentkit.faces.langgraph import tool_node, tools

    class OfflineChatModel(GenericFakeChatModel):
        """LangChain's fake chat model, made bindable (its own bind_tools raises)."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> OfflineChatModel:
            return self

    # Offline: the scripted turns. With a real model (langchain-openai):
    # llm = ChatOpenAI(model="gpt-5-mini").bind_tools(tools(runner))
    llm = OfflineChatModel(messages=iter([
        *[AIMessage("", tool_calls=[{"name": name, "args": arguments, "id": f"call-{turn}-{index}"}
                                    for index, (name, arguments) in enumerate(calls)])
          for turn, calls in enumerate(turns)],
        AIMessage(answer_text),
    ])).bind_tools(tools(runner))
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_node("tools", tool_node(runner))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    result = await graph.compile().ainvoke(
        {"messages": [HumanMessage("Is T-1 still open? And open a ticket for this request.")]})
    messages = result["messages"]
    read = [str(message.content) for message in messages if isinstance(message, ToolMessage)]
    return [*read, str(messages[-1].content)]


FRAMEWORKS = [
    ("openai-agents (agents.testing.ScriptedModel)", with_openai_agents, "r-2", "VPN drops hourly"),
    ("Pydantic AI (FunctionModel)", with_pydantic_ai, "r-3", "Laptop will not boot"),
    ("LangGraph (a bindable GenericFakeChatModel)", with_langgraph, "r-4", "Badge does not open door"),
]


def in_frameworks(store_url: str) -> None:
    section("3. The same tools in three frameworks, offline models, the same store")
    for title, run, request_id, subject in FRAMEWORKS:
        print(f"{title}:")
        with open_store(store_url) as store:
            runner = ToolRunner(tickets.registry, store=store, context=AGENT)
            said, calls = counted(partial(
                asyncio.run, run(runner, ask(request_id, subject),
                                 f"T-1 is open; your request {request_id} is a ticket: {subject}.")))
        *read, final = said
        for text in read:
            print(f"   the model read: {text}")
        print(f"   the model said: {final}")
        print(f"   real calls: {calls_text(calls)}")


# ---------------------------------------------------------------- 4. SQLite -> PostgreSQL


def keys_command(env: dict[str, str], *args: str, shown: Callable[[str], str]) -> None:
    """``python -m agentkit keys ...`` as typed in a terminal, and what it printed."""
    print(f"$ python -m agentkit keys {' '.join(shown(arg) for arg in args)}")
    done = subprocess.run([sys.executable, "-m", "agentkit", "keys", *args], env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    for line in (done.stdout + done.stderr).splitlines():
        print(re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>", shown(line)))
    if done.returncode != 0:
        raise SystemExit(f"keys {args[0]} failed (exit status {done.returncode})")


def to_postgres(env: dict[str, str], pg_url: str | None, shown: Callable[[str], str]) -> None:
    section("4. From SQLite to PostgreSQL: stop the server, keys copy, start it on the new URL")
    if not pg_url:
        print("skipped: set TICKETS_PG_URL=postgresql://... to move the store to PostgreSQL")
        return
    keys_command(env, "list", shown=shown)
    keys_command(env, "copy", "--to", pg_url, shown=shown)
    on_pg = {**env, "AGENTKIT_STORE": pg_url}
    print(f"$ export AGENTKIT_STORE={shown(pg_url)}")
    _, calls = counted(lambda: mcp_session(on_pg, [
        ("create_ticket", TICKET),  # the same call as in step 2: replayed, no second ticket
        ("create_ticket", {"request_id": "r-5", "title": "Monitor flickers"}),  # a new one runs
    ]))
    print(f"real calls: {calls_text(calls)}")
    for name, store_env in (("PostgreSQL", on_pg), ("SQLite", env)):
        with open_store(store_env["AGENTKIT_STORE"]) as store:
            print(f"keys on {name}: {sum(1 for _ in store.entries())}")


# ---------------------------------------------------------------- what really happened


def the_ticket_system() -> None:
    section("What the ticket system received (the handlers' real calls) and holds")
    every = tickets.real_calls()
    print("real calls in all:", ", ".join(f"{name} {every[name]}" for name in sorted(every)))
    made = tickets.tickets()
    for ticket in made:
        print(f"{ticket['ticket_id']}  {ticket['request_id']}  {ticket['title']}")
    requests = [ticket["request_id"] for ticket in made]
    twice = sorted({request for request in requests if requests.count(request) > 1})
    print("a request with two tickets:", ", ".join(twice) if twice else "none")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", metavar="DIR", type=Path, default=None,
                        help="keep the store and the ticket system in DIR (default: a temporary"
                             " folder, deleted at the end)")
    args = parser.parse_args(argv)
    pg_url = os.environ.get("TICKETS_PG_URL") or None
    with contextlib.ExitStack() as stack:
        if args.work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="first-hour-")))
        else:
            work = args.work.resolve()
            work.mkdir(parents=True, exist_ok=True)
        os.environ["TICKETS_DIR"] = str(work / "tickets")  # the ticket system of this run

        def shown(text: str) -> str:
            text = text.replace(str(work), "$WORK")
            if pg_url:
                text = text.replace(pg_url, "$TICKETS_PG_URL")
                text = text.replace(public_address(pg_url), "$TICKETS_PG_URL")
            return text

        env = {"AGENTKIT_STORE": f"sqlite:///{work / 'agentkit.sqlite3'}",
               "TICKETS_DIR": os.environ["TICKETS_DIR"], "HOME": str(work / "home"),
               "PATH": os.environ.get("PATH", "")}
        the_registry()
        over_mcp(env, shown)
        in_frameworks(env["AGENTKIT_STORE"])
        to_postgres(env, pg_url, shown)
        the_ticket_system()
    return 0


if __name__ == "__main__":
    sys.exit(main())
