"""Notebook 08's runs: each failure case through each framework, with agentkit and without.

Each framework is driven by its **own** offline fake model — the OpenAI Agents SDK's
``agents.testing.ScriptedModel``, Pydantic AI's ``FunctionModel``, a LangChain
``GenericFakeChatModel`` in a LangGraph graph — all following one
:class:`~agentkit.lessons.framework_cases.ScriptedTurns`. Without agentkit the tool is the
framework's own, with the timeout, retry and approval settings its documentation shows; with
agentkit it is the face over a :class:`~agentkit.ToolRunner`. A person's decision is the
case's ``decision``. :func:`table` counts the handler's real calls per case and framework.

:func:`real_table` plays the same cases through the OpenAI Agents SDK against a **real**
OpenAI-compatible endpoint (:class:`Endpoint`, from ``OPENAI_BASE_URL``, ``OPENAI_MODEL`` and
``OPENAI_API_KEY``: api.openai.com or a local server), told in words what the scripted model
does. Without ``OPENAI_BASE_URL`` nothing is asked: :data:`NO_ENDPOINT` says so in one line.

Each framework is imported only when a case runs through it (extras ``openai-agents``,
``pydantic-ai``, ``langgraph``), so one framework's tests need only that framework.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentkit.lessons.framework_cases import CASES, TIMEOUT_SECONDS, Bench, Case, ScriptedTurns

if TYPE_CHECKING:
    import pandas as pd
    from agents.testing import ModelCall
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.tools import BaseTool
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models.function import AgentInfo

__all__ = ["FRAMEWORKS", "NO_ENDPOINT", "Endpoint", "Outcome", "real_table", "run_case", "run_real_case",
           "scripted_chat_model", "table"]

FRAMEWORKS = ("openai-agents", "pydantic-ai", "langgraph")
_MAX_MODEL_CALLS = 8


@dataclass
class Outcome:
    """One run: the handler's real calls, what the model read, and how the run ended."""

    calls: int
    seen: list[str] = field(default_factory=list)
    aborted: str = ""  # the exception that ended the run, by class name; "" if it finished


async def run_case(framework: str, case: Case, *, agentkit: bool) -> Outcome:
    """Run ``case`` once through ``framework``, with the agentkit face or the framework alone."""
    runs = {"openai-agents": _openai_agents, "pydantic-ai": _pydantic_ai, "langgraph": _langgraph}
    if framework not in runs:
        raise ValueError(f"unknown framework {framework!r}; choose one of: {', '.join(FRAMEWORKS)}")
    bench = Bench(case)
    turns = ScriptedTurns(case)
    try:
        await runs[framework](bench, turns, agentkit)
    except Exception as exc:  # the framework stopped the run: that is a result too
        return Outcome(bench.calls, turns.seen, type(exc).__name__)
    finally:
        bench.close()
    return Outcome(bench.calls, turns.seen)


async def table(cases: Sequence[Case] = CASES) -> pd.DataFrame:
    """Real handler calls per case (rows) and framework, without and with agentkit (columns):
    ``await table()`` in a notebook, ``asyncio.run(table())`` in a script."""
    import pandas as pd

    columns = [(framework, way) for framework in FRAMEWORKS for way in ("alone", "+ agentkit")]
    rows = []
    for case in cases:
        row: dict[tuple[str, str], int] = {}
        for framework in FRAMEWORKS:
            for agentkit in (False, True):
                outcome = await run_case(framework, case, agentkit=agentkit)
                row[(framework, "+ agentkit" if agentkit else "alone")] = outcome.calls
        rows.append(row)
    frame: pd.DataFrame = pd.DataFrame(
        [[row[column] for column in columns] for row in rows],
        index=pd.Index([case.name for case in cases], name="case"),
        columns=pd.MultiIndex.from_tuples(columns, names=["framework", "real calls"]),
    )
    return frame


# ---------------------------------------------------------------- OpenAI Agents SDK


def _openai_outputs(items: Any) -> list[str]:
    outputs = []
    for item in items if isinstance(items, list) else []:
        data = item if isinstance(item, dict) else {}
        if data.get("type") == "function_call_output":
            output = data.get("output")
            outputs.append(output if isinstance(output, str) else json.dumps(output))
    return outputs


async def _openai_agents(bench: Bench, turns: ScriptedTurns, agentkit: bool, model: Any = None,
                         prompt: str = "go") -> Any:
    """One case through the SDK: its scripted model, or ``model`` (a real one) told ``prompt``.
    Returns the last run's result."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from agentkit.faces import openai_agents as oa_face

    def respond(call: ModelCall) -> list[Any]:
        calls = turns.next(_openai_outputs(call.input))
        if not calls:
            return [assistant_message("done")]
        return [function_call(tool, arguments, call_id=call_id)
                for call_id, tool, arguments in calls]

    if model is None:
        model = ScriptedModel([ModelStep.respond(respond) for _ in range(_MAX_MODEL_CALLS)])
    if agentkit:
        tools: list[Any] = oa_face.function_tools(bench.runner)
    elif bench.case.tool == "save_note":  # the SDK's timeout needs a coroutine
        tools = [function_tool(bench.asave_note, name_override="save_note",
                               timeout=TIMEOUT_SECONDS)]
    elif bench.case.tool == "send_payment":
        tools = [function_tool(bench.send_payment, needs_approval=True)]
    else:
        tools = [function_tool(bench.search)]
    agent: Agent[Any] = Agent(name="bench", model=model, tools=tools)
    config = RunConfig(tracing_disabled=True)
    result = await Runner.run(agent, prompt, run_config=config, max_turns=_MAX_MODEL_CALLS)
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            if bench.case.decision == "approve":
                oa_face.approve(state, item)
            elif agentkit:
                oa_face.reject(state, item)
            else:
                state.reject(item)
        result = await Runner.run(agent, state, run_config=config, max_turns=_MAX_MODEL_CALLS)
    return result


# ---------------------------------------------------------------- a real endpoint

#: What notebook 08 prints instead of asking a real model when none is configured: one line,
#: the same on every machine without ``OPENAI_BASE_URL``, never a failure.
NO_ENDPOINT = ("Skipped: OPENAI_BASE_URL is not set, so no real model was asked (set it to an "
               "OpenAI-compatible endpoint, such as a local server, and OPENAI_MODEL, then run this cell again).")


@dataclass(frozen=True)
class Endpoint:
    """A real OpenAI-compatible chat-completions endpoint: its base URL, model and key."""

    base_url: str
    model: str = "gpt-4o-mini"
    api_key: str = "unused"  # a local server asks for none; the client needs a value

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Endpoint | None:
        """``OPENAI_BASE_URL`` (None when unset or blank), ``OPENAI_MODEL``, ``OPENAI_API_KEY``."""
        env = os.environ if environ is None else environ
        base_url = env.get("OPENAI_BASE_URL", "").strip()
        if not base_url:
            return None
        return cls(base_url, env.get("OPENAI_MODEL", "").strip() or cls.model,
                   env.get("OPENAI_API_KEY", "").strip() or cls.api_key)


def real_prompt(case: Case) -> str:
    """What the scripted model does for ``case``, said to a real model in words."""
    calls = " and ".join(f"{case.tool} with {json.dumps(arguments)}" for arguments in case.arguments)
    again = (" When you have its answer, call it once more with the same arguments, whatever the"
             " answer said." if case.repeats > 1 else "")
    return (f"Call the tool {calls}, in one turn.{again} If an answer says that you may try"
            " again, try once more. Then reply with the single word: done.")


async def run_real_case(case: Case, endpoint: Endpoint, *, agentkit: bool) -> Outcome:
    """Run ``case`` once through the OpenAI Agents SDK against ``endpoint``: the handler's real
    calls, what the model read, and how the run ended (a refused connection is a result too)."""
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    model = OpenAIChatCompletionsModel(model=endpoint.model, openai_client=client)
    bench = Bench(case)
    try:
        result = await _openai_agents(bench, ScriptedTurns(case), agentkit, model, real_prompt(case))
    except Exception as exc:
        return Outcome(bench.calls, [], type(exc).__name__)
    finally:
        bench.close()
        await client.close()
    return Outcome(bench.calls, _openai_outputs(result.to_input_list()))


async def real_table(endpoint: Endpoint, cases: Sequence[Case] = CASES) -> pd.DataFrame:
    """Real handler calls per case against ``endpoint``, alone and through agentkit, and how
    each run ended (``finished`` or the exception's class)."""
    import pandas as pd

    rows = []
    for case in cases:
        alone = await run_real_case(case, endpoint, agentkit=False)
        kit = await run_real_case(case, endpoint, agentkit=True)
        rows.append({"case": case.name, "alone": alone.calls, "+ agentkit": kit.calls,
                     "ended, alone": alone.aborted or "finished",
                     "ended, + agentkit": kit.aborted or "finished"})
    frame: pd.DataFrame = pd.DataFrame(rows).set_index("case")
    return frame


# ---------------------------------------------------------------- Pydantic AI


def _pydantic_outputs(messages: list[ModelMessage]) -> list[str]:
    from pydantic_ai.messages import ModelRequest, RetryPromptPart, ToolReturnPart

    outputs = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    outputs.append(part.model_response_str())
                elif isinstance(part, RetryPromptPart):
                    outputs.append(part.model_response())
    return outputs


async def _pydantic_ai(bench: Bench, turns: ScriptedTurns, agentkit: bool) -> None:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from agentkit.faces import pydantic_ai as pa_face

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = turns.next(_pydantic_outputs(messages))
        if not calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(tool, arguments, tool_call_id=call_id)
                                    for call_id, tool, arguments in calls])

    model = FunctionModel(respond)
    output_type: Any = [str, DeferredToolRequests]
    if agentkit:
        agent: PydanticAgent[None, Any] = PydanticAgent(
            model, toolsets=[pa_face.toolset(bench.runner)], output_type=output_type)
    else:
        if bench.case.tool == "save_note":
            tool: Tool[None] = Tool(bench.save_note, timeout=TIMEOUT_SECONDS)
        elif bench.case.tool == "send_payment":
            tool = Tool(bench.send_payment, requires_approval=True)
        else:
            tool = Tool(bench.search)
        agent = PydanticAgent(model, tools=[tool], output_type=output_type)
    result = await agent.run("go")
    while isinstance(result.output, DeferredToolRequests):
        approvals: dict[str, Any] = {}
        for call in result.output.approvals:
            if bench.case.decision == "approve":
                approvals[call.tool_call_id] = pa_face.approved() if agentkit else True
            else:
                approvals[call.tool_call_id] = pa_face.denied() if agentkit else False
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=DeferredToolResults(approvals=approvals))


# ---------------------------------------------------------------- LangGraph


def scripted_chat_model(turns: ScriptedTurns) -> GenericFakeChatModel:
    """LangChain's ``GenericFakeChatModel``, answering from ``turns`` (and bindable to tools,
    which the stock fake model is not)."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
            return self

        def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                      run_manager: Any = None, **kwargs: Any) -> ChatResult:
            outputs = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
            calls = turns.next(outputs)
            message = AIMessage("", tool_calls=[
                {"name": tool, "args": arguments, "id": call_id}
                for call_id, tool, arguments in calls
            ]) if calls else AIMessage("done")
            return ChatResult(generations=[ChatGeneration(message=message)])

    return ScriptedChatModel(messages=iter(()))


def _plain_langgraph_tool(bench: Bench) -> BaseTool:
    from langchain_core.tools import StructuredTool
    from langgraph.types import interrupt

    if bench.case.tool == "save_note":
        async def save_note(text: str) -> str:
            """Save a note with ``text``; returns the note's id."""
            # A ToolNode has no timeout: the tool brings its own.
            return await asyncio.wait_for(bench.asave_note(text), TIMEOUT_SECONDS)
        return StructuredTool.from_function(coroutine=save_note)
    if bench.case.tool == "send_payment":
        async def send_payment(to: str, cents: int) -> str:
            """Send ``cents`` to ``to``. Irreversible."""
            if interrupt({"to": to, "cents": cents}) is not True:  # LangGraph's approval flow
                return bench.rejected()
            return bench.send_payment(to, cents)
        return StructuredTool.from_function(coroutine=send_payment)
    return StructuredTool.from_function(func=bench.search)


async def _langgraph(bench: Bench, turns: ScriptedTurns, agentkit: bool) -> None:
    from langchain_core.messages import BaseMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import Command

    from agentkit.faces import langgraph as lg_face

    tools = lg_face.tools(bench.runner) if agentkit else [_plain_langgraph_tool(bench)]
    llm = scripted_chat_model(turns).bind_tools(tools)  # as a real chat model is given them

    async def model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    node = (lg_face.tool_node(bench.runner) if agentkit
            else ToolNode(tools, handle_tool_errors=True))
    graph.add_node("tools", node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    app = graph.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": bench.case.name}}
    start: MessagesState = {"messages": [HumanMessage("go")]}
    result = await app.ainvoke(start, config)
    resume = bench.case.decision == "approve"
    while result.get("__interrupt__"):
        pending = result["__interrupt__"]
        answer: Any = resume if len(pending) == 1 else {item.id: resume for item in pending}
        result = await app.ainvoke(Command(resume=answer), config)

