"""The registry: every tool the model may call, each described, limited and handled by one entry.

The model-visible tool list (OpenAI, Anthropic or MCP shape) is generated from the same
entries that run, so the description a model reads can never drift from the handler and
policy that answer it. Parameters are derived and validators compiled once, here, at
registration; nothing about a tool is worked out again per call.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agentkit.boundary.authorization import Policy, check_policy
from agentkit.boundary.concurrency import is_coroutine_handler
from agentkit.boundary.pace import Pace
from agentkit.boundary.redaction import Redactor
from agentkit.boundary.schema import Validator, compile_validator, derive_parameters
from agentkit.boundary.slot import Slot
from agentkit.boundary.spec import Effect, ToolSpec

FORMATS = ("anthropic", "mcp", "openai")

log = logging.getLogger("agentkit")

#: The reversible writes already warned about (by identity): one warning per spec, however
#: many registries it joins.
_warned: weakref.WeakValueDictionary[int, ToolSpec] = weakref.WeakValueDictionary()
_warned_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A tool as the registry holds it, what :meth:`ToolRegistry.entry` returns: the spec (its
    parameters filled in), the argument validator compiled from them, the concurrency slot
    (None: no limit), whether its handler is a coroutine function (decided once, here) and
    the registry's redactor when the tool redacts (None: ``redact=False``), which also cleans
    an ``InvalidInput`` message. The boundary and the runner run every call from one of these."""

    spec: ToolSpec
    validator: Validator
    slot: Slot | None
    coroutine: bool = False
    redactor: Redactor | None = None
    #: How quickly its sync handler answers async callers (see :mod:`agentkit.boundary.pace`).
    pace: Pace = field(default_factory=Pace, compare=False, repr=False)


class ToolRegistry:
    """Tools by name. ``redact_patterns`` add to the default secret patterns; ``policies`` are
    checked for every call (see :mod:`agentkit.boundary.authorization`)."""

    def __init__(
        self,
        specs: Iterable[ToolSpec] = (),
        *,
        redact_patterns: Iterable[str | re.Pattern[str]] = (),
        policies: Iterable[Policy] = (),
    ) -> None:
        self._entries: dict[str, RegisteredTool] = {}
        self._lock = threading.Lock()
        self.redactor = Redactor(redact_patterns)
        self.policies: list[Policy] = []
        for policy in policies:
            self.add_policy(policy)
        for spec in specs:
            self.register(spec)

    def register(self, spec: ToolSpec) -> ToolSpec:
        """Add a tool; returns the spec as registered (with its parameters filled in)."""
        if not isinstance(spec, ToolSpec):
            raise TypeError("register() takes a ToolSpec")
        given = spec
        if spec.parameters is None:
            spec = dataclasses.replace(spec, parameters=derive_parameters(spec.handler))
        validator = compile_validator(spec.parameters)  # type: ignore[arg-type]
        slot = Slot(spec.max_concurrency) if spec.max_concurrency else None
        with self._lock:
            if spec.name in self._entries:
                raise ValueError("duplicate_tool")
            self._entries[spec.name] = RegisteredTool(
                spec, validator, slot, is_coroutine_handler(spec.handler),
                self.redactor if spec.redact else None)
        if (spec.effect is Effect.REVERSIBLE_WRITE and spec.status_lookup is None
                and not spec.transactional):  # (the store itself tells whether it committed)
            _warn_no_lookup(given, spec)
        return spec

    def add_policy(self, policy: Policy) -> None:
        """Check every call with ``policy(spec, arguments, context)``; a callable that cannot
        be called that way is refused now (``TypeError``), not at every call."""
        check_policy(policy)
        self.policies.append(policy)

    def get(self, name: str) -> ToolSpec | None:
        entry = self.entry(name)
        return entry.spec if entry else None

    def entry(self, name: Any) -> RegisteredTool | None:
        """The spec with its compiled validator and concurrency slot (for the boundary)."""
        if not isinstance(name, str):
            return None
        # An exact copy: a str subclass's own __hash__/__eq__ (model input) never runs.
        return self._entries.get(str.__str__(name))

    def names(self) -> list[str]:
        return list(self._entries)

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter([e.spec for e in self._entries.values()])

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return self.entry(name) is not None

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()!r})"

    def describe(self, format: str = "openai") -> list[dict[str, Any]]:
        """The tool list a model is shown, in one provider's shape."""
        if format not in FORMATS:
            raise ValueError(f"unknown format {format!r}; choose one of: {', '.join(FORMATS)}")
        return [_DESCRIBE[format](spec) for spec in self]


def _warn_no_lookup(given: ToolSpec, registered: ToolSpec) -> None:
    """Say once, when a reversible write without a status lookup is registered, what a
    timeout will do to it (the spec given and the copy registered count as one)."""
    with _warned_lock:
        if _warned.get(id(given)) is given:
            _warned[id(registered)] = registered
            return
        _warned[id(given)] = given
        _warned[id(registered)] = registered
    log.warning(
        "%s is a reversible_write with no status_lookup: after a timeout, a lost "
        "connection or an exception other than NotApplied nothing can tell whether the "
        "write landed, so that call answers "
        "outcome_unknown and so does every later call with its key until a person releases "
        "it (store.release(key)); a status_lookup would settle it",
        registered.name,
    )


def _openai(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def _anthropic(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def _mcp(spec: ToolSpec) -> dict[str, Any]:
    # Reads are idempotent; reversible writes are made idempotent by the runner's key;
    # an irreversible write is neither idempotent nor harmless.
    return {
        "name": spec.name,
        "description": spec.description,
        "inputSchema": spec.parameters,
        "annotations": {
            "readOnlyHint": spec.effect is Effect.READ,
            "destructiveHint": spec.effect is Effect.IRREVERSIBLE_WRITE,
            "idempotentHint": spec.effect is not Effect.IRREVERSIBLE_WRITE,
        },
    }


_DESCRIBE = {"openai": _openai, "anthropic": _anthropic, "mcp": _mcp}
