"""Small helpers that keep notebook cells short and their outputs deterministic.

A lesson must print the same thing on every run, on every machine: so workspaces are given by
a path relative to the notebook and emptied first, logs are captured as plain lines without
times or paths, and results print as sorted JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
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


def show(result: Any) -> None:
    """Print a result as the model sees it: one line of JSON, keys in the result's own order."""
    print(json.dumps(result, ensure_ascii=False))


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
