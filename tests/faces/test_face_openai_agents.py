"""agentkit.faces.openai_agents: the registry's tools in the OpenAI Agents SDK, driven by the
SDK's own ScriptedModel through the failure cases, counting the handler's real calls."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("agents")

from _conversations import PAYMENT, REFUND, Ledger
from agents import Agent, RunConfig, Runner, RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from agentkit.faces import openai_agents as face
from agentkit.lessons.framework_cases import CASES, Bench
from agentkit.lessons.framework_runs import run_case

#: case -> (real calls alone, real calls through agentkit, how the run ended alone)
EXPECTED = {
    "repeated write": (2, 1, ""),
    "write commits, then times out": (2, 1, ""),
    "transient read": (2, 2, ""),
    "approval approved (2 payments)": (2, 2, ""),
    "approval rejected": (0, 0, ""),
    "budget spent": (1, 0, ""),
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_real_calls_alone_and_through_agentkit(case):
    alone = asyncio.run(run_case("openai-agents", case, agentkit=False))
    kit = asyncio.run(run_case("openai-agents", case, agentkit=True))
    assert (alone.calls, kit.calls, alone.aborted) == EXPECTED[case.name]
    assert kit.aborted == ""  # through agentkit the run always goes on
    assert not any("try again" in text.lower() for text in kit.seen)


def test_what_the_model_reads():
    by_name = {c.name: c for c in CASES}
    timed_out = asyncio.run(run_case("openai-agents", by_name["write commits, then times out"],
                                     agentkit=True))
    assert timed_out.seen == ["note-1"]  # the status lookup found the receipt
    alone = asyncio.run(run_case("openai-agents", by_name["transient read"], agentkit=False))
    assert "Please try again" in alone.seen[0]
    rejected = asyncio.run(run_case("openai-agents", by_name["approval rejected"], agentkit=True))
    assert json.loads(rejected.seen[0])["error"] == "forbidden"
    spent = asyncio.run(run_case("openai-agents", by_name["budget spent"], agentkit=True))
    assert json.loads(spent.seen[0])["error"] == "budget_exhausted"


def _bench(name: str) -> Bench:
    return Bench(next(c for c in CASES if c.name == name))


def test_tools_carry_the_registry_names_descriptions_and_schemas():
    bench = _bench("approval rejected")
    [tool] = face.function_tools(bench.runner)
    [described] = bench.registry.describe("openai")
    assert tool.name == described["function"]["name"] == "send_payment"
    assert tool.description == described["function"]["description"]
    assert tool.params_json_schema == described["function"]["parameters"]
    assert tool.timeout_seconds is None and tool.strict_json_schema is False


def _run(bench: Bench, steps: list) -> object:
    model = ScriptedModel(steps)
    agent = Agent(name="t", model=model, tools=face.function_tools(bench.runner))
    return asyncio.run(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))


def test_the_sdk_tool_call_id_names_the_call_in_the_trace():
    bench = _bench("repeated write")
    _run(bench, [[function_call("save_note", {"text": "x"}, call_id="sdk-call-7")],
                 [assistant_message("done")]])
    assert {r.call_id for r in bench.runner.trace.records} == {"sdk-call-7"}
    bench.close()


def test_bad_arguments_are_a_tool_result_not_a_crash():
    bench = _bench("repeated write")
    result = _run(bench, [[function_call("save_note", "{not json", call_id="c1")],
                          [assistant_message("done")]])
    outputs = [i.output for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"]
    assert json.loads(outputs[0])["error"] == "invalid_arguments"
    assert bench.calls == 0
    bench.close()


def test_an_irreversible_write_with_the_budget_spent_asks_nobody():
    bench = _bench("approval rejected")
    bench.runner.budget.max_attempts = 0
    result = _run(bench, [[function_call("send_payment", {"to": "ada", "cents": 1}, call_id="c1")],
                          [assistant_message("done")]])
    assert result.interruptions == []
    outputs = [i.output for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"]
    assert json.loads(outputs[0])["error"] == "budget_exhausted"
    assert bench.calls == 0
    bench.close()


def test_the_model_cannot_approve_by_calling_the_tool_itself():
    """on_invoke_tool without the SDK's record of a person's approval runs nothing."""
    from agents.tool_context import ToolContext

    bench = _bench("approval rejected")
    [tool] = face.function_tools(bench.runner)
    context = ToolContext(context=None, tool_name="send_payment", tool_call_id="c1",
                          tool_arguments='{"to": "ada", "cents": 1}')
    output = asyncio.run(tool.on_invoke_tool(context, '{"to": "ada", "cents": 1}'))
    assert json.loads(output)["error"] == "approval_required"
    assert bench.calls == 0
    bench.close()


def test_resuming_the_same_approved_state_twice_pays_once():
    """A host that resumes one RunState twice (a retried web request) re-executes the tool:
    the second run finds agentkit's approval settled and replays the receipt."""
    bench = _bench("approval approved (2 payments)")
    agent = Agent(name="t", model=ScriptedModel([
        [function_call("send_payment", {"to": "ada", "cents": 5}, call_id="c1")],
        [assistant_message("done")],
        [assistant_message("done again")],
    ]), tools=face.function_tools(bench.runner))
    config = RunConfig(tracing_disabled=True)
    result = asyncio.run(Runner.run(agent, "go", run_config=config))
    [item] = result.interruptions
    state = result.to_state()
    face.approve(state, item)
    saved = state.to_json()
    first = asyncio.run(Runner.run(agent, state, run_config=config))
    again_state = asyncio.run(type(state).from_json(agent, saved))
    again = asyncio.run(Runner.run(agent, again_state, run_config=config))
    outputs = [i.output for r in (first, again) for i in r.new_items
               if getattr(i, "type", "") == "tool_call_output_item"]
    assert outputs == ["paid 5 cents to ada", "paid 5 cents to ada"]
    assert bench.calls == 1
    assert [r.step for r in bench.runner.trace.records].count("replay") == 1
    bench.close()


def test_argument_text_nested_a_thousand_levels_is_invalid_arguments_not_a_crash():
    """The face's own parsing of the SDK's argument text. (The SDK 0.24 itself parses the same
    text first, to de-duplicate tool calls, and raises RecursionError before any tool runs:
    that is the SDK's, outside the face.)"""
    from agents.tool_context import ToolContext

    bench = _bench("repeated write")
    [tool] = face.function_tools(bench.runner)
    deep = '{"text": ' + "[" * 1000 + "]" * 1000 + "}"
    context = ToolContext(context=None, tool_name="save_note", tool_call_id="c1",
                          tool_arguments=deep)
    answer = json.loads(asyncio.run(tool.on_invoke_tool(context, deep)))
    assert answer["error"] == "invalid_arguments" and "deeper than" in answer["detail"]
    assert bench.calls == 0
    bench.close()


def test_the_approved_run_keeps_the_sdks_tool_call_id():
    """Before, the write that ran was named by the runner's own ``call-000N``."""
    bench = _bench("approval approved (2 payments)")
    agent = Agent(name="t", model=ScriptedModel([
        [function_call("send_payment", {"to": "ada", "cents": 5}, call_id="sdk-pay-1")],
        [assistant_message("done")],
    ]), tools=face.function_tools(bench.runner))
    config = RunConfig(tracing_disabled=True)
    result = asyncio.run(Runner.run(agent, "go", run_config=config))
    [item] = result.interruptions
    state = result.to_state()
    face.approve(state, item)
    asyncio.run(Runner.run(agent, state, run_config=config))
    assert bench.calls == 1
    assert {r.call_id for r in bench.runner.trace.records} == {"sdk-pay-1"}
    assert [r.step for r in bench.runner.trace.records] == ["approval", "attempt"]
    bench.close()


# ---------------------------------------------------------------------- one task per conversation

#: The host's own context names the conversation; the face reads it (the SDK hands a tool no
#: conversation identity of its own).
BY_CONTEXT = {"task_id": lambda ctx: ctx.context["conversation"]}
CONFIG = RunConfig(tracing_disabled=True)


def _ledger_agent(runner, tool: str, arguments: dict, **task_id) -> Agent:
    """An agent whose model calls ``tool`` once, then answers (twice over, for a resume)."""
    model = ScriptedModel([[function_call(tool, arguments, call_id="c1")],
                           [assistant_message("done")]])
    return Agent(name="t", model=model, tools=face.function_tools(runner, **task_id))


def _outputs(result) -> list[str]:
    return [str(i.output) for i in result.new_items
            if getattr(i, "type", "") == "tool_call_output_item"]


def _refund(runner, conversation: str) -> list[str]:
    agent = _ledger_agent(runner, "refund", REFUND, **BY_CONTEXT)
    result = asyncio.run(Runner.run(agent, "refund o-1", context={"conversation": conversation},
                                    run_config=CONFIG))
    return _outputs(result)


def test_two_conversations_each_get_their_refund_and_the_same_one_replays():
    """Before, every conversation ran under task "default": conversation B's identical refund
    read A's receipt and no refund was made for B."""
    ledger = Ledger()
    runner = ledger.runner()
    _refund(runner, "conversation-a")
    assert _refund(runner, "conversation-b") == ["refunded 500 cents on o-1"]
    assert ledger.refunds == ["o-1", "o-1"]  # once per conversation
    assert _refund(runner, "conversation-a") == ["refunded 500 cents on o-1"]
    assert ledger.refunds == ["o-1", "o-1"]  # the same conversation: its own receipt


def test_tools_made_for_one_conversation_name_it_as_a_str():
    ledger = Ledger()
    runner = ledger.runner()
    for conversation in ("conversation-a", "conversation-b", "conversation-a"):
        agent = _ledger_agent(runner, "refund", REFUND, task_id=conversation)
        asyncio.run(Runner.run(agent, "refund o-1", run_config=CONFIG))
    assert ledger.refunds == ["o-1", "o-1"]


def test_without_a_task_id_the_runners_own_task_serves_one_conversation():
    ledger = Ledger()
    runner = ledger.runner()
    for conversation in ("conversation-a", "conversation-b"):
        agent = _ledger_agent(runner, "refund", REFUND, task_id=lambda ctx: None)
        asyncio.run(Runner.run(agent, "go", context={"conversation": conversation},
                               run_config=CONFIG))
    assert ledger.refunds == ["o-1"]  # one task: the second replays the first
    with pytest.raises(TypeError, match="task_id must be"):
        face.function_tools(runner, task_id=7)


def _asked_and_approved(runner, conversation: str) -> tuple[Agent, object]:
    """Conversation ``conversation`` asks to pay ada; a person approves it in the run's state."""
    agent = _ledger_agent(runner, "send_payment", PAYMENT, **BY_CONTEXT)
    asked = asyncio.run(Runner.run(agent, "pay ada", context={"conversation": conversation},
                                   run_config=CONFIG))
    [item] = asked.interruptions
    state = asked.to_state()
    face.approve(state, item)
    return agent, state


def test_a_payment_approved_in_one_conversation_is_not_another_ones_receipt():
    """Before, conversation B's approved payment found A's settled approval and replayed A's
    receipt: the person approved B's payment and nobody was paid."""
    ledger = Ledger()
    runner = ledger.runner()
    for conversation, paid in [("conversation-a", 1), ("conversation-b", 2)]:
        agent, state = _asked_and_approved(runner, conversation)
        done = asyncio.run(Runner.run(agent, state, run_config=CONFIG))
        assert _outputs(done) == ["paid 100 cents to ada"]
        assert len(ledger.payments) == paid
    assert [r.step for r in runner.trace.records] == ["approval", "attempt"] * 2


def test_a_conversation_resumed_in_a_new_process_keeps_its_task(tmp_path):
    """A new runner and tools on the same SQLite store, the RunState (with the host's context)
    loaded from JSON: the conversation's approval is its own there too. A paid in process 1;
    B asks in process 1 and is approved in process 2: B is paid (its own task), and A asking
    again in process 2 replays A's receipt."""
    from agentkit import SQLiteIdempotencyStore

    ledger = Ledger()
    path = tmp_path / "store.sqlite"

    first = ledger.runner(SQLiteIdempotencyStore(path))
    agent, state = _asked_and_approved(first, "conversation-a")
    asyncio.run(Runner.run(agent, state, run_config=CONFIG))
    _, waiting = _asked_and_approved(first, "conversation-b")
    saved = waiting.to_json()

    restarted = ledger.runner(SQLiteIdempotencyStore(path))
    agent = _ledger_agent(restarted, "send_payment", PAYMENT, **BY_CONTEXT)
    resumed = asyncio.run(RunState.from_json(agent, saved))
    done = asyncio.run(Runner.run(agent, resumed, run_config=CONFIG))
    assert _outputs(done) == ["paid 100 cents to ada"] and ledger.payments == ["ada", "ada"]
    agent, again = _asked_and_approved(restarted, "conversation-a")
    assert _outputs(asyncio.run(Runner.run(agent, again, run_config=CONFIG))) == [
        "paid 100 cents to ada"]
    assert ledger.payments == ["ada", "ada"]
    assert [r.step for r in restarted.trace.records] == ["approval", "attempt", "replay"]
