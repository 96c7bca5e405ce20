"""Who calls, for which task: the facts authorization and idempotency keys are built from."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING


@dataclass(frozen=True)
class CallContext:
    """The caller of a tool. ``scopes`` are what the principal was granted, not what it asks for:
    given as any set (or other iterable) of names, or one name, held as a ``frozenset``."""

    task_id: str = "default"
    principal: str = "anonymous"
    scopes: frozenset[str] = field(default_factory=frozenset)

    if TYPE_CHECKING:
        # What the generated __init__ accepts, for type checkers only (the field holds the
        # frozenset __post_init__ makes); same names, order and defaults as the fields.
        def __init__(
            self,
            task_id: str = "default",
            principal: str = "anonymous",
            scopes: Iterable[str] = frozenset(),
        ) -> None: ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "scopes", as_scopes(self.scopes))


def as_scopes(scopes: Iterable[str] | str | None) -> frozenset[str]:
    """A frozenset of scope names; a lone string is one scope, not a set of letters."""
    if scopes is None:
        return frozenset()
    if isinstance(scopes, str):
        return frozenset({scopes})
    return frozenset(str(s) for s in scopes)
