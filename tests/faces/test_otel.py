"""OpenTelemetry spans by the GenAI conventions (docs/design.md#tracing).

Spans go to the SDK's in-memory exporter through a SimpleSpanProcessor, so each one is there
the moment it ends. The first part feeds the observer the policy's events directly (interface
C); the second drives a real runner through both drivers, ``call`` and ``acall``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("opentelemetry.sdk")

from hypothesis import HealthCheck, given, settings
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode
from test_redaction_promises import assert_nothing_leaks, placed
from test_render import AWS, OPENAI, PEM

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.faces.otel import Instrumentation, instrument, span_tree, spans_frame
from agentkit.policy.events import CallEvent


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def by_name(exporter: InMemorySpanExporter) -> dict[str, list]:
    out: dict[str, list] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def one(exporter: InMemorySpanExporter, name: str):
    spans = by_name(exporter).get(name, [])
    assert len(spans) == 1, (name, [s.name for s in exporter.get_finished_spans()])
    return spans[0]


def children_of(exporter: InMemorySpanExporter, parent) -> list:
    return sorted((s for s in exporter.get_finished_spans()
                   if s.parent is not None and s.parent.span_id == parent.context.span_id),
                  key=lambda s: s.start_time)


# ====================================================================== events fed directly


class FeedRunner(ToolRunner):
    """A runner whose observers this test calls itself, with exactly the events it chooses."""

    def __init__(self, registry: ToolRegistry) -> None:
        super().__init__(registry)
        self.observers: list = []

    def add_observer(self, observer):  # interface C's signature
        self.observers.append(observer)
        return lambda: self.observers.remove(observer)

    def emit(self, kind: str, call_id: str = "c1", **kw) -> None:
        defaults = {"tool": "save", "effect": "reversible_write", "at": time.monotonic()}
        event = CallEvent(kind=kind, call_id=call_id, **{**defaults, **kw})
        for observer in list(self.observers):
            observer(event)


def echo(text: str) -> str:
    return text


@pytest.fixture
def fed(provider) -> FeedRunner:
    spec = ToolSpec("save", "Save a value.", "reversible_write", 1.0, 3, 100, echo)
    return FeedRunner(ToolRegistry([spec]))


def timed_out_write_settled(runner: FeedRunner) -> None:
    """The events of a write whose attempt timed out and whose status lookup said done."""
    runner.emit("call_started")
    runner.emit("attempt_started", number=1)
    runner.emit("attempt_ended", number=1, outcome="outcome_unknown", handler_ran=True)
    runner.emit("lookup_started", number=1)
    runner.emit("lookup_ended", number=1, outcome="done")
    runner.emit("call_ended", result={"ok": True, "data": "receipt", "attempts": 1, "replayed": False})


def test_a_call_is_one_execute_tool_span_with_the_conventions_attributes(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    timed_out_write_settled(fed)
    span = one(exporter, "execute_tool save")
    assert span.kind is SpanKind.INTERNAL
    assert dict(span.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "save",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "agentkit.effect": "reversible_write",
        "agentkit.operation": "call",
        "agentkit.attempts": 1,
        "agentkit.replayed": False,
        "agentkit.outcome": "ok",
    }
    assert span.status.status_code is StatusCode.UNSET
    attempt, lookup = children_of(exporter, span)
    assert attempt.name == "agentkit.attempt save" and lookup.name == "agentkit.status_lookup save"
    assert attempt.status.status_code is StatusCode.ERROR
    assert attempt.attributes["error.type"] == "outcome_unknown"
    assert attempt.attributes["agentkit.attempt.number"] == 1
    assert lookup.attributes["agentkit.outcome"] == "done"
    assert lookup.status.status_code is StatusCode.UNSET
    assert all(s.context.trace_id == span.context.trace_id for s in (attempt, lookup))


def test_the_instrumentation_scope_carries_the_distributions_version(fed, provider, exporter):
    """The scope's version is read from the installed distribution, `agentkit-boundary` (the
    import name `agentkit` names no distribution of ours: asking it gave "0")."""
    import importlib.metadata

    instrument(fed, tracer_provider=provider)
    timed_out_write_settled(fed)
    span = one(exporter, "execute_tool save")
    assert span.instrumentation_scope.name == "agentkit"
    assert span.instrumentation_scope.version == importlib.metadata.version("agentkit-boundary")
    assert span.instrumentation_scope.version != "0"


def test_span_times_are_the_events_times(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    fed.emit("call_started", at=100.0)
    fed.emit("attempt_started", number=1, at=100.25)
    fed.emit("attempt_ended", number=1, outcome="ok", handler_ran=True, at=100.5)
    fed.emit("call_ended", at=101.0, result={"ok": True, "data": "x", "attempts": 1, "replayed": False})
    call = one(exporter, "execute_tool save")
    attempt = one(exporter, "agentkit.attempt save")
    assert call.end_time - call.start_time == 1_000_000_000
    assert attempt.start_time - call.start_time == 250_000_000
    assert attempt.end_time - attempt.start_time == 250_000_000


@pytest.mark.parametrize("code", ["transient_failure", "outcome_unknown", "forbidden", "busy",
                                  "invalid_arguments", "budget_exhausted", "idempotency_conflict"])
def test_a_failed_result_is_an_error_with_its_stable_code(fed, provider, exporter, code):
    instrument(fed, tracer_provider=provider)
    fed.emit("call_started")
    fed.emit("call_ended", result={"ok": False, "error": code, "retryable": False,
                                   "attempts": 0, "replayed": False})
    span = one(exporter, "execute_tool save")
    assert span.attributes["error.type"] == code
    assert span.status.status_code is StatusCode.ERROR


def test_approval_required_is_not_an_error(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    fed.emit("call_started", tool="send", effect="irreversible_write")
    fed.emit("approval_asked", tool="send", effect="irreversible_write", approval_id="ap-1",
             outcome="approval_required")
    fed.emit("call_ended", tool="send", effect="irreversible_write",
             result={"ok": False, "error": "approval_required", "approval_id": "ap-1",
                     "retryable": False, "attempts": 0, "replayed": False})
    span = one(exporter, "execute_tool send")
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in span.attributes
    assert span.attributes["agentkit.outcome"] == "approval_required"
    assert span.attributes["agentkit.approval.id"] == "ap-1"
    assert [e.name for e in span.events] == ["agentkit.approval_asked"]


def test_a_deny_is_its_own_span_and_not_an_error_when_it_settled(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    fed.emit("call_started", operation="deny", tool="send", effect="irreversible_write")
    fed.emit("approval_settled", tool="send", approval_id="ap-1", outcome="forbidden")
    fed.emit("call_ended", operation="deny", tool="send",
             result={"ok": False, "error": "forbidden", "retryable": False, "attempts": 0,
                     "replayed": False})
    fed.emit("call_started", "c2", operation="deny", tool="nope", effect="")
    fed.emit("call_ended", "c2", operation="deny", tool="nope",
             result={"ok": False, "error": "forbidden", "retryable": False, "attempts": 0,
                     "replayed": False})
    settled = one(exporter, "agentkit.deny send")
    unknown = one(exporter, "agentkit.deny nope")
    assert "gen_ai.operation.name" not in settled.attributes  # a denial executes nothing
    assert settled.status.status_code is StatusCode.UNSET
    assert settled.attributes["agentkit.approval.id"] == "ap-1"
    assert unknown.status.status_code is StatusCode.ERROR
    assert unknown.attributes["error.type"] == "forbidden"


def test_approve_learns_its_tool_on_the_way(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    fed.emit("call_started", operation="approve", tool="ap-1", effect="")
    fed.emit("approval_settled", tool="send", approval_id="ap-1", outcome="ok")
    fed.emit("attempt_started", tool="send", number=1)
    fed.emit("attempt_ended", tool="send", number=1, outcome="ok", handler_ran=True)
    fed.emit("call_ended", operation="approve", tool="send", effect="irreversible_write",
             result={"ok": True, "data": "sent", "attempts": 1, "replayed": False})
    span = one(exporter, "execute_tool send")
    assert span.attributes["gen_ai.tool.name"] == "send"
    assert span.attributes["agentkit.operation"] == "approve"
    assert span.attributes["agentkit.effect"] == "irreversible_write"
    assert [c.name for c in children_of(exporter, span)] == ["agentkit.attempt send"]


def test_replays_and_refusals_are_events_on_the_call_span(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    fed.emit("call_started")
    fed.emit("replay", outcome="ok")
    fed.emit("call_ended", result={"ok": True, "data": "x", "attempts": 0, "replayed": True})
    fed.emit("call_started", "c2")
    fed.emit("refused", "c2", outcome="budget_exhausted")
    fed.emit("call_ended", "c2", result={"ok": False, "error": "budget_exhausted",
                                         "retryable": False, "attempts": 0, "replayed": False})
    replayed, refused = sorted(by_name(exporter)["execute_tool save"], key=lambda s: s.start_time)
    assert replayed.attributes["agentkit.replayed"] is True
    assert [(e.name, dict(e.attributes)) for e in replayed.events] == [
        ("agentkit.replay", {"agentkit.outcome": "ok"})]
    assert [e.name for e in refused.events] == ["agentkit.refused"]
    assert refused.attributes["error.type"] == "budget_exhausted"
    assert len(exporter.get_finished_spans()) == 2  # nothing ran: no child spans


def test_content_is_off_by_default_and_only_data_when_on(fed, provider, exporter):
    handle = instrument(fed, tracer_provider=provider)
    result = {"ok": True, "data": "the receipt", "attempts": 1, "replayed": False}
    fed.emit("call_started")
    fed.emit("call_ended", result=result)
    handle.uninstrument()
    instrument(fed, tracer_provider=provider, record_content=True)
    fed.emit("call_started", "c2")
    fed.emit("call_ended", "c2", result=result)
    off, on = sorted(by_name(exporter)["execute_tool save"], key=lambda s: s.start_time)
    assert "gen_ai.tool.call.result" not in off.attributes
    assert on.attributes["gen_ai.tool.call.result"] == "the receipt"
    assert not any("arguments" in key for span in (off, on) for key in span.attributes)


def test_no_content_for_a_tool_that_opted_out_of_redaction(provider, exporter):
    spec = ToolSpec("raw", "Raw.", "read", 1.0, 1, 100, echo, redact=False)
    runner = FeedRunner(ToolRegistry([spec]))
    instrument(runner, tracer_provider=provider, record_content=True)
    runner.emit("call_started", tool="raw", effect="read")
    runner.emit("call_ended", tool="raw", effect="read",
                result={"ok": True, "data": "password=hunter2", "attempts": 1, "replayed": False})
    assert "gen_ai.tool.call.result" not in one(exporter, "execute_tool raw").attributes


def test_the_parent_is_the_callers_current_span(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    tracer = provider.get_tracer("host")
    with tracer.start_as_current_span("agent run") as outer:
        timed_out_write_settled(fed)
    call = one(exporter, "execute_tool save")
    assert call.parent is not None and call.parent.span_id == outer.get_span_context().span_id
    assert call.context.trace_id == outer.get_span_context().trace_id


def test_uninstrument_stops_spans_and_ends_open_ones(fed, provider, exporter):
    handle = instrument(fed, tracer_provider=provider)
    assert handle.active and len(fed.observers) == 1
    fed.emit("call_started")
    fed.emit("attempt_started", number=1)
    handle.uninstrument()
    handle.uninstrument()  # again: nothing
    assert not handle.active and fed.observers == []
    ended = {s.name: s for s in exporter.get_finished_spans()}
    assert ended["execute_tool save"].attributes["agentkit.outcome"] == "uninstrumented"
    assert ended["agentkit.attempt save"].attributes["agentkit.outcome"] == "unfinished"
    timed_out_write_settled(fed)
    assert len(exporter.get_finished_spans()) == 2


def test_instrumenting_again_replaces_the_earlier_instrumentation(fed, provider, exporter):
    first = instrument(fed, tracer_provider=provider)
    second = instrument(fed, tracer_provider=provider)
    assert not first.active and second.active and len(fed.observers) == 1
    timed_out_write_settled(fed)
    assert len(by_name(exporter)["execute_tool save"]) == 1


def test_the_handle_is_a_context_manager(fed, provider, exporter):
    with instrument(fed, tracer_provider=provider) as handle:
        assert isinstance(handle, Instrumentation)
        timed_out_write_settled(fed)
    assert fed.observers == []
    assert len(exporter.get_finished_spans()) == 3


def test_events_of_calls_it_never_saw_start_are_ignored(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    fed.emit("attempt_ended", "zz", number=1, outcome="ok")
    fed.emit("lookup_ended", "zz", number=1, outcome="done")
    fed.emit("replay", "zz")
    fed.emit("call_ended", "zz", result={"ok": True})
    fed.emit("no_such_kind", "zz")
    assert exporter.get_finished_spans() == ()


def test_bad_arguments_are_clear_errors(provider):
    with pytest.raises(TypeError, match="takes a ToolRunner"):
        instrument(object(), tracer_provider=provider)  # type: ignore[arg-type]
    spec = ToolSpec("save", "Save a value.", "reversible_write", 1.0, 3, 100, echo)
    with pytest.raises(TypeError, match="record_content"):
        instrument(FeedRunner(ToolRegistry([spec])), record_content="yes")  # type: ignore[arg-type]


def test_the_tree_and_the_frame_show_no_ids_or_times(fed, provider, exporter):
    instrument(fed, tracer_provider=provider)
    timed_out_write_settled(fed)
    spans = exporter.get_finished_spans()
    assert span_tree(spans) == (
        "execute_tool save [UNSET] agentkit.outcome=ok agentkit.attempts=1 agentkit.replayed=False\n"
        "├── agentkit.attempt save [ERROR] error.type=outcome_unknown "
        "agentkit.outcome=outcome_unknown agentkit.handler_ran=True\n"
        "└── agentkit.status_lookup save [UNSET] agentkit.outcome=done"
    )
    frame = spans_frame(spans)
    assert list(frame["span"]) == ["execute_tool save", "agentkit.attempt save",
                                   "agentkit.status_lookup save"]
    assert list(frame["parent"]) == ["", "execute_tool save", "execute_tool save"]
    assert list(frame["call"]) == [1, 1, 1]
    assert "c1" not in frame.to_string()


def test_import_agentkit_does_not_import_opentelemetry():
    code = "import sys, agentkit; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    probe = "import sys, agentkit.faces.otel; print('opentelemetry' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "True"  # the probe is not vacuous


# ====================================================================== a real runner, both drivers


class Ledger:
    """Writes land here; the status lookup reads them back."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.calls = 0
        self.lookups = 0

    def write(self, key: str, value: str) -> dict:
        self.calls += 1
        self.rows[key] = value
        return {"saved": key}

    def status(self, key: str, value: str):
        self.lookups += 1
        return {"saved": key} if self.rows.get(key) == value else None


def never_sleep(seconds: float) -> None:
    pass


class Driver:
    """The sync driver (``call``, ``approve``, ``deny``) or the async one (``acall``, ...)."""

    def __init__(self, name: str) -> None:
        self.is_async = name == "acall"

    def __call__(self, method, *args, **kw):
        if not self.is_async:
            return method(*args, **kw)
        amethod = getattr(method.__self__, "a" + method.__name__)
        return asyncio.run(amethod(*args, **kw))


@pytest.fixture(params=["call", "acall"])
def driver(request) -> Driver:
    return Driver(request.param)


def hang_after_commit(ledger: Ledger, release: threading.Event):
    def save(key: str, value: str) -> dict:
        ledger.write(key, value)
        release.wait(10)  # the boundary's 0.05 s timeout ends the attempt first
        return {"saved": key}

    return save


def timed_out_runner(ledger: Ledger, release: threading.Event) -> ToolRunner:
    spec = ToolSpec("save", "Save a value.", "reversible_write", 0.05, 3, 100,
                    hang_after_commit(ledger, release), status_lookup=ledger.status)
    return ToolRunner(ToolRegistry([spec]), sleep=never_sleep)


def test_a_timed_out_write_settled_by_its_lookup(driver, provider, exporter):
    ledger, release = Ledger(), threading.Event()
    runner = timed_out_runner(ledger, release)
    instrument(runner, tracer_provider=provider)
    try:
        result = driver(runner.call, "save", {"key": "k", "value": "v"}, call_id="tc-1")
    finally:
        release.set()
    assert result == {"ok": True, "data": '{"saved": "k"}', "attempts": 1, "replayed": False}
    assert ledger.calls == 1 and ledger.lookups == 1
    call = one(exporter, "execute_tool save")
    assert call.attributes["gen_ai.tool.call.id"] == "tc-1"
    assert call.attributes["agentkit.attempts"] == 1
    assert call.status.status_code is StatusCode.UNSET
    attempt, lookup = children_of(exporter, call)
    assert attempt.name == "agentkit.attempt save"
    assert attempt.attributes["error.type"] == "outcome_unknown"
    assert attempt.attributes["agentkit.handler_still_running"] is True
    assert lookup.name == "agentkit.status_lookup save"
    assert lookup.attributes["agentkit.outcome"] == "done"
    assert attempt.end_time <= lookup.start_time


def test_a_write_that_lands_before_its_caller_gives_up_is_an_event_on_its_attempt(driver, provider, exporter):
    """The handler marks when its write took effect (mark_landed); the attempt span that timed
    out carries `agentkit.write_landed` at that moment, inside the attempt, before its end."""
    from agentkit.boundary.concurrency import mark_landed

    ledger, release = Ledger(), threading.Event()

    def save(key: str, value: str) -> dict:
        ledger.write(key, value)
        mark_landed()
        release.wait(10)  # the boundary's 0.05 s timeout ends the attempt first
        return {"saved": key}

    spec = ToolSpec("save", "Save a value.", "reversible_write", 0.05, 3, 100, save,
                    status_lookup=ledger.status)
    runner = ToolRunner(ToolRegistry([spec]), sleep=never_sleep)
    instrument(runner, tracer_provider=provider)
    try:
        result = driver(runner.call, "save", {"key": "k", "value": "v"})
    finally:
        release.set()
    assert result["ok"] is True and ledger.calls == 1
    attempt, _lookup = children_of(exporter, one(exporter, "execute_tool save"))
    [landed] = [e for e in attempt.events if e.name == "agentkit.write_landed"]
    assert attempt.start_time <= landed.timestamp <= attempt.end_time
    assert "· event agentkit.write_landed" in span_tree(exporter.get_finished_spans())


def test_no_write_landed_event_without_a_mark_or_for_a_read(driver, provider, exporter):
    """Only a handler that says when its write landed gets the event: a timed-out write that
    never marked it has none (nobody knows when, or whether), and a read never has one."""
    ledger, release = Ledger(), threading.Event()
    runner = timed_out_runner(ledger, release)  # commits, hangs, never marks
    instrument(runner, tracer_provider=provider)
    try:
        driver(runner.call, "save", {"key": "k", "value": "v"})
    finally:
        release.set()
    from agentkit.boundary.concurrency import mark_landed

    def read(q: str) -> str:
        mark_landed()  # a read that (wrongly) marks: still no write landed
        return "found"

    reader = ToolRunner(ToolRegistry([ToolSpec("find", "Find.", "read", 1.0, 1, 100, read)]))
    instrument(reader, tracer_provider=provider)
    driver(reader.call, "find", {"q": "x"})
    assert not [e for s in exporter.get_finished_spans() for e in s.events
                if e.name == "agentkit.write_landed"]


def matrix_runner(provider) -> ToolRunner:
    """A read that fails once, a write, an irreversible write: every kind of span."""
    failures = iter([ConnectionError(), None])

    def flaky(q: str) -> str:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return "found"

    ledger = Ledger()
    specs = [ToolSpec("find", "Find.", "read", 1.0, 3, 100, flaky),
             ToolSpec("save", "Save.", "reversible_write", 1.0, 3, 100, ledger.write,
                      status_lookup=ledger.status),
             ToolSpec("send", "Send.", "irreversible_write", 1.0, 1, 100, ledger.write)]
    runner = ToolRunner(ToolRegistry(specs), sleep=never_sleep)
    instrument(runner, tracer_provider=provider)
    return runner


def script(runner: ToolRunner, driver) -> None:
    driver(runner.call, "find", {"q": "x"})
    driver(runner.call, "save", {"key": "a", "value": "1"})
    driver(runner.call, "save", {"key": "a", "value": "1"})
    driver(runner.call, "nope", {})
    asked = driver(runner.call, "send", {"key": "b", "value": "2"})
    driver(runner.approve, asked["approval_id"])
    driver(runner.approve, asked["approval_id"])
    other = driver(runner.call, "send", {"key": "c", "value": "3"})
    driver(runner.deny, other["approval_id"])


def test_both_drivers_make_the_same_spans(provider, exporter):
    trees = []
    for driver in (Driver("call"), Driver("acall")):
        exporter.clear()
        script(matrix_runner(provider), driver)
        trees.append(span_tree(exporter.get_finished_spans()))
    assert trees[0] == trees[1]
    tree = trees[0]
    assert tree.count("execute_tool ") == 8 and tree.count("agentkit.deny send") == 1
    assert tree.count("agentkit.attempt find") == 2
    assert "execute_tool nope [ERROR] error.type=unknown_tool" in tree


def test_approve_is_an_execute_tool_span_with_the_attempt_as_its_child(driver, provider, exporter):
    ledger = Ledger()
    spec = ToolSpec("send", "Send.", "irreversible_write", 1.0, 1, 100, ledger.write)
    runner = ToolRunner(ToolRegistry([spec]), sleep=never_sleep)
    instrument(runner, tracer_provider=provider)
    asked = driver(runner.call, "send", {"key": "b", "value": "2"})
    approved = driver(runner.approve, asked["approval_id"])
    again = driver(runner.approve, asked["approval_id"])
    assert approved["ok"] and again["replayed"] and ledger.calls == 1
    assert driver(runner.deny, asked["approval_id"])["replayed"]  # too late: it ran
    assert driver(runner.deny, "no-such-id")["error"] == "forbidden"
    settled, unknown = sorted((s for s in exporter.get_finished_spans() if s.name.startswith("agentkit.deny")),
                              key=lambda s: s.start_time)
    assert settled.status.status_code is StatusCode.UNSET and unknown.status.status_code is StatusCode.ERROR
    assert unknown.attributes["error.type"] == "forbidden"
    ask, run, replay = sorted(by_name(exporter)["execute_tool send"], key=lambda s: s.start_time)
    assert ask.attributes["agentkit.outcome"] == "approval_required"
    assert ask.status.status_code is StatusCode.UNSET
    assert run.attributes["agentkit.operation"] == "approve"
    assert run.attributes["agentkit.approval.id"] == ask.attributes["agentkit.approval.id"]
    assert [c.name for c in children_of(exporter, run)] == ["agentkit.attempt send"]
    assert children_of(exporter, replay) == []
    assert replay.attributes["agentkit.replayed"] is True
    assert "agentkit.replay" in [e.name for e in replay.events]


def test_the_callers_span_is_the_parent_on_both_drivers(driver, provider, exporter):
    spec = ToolSpec("find", "Find.", "read", 1.0, 1, 100, echo)
    runner = ToolRunner(ToolRegistry([spec]))
    instrument(runner, tracer_provider=provider)
    tracer = provider.get_tracer("host")
    if driver.is_async:  # the host's span is current in its own task

        async def host():
            with tracer.start_as_current_span("mcp tools/call") as outer:
                await runner.acall("find", {"text": "x"})
            return outer

        outer = asyncio.run(host())
    else:
        with tracer.start_as_current_span("mcp tools/call") as outer:
            runner.call("find", {"text": "x"})
    call = one(exporter, "execute_tool find")
    attempt = one(exporter, "agentkit.attempt find")
    assert call.parent.span_id == outer.get_span_context().span_id
    assert attempt.parent.span_id == call.context.span_id
    assert len({call.context.trace_id, attempt.context.trace_id,
                outer.get_span_context().trace_id}) == 1


def test_no_argument_and_no_result_text_by_default(driver, provider, exporter):
    secret_arg, out = "argument-value-41", "result-text-42"
    spec = ToolSpec("find", "Find.", "read", 1.0, 1, 100, lambda text: out)
    runner = ToolRunner(ToolRegistry([spec]))
    instrument(runner, tracer_provider=provider)
    assert driver(runner.call, "find", {"text": secret_arg})["data"] == out
    dumped = " ".join(span.to_json() for span in exporter.get_finished_spans())
    assert secret_arg not in dumped and out not in dumped
    instrument(runner, tracer_provider=provider, record_content=True)
    exporter.clear()
    driver(runner.call, "find", {"text": secret_arg})
    dumped = " ".join(span.to_json() for span in exporter.get_finished_spans())
    assert out in dumped and secret_arg not in dumped


class Exploding:
    """A span processor that raises: a broken exporter must not change any result."""

    def on_start(self, span, parent_context=None):
        raise RuntimeError("exporter down")

    def on_end(self, span):
        raise RuntimeError("exporter down")

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def test_a_failing_tracer_never_changes_a_result(driver):
    provider = TracerProvider()
    provider.add_span_processor(Exploding())
    ledger = Ledger()
    spec = ToolSpec("save", "Save.", "reversible_write", 1.0, 3, 100, ledger.write,
                    status_lookup=ledger.status)
    plain = ToolRunner(ToolRegistry([spec]), sleep=never_sleep)
    traced = ToolRunner(ToolRegistry([spec]), sleep=never_sleep)
    instrument(traced, tracer_provider=provider)
    expected = driver(plain.call, "save", {"key": "k", "value": "v"})
    assert driver(traced.call, "save", {"key": "k", "value": "v"}) == expected
    assert ledger.calls == 2  # one real write per runner, no more


def spans_text(exporter: InMemorySpanExporter) -> tuple[str, str]:
    """(the recorded result, every other attribute and event value) of all spans."""
    recorded, rest = [], []
    for span in exporter.get_finished_spans():
        for key, value in span.attributes.items():
            (recorded if key == "gen_ai.tool.call.result" else rest).append(str(value))
        rest.append(span.name)
        for event in span.events:
            rest.append(event.name)
            rest.extend(str(v) for v in event.attributes.values())
    return "".join(recorded), "\n".join(rest)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=placed())
def test_a_secret_in_a_handlers_output_never_reaches_a_span(case):
    """The redaction suite's own hostile outputs, with content recording on: the recorded
    result is exactly the data the model saw (which that suite proves clean), and nothing
    else in any span depends on the output at all."""
    text, parts, limit = case

    def spans_of(output: str) -> tuple[dict, str, str]:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        spec = ToolSpec("t", "Test tool.", "read", 5.0, 1, limit, lambda: output,
                        parameters={"type": "object"})
        runner = ToolRunner(ToolRegistry([spec]))
        instrument(runner, tracer_provider=provider, record_content=True)
        return (runner.call("t", {}, call_id="c"), *spans_text(exporter))

    result, recorded, rest = spans_of(text)
    assert recorded == result["data"]  # exactly what the model saw, nothing more
    assert_nothing_leaks(recorded, parts, limit)
    assert rest == spans_of("harmless")[2]  # names, ids, codes: the same whatever the output


def test_the_timeline_has_one_row_per_span_in_tree_order(fed, provider, exporter):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from agentkit.faces.otel import plot_spans

    instrument(fed, tracer_provider=provider)
    timed_out_write_settled(fed)
    ax = plot_spans(exporter.get_finished_spans(), title="settled")
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["execute_tool save", "└ agentkit.attempt save", "└ agentkit.status_lookup save"]
    bars = sorted(ax.patches[:3], key=lambda p: p.get_y())
    assert [round(b.get_x()) for b in bars] == [0, 1, 3]  # call, attempt, then the lookup after it
    assert ax.get_title() == "settled"
    assert "write lands" not in [t.get_text() for t in ax.texts]  # nothing marked a landing


def test_the_timeline_stars_where_a_write_lands(provider, exporter):
    """Like notebook 04/05's timeline: a star labelled "write lands" on the attempt's row,
    after the attempt started and before the caller gave up on it."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from agentkit.demo import matrix
    from agentkit.demo.scenarios import Subject
    from agentkit.faces.otel import plot_spans

    class Traced(Subject):
        def bench(self, **options):
            bench = super().bench(**options)
            instrument(bench.runner, tracer_provider=provider)
            return bench

    matrix.play("timeout_outcome_unknown", "reversible_write",
                subject=Traced.demo("reversible_write"))
    ax = plot_spans(exporter.get_finished_spans())
    [star] = [line for line in ax.lines if line.get_marker() == "*"]
    assert [t.get_text() for t in ax.texts].count("write lands") == 1
    [row] = star.get_ydata()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[int(row)] == "└ agentkit.attempt save_draft"
    attempt_bar = sorted(ax.patches[: len(labels)], key=lambda p: p.get_y())[int(row)]
    [x] = star.get_xdata()
    assert attempt_bar.get_x() < x < attempt_bar.get_x() + attempt_bar.get_width()
    assert "write lands" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_call_the_sampler_drops_makes_no_span_at_all(fed, exporter):
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handle = instrument(fed, tracer_provider=provider)
    timed_out_write_settled(fed)
    assert exporter.get_finished_spans() == ()
    handle.uninstrument()
    instrument(fed, tracer_provider=NoOpTracerProvider())
    timed_out_write_settled(fed)
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("secret", [OPENAI, AWS, PEM, "DB_PASSWORD=hunter2hunter2"],
                         ids=["openai", "aws", "pem", "password"])
def test_the_render_suites_secrets_stay_out_of_spans_on_both_drivers(driver, provider, exporter, secret):
    spec = ToolSpec("t", "Test tool.", "read", 2.0, 1, 200, lambda: f"before {secret} after",
                    parameters={"type": "object"})
    runner = ToolRunner(ToolRegistry([spec]))
    instrument(runner, tracer_provider=provider, record_content=True)
    result = driver(runner.call, "t", {})
    assert result["ok"] and result["redactions"] >= 1
    recorded, rest = spans_text(exporter)
    assert recorded == result["data"] and "[REDACTED]" in recorded
    value = secret.split("=", 1)[-1]
    for text in (recorded, rest):
        assert value not in text and value[:20] not in text


def test_a_coroutine_handler_makes_the_same_spans_on_both_drivers(provider, exporter):
    async def afind(text: str) -> str:
        await asyncio.sleep(0)
        return text

    trees = []
    for driver in (Driver("call"), Driver("acall")):
        exporter.clear()
        runner = ToolRunner(ToolRegistry([ToolSpec("afind", "Find.", "read", 1.0, 1, 100, afind)]))
        instrument(runner, tracer_provider=provider)
        tracer = provider.get_tracer("host")

        async def host(runner=runner, tracer=tracer):
            with tracer.start_as_current_span("host"):
                return await runner.acall("afind", {"text": "x"})

        if driver.is_async:
            assert asyncio.run(host())["data"] == "x"
        else:
            with tracer.start_as_current_span("host"):
                assert runner.call("afind", {"text": "x"})["data"] == "x"
        trees.append(span_tree(exporter.get_finished_spans()))
    assert trees[0] == trees[1] == (
        "host [UNSET]\n"
        "└── execute_tool afind [UNSET] agentkit.outcome=ok agentkit.attempts=1 agentkit.replayed=False\n"
        "    └── agentkit.attempt afind [UNSET] agentkit.outcome=ok agentkit.handler_ran=True"
    )


def test_concurrent_calls_keep_their_own_children_and_parents(provider, exporter):
    """Threads and tasks in flight at once: every attempt under its own call, every call
    under the host span of the thread or task that made it."""
    together = threading.Barrier(8)

    def meet(n: int) -> int:
        together.wait(10)  # all eight attempts are running at the same time
        return n

    async def ameet(n: int) -> int:
        await asyncio.sleep(0)
        return n

    specs = [ToolSpec("meet", "Meet.", "read", 20.0, 1, 100, meet),
             ToolSpec("ameet", "Meet.", "read", 20.0, 1, 100, ameet)]
    runner = ToolRunner(ToolRegistry(specs))
    instrument(runner, tracer_provider=provider)
    tracer = provider.get_tracer("host")

    def host(n: int) -> None:
        with tracer.start_as_current_span(f"host {n}"):
            runner.call("meet", {"n": n}, call_id=f"t{n}")

    threads = [threading.Thread(target=host, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    async def ahost(n: int) -> None:
        with tracer.start_as_current_span(f"host a{n}"):
            await runner.acall("ameet", {"n": n}, call_id=f"a{n}")

    async def many() -> None:
        await asyncio.gather(*(ahost(n) for n in range(8)))

    asyncio.run(many())
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    calls = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(calls) == 16
    for call in calls:
        call_id = call.attributes["gen_ai.tool.call.id"]
        assert by_id[call.parent.span_id].name == f"host {call_id.lstrip('t')}"
        (attempt,) = children_of(exporter, call)
        assert attempt.attributes["agentkit.outcome"] == "ok"


def test_an_instrumented_runner_is_not_kept_alive(provider, exporter):
    import gc
    import weakref

    spec = ToolSpec("find", "Find.", "read", 1.0, 1, 100, echo)
    runner = ToolRunner(ToolRegistry([spec]))
    handle = instrument(runner, tracer_provider=provider)
    runner.call("find", {"text": "x"})
    assert handle.runner is runner
    gone = weakref.ref(runner)
    del runner
    gc.collect()
    assert gone() is None and handle.runner is None
    handle.uninstrument()  # still safe


def test_a_no_op_tracer_provider_adds_no_observer(monkeypatch):
    """OpenTelemetry's own no-op tracer never records, so instrumenting with it observes
    nothing: the runner is not asked to build events for it (make bench's 1.1x cost goal)."""
    told: list[str] = []
    original = Instrumentation.__call__

    def counting(self, event):
        told.append(event.kind)
        return original(self, event)

    monkeypatch.setattr(Instrumentation, "__call__", counting)
    calls: list[str] = []

    def search(query: str) -> str:
        calls.append(query)
        return "found"

    runner = ToolRunner(ToolRegistry([ToolSpec("search", "Search.", "read", 2.0, 1, 200, search)]))
    handle = instrument(runner, tracer_provider=NoOpTracerProvider())
    assert handle.off and handle.active
    assert runner.call("search", {"query": "q"})["ok"]
    assert asyncio.run(runner.acall("search", {"query": "r"}))["ok"]
    assert calls == ["q", "r"] and len(runner.trace) == 2 and told == []
    handle.uninstrument()
    assert not handle.active
    recording = instrument(runner, tracer_provider=TracerProvider())  # a recording tracer is told
    assert not recording.off
    assert runner.call("search", {"query": "s"})["ok"]
    assert told == ["call_started", "attempt_started", "attempt_ended", "call_ended"]


def test_two_calls_with_one_host_call_id_keep_their_own_spans(provider, exporter):
    """Frameworks reuse ids ("call_0" in every turn): two calls in flight with one id each
    keep their own attempt and result. (Keyed by the host's id, b's attempt ended a's span.)"""
    release = {"a": asyncio.Event(), "b": asyncio.Event()}
    entered = {"a": asyncio.Event(), "b": asyncio.Event()}
    ran: list[str] = []

    async def wait(text: str) -> str:
        entered[text].set()
        await release[text].wait()
        ran.append(text)
        return text

    runner = ToolRunner(ToolRegistry([ToolSpec("wait", "Wait.", "read", 20.0, 1, 100, wait)]))
    instrument(runner, tracer_provider=provider, record_content=True)

    async def both() -> list[dict]:
        first = asyncio.ensure_future(runner.acall("wait", {"text": "a"}, call_id="call_0"))
        await entered["a"].wait()
        second = asyncio.ensure_future(runner.acall("wait", {"text": "b"}, call_id="call_0"))
        await entered["b"].wait()
        release["a"].set()  # a ends while b, the later call with the same id, is open
        done_first = await first
        release["b"].set()
        return [done_first, await second]

    results = asyncio.run(both())
    assert [r["data"] for r in results] == ["a", "b"] and ran == ["a", "b"]
    calls = sorted((s for s in exporter.get_finished_spans() if s.name == "execute_tool wait"),
                   key=lambda s: s.start_time)
    assert [c.attributes["gen_ai.tool.call.id"] for c in calls] == ["call_0", "call_0"]
    assert [c.attributes["gen_ai.tool.call.result"] for c in calls] == ["a", "b"]
    for call in calls:
        (attempt,) = children_of(exporter, call)
        assert attempt.attributes["agentkit.outcome"] == "ok"
        assert call.start_time <= attempt.start_time <= attempt.end_time <= call.end_time
    first, second = calls
    assert first.end_time < second.end_time  # a ended first, as it did


@pytest.mark.parametrize("tool", ["find", "save"])
def test_an_observer_added_mid_call_sees_whole_calls_only(tool):
    """Added while a call's handler runs, an observer sees none of that call (before, it got
    a lone attempt_ended: a read's start is told only to a live audience), then whole calls."""
    entered, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow(text: str) -> str:
        runs.append(text)
        if text == "first":
            entered.set()
            assert release.wait(10)
        return text

    specs = [ToolSpec("find", "Find.", "read", 20.0, 1, 100, slow),
             ToolSpec("save", "Save.", "reversible_write", 20.0, 1, 100, slow)]
    runner = ToolRunner(ToolRegistry(specs))
    seen: list[CallEvent] = []
    worker = threading.Thread(target=runner.call, args=(tool, {"text": "first"}))
    worker.start()
    assert entered.wait(10)
    runner.add_observer(seen.append)
    release.set()
    worker.join(10)
    assert seen == []  # nothing of the call that began before the observer was added
    runner.call(tool, {"text": "second"})
    kinds = [e.kind for e in seen]
    assert kinds == ["call_started", "attempt_started", "attempt_ended", "call_ended"]
    assert len({e.serial for e in seen}) == 1 and seen[0].serial > 0
    assert runs == ["first", "second"]
