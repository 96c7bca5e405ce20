"""Fixtures the policy's tests share: every store, the durable ones, and both drivers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_stores import Backend  # tests/ is on sys.path (pytest rootdir-relative import)

from agentkit import ToolRunner

#: ``drive(runner, "call", name, arguments)``, ``drive(runner, "approve", approval_id)``, …
Drive = Callable[..., dict[str, Any]]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Every store, one test each (PostgreSQL: a schema of its own)."""
    made = Backend(request.param, tmp_path)
    yield made
    made.close()


@pytest.fixture(params=["sqlite", "postgres"])
def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The durable stores, which several processes share."""
    made = Backend(request.param, tmp_path)
    yield made
    made.close()


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> Drive:
    """A runner's operation by either driver: the sync method, or its async twin
    (``acall``, ``aapprove``, ``adeny``, ``arecheck``) run to completion on a fresh loop."""

    def drive(runner: ToolRunner, operation: str, *args: Any, **options: Any) -> dict[str, Any]:
        if request.param == "sync":
            return getattr(runner, operation)(*args, **options)  # type: ignore[no-any-return]
        return asyncio.run(  # type: ignore[no-any-return]
            getattr(runner, "a" + operation)(*args, **options))

    return drive
