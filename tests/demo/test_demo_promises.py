"""The demo tools keep the contract (issue 10): the model never chooses the task of its keys,
and the workspace refuses names that would overwrite its own files or read as something else.
Real handler calls counted."""

from __future__ import annotations

import json

import pytest

from agentkit import CallContext, IdempotencyStore, ToolRunner
from agentkit.demo.tools import OUTBOX, make_demo_registry, outbox_lines, workspace_path


def runner_for(workspace, corpus, calls, task="t1", store=None) -> ToolRunner:
    registry = make_demo_registry(workspace, corpus, wrap=calls)
    return ToolRunner(registry, store=store, context=CallContext(task_id=task), sleep=lambda s: None)


def test_save_brief_takes_no_task_id(runner, calls):
    spec = runner.registry.get("save_brief")
    assert spec is not None and set(spec.parameters["properties"]) == {"path", "content"}
    result = runner.call("save_brief", {"task_id": "someone-else", "path": "briefs/a.md",
                                        "content": "# A\n"})
    assert result["error"] == "invalid_arguments" and "task_id" not in result["detail"]
    assert calls.count["save_brief"] == 0


def test_the_key_is_the_runner_s_task_plus_path_plus_content_hash(workspace, corpus, calls):
    store = IdempotencyStore()
    first = runner_for(workspace, corpus, calls, task="t1", store=store)
    other = runner_for(workspace, corpus, calls, task="t2", store=store)
    brief = {"path": "briefs/a.md", "content": "# A\n"}
    assert first.call("save_brief", brief)["replayed"] is False
    assert first.call("save_brief", brief)["replayed"] is True  # same task: one intent
    assert other.call("save_brief", brief)["replayed"] is False  # another task's intent
    assert calls.count["save_brief"] == 2


@pytest.mark.parametrize("path", [
    OUTBOX, OUTBOX.upper(), "Outbox.Jsonl", f"{OUTBOX}.", f"{OUTBOX} ", f"sub/{OUTBOX}",
    f".{OUTBOX}.abc.tmp", ".hidden.md", "briefs/.x.md", "agentkit.sqlite3", "store.sqlite",
    "keys.db", "store.sqlite-wal", "store.sqlite-journal",
])
def test_the_workspace_refuses_names_it_reserves(runner, calls, workspace, path):
    runner.call("send_message", {"to": "ana", "body": "hello"})  # an outbox exists (pending)
    (workspace / OUTBOX).write_text(json.dumps({"to": "ana", "body": "hi"}) + "\n")
    result = runner.call("save_brief", {"path": path, "content": "overwritten\n"})
    assert result["error"] == "forbidden" and calls.count["save_brief"] == 0
    assert outbox_lines(workspace) == 1 and "overwritten" not in (workspace / OUTBOX).read_text()
    with pytest.raises(PermissionError):
        workspace_path(workspace, path)


@pytest.mark.parametrize("path", [
    "briefs/\u202egpj.md",  # right-to-left override: reads as "dm.jpg"
    "briefs/a\u202ab.md", "briefs/a\u2066b.md", "briefs/a\u2069.md", "a\u061cb.md",
    "a\u200bb.md", "a\u200cb.md", "a\u200db.md", "a\u2060b.md", "\ufeffa.md",
    "a\u200eb.md", "a\nb.md", "a\tb.md", "a\x00b.md", "a\u2028b.md", "a\x7fb.md",
])
def test_the_workspace_refuses_bidi_zero_width_and_control_characters(runner, calls, path):
    result = runner.call("save_brief", {"path": path, "content": "x\n"})
    assert result["error"] == "forbidden" and calls.count["save_brief"] == 0


@pytest.mark.parametrize("path", ["briefs/café.md", "briefs/日本語.md", "notes/a-b_c.1.md"])
def test_ordinary_names_in_any_script_are_still_saved(runner, calls, workspace, path):
    result = runner.call("save_brief", {"path": path, "content": "x\n"})
    assert result["ok"] is True and calls.count["save_brief"] == 1
    assert (workspace / path).read_text() == "x\n"
