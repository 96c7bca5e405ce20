"""Small helpers that keep notebook cells short and their outputs deterministic.

A lesson must print the same thing on every run, on every machine: so workspaces are given by
a path relative to the notebook and emptied first, logs are captured as plain lines without
times or paths, and results print as sorted JSON.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def fresh_workspace(path: str | Path = "workspace") -> Path:
    """An empty folder at ``path`` (relative to the notebook), emptied if it existed.

    Notebooks re-run top to bottom: a leftover outbox line or brief from the last run would
    change what the next run shows.
    """
    folder = Path(path)
    if folder.is_symlink() or folder.is_file():
        raise ValueError(f"{path} is not a folder")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


#: How :func:`show` draws its line in a notebook. JupyterLab breaks a long output line at any
#: character ("replaye" / "d"); this lets it wrap only between words (a token longer than the
#: line, a hash, may still break), in the size and margins of a printed line.
_WRAPPING_LINE = ('<pre style="margin: 0; padding-left: 1ch; font-size: var(--jp-code-font-size); '
                  'line-height: var(--jp-code-line-height); white-space: pre-wrap; '
                  'word-break: normal; overflow-wrap: anywhere{}">{}</pre>')

#: The CSS that keeps a wrapped line's words whole (JupyterLab's own output style breaks
#: ``outcome_unknown`` anywhere); :mod:`agentkit.lessons.widgets` uses it too.
WORD_WRAP = "white-space: pre-wrap; word-break: normal; overflow-wrap: anywhere"

#: The colour of a checker's verdict, by its first word: Correct and Incorrect never look alike
#: (the widgets' own green and red); "Not attempted yet" and hints keep the text colour.
VERDICT_COLOURS = {"Correct": "#1a7f37", "Incorrect": "#b42318"}


def show(result: Any) -> None:
    """Show a result as the model sees it: one line of JSON, keys in the result's own order.

    Outside a notebook the line is printed. In a Jupyter kernel it is displayed: the same line
    as ``text/plain`` (what a terminal, nbval or a text export reads) and as HTML that wraps
    between words, so escaped JSON inside ``data`` never breaks in the middle of a word.
    """
    line = json.dumps(result, ensure_ascii=False)
    if not _in_a_kernel():
        print(line)
        return
    _display_line(line)


def say(text: str) -> None:
    """Print a checker's verdict (``Correct: …``, ``Incorrect: …``, ``Not attempted yet: …``).

    Outside a notebook the text is printed. In a Jupyter kernel it is displayed as :func:`show`
    displays its line: the same text as ``text/plain``, and HTML that wraps between words, in
    green for ``Correct``, in red for ``Incorrect`` (:data:`VERDICT_COLOURS`).
    """
    if not _in_a_kernel():
        print(text)
        return
    first = text.split(":", 1)[0]
    colour = VERDICT_COLOURS.get(first)
    _display_line(text, f"; color: {colour}" if colour else "", kind=first.lower().replace(" ", "-"))


def _display_line(text: str, extra_style: str = "", kind: str = "") -> None:
    from IPython.display import display

    page = _WRAPPING_LINE.format(extra_style, html.escape(text))
    if kind:
        page = page.replace("<pre ", f'<pre class="agentkit-verdict agentkit-verdict-{kind}" ', 1)
    display({"text/plain": text, "text/html": page}, raw=True)  # type: ignore[no-untyped-call]


def _in_a_kernel() -> bool:
    """True inside a Jupyter kernel (never imports IPython where nothing has)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


class LogLines(list[str]):
    """Log lines captured by :func:`capture_log`: ``LEVEL message``, plus the exception's
    type and message where the record carries one (as the log keeps it, not the model)."""

    def show(self) -> None:
        for line in self:
            print(line)


class _ListHandler(logging.Handler):
    def __init__(self, lines: LogLines) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        line = f"{record.levelname} {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            line += f"\n    {type(exc).__name__}: {exc}"
        self.lines.append(line)


@contextlib.contextmanager
def capture_log(level: int = logging.INFO) -> Iterator[LogLines]:
    """Collect what the ``agentkit`` logger records inside the block."""
    lines = LogLines()
    handler = _ListHandler(lines)
    logger = logging.getLogger("agentkit")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


#: Every header and cell: read from the left, compact rows.
_CELL = "text-align: left; vertical-align: top; padding: 0.15em 0.4em"
#: Headers wrap between words (a number's column is as wide as its number, not its header)
#: and stay in view while the rows scroll past.
_HEAD = ("text-align: left; vertical-align: bottom; padding: 0.15em 0.4em; white-space: normal; "
         "word-break: normal; overflow-wrap: normal; position: sticky; top: 0; "
         "background-color: var(--jp-layout-color0, white)")
_ONE_LINE = "white-space: nowrap"
#: Between words only: ``overflow-wrap: break-word`` (not ``anywhere``) leaves a column's
#: narrowest width its longest word, so a table never squeezes a column into broken words.
_WRAPS = "white-space: normal; word-break: normal; overflow-wrap: break-word"
#: Only at the ``<wbr>`` after a ``+`` or a ``_``: ``nowrap`` would forbid even those.
_BREAKS = "white-space: normal; word-break: normal; overflow-wrap: normal"
_SHADED = "background-color: #fde8e8"


class Table:
    """A table for people (:func:`readable_table`): HTML whose every style is inline, and the frame's
    plain text for whatever reads ``text/plain`` (a terminal, nbval, a text export)."""

    def __init__(self, html_text: str, plain: str) -> None:
        self.html = html_text
        self.plain = plain

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.plain


def readable_table(
    frame: Any,
    *,
    breaks: tuple[str, ...] = (),
    wraps: tuple[str, ...] = (),
    shade: Callable[[dict[str, Any]], bool] | None = None,
) -> Table:
    """A DataFrame as a table that fits a notebook's page and looks the same whether the
    notebook is trusted or not.

    A Styler's table keeps its styles in a ``<style>`` element, which JupyterLab removes from
    a notebook it does not trust yet (a learner's fresh clone): the stored table then loses
    its layout. Here every style is an attribute of its own cell, which JupyterLab keeps (all
    but the header's ``position: sticky``, which it drops until the notebook is trusted).

    - ``breaks``: columns whose cells break only after a ``+`` or a ``_``
      (``outcome_unknown+retryable``), never inside a word;
    - ``wraps``: columns of labels or prose, wrapped between words only;
    - ``shade``: a function of a row (a dict) that says which rows to shade red.

    Every other cell keeps to one line (numbers, codes); every header wraps between its words,
    so a column of numbers is as narrow as its numbers. Nothing is ever cut with "...".
    """
    heads = "".join(f'<th style="{_HEAD}">{html.escape(str(column))}</th>' for column in frame.columns)
    rows = []
    for record in frame.to_dict("records"):
        shaded = bool(shade(record)) if shade is not None else False
        cells = []
        for column, value in record.items():
            text = html.escape(str(value))
            if column in breaks:
                text = text.replace("+", "+<wbr>").replace("_", "_<wbr>")
            style = _WRAPS if column in wraps else _BREAKS if column in breaks else _ONE_LINE
            if shaded:
                style += f"; {_SHADED}"
            cells.append(f'<td style="{_CELL}; {style}">{text}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    page = (f'<table class="agentkit-table" style="border-collapse: collapse">'
            f"<thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    return Table(page, str(frame.to_string(index=False)))
