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
from collections.abc import Iterator
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
                  'word-break: normal; overflow-wrap: anywhere">{}</pre>')


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
    from IPython.display import display

    page = _WRAPPING_LINE.format(html.escape(line))
    display({"text/plain": line, "text/html": page}, raw=True)  # type: ignore[no-untyped-call]


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
