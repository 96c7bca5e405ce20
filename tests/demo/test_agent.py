"""The fake model and the agent loop: the happy-path baseline, before and after the registry,
and every misbehaviour ending with its stable code, the right handler count, and no exception."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from agentkit import Budget, ToolRunner
from agentkit.demo import baseline
from agentkit.demo.agent import STOP_REASONS, Transcript, run_agent, run_baseline
from agentkit.demo.fake_model import MISBEHAVIOURS, FakeModel, FinalAnswer, ToolCall, first_sentence
from agentkit.demo.tools import make_demo_registry, outbox_lines

QUESTIONS = [
    "idempotency key retry",
    "approval before sending a payment",
    "what happens when a tool times out",
]


# --------------------------------------------------------------------------- the fake model


def test_model_is_a_pure_function_of_question_and_history():
    model = FakeModel()
    first = model.next_action("idempotency key retry", [])
    assert first == ToolCall("call_1", "search_local_sources", {"query": "idempotency key retry", "limit": 3})
    assert FakeModel().next_action("idempotency key retry", []) == first
    hits = [{"id": "status-lookup", "title": "t", "snippet": "s"}]
    second = model.next_action("q", [(first, {"ok": True, "data": json.dumps(hits)})])
    assert second == ToolCall("call_2", "get_document", {"doc_id": "status-lookup"})
    assert model.next_action("q", [(first, hits)]) == second  # the raw baseline value reads the same


def test_tool_call_openai_shape_round_trips():
    call = ToolCall("call_7", "get_document", {"doc_id": "human-approval"})
    shape = call.to_openai()
    assert shape == {
        "id": "call_7",
        "type": "function",
        "function": {"name": "get_document", "arguments": '{"doc_id": "human-approval"}'},
    }
    assert ToolCall.from_openai(shape) == call


def test_unknown_misbehaviour_is_refused():
    with pytest.raises(ValueError):
        FakeModel(misbehave="sulk")


def test_first_sentence_skips_headings():
    assert first_sentence("# Title\n\nOne two. Three four.") == "One two."


# --------------------------------------------------------------------------- the happy path


def test_happy_path_searches_reads_and_cites(runner, calls, corpus):
    transcript = run_agent(FakeModel(), runner, "idempotency key retry")
    assert transcript.stop_reason == "final_answer"
    assert [s.tool_call.name for s in transcript.steps] == ["search_local_sources", "get_document"]
    assert [s.tool_call.id for s in transcript.steps] == ["call_1", "call_2"]
    assert transcript.citations == ("idempotency-keys",)
    sentence = first_sentence(corpus.get("idempotency-keys")["text"])
    assert transcript.final_answer == f'"{sentence}" [doc:idempotency-keys]'
    assert calls.count == Counter({"search_local_sources": 1, "get_document": 1})


def test_happy_path_with_a_brief(runner, calls, workspace):
    transcript = run_agent(FakeModel(save_brief=True), runner, "approval before sending a payment")
    names = [s.tool_call.name for s in transcript.steps]
    assert names == ["search_local_sources", "get_document", "save_brief"]
    # The model names the path and content only: the task is the runner's context.
    assert set(transcript.steps[2].tool_call.arguments) == {"path", "content"}
    brief = (workspace / "briefs" / "human-approval.md").read_text()
    assert brief.startswith("# Human approval for irreversible actions") and "[doc:human-approval]" in brief
    assert transcript.final_answer.endswith("Brief saved to briefs/human-approval.md.")


@pytest.mark.parametrize("question", QUESTIONS)
def test_registry_keeps_the_baseline_transcript(runner, question):
    before = run_baseline(FakeModel(), question)
    after = run_agent(FakeModel(), runner, question)
    assert after.signature() == before.signature()
    assert after.stop_reason == before.stop_reason == "final_answer"
    assert after.citations == before.citations
    # The shapes differ, and that is the point: raw values before, {"ok", "data"} after.
    assert isinstance(before.steps[0].result, list)
    assert after.steps[0].result["ok"] is True


def test_text_and_frame_are_deterministic(workspace, corpus):
    def run() -> Transcript:
        return run_agent(FakeModel(), ToolRunner(make_demo_registry(workspace, corpus)), QUESTIONS[0])

    first, second = run(), run()
    assert first.to_text() == second.to_text()
    lines = first.to_text().splitlines()
    assert lines[0] == "Question: idempotency key retry"
    assert lines[1].startswith(
        '1. search_local_sources({"query": "idempotency key retry", "limit": 3}) -> ok: [{"id": "idempotency-keys"'
    )
    assert lines[2].startswith('2. get_document({"doc_id": "idempotency-keys"}) -> ok: ')
    assert lines[3].startswith('Answer: "An idempotency key is')
    frame = first.to_frame()
    assert list(frame.columns) == ["step", "tool", "arguments", "ok", "error", "data", "attempts", "replayed"]
    assert frame["tool"].tolist() == ["search_local_sources", "get_document"]
    assert frame["attempts"].tolist() == [1, 1] and frame["data"].str.len().max() <= 60
    assert json.loads(frame["arguments"][1]) == {"doc_id": "idempotency-keys"}


# --------------------------------------------------------------------------- misbehaviour


@pytest.mark.parametrize(
    "mode, code, tool",
    [
        ("oversized", "invalid_arguments", "search_local_sources"),
        ("unknown_tool", "unknown_tool", "web_search"),
        ("missing_argument", "invalid_arguments", "search_local_sources"),
    ],
)
def test_refused_requests_run_nothing_and_end_cleanly(runner, calls, mode, code, tool):
    transcript = run_agent(FakeModel(misbehave=mode), runner, "idempotency key retry")
    [step] = transcript.steps
    assert step.tool_call.name == tool
    assert step.result["error"] == code and step.result["attempts"] == 0
    assert sum(calls.count.values()) == 0 and runner.budget.used == 0
    assert transcript.stop_reason == "final_answer"
    assert transcript.final_answer == f"I could not finish: the tool {tool} failed with {code}."


def test_oversized_query_is_refused_without_echoing_it(runner):
    transcript = run_agent(FakeModel(misbehave="oversized"), runner, "idempotency key retry")
    result = transcript.steps[0].result
    assert len(transcript.steps[0].tool_call.arguments["query"]) == 100_000
    assert "idempotency" not in result["detail"]
    assert "(100025 chars)" in transcript.to_text()  # the long argument is shortened


def test_repeated_write_runs_once(runner, calls, workspace):
    transcript = run_agent(FakeModel(misbehave="repeat"), runner, "idempotency key retry")
    names = [s.tool_call.name for s in transcript.steps]
    assert names == ["search_local_sources"] * 2 + ["get_document"] * 2 + ["save_brief"] * 2
    first, second = (s.result for s in transcript.steps[4:])
    assert first["replayed"] is False and second["replayed"] is True and second["data"] == first["data"]
    # Reads are asked twice and run twice (harmless); the write ran once.
    assert calls.count == Counter({"search_local_sources": 2, "get_document": 2, "save_brief": 1})
    assert transcript.stop_reason == "final_answer"
    assert (workspace / "briefs" / "idempotency-keys.md").exists()


def test_a_looping_model_is_stopped_by_the_step_limit(runner, calls):
    transcript = run_agent(FakeModel(misbehave="loop"), runner, "budget", max_steps=3)
    assert transcript.stop_reason == "max_steps" and transcript.final_answer is None
    assert len(transcript.steps) == 3 and calls.count["search_local_sources"] == 3
    assert transcript.to_text().endswith("Stopped: max_steps")


def test_a_spent_budget_ends_the_run(workspace, corpus, calls):
    runner = ToolRunner(make_demo_registry(workspace, corpus, wrap=calls), budget=Budget(max_attempts=1))
    transcript = run_agent(FakeModel(), runner, "idempotency key retry")
    assert transcript.stop_reason == "budget_exhausted" and transcript.final_answer is None
    assert [s.result.get("error") for s in transcript.steps] == [None, "budget_exhausted"]
    assert calls.count == Counter({"search_local_sources": 1})


def test_every_misbehaviour_ends_with_a_known_stop_reason(workspace, corpus):
    for mode in MISBEHAVIOURS:
        runner = ToolRunner(make_demo_registry(workspace / mode, corpus), budget=Budget(max_attempts=5))
        transcript = run_agent(FakeModel(misbehave=mode), runner, "idempotency key retry")
        assert transcript.stop_reason in STOP_REASONS, mode


def test_a_failing_tool_is_explained_in_the_answer(workspace, corpus, calls):
    def always_down(handler, **kwargs):
        raise ConnectionError("search backend unreachable")

    calls.faults["search_local_sources"] = always_down
    runner = ToolRunner(make_demo_registry(workspace, corpus, wrap=calls), sleep=lambda s: None)
    transcript = run_agent(FakeModel(), runner, "idempotency key retry")
    assert transcript.steps[0].result["attempts"] == 3  # a read is retried, up to max_attempts
    assert calls.count["search_local_sources"] == 3
    assert transcript.final_answer == (
        "I could not finish: the tool search_local_sources failed with transient_failure."
    )


# --------------------------------------------------------------------------- scripted runs


def test_scripted_model_replays_its_actions(runner, calls, workspace):
    model = FakeModel.scripted([
        {"name": "get_document", "arguments": {"doc_id": "no-such-doc"}},
        ToolCall("mine", "send_message", {"to": "ops", "body": "hi"}),
        {"type": "function", "function": {"name": "search_local_sources", "arguments": '{"query": "x", "limit": 0}'}},
    ])
    transcript = run_agent(model, runner, "anything")
    codes = [s.result["error"] for s in transcript.steps]
    assert codes == ["invalid_arguments", "approval_required", "invalid_arguments"]
    assert [s.tool_call.id for s in transcript.steps] == ["call_1", "mine", "call_3"]
    assert transcript.final_answer == "Scripted run finished after 3 tool call(s)."
    assert calls.count == Counter({"get_document": 1})  # nothing sent without approval
    assert outbox_lines(workspace) == 0
    assert "approval_required (0 attempts) [apr-" in transcript.to_text()


def test_scripted_final_answer_stops_early(runner):
    model = FakeModel.scripted([FinalAnswer("No tools needed.", ["x"]), {"name": "get_document"}])
    transcript = run_agent(model, runner, "hi")
    assert transcript.steps == [] and transcript.final_answer == "No tools needed."
    assert transcript.citations == ("x",)
    with pytest.raises(TypeError):
        FakeModel.scripted(["not an action"])


def test_non_dict_arguments_never_raise(runner):
    model = FakeModel.scripted([ToolCall("c", "get_document", ["not", "a", "dict"])])
    transcript = run_agent(model, runner, "q")
    assert transcript.steps[0].result["error"] == "invalid_arguments"


# --------------------------------------------------------------------------- the baseline's flaw


def test_baseline_misreports_a_bug_as_bad_arguments(monkeypatch, workspace, corpus, calls):
    def buggy_get_document(doc_id: str) -> dict:
        return corpus.get(doc_id)["text"] + 1  # a bug: str + int raises TypeError

    monkeypatch.setattr(baseline, "get_document", buggy_get_document)
    assert baseline.dispatch_tool("get_document", {"doc_id": "status-lookup"}) == {"error": "bad arguments"}

    def bug(handler, **kwargs):
        return buggy_get_document(**kwargs)

    calls.faults["get_document"] = bug
    runner = ToolRunner(make_demo_registry(workspace, corpus, wrap=calls))
    assert runner.call("get_document", {"doc_id": "status-lookup"})["error"] == "tool_failure"


def test_baseline_lets_exceptions_escape():
    with pytest.raises(KeyError):
        run_baseline(FakeModel.scripted([{"name": "get_document", "arguments": {"doc_id": "nope"}}]), "q")
    assert baseline.dispatch_tool("search_local_sources", {"q": "x"}) == {"error": "bad arguments"}
    assert baseline.dispatch_tool("web_search", {})["error"].startswith("unknown tool")


def test_preview_cuts_at_a_word_boundary_with_an_ellipsis():
    from agentkit.demo.agent import preview

    text = '[{"id": "idempotency-keys", "title": "Idempotency keys", "snippet": "An idempotency key"}]'
    cut = preview(text)
    assert cut == '[{"id": "idempotency-keys", "title": "Idempotency keys",…'
    assert len(cut) <= 60 and preview("short\ntext") == "short text"
    assert preview("x" * 100, 10) == "x" * 9 + "…"  # one long word: cut inside it, still marked
