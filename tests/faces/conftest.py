"""Fixtures of the faces' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from _zygote import Zygote

#: What tests/faces/_face_worker.py imports from the frameworks (agentkit itself is imported
#: afresh by every step).
FRAMEWORKS = [
    "langchain_core.messages", "langgraph.graph", "langgraph.types",
    "langgraph.checkpoint.sqlite", "langgraph.checkpoint.sqlite.aio",
    "langgraph.checkpoint.postgres", "langgraph.checkpoint.postgres.aio",
    "agents", "agents.testing",
    "pydantic_ai", "pydantic_ai.messages", "pydantic_ai.models.function",
]


@pytest.fixture(scope="session")
def face_processes() -> Iterator[Zygote]:
    """Fresh processes for the conversations' steps, forked from one that has imported the
    frameworks (tests/faces/_zygote.py): each step is still a process of its own."""
    zygote = Zygote(FRAMEWORKS)
    yield zygote
    zygote.close()
