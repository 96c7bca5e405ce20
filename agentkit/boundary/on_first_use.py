"""A module imported when it is first used, not when its importer is: ``import agentkit`` stays light.

A program that only makes sync calls never needs ``asyncio`` (with ssl, about a third of
``import agentkit``). A boundary module that uses it on its async paths binds the name to an
:class:`OnFirstUse` instead of the module; the first attribute read imports the module and
puts it in the importer's namespace in its own place, so every later use reads the module
itself, at no cost beyond the first::

    if TYPE_CHECKING:
        import asyncio
    else:
        asyncio = OnFirstUse("asyncio", globals())
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["OnFirstUse"]


class OnFirstUse:
    """Stands in for the module ``name`` in ``namespace`` (an importer's ``globals()``) until
    an attribute of it is first read, then puts the module itself there."""

    __slots__ = ("name", "namespace")

    def __init__(self, name: str, namespace: dict[str, Any]) -> None:
        self.name = name
        self.namespace = namespace

    def __getattr__(self, attribute: str) -> Any:
        module = importlib.import_module(self.name)
        self.namespace[self.name] = module
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<{self.name}, imported on first use>"
