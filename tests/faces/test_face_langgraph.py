"""agentkit.faces.langgraph: the registry as a LangGraph ToolNode, driven by LangChain's
GenericFakeChatModel (a subclass that binds tools) through the failure cases, counting the
handler's real calls; interrupt() re-runs the node on resume, and the write still runs once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("langgraph")

from _conversations import PAYMENT, REFUND, Ledger
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from agentkit import SQLiteIdempotencyStore
from agentkit.faces import langgraph as face
from agentkit.lessons.framework_cases import CASES, Bench
from agentkit.lessons.framework_runs import run_case

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
    assert sorted(kit.seen) == ["paid 500 cents to ada", "paid 700 cents to bob"]


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
            assert message.content == "paid 1 cents to ada"
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


def test_sync_path_two_approved_payments_in_one_node_each_run_once():
    """The node pauses twice and LangGraph re-runs it from its top after each resume: the
    first payment's approval is settled by then, so the re-run replays its receipt."""
    bench = _bench("approval approved (2 payments)")
    app = _graph(bench, [
        {"name": "send_payment", "args": {"to": "ada", "cents": 500}, "id": "call_ada"},
        {"name": "send_payment", "args": {"to": "bob", "cents": 700}, "id": "call_bob"},
    ])
    config = {"configurable": {"thread_id": "t"}}
    result = app.invoke({"messages": [("user", "go")]}, config)
    pauses = 0
    while result.get("__interrupt__"):
        pauses += 1
        result = app.invoke(Command(resume=True), config)
    assert pauses == 2
    assert bench.calls == 2
    assert sorted(bench.ledger, key=lambda p: p["to"]) == [{"to": "ada", "cents": 500},
                                                           {"to": "bob", "cents": 700}]
    receipts = {m.tool_call_id: m.content for m in result["messages"] if m.type == "tool"}
    assert receipts == {"call_ada": "paid 500 cents to ada", "call_bob": "paid 700 cents to bob"}
    attempts = [r.tool for r in bench.runner.trace.records if r.step == "attempt"]
    assert attempts == ["send_payment", "send_payment"]  # the re-run joined ada's settlement


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_answer_goes_to_the_call_it_was_shown_for(mode):
    """Ada approved, Bob rejected, in one node: only Ada is paid, on both paths. (LangGraph
    matches resume values to interrupt() calls by their order in the node.)"""
    bench = _bench("approval approved (2 payments)")
    app = _graph(bench, [
        {"name": "send_payment", "args": {"to": "ada", "cents": 500}, "id": "call_ada"},
        {"name": "send_payment", "args": {"to": "bob", "cents": 700}, "id": "call_bob"},
    ])
    config = {"configurable": {"thread_id": "t"}}

    async def drive():
        invoke = app.invoke if mode == "sync" else None
        start = {"messages": [("user", "go")]}
        result = invoke(start, config) if invoke else await app.ainvoke(start, config)
        shown = []
        while result.get("__interrupt__"):
            [pending] = result["__interrupt__"]
            shown.append(pending.value["tool_call_id"])
            answer = Command(resume=pending.value["arguments"]["to"] == "ada")
            result = invoke(answer, config) if invoke else await app.ainvoke(answer, config)
        return shown, result

    shown, result = asyncio.run(drive())
    assert shown == ["call_ada", "call_bob"]
    assert bench.ledger == [{"to": "ada", "cents": 500}]
    contents = {m.tool_call_id: m.content for m in result["messages"] if m.type == "tool"}
    assert contents["call_ada"] == "paid 500 cents to ada"
    assert json.loads(contents["call_bob"])["error"] == "forbidden"


def test_a_re_run_node_keeps_a_settled_result_after_the_budget_is_spent():
    """Ada is paid while Bob still waits; by the time Bob is answered the budget is spent.
    The re-run node still reads Ada's receipt (not budget_exhausted for a write that ran),
    and Bob, not asked again, is refused without running."""
    bench = _bench("approval approved (2 payments)")
    app = _graph(bench, [
        {"name": "send_payment", "args": {"to": "ada", "cents": 500}, "id": "call_ada"},
        {"name": "send_payment", "args": {"to": "bob", "cents": 700}, "id": "call_bob"},
    ])
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [("user", "go")]}, config)         # pauses for Ada
    waiting = app.invoke(Command(resume=True), config)          # Ada paid; pauses for Bob
    [pending] = waiting["__interrupt__"]
    assert pending.value["tool_call_id"] == "call_bob" and bench.calls == 1
    bench.runner.budget.max_attempts = bench.runner.budget.used  # nothing left
    done = app.invoke(Command(resume=True), config)
    contents = {m.tool_call_id: m.content for m in done["messages"] if m.type == "tool"}
    assert contents["call_ada"] == "paid 500 cents to ada"
    assert json.loads(contents["call_bob"])["error"] == "budget_exhausted"
    assert bench.calls == 1


def test_an_irreversible_write_with_the_budget_spent_asks_nobody():
    bench = _bench("approval rejected")
    bench.runner.budget.max_attempts = 0
    app = _graph(bench, [{"name": "send_payment", "args": {"to": "ada", "cents": 1}, "id": "c1"}])
    done = app.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "t"}})
    assert "__interrupt__" not in done
    assert json.loads(done["messages"][-1].content)["error"] == "budget_exhausted"
    assert bench.calls == 0


# ---------------------------------------------------------------------- under the host's failures


class Payments:
    """A payment tool whose handler can be held mid-payment (``hold``), and a search that can
    be held mid-search (``hold_search``), counting real calls. ``on_enter`` is called (on the
    handler's thread) whenever a held handler starts; ``returned`` lists what has returned."""

    def __init__(self, budget: int | None = None, hold: bool = False,
                 hold_search: bool = False) -> None:
        import threading

        from agentkit import Budget, ToolRegistry, ToolRunner, ToolSpec

        self.paid: list[str] = []
        self.returned: list[str] = []
        self.on_enter: Callable[[], None] = lambda: None
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        search_released = threading.Event()
        self.release_search = search_released.set
        if not hold_search:
            search_released.set()

        def send_payment(to: str, cents: int) -> str:
            """Send a payment."""
            self.paid.append(to)
            self.entered.set()
            self.on_enter()
            assert self.release.wait(30)
            self.returned.append(to)
            return f"paid {cents} cents to {to}"

        def status(to: str, cents: int) -> str | None:
            return f"paid {cents} cents to {to}" if to in self.paid else None

        self.searches = 0

        def search(query: str) -> str:
            """Search the notes."""
            self.searches += 1
            if not search_released.is_set():
                self.on_enter()
                assert search_released.wait(30)
            self.returned.append("search")
            return f"notes on {query}"

        specs = [ToolSpec("send_payment", "Send a payment.", "irreversible_write", 30.0, 1, 2000,
                          send_payment, status_lookup=status),
                 ToolSpec("search", "Search.", "read", 30.0, 1, 2000, search)]
        self.runner = ToolRunner(ToolRegistry(specs), budget=Budget(budget),
                                 sleep=lambda seconds: None)

    def graph(self, calls: list[dict], *, step_timeout: float | None = None,
              checkpointer: InMemorySaver | None = None):
        def model(state: MessagesState) -> dict:
            return {"messages": [AIMessage("", tool_calls=calls)]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", model)
        graph.add_node("tools", face.tool_node(self.runner))
        graph.add_edge(START, "model")
        graph.add_edge("model", "tools")
        app = graph.compile(checkpointer=checkpointer or InMemorySaver())
        if step_timeout is not None:
            app.step_timeout = step_timeout
        return app


def pay(to: str, cents: int = 100) -> dict:
    return {"name": "send_payment", "args": {"to": to, "cents": cents}, "id": f"call_{to}"}


def tool_messages(result: dict) -> dict[str, str]:
    return {m.tool_call_id: m.content for m in result["messages"] if m.type == "tool"}


@pytest.mark.parametrize("how", ["wait_for", "step_timeout", "asyncio.run per request"])
def test_a_cancelled_resume_does_not_break_the_conversation(how):
    """The host gives up on a resume while the approved payment runs. Before: every later
    resume raised NodeCancelledError (the node's memory handed out a future the first waiter's
    cancellation cancelled) and the settlement thread died with InvalidStateError. Now: one
    payment, and the retried resume reads its receipt."""
    payments = Payments(hold=True)
    app = payments.graph([pay("ada")], step_timeout=0.5 if how == "step_timeout" else None)
    config = {"configurable": {"thread_id": "t"}}

    async def ask() -> dict:
        return await app.ainvoke({"messages": [("user", "go")]}, config)

    async def resume_and_give_up() -> None:
        task = asyncio.ensure_future(app.ainvoke(Command(resume=True), config))
        await asyncio.to_thread(payments.entered.wait, 30)  # the payment is under way
        if how == "step_timeout":
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await task
        elif how == "wait_for":
            with pytest.raises((TimeoutError, asyncio.TimeoutError)):
                await asyncio.wait_for(asyncio.shield(task), 0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # "asyncio.run per request": the loop ends with the task still running; asyncio.run
        # cancels it on the way out

    async def retry() -> dict:
        return await app.ainvoke(Command(resume=True), config)

    assert asyncio.run(ask())["__interrupt__"]
    asyncio.run(resume_and_give_up())
    payments.release.set()
    done = asyncio.run(retry())
    assert tool_messages(done) == {"call_ada": "paid 100 cents to ada"}
    assert payments.paid == ["ada"]
    again = asyncio.run(retry())  # resuming once more changes nothing
    assert tool_messages(again) == {"call_ada": "paid 100 cents to ada"} and payments.paid == ["ada"]


class InlineExecutor(ThreadPoolExecutor):
    """The loop's default executor for a test: what the loop hands it (``asyncio.to_thread``,
    LangGraph's sync nodes) runs at once, on the loop's own thread. The loop then waits on
    nothing but the handler threads the test holds, so how far a node run gets while they are
    held is the same on every run, however loaded the machine."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            done.set_exception(exc)
        return done


class SavedQuestions(InMemorySaver):
    """A checkpointer that notes, each time the graph saves a question (an interrupt), what
    the held handlers had returned by then."""

    def __init__(self, payments: Payments) -> None:
        super().__init__()
        self.payments = payments
        self.returned_by_then: list[list[str]] = []

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        if any(channel == "__interrupt__" for channel, _ in writes):
            self.returned_by_then.append(list(self.payments.returned))
        super().put_writes(config, writes, task_id, task_path)


#: Loop turns the test gives a node run while a handler is held: far more than a run needs to
#: finish when nothing holds it back (with :class:`InlineExecutor`: the same count every run).
TURNS = 5000


async def _run_while_held(app: Any, payments: Payments, request: Any,
                          config: dict) -> tuple[bool, list[str], dict]:
    """Run ``request`` while a held handler runs: whether the run had ended before the handler
    was released (after :data:`TURNS` turns of the loop), the calls this run had sent the
    runner by then, and the run's result."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(InlineExecutor(max_workers=1))
    held = asyncio.Event()
    payments.on_enter = lambda: loop.call_soon_threadsafe(held.set)
    earlier = len(payments.runner.trace.records)
    run = asyncio.ensure_future(app.ainvoke(request, config))
    await held.wait()
    for _ in range(TURNS):
        if run.done():
            break
        await asyncio.sleep(0)  # one turn of the loop (nothing here waits for time)
    ended_early = run.done()
    seen = [record.call_id or "" for record in payments.runner.trace.records[earlier:]]
    payments.release.set()
    payments.release_search()
    return ended_early, seen, await run


def test_the_async_node_asks_its_next_question_only_once_the_approved_payment_is_settled():
    """Carol approved, Dave next. Before, on the async path the node let Dave decide and stop
    on his question while Carol's approved payment still ran on its thread: the graph saved
    Dave's question and ``ainvoke`` returned with it, so a host that then ended (one process
    per request) left Carol's payment half-recorded, and one killed mid-payment had already
    moved the conversation on to Dave. Now, as on the sync path, each irreversible call keeps
    its turn until it is settled: Dave is asked once Carol is paid and recorded."""
    payments = Payments(hold=True)
    saver = SavedQuestions(payments)
    app = payments.graph([pay("carol", 200), pay("dave", 300)], checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}

    async def drive() -> tuple[bool, list[str], dict]:
        asked = await app.ainvoke({"messages": [("user", "go")]}, config)
        assert asked["__interrupt__"][0].value["tool_call_id"] == "call_carol"
        return await _run_while_held(app, payments, Command(resume=True), config)

    ended_early, seen_while_paying, waiting = asyncio.run(drive())
    assert not ended_early  # the run waited for Carol's payment
    assert "call_dave" not in seen_while_paying  # Dave decided after it, as on the sync path
    assert saver.returned_by_then == [[], ["carol"]]  # Dave's question saved after she was paid
    assert waiting["__interrupt__"][0].value["tool_call_id"] == "call_dave"
    assert payments.paid == ["carol"]
    done = asyncio.run(app.ainvoke(Command(resume=False), config))
    assert {call: text if not text.startswith("{") else json.loads(text)["error"]
            for call, text in tool_messages(done).items()} == {
        "call_carol": "paid 200 cents to carol", "call_dave": "forbidden"}
    assert payments.paid == ["carol"]  # one payment: the re-run read Carol's receipt


def test_the_async_node_stops_on_a_question_only_once_its_other_calls_have_ended():
    """Ada asks; a search in the same node still runs. Before, LangGraph's ``asyncio.gather``
    let Ada's question end the node at once, with the search still running (the sync path
    waits for every call of the node). Now the run ends with the question once the search
    has ended."""
    payments = Payments(hold_search=True)
    saver = SavedQuestions(payments)
    search = {"name": "search", "args": {"query": "invoices"}, "id": "call_search"}
    app = payments.graph([pay("ada"), search], checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}

    async def drive() -> tuple[bool, list[str], dict]:
        return await _run_while_held(app, payments, {"messages": [("user", "go")]}, config)

    ended_early, _, asked = asyncio.run(drive())
    assert not ended_early
    assert saver.returned_by_then == [["search"]]
    assert asked["__interrupt__"][0].value["tool_call_id"] == "call_ada"
    assert payments.searches == 1 and payments.paid == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_answers_follow_the_calls_they_were_shown_for_when_the_budget_runs_out(mode):
    """A search, then Ada (no), Bob (yes) and Carol in one node, and a budget of 5: every
    re-run searches again, so the budget runs out between re-runs. Before, the re-run skipped
    Ada (rejected, and no budget left to ask) and gave her "no" to Bob: the model read
    ``forbidden`` for Bob, who was paid. Now each answer stays with its call."""
    payments = Payments(budget=5)
    search = {"name": "search", "args": {"query": "invoices"}, "id": "call_search"}
    app = payments.graph([search, pay("ada"), pay("bob"), pay("carol")])
    config = {"configurable": {"thread_id": "t"}}
    answers = {"ada": False, "bob": True, "carol": True}

    async def drive() -> tuple[list[str], dict]:
        invoke = app.invoke if mode == "sync" else None
        start = {"messages": [("user", "go")]}
        result = invoke(start, config) if invoke else await app.ainvoke(start, config)
        shown = []
        while result.get("__interrupt__"):
            [pending] = result["__interrupt__"]
            to = pending.value["arguments"]["to"]
            shown.append(to)
            answer = Command(resume=answers[to])
            result = invoke(answer, config) if invoke else await app.ainvoke(answer, config)
        return shown, result

    shown, result = asyncio.run(drive())
    assert shown == ["ada", "bob", "carol"]
    contents = tool_messages(result)
    assert {to: contents[f"call_{to}"] for to in answers} == {
        "ada": json.dumps({"ok": False, "error": "forbidden", "retryable": False, "attempts": 0,
                           "replayed": True}),
        "bob": "paid 100 cents to bob",
        "carol": json.dumps({"ok": False, "error": "budget_exhausted", "retryable": False,
                             "attempts": 0, "replayed": False}),
    }
    assert payments.paid == ["bob"]
    assert payments.searches == 4  # one per run of the node


def test_a_rejected_call_keeps_its_no_when_a_later_call_was_paid_meanwhile():
    """Ada: no, Bob: yes, Carol still waiting; then the budget is spent elsewhere. Before,
    the re-run skipped Ada (rejected, no budget) and gave Bob her "no"."""
    payments = Payments(budget=2)
    app = payments.graph([pay("ada"), pay("bob"), pay("carol")])
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [("user", "go")]}, config)  # Ada asked
    app.invoke(Command(resume=False), config)  # Ada: no; Bob asked
    waiting = app.invoke(Command(resume=True), config)  # Bob paid; Carol asked
    assert waiting["__interrupt__"][0].value["tool_call_id"] == "call_carol"
    payments.runner.budget.max_attempts = payments.runner.budget.used  # spent elsewhere
    done = app.invoke(Command(resume=True), config)
    contents = tool_messages(done)
    assert {call: json.loads(text).get("error") if text.startswith("{") else text
            for call, text in contents.items()} == {
        "call_ada": "forbidden", "call_bob": "paid 100 cents to bob",
        "call_carol": "budget_exhausted"}
    assert payments.paid == ["bob"]


@pytest.mark.parametrize("answer", [True, False])
def test_a_fork_before_the_tool_node_tells_the_settled_result(answer):
    """Replaying a checkpoint from before the tool node re-runs a paid call in a new task.
    Before, it was asked again and a "no" made the model read ``forbidden`` for a payment
    that happened. Now nobody is asked: the model reads the receipt."""
    payments = Payments()
    app = payments.graph([pay("ada")])
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [("user", "go")]}, config)
    app.invoke(Command(resume=True), config)
    assert payments.paid == ["ada"]
    before_tools = next(s for s in app.get_state_history(config) if s.next == ("tools",))
    result = app.invoke(None, before_tools.config)  # the fork: a new head of the thread
    while result.get("__interrupt__"):
        result = app.invoke(Command(resume=answer), config)
    assert tool_messages(result) == {"call_ada": "paid 100 cents to ada"}
    assert payments.paid == ["ada"]


def test_the_approved_run_keeps_the_models_tool_call_id():
    payments = Payments()
    app = payments.graph([pay("ada")])
    config = {"configurable": {"thread_id": "t"}}
    app.invoke({"messages": [("user", "go")]}, config)
    app.invoke(Command(resume=True), config)
    assert {r.call_id for r in payments.runner.trace.records} == {"call_ada"}
    assert payments.paid == ["ada"]


# ---------------------------------------------------------------------- one task per thread


def _ledger_graph(runner, calls: list[dict], *, checkpointer: Any = None, node: Any = None):
    """model -> tools: the given tool calls on every turn, through ``node`` (the face's)."""
    def model(state: MessagesState) -> dict:
        return {"messages": [AIMessage("", tool_calls=calls)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", node if node is not None else face.tool_node(runner))
    graph.add_edge(START, "model")
    graph.add_edge("model", "tools")
    return graph.compile(checkpointer=checkpointer or InMemorySaver())


def _turn(app, thread: str, mode: str, request: Any = None) -> dict:
    config = {"configurable": {"thread_id": thread}}
    request = request if request is not None else {"messages": [("user", "refund o-1")]}
    if mode == "sync":
        return app.invoke(request, config)
    return asyncio.run(app.ainvoke(request, config))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_threads_each_get_their_refund_and_the_same_thread_replays(mode):
    """Before, every thread ran under task "default": thread B's identical refund read A's
    receipt (``replayed``) and no refund was made for B."""
    ledger = Ledger()
    app = _ledger_graph(ledger.runner(), [{"name": "refund", "args": REFUND, "id": "c1"}])
    _turn(app, "thread-a", mode)
    b = _turn(app, "thread-b", mode)
    assert ledger.refunds == ["o-1", "o-1"]  # once per conversation
    assert tool_messages(b) == {"c1": "refunded 500 cents on o-1"}
    _turn(app, "thread-a", mode)  # the same conversation asks again: its own receipt
    assert ledger.refunds == ["o-1", "o-1"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_payment_approved_in_one_thread_is_asked_again_in_another(mode):
    """Before, thread B's identical payment found A's settled approval: no question, A's
    receipt, nobody paid. Now B's own approval is asked in B (task id: B's thread)."""
    ledger = Ledger()
    runner = ledger.runner()
    app = _ledger_graph(runner, [{"name": "send_payment", "args": PAYMENT, "id": "c1"}])
    assert _turn(app, "thread-a", mode)["__interrupt__"]
    _turn(app, "thread-a", mode, Command(resume=True))
    assert ledger.payments == ["ada"]
    asked = _turn(app, "thread-b", mode)
    [pending] = asked["__interrupt__"]
    assert pending.value["arguments"] == PAYMENT and ledger.payments == ["ada"]
    assert [p["task_id"] for p in runner.pending_approvals()] == ["thread-b"]
    done = _turn(app, "thread-b", mode, Command(resume=True))
    assert tool_messages(done) == {"c1": "paid 100 cents to ada"}
    assert ledger.payments == ["ada", "ada"]


def test_a_restarted_thread_keeps_its_task_on_a_durable_store(tmp_path):
    """A new runner, node and checkpointer on the same SQLite store (a new process): the same
    thread replays its refund, another thread makes its own."""
    ledger = Ledger()
    calls = [{"name": "refund", "args": REFUND, "id": "c1"}]
    path = tmp_path / "store.sqlite"
    _turn(_ledger_graph(ledger.runner(SQLiteIdempotencyStore(path)), calls), "thread-a", "sync")
    restarted = _ledger_graph(ledger.runner(SQLiteIdempotencyStore(path)), calls)
    _turn(restarted, "thread-a", "sync")
    assert ledger.refunds == ["o-1"]
    _turn(restarted, "thread-b", "sync")
    assert ledger.refunds == ["o-1", "o-1"]


def test_the_tools_in_a_stock_tool_node_take_the_thread_too():
    """``tools(runner)`` in LangGraph's own ToolNode: a call runs under its thread's task."""
    ledger = Ledger()
    runner = ledger.runner()
    app = _ledger_graph(runner, [{"name": "refund", "args": REFUND, "id": "c1"}],
                        node=ToolNode(face.tools(runner)))
    _turn(app, "thread-a", "sync")
    _turn(app, "thread-b", "async")
    _turn(app, "thread-a", "async")
    assert ledger.refunds == ["o-1", "o-1"]
