"""One tool, one entry: what the model is told, what policy applies, and what runs.

Keeping the description, the limits and the handler in one frozen value means the list the
model sees and the code that runs can never drift apart, and no call can loosen a limit.
"""

from __future__ import annotations

import enum
import functools
import inspect
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentkit.boundary.context import as_scopes

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

#: The effect names a :class:`ToolSpec` accepts as plain strings (``"read"``), for type checkers.
EffectName = Literal["read", "reversible_write", "irreversible_write"]


class Effect(str, enum.Enum):
    """How much harm a repeated call can do; it decides the runner's retry policy."""

    READ = "read"
    REVERSIBLE_WRITE = "reversible_write"
    IRREVERSIBLE_WRITE = "irreversible_write"

    def __str__(self) -> str:
        return self.value

    @property
    def is_write(self) -> bool:
        return self is not Effect.READ


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call, with the policy the boundary enforces for it.

    The first seven fields are the chapter's. ``parameters`` left as None is derived from the
    handler's signature when the spec is registered; ``status_lookup`` and ``idempotency_key``
    matter to writes only (see :mod:`agentkit.policy.runner`). ``transactional=True`` (a
    write whose effect lives in the store's own database) runs the handler inside the store's
    transaction, so that its effect and the key's result commit as one
    (docs/design.md#transactional-writes).

    The spec is made from what a person writes and holds what the boundary reads: ``effect``
    may be given as its plain name (``"read"``) and ``required_scopes`` as any set (or other
    iterable) of names; once made, ``effect`` is an :class:`Effect` and ``required_scopes`` a
    ``frozenset``. The ``__init__`` type checkers see says so (below); at run time the
    dataclass's own ``__init__`` runs and ``__post_init__`` converts.
    """

    name: str
    description: str
    effect: Effect
    timeout_seconds: float
    max_attempts: int
    max_output_chars: int
    handler: Callable[..., Any] = field(repr=False)
    parameters: dict[str, Any] | None = None
    max_argument_chars: int = 65_536
    required_scopes: frozenset[str] = field(default_factory=frozenset)
    max_concurrency: int | None = None
    status_lookup: Callable[..., Any] | None = field(default=None, repr=False)
    idempotency_key: Callable[..., str] | None = field(default=None, repr=False)
    redact: bool = True
    transactional: bool = False

    if TYPE_CHECKING:
        # What the dataclass's generated __init__ accepts, for type checkers only: the fields'
        # own types are what a made spec holds. Same names, order and defaults as the fields
        # (tests/boundary/test_registry.py compares them).
        def __init__(
            self,
            name: str,
            description: str,
            effect: Effect | EffectName,
            timeout_seconds: float,
            max_attempts: int,
            max_output_chars: int,
            handler: Callable[..., Any],
            parameters: dict[str, Any] | None = None,
            max_argument_chars: int = 65_536,
            required_scopes: Iterable[str] = frozenset(),
            max_concurrency: int | None = None,
            status_lookup: Callable[..., Any] | None = None,
            idempotency_key: Callable[..., str] | None = None,
            redact: bool = True,
            transactional: bool = False,
        ) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError("name must be 1-64 characters of letters, digits, '_' or '-'")
        if not isinstance(self.description, str) or not self.description.strip():
            raise ValueError("description must be a non-empty string: it is what the model reads")
        try:
            object.__setattr__(self, "effect", Effect(self.effect))
        except ValueError:
            allowed = ", ".join(e.value for e in Effect)
            raise ValueError(f"effect must be one of: {allowed}") from None
        if not _positive_number(self.timeout_seconds):
            raise ValueError("timeout_seconds must be a positive, finite number")
        _require_positive_int("max_attempts", self.max_attempts)
        if self.effect is Effect.IRREVERSIBLE_WRITE and self.max_attempts != 1:
            raise ValueError(
                "an irreversible_write is never retried: max_attempts must be 1 "
                f"(got {self.max_attempts})"
            )
        _require_positive_int("max_output_chars", self.max_output_chars)
        _require_positive_int("max_argument_chars", self.max_argument_chars)
        if self.max_concurrency is not None:
            _require_positive_int("max_concurrency", self.max_concurrency)
        if not callable(self.handler):
            raise ValueError("handler must be callable")
        for name in ("status_lookup", "idempotency_key"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"{name} must be callable or None")
        if self.parameters is not None and not isinstance(self.parameters, dict):
            raise ValueError("parameters must be a JSON Schema dict or None")
        if self.status_lookup is not None:
            problem = lookup_mismatch(self.handler, self.parameters, self.status_lookup)
            if problem:
                raise ValueError(
                    f"status_lookup {_callable_name(self.status_lookup)} cannot be called with "
                    f"the arguments of {self.name}: {problem} (the runner calls it with the "
                    "tool's own keyword arguments; take them all, or the ones you need and **_)"
                )
        object.__setattr__(self, "required_scopes", as_scopes(self.required_scopes))
        object.__setattr__(self, "redact", bool(self.redact))
        if self.transactional is not False:
            if self.transactional is not True:
                raise ValueError("transactional must be True or False")
            if self.effect is Effect.READ:
                raise ValueError("a read cannot be transactional: only a write's effect commits"
                                 " with its result")
            if _is_coroutine_function(self.handler):
                raise ValueError(
                    "a transactional tool's handler must be a plain function: it runs on a"
                    " worker thread inside the store's own transaction"
                    " (current_call().connection)")


def with_handler(spec: ToolSpec, handler: Callable[..., Any]) -> ToolSpec:
    """A copy of a made ``spec`` with another ``handler``, without checking it again (the
    policy's wrapper of a transactional tool's handler, per call)."""
    copy = object.__new__(ToolSpec)
    copy.__dict__.update(spec.__dict__)
    object.__setattr__(copy, "handler", handler)
    return copy


def _is_coroutine_function(fn: Any) -> bool:
    """An ``async def`` (or a partial of one); a sync wrapper of one counts as sync."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn)


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _require_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1")


def lookup_mismatch(
    handler: Callable[..., Any], parameters: dict[str, Any] | None, lookup: Callable[..., Any]
) -> str:
    """Why ``lookup`` cannot be called with every set of keyword arguments that reaches the
    tool's handler, or "" when it can (or when a signature cannot be read: a builtin, say).

    A call carries the handler's keyword parameters, and the schema's properties when the spec
    gives ``parameters``. The lookup must take each by name or through ``**kwargs``, may
    require only what every call carries (what the schema or the handler requires), and must
    take ``**kwargs`` when the handler does (unless the schema closes the arguments with
    ``additionalProperties: false``).
    """
    try:
        tool = inspect.signature(handler)
        asked = inspect.signature(lookup)
    except (TypeError, ValueError):
        return ""
    named = {p.name: p for p in tool.parameters.values() if p.kind in _BY_KEYWORD}
    carried = set(named)
    required = {name for name, p in named.items() if p.default is p.empty}
    open_ended = any(p.kind is p.VAR_KEYWORD for p in tool.parameters.values())
    if parameters is not None:
        properties = parameters.get("properties")
        listed = parameters.get("required")
        closed = parameters.get("additionalProperties", True) is False
        if closed:
            carried = set()
            open_ended = False
        carried |= set(properties) if isinstance(properties, dict) else set()
        required |= {str(name) for name in listed} if isinstance(listed, list) else set()
    takes = {p.name: p for p in asked.parameters.values() if p.kind in _BY_KEYWORD}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in asked.parameters.values())
    for p in asked.parameters.values():
        if p.kind is p.POSITIONAL_ONLY and p.default is p.empty:
            return f"its parameter {p.name!r} cannot be passed by keyword"
    missing = sorted(name for name in carried if name not in takes)
    if missing and not takes_any:
        return f"it takes no parameter {missing[0]!r}"
    for name, p in takes.items():
        if p.default is p.empty and name not in required:
            return (f"it requires {name!r}, which a call may leave out" if name in carried
                    else f"it requires {name!r}, which no call carries")
    if open_ended and not takes_any:
        return "the handler takes **kwargs and the lookup does not"
    return ""


_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def _callable_name(fn: Callable[..., Any]) -> str:
    """``name(a, b, **rest)``: a callable as a person wrote it, without annotations."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return str(name)
    shown = [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "")
             + p.name for p in parameters]
    return f"{name}({', '.join(shown)})"
