"""Who calls, for which task: the facts authorization and idempotency keys are built from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CallContext:
    """The caller of a tool. ``scopes`` are what the principal was granted, not what it asks for."""

    task_id: str = "default"
    principal: str = "anonymous"
    scopes: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", as_scopes(self.scopes))


def as_scopes(scopes: Iterable[str] | str | None) -> frozenset[str]:
    """A frozenset of scope names; a lone string is one scope, not a set of letters."""
    if scopes is None:
        return frozenset()
    if isinstance(scopes, str):
        return frozenset({scopes})
    return frozenset(str(s) for s in scopes)
