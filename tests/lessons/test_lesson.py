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


def _in_a_fake_kernel(monkeypatch):
    """``IPython.get_ipython()`` answers a shell with a kernel; ``display`` is recorded."""
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    monkeypatch.setattr(IPython.display, "display",
                        lambda data, raw=False: shown.append((data, raw)))
    return shown


def test_a_checkers_verdict_is_printed_outside_a_notebook(capsys):
    from agentkit.lessons.notebook import say

    say("Incorrect: the lookup said done")
    assert capsys.readouterr().out == "Incorrect: the lookup said done\n"


def test_a_checkers_verdict_in_a_kernel_wraps_between_words_correct_and_incorrect_in_colours(monkeypatch, capsys):
    """Checker feedback broke mid-word ("outc|ome_unknown") and Correct looked like Incorrect."""
    from agentkit.lessons.exercises import q1
    from agentkit.lessons.notebook import VERDICT_COLOURS

    shown = _in_a_fake_kernel(monkeypatch)
    assert q1.check(lambda drafts, draft_id, text: None) is False  # never done: it writes twice
    assert capsys.readouterr().out == ""  # displayed, not printed
    pages = {data["text/plain"].split(":", 1)[0]: data for data, raw in shown if raw}
    incorrect = pages["Incorrect"]
    assert "word-break: normal; overflow-wrap: anywhere" in incorrect["text/html"]
    assert f"color: {VERDICT_COLOURS['Incorrect']}" in incorrect["text/html"]
    assert html.escape(incorrect["text/plain"]) in incorrect["text/html"]
    assert VERDICT_COLOURS["Correct"] != VERDICT_COLOURS["Incorrect"]


def test_correct_is_green_and_not_attempted_keeps_the_text_colour(monkeypatch):
    from agentkit.lessons.notebook import VERDICT_COLOURS, say

    shown = _in_a_fake_kernel(monkeypatch)
    say("Correct: every row of the audit passes")
    say("Not attempted yet: replace the placeholder")
    (correct, _), (pending, _) = shown
    assert f"color: {VERDICT_COLOURS['Correct']}" in correct["text/html"]
    assert "agentkit-verdict-correct" in correct["text/html"]
    assert "color:" not in pending["text/html"]
    assert pending["text/plain"] == "Not attempted yet: replace the placeholder"


def test_readable_table_styles_every_cell_inline_and_cuts_nothing():
    """A Styler's ``<style>`` is dropped from an untrusted notebook's stored output, and two
    Stylers with one uuid shared their colours (07 showed passing rows in red)."""
    import pandas as pd

    from agentkit.lessons.notebook import readable_table

    frame = pd.DataFrame([
        {"failure": "killed after payment key not forwarded", "observed": "outcome_unknown+retryable",
         "why": "x" * 120, "pass": False},
        {"failure": "budget spent", "observed": "budget_exhausted", "why": "ok", "pass": True},
    ])
    table = readable_table(frame, wraps=("failure",), breaks=("observed",), shade=lambda row: not row["pass"])
    page = table._repr_html_()
    assert "<style" not in page and "id=" not in page  # nothing a sanitizer drops, nothing shared
    assert "x" * 120 in page and "..." not in page  # never cut
    assert "outcome_<wbr>unknown+<wbr>retryable" in page
    first, second = page.split("<tr>")[2:]
    assert first.count("background-color: #fde8e8") == 4 and "#fde8e8" not in second
    assert "overflow-wrap: break-word" in first.split("</td>")[0]  # a label wraps between words only
    assert "white-space: nowrap" in first.split("</td>")[3]  # pass stays on one line
    assert repr(table) == frame.to_string(index=False)  # what nbval and a terminal read
