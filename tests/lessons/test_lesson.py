"""The notebook helpers: fresh workspaces, one-line results, captured log lines."""

from __future__ import annotations

import html
import json

import pytest

from agentkit import ToolRegistry, ToolSpec, invoke_tool
from agentkit.lessons.notebook import capture_log, fresh_workspace, show


def test_fresh_workspace_empties_what_a_previous_run_left(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = fresh_workspace("workspace/04")
    (folder / "outbox.jsonl").write_text("old line\n")
    again = fresh_workspace("workspace/04")
    assert again == folder and list(again.iterdir()) == []
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError):
        fresh_workspace("afile")


def test_show_prints_one_json_line(capsys):
    show({"ok": True, "data": "é"})
    assert capsys.readouterr().out == '{"ok": true, "data": "é"}\n'


def test_show_in_a_kernel_displays_the_line_wrapping_between_words(monkeypatch, capsys):
    """JupyterLab breaks a long printed line at any character (`replaye` / `d`); in a kernel
    the line is displayed instead: the same text for text readers, HTML that wraps at spaces."""
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw=False: shown.append((data, raw)))
    result = {"ok": True, "data": '{"entry_id": "inv-1001", "request_id": "req-1"}', "replayed": True}
    show(result)
    assert capsys.readouterr().out == ""
    [(data, raw)] = shown
    assert raw is True
    assert data["text/plain"] == json.dumps(result, ensure_ascii=False)
    page = data["text/html"]
    assert "word-break: normal" in page and "white-space: pre-wrap" in page
    assert page.count("<pre") == 1 and "\n" not in page
    assert html.unescape(page[page.index(">") + 1: page.rindex("</pre>")]) == data["text/plain"]


def test_capture_log_keeps_what_the_model_never_sees(capsys):
    def broken(x: int) -> int:
        raise TypeError("unsupported operand")

    registry = ToolRegistry([ToolSpec("broken", "Broken.", "read", 1.0, 1, 50, broken)])
    with capture_log() as lines:
        result = invoke_tool(registry, "broken", {"x": 1}, call_id="call-demo")
    assert "unsupported operand" not in json.dumps(result)
    assert lines == ["ERROR call-demo broken: handler raised TypeError -> tool_failure\n"
                     "    TypeError: unsupported operand"]
    lines.show()
    assert "TypeError: unsupported operand" in capsys.readouterr().out
