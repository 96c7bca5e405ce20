"""Shared fixtures: counting handlers and a registry factory, deterministic by construction."""

from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentkit
from agentkit import CallContext, ToolRunner
from agentkit.demo.corpus import Corpus
from agentkit.demo.tools import make_demo_registry

# tests/ is laid out like the package (boundary/, policy/, faces/, lessons/, demo/, notebooks/;
# browser/ on its own). A few test modules share helpers by module name across folders
# (``from test_stores import PgSchema``), and pytest puts a test file's own folder on sys.path
# only when it collects that file: every folder is put there first, so such an import does not
# depend on the order in which pytest collects the folders. Module basenames stay unique.
_TESTS = Path(__file__).resolve().parent
for _folder in sorted(_TESTS.iterdir(), reverse=True):
    if (_folder.is_dir() and _folder.name not in {"browser", "typing"}
            and not _folder.name.startswith((".", "_")) and str(_folder) not in sys.path):
        sys.path.insert(0, str(_folder))


@pytest.fixture(autouse=True)
def instant_backoff():
    """Retries never wait on the wall clock in tests (stamina-style switch)."""
    agentkit.set_testing(True)
    yield
    agentkit.set_testing(False)


class Counted:
    """Wraps a handler and counts its real calls (thread safe)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls = 0
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    def __call__(self, **kwargs: Any) -> Any:
        with self._lock:
            self.calls += 1
        return self.fn(**kwargs)


@pytest.fixture
def counted() -> Callable[[Callable[..., Any]], Counted]:
    return Counted


# ------------------------------------------------------------------ the demo tools


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.load()


class Calls:
    """Counts real handler calls per tool; ``faults[name](handler, **kwargs)`` replaces a call."""

    def __init__(self, faults: dict | None = None) -> None:
        self.count: Counter[str] = Counter()
        self.faults = faults or {}

    def __call__(self, name, handler):
        @functools.wraps(handler)
        def counted(**kwargs):
            self.count[name] += 1
            if name in self.faults:
                return self.faults[name](handler, **kwargs)
            return handler(**kwargs)

        return counted


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def runner(workspace, corpus, calls) -> ToolRunner:
    registry = make_demo_registry(workspace, corpus, wrap=calls)
    return ToolRunner(registry, context=CallContext(task_id="t1"), sleep=lambda s: None)
