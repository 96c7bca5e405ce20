"""The demo corpus and tools: ranking, schemas, workspace safety, atomic writes, approvals.

Every boundary assertion also counts the handler's real calls (through ``wrap``): an error
code alone cannot show whether the tool ran.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter

import pytest

from agentkit import Budget, CallContext, InvalidInput, ToolRunner
from agentkit.demo.corpus import SNIPPET_CHARS, Corpus, Document, parse_document, tokenize
from agentkit.demo.tools import (
    OUTBOX,
    UNKNOWN_DOCUMENT,
    DemoTools,
    UnknownDocument,
    brief_key,
    make_demo_registry,
    outbox_lines,
    workspace_path,
)

# --------------------------------------------------------------------------- corpus


def test_corpus_loads_all_sources(corpus):
    assert len(corpus) == 16
    assert "idempotency-keys" in corpus.ids()
    doc = corpus.get("idempotency-keys")
    assert doc["title"] == "Idempotency keys"
    assert doc["text"].startswith("# Idempotency keys")
    assert "---" not in doc["text"].splitlines()[0]
    with pytest.raises(KeyError):
        corpus.get("no-such-doc")


@pytest.mark.parametrize(
    "query, expected",
    [
        ("idempotency key retry", "idempotency-keys"),
        ("approval before sending a payment", "human-approval"),
        ("what happens when a tool times out", "timeouts-outcome-unknown"),
        ("redact secrets from output", "secret-redaction"),
        ("validate arguments with json schema", "json-schema-arguments"),
        ("stop a runaway loop with a budget", "task-budgets"),
    ],
)
def test_natural_queries_hit_the_expected_note_first(corpus, query, expected):
    assert corpus.search(query)[0]["id"] == expected


def test_ranking_is_deterministic_and_independent_of_file_order(corpus):
    query = "retry a write after a timeout"
    first = corpus.search(query, limit=10)
    docs = [Document(i, corpus.get(i)["title"], corpus.get(i)["text"]) for i in corpus.ids()]
    reversed_corpus = Corpus(reversed(docs))
    assert [corpus.search(query, limit=10) for _ in range(3)] == [first] * 3
    assert reversed_corpus.search(query, limit=10) == first


def test_ties_are_broken_by_id():
    docs = [Document(i, "Same", "identical words here") for i in ("b-doc", "c-doc", "a-doc")]
    assert [h["id"] for h in Corpus(docs).search("identical words", limit=3)] == ["a-doc", "b-doc", "c-doc"]


def test_search_edges(corpus):
    assert corpus.search("") == []
    assert corpus.search("zzzz qqqq") == []
    assert len(corpus.search("the", limit=10)) == 10
    with pytest.raises(ValueError):
        corpus.search("x", limit=0)


def test_snippets_are_short_and_show_the_first_match(corpus):
    for query in ("bearer token", "payment", "sqlite", "idempotency key retry", "jitter"):
        hits = corpus.search(query, limit=5)
        assert all(0 < len(hit["snippet"]) <= SNIPPET_CHARS for hit in hits)
        assert set(tokenize(hits[0]["snippet"])) & set(tokenize(query)), query


def test_load_explicit_path_and_front_matter_errors(tmp_path):
    (tmp_path / "one.md").write_text("---\nid: one\ntitle: 'First'\n---\n\n# First\n\nHello world.\n")
    loaded = Corpus.load(tmp_path)
    assert loaded.get("one") == {"id": "one", "title": "First", "text": "# First\n\nHello world."}
    with pytest.raises(ValueError, match="front matter"):
        parse_document("# no front matter\n")
    with pytest.raises(ValueError, match="title"):
        parse_document("---\nid: x\n---\nbody\n")
    with pytest.raises(FileNotFoundError):
        Corpus.load(tmp_path / "missing")


# --------------------------------------------------------------------------- reads


def test_tool_list_is_generated_from_the_registry(workspace, corpus):
    registry = make_demo_registry(workspace, corpus)
    tools = {t["function"]["name"]: t["function"] for t in registry.describe("openai")}
    assert list(tools) == ["search_local_sources", "get_document", "save_brief", "send_message"]
    limit = tools["search_local_sources"]["parameters"]["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"]) == (1, 10)
    assert tools["save_brief"]["parameters"]["required"] == ["path", "content"]
    hints = {t["name"]: t["annotations"] for t in registry.describe("mcp")}
    assert hints["send_message"]["destructiveHint"] is True
    assert hints["search_local_sources"]["readOnlyHint"] is True


def test_search_through_the_runner(runner, calls):
    result = runner.call("search_local_sources", {"query": "idempotency key retry"})
    assert result["ok"] and result["attempts"] == 1
    hits = json.loads(result["data"])
    assert hits[0]["id"] == "idempotency-keys" and len(hits) == 3
    assert calls.count["search_local_sources"] == 1


@pytest.mark.parametrize("limit", [0, 11, -1, "3", 2.5, True])
def test_bad_limit_is_invalid_arguments_and_runs_nothing(runner, calls, limit):
    result = runner.call("search_local_sources", {"query": "x", "limit": limit})
    assert result["error"] == "invalid_arguments" and result["retryable"] is False
    assert "limit" in result["detail"]
    assert calls.count["search_local_sources"] == 0
    assert runner.budget.used == 0


def test_unknown_document_is_invalid_arguments_with_advice(runner, calls, workspace, corpus):
    result = runner.call("get_document", {"doc_id": "no-such-doc"})
    assert result == {"ok": False, "error": "invalid_arguments", "retryable": False,
                      "detail": UNKNOWN_DOCUMENT, "attempts": 1, "replayed": False}
    assert "no-such-doc" not in result["detail"]  # the model's own value is not echoed
    assert calls.count["get_document"] == 1  # not retried: asking again cannot help
    with pytest.raises(UnknownDocument) as raised:
        DemoTools(workspace, corpus).get_document("nope")
    assert isinstance(raised.value, InvalidInput) and raised.value.doc_id == "nope"


def test_get_document_returns_the_note(runner):
    result = runner.call("get_document", {"doc_id": "status-lookup"})
    assert result["ok"] and "truncated" not in result
    assert json.loads(result["data"])["title"] == "Status lookup before repeating a write"


# --------------------------------------------------------------------------- save_brief


def _brief(content: str = "# Brief\n\nOne line.\n", path: str = "briefs/a.md") -> dict:
    return {"path": path, "content": content}


def test_save_brief_writes_and_returns_a_receipt(runner, calls, workspace):
    arguments = _brief()
    result = runner.call("save_brief", arguments)
    assert result["ok"] and result["attempts"] == 1 and result["replayed"] is False
    digest = hashlib.sha256(arguments["content"].encode()).hexdigest()
    assert json.loads(result["data"]) == {"path": "briefs/a.md", "sha256": digest, "chars": len(arguments["content"])}
    assert (workspace / "briefs" / "a.md").read_text() == arguments["content"]
    assert [p.name for p in (workspace / "briefs").iterdir()] == ["a.md"]  # no temp file left


def test_same_brief_twice_runs_once_and_replays(runner, calls, workspace):
    first = runner.call("save_brief", _brief())
    second = runner.call("save_brief", _brief())
    assert calls.count["save_brief"] == 1
    assert second["replayed"] is True and second["attempts"] == 0
    assert second["data"] == first["data"]
    changed = runner.call("save_brief", _brief("# Brief\n\nTwo lines.\n"))  # another intent
    assert changed["ok"] and calls.count["save_brief"] == 2


def test_idempotency_key_is_task_path_and_content_hash():
    arguments = _brief("hello")
    digest = hashlib.sha256(b"hello").hexdigest()
    assert brief_key(CallContext(task_id="t1"), arguments) == f"t1:briefs/a.md:{digest}"
    # the task comes from the runner's context, never from the arguments
    assert brief_key(CallContext(task_id="t2"), {**arguments, "task_id": "t1"}).startswith("t2:")


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "a/../b.md", "..", "", ".", "dir/",
                                  "C:/x", "a\\..\\x"])
def test_paths_leaving_the_workspace_are_forbidden_before_the_handler(runner, calls, workspace, path):
    result = runner.call("save_brief", _brief(path=path))
    assert result["error"] == "forbidden" and result["retryable"] is False
    assert calls.count["save_brief"] == 0
    assert runner.budget.used == 0
    assert not (workspace.parent / "x").exists()


def test_symlink_out_of_the_workspace_is_forbidden(runner, calls, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "link").symlink_to(outside, target_is_directory=True)
    (workspace / "file-link.md").symlink_to(outside / "f.md")
    for path in ("link/x.md", "file-link.md"):
        result = runner.call("save_brief", _brief(path=path))
        assert result["error"] == "forbidden"
    assert calls.count["save_brief"] == 0
    assert list(outside.iterdir()) == []


def test_symlink_inside_the_workspace_is_allowed(runner, workspace):
    (workspace / "real").mkdir()
    (workspace / "alias").symlink_to(workspace / "real", target_is_directory=True)
    assert runner.call("save_brief", _brief(path="alias/b.md"))["ok"]
    assert (workspace / "real" / "b.md").exists()


def test_the_handler_refuses_bad_paths_even_without_the_policy(workspace, corpus):
    tools = DemoTools(workspace, corpus)
    for path in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(PermissionError):
            tools.save_brief(path, "x")
    with pytest.raises(PermissionError):
        workspace_path(workspace, 42)


def test_status_lookup_returns_the_receipt_only_for_the_same_content(workspace, corpus):
    tools = DemoTools(workspace, corpus)
    assert tools.brief_status(**_brief()) is None  # no file yet
    receipt = tools.save_brief(**_brief())
    assert tools.brief_status(**_brief()) == receipt
    assert tools.brief_status(**_brief("other content")) is None


def test_write_is_atomic_when_the_rename_fails(runner, calls, workspace, monkeypatch):
    assert runner.call("save_brief", _brief("old"))["ok"]
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    result = runner.call("save_brief", _brief("new"))
    assert result["error"] == "tool_failure"
    assert (workspace / "briefs" / "a.md").read_text() == "old"
    assert [p.name for p in (workspace / "briefs").iterdir()] == ["a.md"]
    assert synced  # the temp file was fsynced before the rename was tried
    monkeypatch.undo()
    assert runner.call("save_brief", _brief("new"))["ok"]  # a failure left the key free


def test_disconnect_after_the_write_is_settled_by_the_status_lookup(workspace, corpus, calls):
    def write_then_drop(handler, **kwargs):
        handler(**kwargs)
        raise ConnectionError("reset after the write landed")

    calls.faults["save_brief"] = write_then_drop
    runner = ToolRunner(make_demo_registry(workspace, corpus, wrap=calls), sleep=lambda s: None)
    result = runner.call("save_brief", _brief())
    assert result["ok"] and json.loads(result["data"])["path"] == "briefs/a.md"
    assert calls.count["save_brief"] == 1  # the lookup said "done": no second write
    steps = [(r.step, r.outcome) for r in runner.trace]
    assert steps == [("attempt", "transient_failure"), ("status_lookup", "done")]


# --------------------------------------------------------------------------- send_message


def test_send_message_waits_for_approval_and_sends_once(runner, calls, workspace):
    message = {"to": "ops@example.com", "body": "Deploy finished."}
    asked = runner.call("send_message", message)
    assert asked["error"] == "approval_required" and asked["attempts"] == 0
    assert calls.count["send_message"] == 0 and outbox_lines(workspace) == 0
    assert [p["approval_id"] for p in runner.pending_approvals()] == [asked["approval_id"]]

    sent = runner.approve(asked["approval_id"])
    assert sent["ok"] and sent["attempts"] == 1
    assert json.loads(sent["data"]) == {"sent": True, "to": "ops@example.com", "line": 1}
    assert calls.count["send_message"] == 1 and outbox_lines(workspace) == 1
    assert json.loads((workspace / OUTBOX).read_text()) == message

    again = runner.approve(asked["approval_id"])
    assert again["ok"] and again["replayed"] is True and again["data"] == sent["data"]
    assert calls.count["send_message"] == 1 and outbox_lines(workspace) == 1
    assert runner.pending_approvals() == []


def test_denied_message_is_never_sent(runner, calls, workspace):
    asked = runner.call("send_message", {"to": "ceo@example.com", "body": "Wire 1M EUR."})
    denied = runner.deny(asked["approval_id"])
    assert denied["error"] == "forbidden"
    assert runner.approve(asked["approval_id"])["error"] == "forbidden"
    assert calls.count["send_message"] == 0 and outbox_lines(workspace) == 0


def test_messages_number_their_lines(workspace, corpus):
    tools = DemoTools(workspace, corpus)
    assert outbox_lines(workspace) == 0
    assert [tools.send_message(to="a", body=f"m{i}")["line"] for i in range(3)] == [1, 2, 3]
    assert outbox_lines(workspace) == 3


def test_budget_counts_demo_attempts(workspace, corpus, calls):
    runner = ToolRunner(make_demo_registry(workspace, corpus, wrap=calls), budget=Budget(max_attempts=1))
    assert runner.call("search_local_sources", {"query": "budget"})["ok"]
    assert runner.call("get_document", {"doc_id": "task-budgets"})["error"] == "budget_exhausted"
    assert calls.count == Counter({"search_local_sources": 1})
