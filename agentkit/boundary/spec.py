"""One tool, one entry: what the model is told, what policy applies, and what runs.

Keeping the description, the limits and the handler in one frozen value means the list the
model sees and the code that runs can never drift apart, and no call can loosen a limit.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentkit.boundary.context import as_scopes

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


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
    matter to writes only (see :mod:`agentkit.policy.runner`).
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
        object.__setattr__(self, "required_scopes", as_scopes(self.required_scopes))
        object.__setattr__(self, "redact", bool(self.redact))


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

