"""Shared fixtures: counting handlers and a registry factory, deterministic by construction."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import pytest

import agentkit


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
