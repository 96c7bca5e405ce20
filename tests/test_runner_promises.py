"""ToolRunner keeps its promises at the edges (issue 10): a write never runs twice, the runner
never raises for model input, and what it remembers stays bounded. Real handler calls counted."""

from __future__ import annotations

import logging
import threading

from agentkit import ToolRegistry, ToolRunner, ToolSpec


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


class _Signal(logging.Handler):
    """Sets an event when the agentkit logger reports a late handler finishing (the moment
    the timed-out attempt has really returned)."""

    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "finished after the caller gave up" in record.getMessage():
            self.event.set()


# ------------------------------------------------------------------ point 1: the lookup race

def test_a_write_landing_while_the_lookup_runs_is_never_repeated():
    """The handler blocks until the lookup has looked; the lookup then waits for the write to
    land and the attempt to return, and answers its stale "not done". That answer proves
    nothing: the attempt was still running when the lookup started."""
    rows: dict[str, str] = {}
    looked = threading.Event()
    landed = threading.Event()
    handler_calls = []
    signal = _Signal()
    logger = logging.getLogger("agentkit")
    logger.addHandler(signal)

    def write(key: str, value: str) -> dict:
        handler_calls.append(key)
        looked.wait(10)  # still "running" while the lookup looks
        rows[key] = value
        landed.set()
        return {"saved": key}

    def lookup(key: str, value: str):
        answer = {"saved": key} if rows.get(key) == value else None
        looked.set()
        landed.wait(10)  # the write lands while the lookup runs …
        signal.event.wait(10)  # … and the attempt has returned before the lookup answers
        return answer

    spec = ToolSpec("save", "Save a value.", "reversible_write", 0.5, 3, 100, write,
                    status_lookup=lookup)
    runner = ToolRunner(ToolRegistry([spec]), sleep=Sleeps())
    try:
        result = runner.call("save", {"key": "k", "value": "v"})
    finally:
        logger.removeHandler(signal)
        looked.set()
        landed.set()
    assert result["ok"] is False and result["error"] == "outcome_unknown"
    assert result["retryable"] is False and result["attempts"] == 1
    assert handler_calls == ["k"]  # one real write, never a second beside or after it
    assert rows == {"k": "v"}


def test_not_done_after_the_attempt_returned_still_retries():
    """The other side of the race: an attempt that had returned before the lookup started
    (a disconnect) and a lookup saying "not done" is retried with the same key."""
    rows: dict[str, str] = {}
    handler_calls = []

    def write(key: str, value: str) -> dict:
        handler_calls.append(key)
        if len(handler_calls) == 1:
            raise ConnectionError("reset before commit")
        rows[key] = value
        return {"saved": key}

    def lookup(key: str, value: str):
        return {"saved": key} if rows.get(key) == value else None

    spec = ToolSpec("save", "Save a value.", "reversible_write", 1.0, 3, 100, write,
                    status_lookup=lookup)
    runner = ToolRunner(ToolRegistry([spec]), sleep=Sleeps())
    result = runner.call("save", {"key": "k", "value": "v"})
    assert result["ok"] is True and result["attempts"] == 2
    assert handler_calls == ["k", "k"] and rows == {"k": "v"}
