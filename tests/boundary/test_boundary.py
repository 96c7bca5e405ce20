"""invoke_tool: every stable error code (docs/design.md#error-codes), each with the handler's
real call count."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

from agentkit import CallContext, ToolRegistry, ToolSpec, invoke_tool
from agentkit.boundary.invoke import invoke_attempt


def spec(handler, *, name="tool", effect="read", timeout=1.0, attempts=3, out=200, **kw):
    return ToolSpec(name, f"The {name} tool.", effect, timeout, attempts, out, handler, **kw)


def echo(text: str, times: int = 1) -> str:
    return text * times


def registry_with(*specs, **kw) -> ToolRegistry:
    return ToolRegistry(specs, **kw)


# ------------------------------------------------------------------ ok path and result shape

def test_ok_result_is_plain_json(counted):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo"))
    result = invoke_tool(reg, "echo", {"text": "ab", "times": 2})
    assert result == {"ok": True, "data": "abab"}
    assert handler.calls == 1
    json.dumps(result)


def test_non_str_values_render_as_json(counted):
    handler = counted(lambda: {"b": 1, "a": [1, 2]})
    reg = registry_with(spec(handler, parameters={"type": "object", "properties": {}}))
    assert invoke_tool(reg, "tool", {})["data"] == '{"b": 1, "a": [1, 2]}'


def test_unjsonable_value_falls_back_to_str():
    class Thing:
        def __str__(self) -> str:
            return "a thing"

    reg = registry_with(spec(lambda: Thing(), parameters={"type": "object"}))
    assert invoke_tool(reg, "tool", {})["data"] == "a thing"


# ------------------------------------------------------------------ unknown_tool

@pytest.mark.parametrize("name", ["nope", "", None, 3, ["echo"], "echo "])
def test_unknown_tool(counted, name):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo"))
    assert invoke_tool(reg, name, {"text": "a"}) == {
        "ok": False, "error": "unknown_tool", "retryable": False,
    }
    assert handler.calls == 0


# ------------------------------------------------------------------ invalid_arguments

@pytest.mark.parametrize(
    "arguments, detail",
    [
        ({}, "missing required field 'text'"),
        ({"text": "a", "colour": "red"}, "unexpected field; allowed fields: text, times"),
        ({"text": 5}, "field 'text' must be of type string"),
        ({"text": "a", "times": True}, "field 'times' must be of type integer"),
        ("text=a", "arguments must be a JSON object"),
        (None, "arguments must be a JSON object"),
        ([("text", "a")], "arguments must be a JSON object"),
        ({"text": float("nan")}, "arguments must hold only JSON values"),
        ({"text": {1, 2}}, "arguments must hold only JSON values"),
        ({1: "a"}, "arguments must hold only JSON values"),
        ({"text": ("a",)}, "arguments must hold only JSON values"),
    ],
)
def test_invalid_arguments_never_reach_the_handler(counted, arguments, detail):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo"))
    result = invoke_tool(reg, "echo", arguments)
    assert result == {"ok": False, "error": "invalid_arguments", "retryable": False, "detail": detail}
    assert handler.calls == 0


def test_detail_never_echoes_argument_values(counted):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo"))
    secret = "sk-THISMUSTNOTAPPEAR1234567"
    for arguments in ({"text": 1, secret: 2}, {"text": [secret]}, {secret: "x"}):
        result = invoke_tool(reg, "echo", arguments)
        assert secret not in json.dumps(result)
    assert handler.calls == 0


def test_nested_fields_are_named_by_schema_path(counted):
    def tag(tags: list[str]) -> str:
        return ",".join(tags)

    handler = counted(tag)
    reg = registry_with(spec(handler, name="tag"))
    result = invoke_tool(reg, "tag", {"tags": ["a", 2]})
    assert result["detail"] == "field 'tags[1]' must be of type string"
    assert handler.calls == 0


def test_oversized_arguments(counted):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo", max_argument_chars=100))
    result = invoke_tool(reg, "echo", {"text": "x" * 200})
    assert result["error"] == "invalid_arguments"
    assert "limit is 100" in result["detail"]
    assert handler.calls == 0


def test_default_argument_limit_is_64_kib(counted):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo"))
    assert invoke_tool(reg, "echo", {"text": "x" * 70_000})["error"] == "invalid_arguments"
    assert invoke_tool(reg, "echo", {"text": "x" * 60_000})["ok"]
    assert handler.calls == 1


def test_handler_gets_a_copy_of_the_arguments():
    seen = []
    reg = registry_with(spec(lambda items: seen.append(items) or "ok",
                             parameters={"type": "object", "properties": {"items": {"type": "array"}}}))
    original = {"items": [1, 2]}
    invoke_tool(reg, "tool", original)
    assert seen == [[1, 2]] and seen[0] is not original["items"]


# ------------------------------------------------------------------ forbidden

def test_missing_scope_is_forbidden_before_the_handler(counted):
    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo", required_scopes={"docs:read"}))
    result = invoke_tool(reg, "echo", {"text": "a"}, CallContext(scopes={"other"}))
    assert result == {"ok": False, "error": "forbidden", "retryable": False}
    assert handler.calls == 0
    allowed = invoke_tool(reg, "echo", {"text": "a"}, CallContext(scopes={"docs:read"}))
    assert allowed["ok"] and handler.calls == 1


def test_registry_policy_refuses_before_the_handler(counted):
    handler = counted(echo)

    def no_dots(spec, arguments, context):
        return "dots are not allowed" if "." in arguments.get("text", "") else None

    reg = registry_with(spec(handler, name="echo"), policies=[no_dots])
    assert invoke_tool(reg, "echo", {"text": "../etc"})["error"] == "forbidden"
    assert handler.calls == 0


def test_a_failing_policy_fails_closed(counted):
    handler = counted(echo)

    def broken(spec, arguments, context):
        raise RuntimeError("policy bug")

    reg = registry_with(spec(handler, name="echo"), policies=[broken])
    assert invoke_tool(reg, "echo", {"text": "a"})["error"] == "forbidden"
    assert handler.calls == 0


def test_handler_permission_error_is_forbidden(counted):
    def refuse(path: str) -> str:
        raise PermissionError(f"{path} is outside the workspace")

    handler = counted(refuse)
    reg = registry_with(spec(handler, name="refuse"))
    assert invoke_tool(reg, "refuse", {"path": "/etc"}) == {
        "ok": False, "error": "forbidden", "retryable": False,
    }
    assert handler.calls == 1


# ------------------------------------------------------------------ transient_failure / tool_failure

@pytest.mark.parametrize("exc", [ConnectionError("reset"), ConnectionResetError(), TimeoutError("socket")])
def test_transient_failures(counted, exc):
    def flaky(x: int) -> int:
        raise exc

    handler = counted(flaky)
    reg = registry_with(spec(handler, name="flaky"))
    assert invoke_tool(reg, "flaky", {"x": 1}) == {
        "ok": False, "error": "transient_failure", "retryable": True,
    }
    assert handler.calls == 1


@pytest.mark.parametrize("exc", [ConnectionError("reset by peer"), TimeoutError("socket")])
def test_a_transient_failure_is_one_warning_line_without_a_traceback(counted, exc, caplog):
    def flaky(x: int) -> int:
        raise exc

    handler = counted(flaky)
    reg = registry_with(spec(handler, name="flaky"))
    with caplog.at_level(logging.DEBUG, logger="agentkit"):
        assert invoke_tool(reg, "flaky", {"x": 1})["error"] == "transient_failure"
    assert handler.calls == 1
    said = [r for r in caplog.records if r.name == "agentkit"]
    assert [r.levelno for r in said] == [logging.WARNING], said
    (record,) = said
    assert record.exc_info is None and "\n" not in record.getMessage()
    message = record.getMessage()
    assert "flaky" in message and "call-" in message and type(exc).__name__ in message
    assert str(exc) in message and "transient_failure" in message


def test_a_transient_failure_the_runner_retried_away_logs_no_error(caplog):
    """A ConnectionError, retried, then a success: WARNING lines, never ERROR or a traceback."""
    from agentkit import ToolRunner

    calls = []

    def fetch(x: int) -> int:
        calls.append(x)
        if len(calls) < 3:
            raise ConnectionError("connection reset by peer")
        return x

    reg = registry_with(spec(fetch, name="fetch", attempts=3))
    slept: list[float] = []
    runner = ToolRunner(reg, sleep=slept.append)
    with caplog.at_level(logging.DEBUG, logger="agentkit"):
        result = runner.call("fetch", {"x": 7})
    assert result["ok"] is True and result["attempts"] == 3
    assert len(calls) == 3 and len(slept) == 2
    said = [r for r in caplog.records if r.name == "agentkit"]
    assert not [r for r in said if r.levelno >= logging.ERROR], [r.getMessage() for r in said]
    assert not [r for r in said if r.exc_info], [r.getMessage() for r in said]
    warnings = [r.getMessage() for r in said if r.levelno == logging.WARNING]
    assert sum("transient failure" in m and "ConnectionError" in m for m in warnings) == 2


def raising(exc: Exception):
    def flaky(x: int) -> int:
        raise exc

    return flaky


def test_a_transient_failures_log_line_is_redacted_and_survives_a_broken_str(counted, caplog):
    class Hostile(ConnectionError):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    secret = "sk-" + "a" * 40
    for exc, hidden in ((ConnectionError(f"upstream said key={secret}\nline two"), secret),
                        (Hostile(), "no text")):
        reg = registry_with(spec(counted(raising(exc)), name="flaky"))
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="agentkit"):
            assert invoke_tool(reg, "flaky", {"x": 1})["error"] == "transient_failure"
        (record,) = [r for r in caplog.records if r.name == "agentkit"]
        assert record.levelno == logging.WARNING and hidden not in record.getMessage()
        assert "\n" not in record.getMessage()


@pytest.mark.parametrize("exc", [TypeError("bug inside"), KeyError("k"), ValueError("v"), RuntimeError()])
def test_other_exceptions_are_tool_failures(counted, exc, caplog):
    def buggy(x: int) -> int:
        raise exc

    handler = counted(buggy)
    reg = registry_with(spec(handler, name="buggy"))
    with caplog.at_level(logging.INFO, logger="agentkit"):
        result = invoke_tool(reg, "buggy", {"x": 1})
    assert result == {"ok": False, "error": "tool_failure", "retryable": False}
    assert handler.calls == 1
    # The exception goes to the log, with its traceback, tool name and call id; not to the model.
    record = next(r for r in caplog.records if r.exc_info)
    assert record.exc_info[1] is exc
    assert "buggy" in record.getMessage() and "call-" in record.getMessage()


def test_exception_text_never_reaches_the_model():
    def leaky(x: int) -> int:
        raise RuntimeError("database password=hunter2 at /srv/secret")

    reg = registry_with(spec(leaky, name="leaky"))
    assert "hunter2" not in json.dumps(invoke_tool(reg, "leaky", {"x": 1}))


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_propagate(exc):
    def stop(x: int) -> int:
        raise exc()

    reg = registry_with(spec(stop, name="stop"))
    with pytest.raises(exc):
        invoke_tool(reg, "stop", {"x": 1})


# ------------------------------------------------------------------ outcome_unknown (timeout)

def test_timeout_is_outcome_unknown_and_the_write_still_lands(counted):
    entered, release, landed = threading.Event(), threading.Event(), []

    def write(value: str) -> str:
        entered.set()
        assert release.wait(10)
        landed.append(value)
        return "written"

    handler = counted(write)
    reg = registry_with(spec(handler, name="write", effect="reversible_write", timeout=0.05))
    result = invoke_tool(reg, "write", {"value": "v"})
    assert result == {"ok": False, "error": "outcome_unknown", "retryable": False}
    assert entered.is_set() and landed == []
    release.set()
    deadline = time.monotonic() + 10
    while not landed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert landed == ["v"], "a timeout never proves the write failed"
    assert handler.calls == 1


def test_timeout_of_a_read_is_retryable():
    release = threading.Event()
    reg = registry_with(spec(lambda q: release.wait(10), name="slow", timeout=0.05,
                             parameters={"type": "object", "properties": {"q": {"type": "string"}}}))
    try:
        assert invoke_tool(reg, "slow", {"q": "x"}) == {
            "ok": False, "error": "outcome_unknown", "retryable": True,
        }
    finally:
        release.set()


def test_handler_timeout_error_is_not_the_boundary_timeout():
    def raises_timeout(x: int) -> int:
        raise TimeoutError("upstream")

    reg = registry_with(spec(raises_timeout, name="t", effect="reversible_write"))
    assert invoke_tool(reg, "t", {"x": 1})["error"] == "transient_failure"


def test_a_hung_handler_does_not_block_other_tools():
    release = threading.Event()
    try:
        reg = registry_with(
            spec(lambda x: release.wait(10), name="hang", timeout=0.05,
                 parameters={"type": "object", "properties": {"x": {"type": "integer"}}}),
            spec(echo, name="echo"),
        )
        for _ in range(3):
            assert invoke_tool(reg, "hang", {"x": 1})["error"] == "outcome_unknown"
        assert invoke_tool(reg, "echo", {"text": "still here"}) == {"ok": True, "data": "still here"}
    finally:
        release.set()


def test_an_attempt_that_never_started_is_busy_not_outcome_unknown(counted):
    class StalledPool:
        """A pool whose worker would start only later: the attempt times out before it starts."""

        def __init__(self):
            self.tasks = []

        def submit(self, task):
            self.tasks.append(task)

    handler = counted(echo)
    reg = registry_with(spec(handler, name="echo", timeout=0.05))
    pool = StalledPool()
    from agentkit.boundary.workers import POOL

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(POOL, "submit", pool.submit)
        result, attempt = invoke_attempt(reg, "echo", {"text": "a"})
    assert result == {"ok": False, "error": "busy", "retryable": True}
    assert not attempt.started
    for task in pool.tasks:  # the worker starts late: the cancelled attempt must not run
        task()
    assert handler.calls == 0


def test_worker_threads_are_reused():
    from agentkit.boundary.workers import POOL

    reg = registry_with(spec(echo, name="echo"))
    invoke_tool(reg, "echo", {"text": "warm"})
    before = POOL.threads_started
    for _ in range(50):
        invoke_tool(reg, "echo", {"text": "a"})
    assert POOL.threads_started - before <= 1


def test_workers_are_daemon_threads():
    started = threading.Event()
    release = threading.Event()

    def hang(x: int) -> int:
        started.set()
        release.wait(10)
        return x

    reg = registry_with(spec(hang, name="hang", timeout=0.05))
    invoke_tool(reg, "hang", {"x": 1})
    assert started.wait(5)
    workers = [t for t in threading.enumerate() if t.name.startswith("agentkit-worker")]
    assert workers and all(t.daemon for t in workers)
    release.set()


def test_interpreter_exits_with_a_hung_handler(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "hang.py"
    script.write_text(
        "import threading\n"
        "from agentkit import ToolRegistry, ToolSpec, invoke_tool\n"
        "def hang(x: int) -> int:\n"
        "    threading.Event().wait()\n"
        "reg = ToolRegistry([ToolSpec('hang', 'Hangs.', 'read', 0.05, 1, 10, hang)])\n"
        "print(invoke_tool(reg, 'hang', {'x': 1})['error'])\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "outcome_unknown"


# ------------------------------------------------------------------ busy (concurrency)

def test_second_caller_is_busy_while_the_slot_is_held(counted):
    entered, release = threading.Event(), threading.Event()

    def hold(x: int) -> int:
        entered.set()
        release.wait(10)
        return x

    handler = counted(hold)
    reg = registry_with(spec(handler, name="hold", timeout=0.5, max_concurrency=1))
    thread = threading.Thread(target=invoke_tool, args=(reg, "hold", {"x": 1}))
    thread.start()
    try:
        assert entered.wait(5)
        assert invoke_tool(reg, "hold", {"x": 2}) == {"ok": False, "error": "busy", "retryable": True}
        assert handler.calls == 1
    finally:
        release.set()
        thread.join(10)


def test_limits_belong_to_the_spec_not_the_registry(counted):
    release = threading.Event()
    hold = counted(lambda x: release.wait(10))
    params = {"type": "object", "properties": {"x": {"type": "integer"}}}
    reg = registry_with(
        spec(hold, name="hold", timeout=0.05, max_concurrency=1, parameters=params),
        spec(echo, name="echo", max_concurrency=1),
    )
    try:
        assert invoke_tool(reg, "hold", {"x": 1})["error"] == "outcome_unknown"
        assert invoke_tool(reg, "echo", {"text": "free"}) == {"ok": True, "data": "free"}
    finally:
        release.set()


def test_busy_while_slot_held_by_a_timed_out_handler(counted):
    entered, release = threading.Event(), threading.Event()

    def hold(x: int) -> int:
        entered.set()
        release.wait(10)
        return x

    handler = counted(hold)
    reg = registry_with(spec(handler, name="hold", timeout=0.05, max_concurrency=1))
    assert invoke_tool(reg, "hold", {"x": 1})["error"] == "outcome_unknown"
    assert entered.is_set()
    # the timed-out handler still holds the only slot
    assert invoke_tool(reg, "hold", {"x": 2}) == {"ok": False, "error": "busy", "retryable": True}
    assert handler.calls == 1
    release.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the slot comes back when the handler really returns
        if reg.entry("hold").slot.acquire(timeout=0.01):
            reg.entry("hold").slot.release()
            break
    assert invoke_tool(reg, "hold", {"x": 3}) == {"ok": True, "data": "3"}
    assert handler.calls == 2
