"""agentkit.faces.pydantic_ai: the registry as a Pydantic AI toolset, driven by Pydantic AI's
own FunctionModel through the failure cases, counting the handler's real calls."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("pydantic_ai")

from _conversations import PAYMENT, REFUND, Ledger
from pydantic_ai import Agent, ApprovalRequired, DeferredToolRequests, RunContext
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from agentkit.faces import pydantic_ai as face
from agentkit.lessons.framework_cases import CASES, Bench
from agentkit.lessons.framework_runs import run_case

#: case -> (real calls alone, real calls through agentkit, how the run ended alone)
EXPECTED = {
    "repeated write": (2, 1, ""),
    # The timeout becomes a retry prompt, the abandoned thread's write lands, the retry writes
    # again, and the second timeout exhausts the tool's retries: the run fails.
    "write commits, then times out": (2, 1, "UnexpectedModelBehavior"),
    # A plain exception from a tool ends the run (only ModelRetry asks the model again).
    "transient read": (1, 2, "ConnectionError"),
    "approval approved (2 payments)": (2, 2, ""),
    "approval rejected": (0, 0, ""),
    "budget spent": (1, 0, ""),
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_calls_alone_and_through_agentkit(case):
    alone = asyncio.run(run_case("pydantic-ai", case, agentkit=False))
    kit = asyncio.run(run_case("pydantic-ai", case, agentkit=True))
    assert (alone.calls, kit.calls, alone.aborted) == EXPECTED[case.name]
    assert kit.aborted == ""
    assert not any("try again" in text.lower() for text in kit.seen)


def test_what_the_model_reads():
    by_name = {c.name: c for c in CASES}
    timed_out = asyncio.run(run_case("pydantic-ai", by_name["write commits, then times out"],
                                     agentkit=True))
    assert timed_out.seen == ["note-1"]
    rejected = asyncio.run(run_case("pydantic-ai", by_name["approval rejected"], agentkit=True))
    assert json.loads(rejected.seen[0])["error"] == "forbidden"


def _bench(name: str) -> Bench:
    return Bench(next(c for c in CASES if c.name == name))


def _context(**kwargs):
    return RunContext(deps=None, model=TestModel(), usage=RunUsage(), **kwargs)


def test_tools_carry_the_registry_names_descriptions_and_schemas():
    bench = _bench("approval rejected")
    tools = asyncio.run(face.toolset(bench.runner).get_tools(_context()))
    [described] = bench.registry.describe("openai")
    definition = tools["send_payment"].tool_def
    assert definition.description == described["function"]["description"]
    assert definition.parameters_json_schema == described["function"]["parameters"]
    assert tools["send_payment"].max_retries == 0


def test_the_model_cannot_approve_by_calling_the_tool_itself():
    bench = _bench("approval rejected")
    toolset = face.toolset(bench.runner)
    tools = asyncio.run(toolset.get_tools(_context()))
    with pytest.raises(ApprovalRequired):
        asyncio.run(toolset.call_tool("send_payment", {"to": "ada", "cents": 1},
                                      _context(tool_call_id="c1"), tools["send_payment"]))
    assert bench.calls == 0


def test_an_approved_call_runs_once_and_again_replays():
    bench = _bench("approval rejected")
    toolset = face.toolset(bench.runner)
    tools = asyncio.run(toolset.get_tools(_context()))
    context = _context(tool_call_id="c1", tool_call_approved=True)
    args = {"to": "ada", "cents": 1}
    first = asyncio.run(toolset.call_tool("send_payment", args, context, tools["send_payment"]))
    again = asyncio.run(toolset.call_tool("send_payment", args, context, tools["send_payment"]))
    assert first == again == "paid 1 cents to ada"
    assert bench.calls == 1


def test_the_sdk_tool_call_id_names_the_call_and_test_model_runs_it():
    bench = _bench("repeated write")
    agent = Agent(TestModel(call_tools=["save_note"]), toolsets=[face.toolset(bench.runner)],
                  output_type=[str, DeferredToolRequests])
    asyncio.run(agent.run("go"))
    assert bench.calls == 1
    ids = {r.call_id for r in bench.runner.trace.records}
    assert len(ids) == 1 and ids != {""}


def test_bad_arguments_are_a_tool_result_not_a_retry_prompt_or_a_crash():
    """Pydantic AI validates nothing here: JSON that does not parse, or that breaks the schema,
    reaches the boundary and comes back as invalid_arguments, and the run goes on."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import FunctionModel

    bench = _bench("repeated write")
    script = iter([
        [ToolCallPart("save_note", "{not json", tool_call_id="c1")],
        [ToolCallPart("save_note", {"text": 5}, tool_call_id="c2")],
    ])
    seen = []

    def respond(messages, info):
        seen[:] = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                   if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=next(script, [TextPart("done")]))

    agent = Agent(FunctionModel(respond), toolsets=[face.toolset(bench.runner)],
                  output_type=[str, DeferredToolRequests])
    assert asyncio.run(agent.run("go")).output == "done"
    assert [json.loads(text)["error"] for text in seen] == ["invalid_arguments"] * 2
    assert bench.calls == 0


def test_sending_the_same_approval_twice_pays_once():
    """A host that runs the same DeferredToolResults twice (a retried request) calls the tool
    twice: the second call finds agentkit's approval settled and replays the receipt."""
    from pydantic_ai import DeferredToolResults
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    bench = _bench("approval approved (2 payments)")

    def respond(messages, info):
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_payment", {"to": "ada", "cents": 5},
                                                     tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), toolsets=[face.toolset(bench.runner)],
                  output_type=[str, DeferredToolRequests])
    asked = asyncio.run(agent.run("go"))
    assert isinstance(asked.output, DeferredToolRequests)
    results = DeferredToolResults(approvals={"c1": face.approved()})
    for _ in range(2):
        done = asyncio.run(agent.run(message_history=asked.all_messages(),
                                     deferred_tool_results=results))
        assert done.output == "done"
    assert bench.calls == 1
    assert [r.step for r in bench.runner.trace.records].count("replay") == 1  # the tool ran twice


def test_an_irreversible_write_with_the_budget_spent_asks_nobody():
    bench = _bench("approval rejected")
    bench.runner.budget.max_attempts = 0
    toolset = face.toolset(bench.runner)
    tools = asyncio.run(toolset.get_tools(_context()))
    output = asyncio.run(toolset.call_tool("send_payment", {"to": "ada", "cents": 1},
                                           _context(tool_call_id="c1"), tools["send_payment"]))
    assert json.loads(output)["error"] == "budget_exhausted"  # no ApprovalRequired raised
    assert bench.calls == 0


def test_argument_text_nested_a_thousand_levels_is_invalid_arguments_not_a_crash():
    """Two kilobytes of ``[[[…`` made json.loads raise RecursionError out of the face's
    argument parsing, ending the run; now the model reads the boundary's own reason."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import FunctionModel

    bench = _bench("repeated write")
    deep = '{"text": ' + "[" * 1000 + "]" * 1000 + "}"
    assert len(deep) < 2100
    seen = []

    def respond(messages, info):
        seen[:] = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                   if isinstance(p, ToolReturnPart)]
        if not seen:
            return ModelResponse(parts=[ToolCallPart("save_note", deep, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), toolsets=[face.toolset(bench.runner)],
                  output_type=[str, DeferredToolRequests])
    assert asyncio.run(agent.run("go")).output == "done"
    [answer] = [json.loads(text) for text in seen]
    assert answer["error"] == "invalid_arguments" and "deeper than" in answer["detail"]
    assert bench.calls == 0
    assert [(r.call_id, r.step, r.outcome) for r in bench.runner.trace.records] == [
        ("c1", "refused", "invalid_arguments")]


def test_the_approved_run_keeps_the_frameworks_tool_call_id():
    """Before, the write that ran was named by the runner's own ``call-000N``."""
    bench = _bench("approval rejected")
    toolset = face.toolset(bench.runner)
    tools = asyncio.run(toolset.get_tools(_context()))
    context = _context(tool_call_id="pyd-call-9", tool_call_approved=True)
    done = asyncio.run(toolset.call_tool("send_payment", {"to": "ada", "cents": 1}, context,
                                         tools["send_payment"]))
    assert done == "paid 1 cents to ada" and bench.calls == 1
    steps = [(r.call_id, r.step) for r in bench.runner.trace.records]
    assert steps == [("pyd-call-9", "approval"), ("pyd-call-9", "attempt")]


# ---------------------------------------------------------------------- one task per conversation


def _agent(runner, tool: str, arguments: dict):
    """An agent whose model calls ``tool`` once per run, then answers."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages, info):
        if isinstance(messages[-1], ModelRequest) and any(
                p.part_kind == "user-prompt" for p in messages[-1].parts):
            return ModelResponse(parts=[ToolCallPart(tool, arguments, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    return Agent(FunctionModel(respond), toolsets=[face.toolset(runner)],
                 output_type=[str, DeferredToolRequests])


def _read(result) -> list[str]:
    from pydantic_ai.messages import ModelRequest, ToolReturnPart

    return [p.model_response_str() for m in result.new_messages() if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)]


def test_two_conversations_each_get_their_refund_and_the_same_one_replays():
    """Before, every conversation ran under task "default": conversation B's identical refund
    read A's receipt and no refund was made for B. The task id is Pydantic AI's own
    ``conversation_id``: given to ``run``, or carried on by the message history."""
    ledger = Ledger()
    agent = _agent(ledger.runner(), "refund", REFUND)
    first = asyncio.run(agent.run("refund o-1", conversation_id="conversation-a"))
    other = asyncio.run(agent.run("refund o-1", conversation_id="conversation-b"))
    assert ledger.refunds == ["o-1", "o-1"]  # once per conversation
    assert _read(other) == ["refunded 500 cents on o-1"]
    # the same conversation again: named, or continued from its history
    asyncio.run(agent.run("refund o-1 again", conversation_id="conversation-a"))
    later = asyncio.run(agent.run("and again", message_history=first.all_messages()))
    assert later.conversation_id == "conversation-a"
    assert _read(later) == ["refunded 500 cents on o-1"]
    assert ledger.refunds == ["o-1", "o-1"]


def test_a_payment_approved_in_one_conversation_is_not_another_ones_receipt():
    """Before, conversation B's approved payment found A's settled approval and replayed A's
    receipt: the person approved B's payment and nobody was paid."""
    from pydantic_ai import DeferredToolResults

    ledger = Ledger()
    runner = ledger.runner()
    agent = _agent(runner, "send_payment", PAYMENT)
    approve = DeferredToolResults(approvals={"c1": face.approved()})
    for conversation, paid in [("conversation-a", 1), ("conversation-b", 2)]:
        asked = asyncio.run(agent.run("pay ada", conversation_id=conversation))
        assert isinstance(asked.output, DeferredToolRequests)
        done = asyncio.run(agent.run(message_history=asked.all_messages(),
                                     deferred_tool_results=approve))
        assert _read(done) == ["paid 100 cents to ada"]
        assert len(ledger.payments) == paid
    steps = [r.step for r in runner.trace.records]
    assert steps == ["approval", "attempt"] * 2  # B's own approval, not A's replayed


def test_a_conversation_continued_in_a_new_process_keeps_its_task(tmp_path):
    """A new runner and toolset on the same SQLite store, the conversation's history loaded
    from JSON (another process): it replays its refund; a new conversation makes its own."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from agentkit import SQLiteIdempotencyStore

    ledger = Ledger()
    path = tmp_path / "store.sqlite"
    first = asyncio.run(_agent(ledger.runner(SQLiteIdempotencyStore(path)), "refund", REFUND)
                        .run("refund o-1"))
    saved = ModelMessagesTypeAdapter.dump_json(first.all_messages())
    restarted = _agent(ledger.runner(SQLiteIdempotencyStore(path)), "refund", REFUND)
    history = ModelMessagesTypeAdapter.validate_json(saved)
    again = asyncio.run(restarted.run("refund o-1 again", message_history=history))
    assert again.conversation_id == first.conversation_id
    assert _read(again) == ["refunded 500 cents on o-1"] and ledger.refunds == ["o-1"]
    asyncio.run(restarted.run("refund o-1"))  # no history: a new conversation
    assert ledger.refunds == ["o-1", "o-1"]
