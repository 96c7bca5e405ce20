"""The task budget: a hard cap on how much work one task may cause, however the model loops.

Every handler attempt and every status lookup spends one unit; refusals that run nothing
(invalid arguments, forbidden, busy) spend none. Optional caps per effect express rules like
"at most one irreversible write per task". Units are reserved before the work and given back
when it turned out nothing ran, so two threads can never both take the last unit.

A budget with no cap (the default) only counts: it has nothing to check before a unit is
taken, so a unit is taken without a lock, by one step that no other thread can split (a
:class:`~agentkit.policy.tally.Tally`). A capped budget checks and counts under its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import MappingProxyType

from agentkit.boundary.spec import Effect
from agentkit.policy.tally import Tally


class Budget:
    """``Budget(max_attempts=None)`` is unlimited; ``remaining`` is then None.

    ``max_attempts`` may be changed at any time (a notebook that wants to show what an
    exhausted budget does sets it to ``used``); a unit taken by a call already past its check
    when the cap changed still counts. The caps per effect are fixed when the budget is made.
    """

    def __init__(
        self,
        max_attempts: int | None = None,
        *,
        max_per_effect: Mapping[Effect | str, int] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._max_per_effect = MappingProxyType(
            {Effect(k): int(v) for k, v in (max_per_effect or {}).items()})
        self._used = 0  # units taken (and not given back) under the lock
        self._used_by: dict[Effect, int] = {e: 0 for e in Effect}  # the same, per effect
        # the units of an uncapped budget, taken and given back without the lock
        self._taken, self._given_back = Tally(), Tally()
        self._tallied = False  # ever uncapped: only then can the Tallies hold units
        self._max_attempts: int | None = None
        self._capped = False
        self.max_attempts = max_attempts

    @property
    def max_attempts(self) -> int | None:
        """The cap on units in all (None: no cap)."""
        return self._max_attempts

    @max_attempts.setter
    def max_attempts(self, value: int | None) -> None:
        if value is not None and (type(value) is bool or not isinstance(value, int) or value < 0):
            raise ValueError("max_attempts must be an integer >= 0 or None")
        with self._lock:
            self._max_attempts = value
            self._capped = value is not None or bool(self._max_per_effect)
            self._tallied = self._tallied or not self._capped

    @property
    def max_per_effect(self) -> Mapping[Effect, int]:
        """The caps per effect (read-only: fixed when the budget is made)."""
        return self._max_per_effect

    @property
    def used(self) -> int:
        with self._lock:
            return self._used_now()

    @property
    def remaining(self) -> int | None:
        with self._lock:
            if self._max_attempts is None:
                return None
            return max(0, self._max_attempts - self._used_now())

    def spend(self, effect: Effect | str = Effect.READ) -> bool:
        """Take one unit for ``effect``; False (nothing taken) when a cap is reached."""
        if effect.__class__ is not Effect:  # the runner passes the member: no enum lookup
            effect = Effect(effect)
        if not self._capped:  # nothing to check: count, in one step no thread can split
            self._taken.add()
            return True
        with self._lock:
            if not self._room(effect):
                return False
            self._used += 1
            self._used_by[effect] += 1
            return True

    def can_spend(self, effect: Effect | str = Effect.READ) -> bool:
        """Whether a unit for ``effect`` is left now (nothing is taken): the runner asks before
        opening an approval, so that no person is asked for a call that could not run."""
        if effect.__class__ is not Effect:
            effect = Effect(effect)
        with self._lock:
            return self._room(effect)

    def refund(self, effect: Effect | str = Effect.READ) -> None:
        """Give back a unit taken for work that did not run (a ``busy`` attempt)."""
        if effect.__class__ is not Effect:
            effect = Effect(effect)
        if not self._capped:
            self._given_back.add()
            return
        with self._lock:
            self._used -= 1
            self._used_by[effect] -= 1

    def _room(self, effect: Effect) -> bool:
        """Whether a cap leaves a unit for ``effect`` (with the lock held)."""
        if self._max_attempts is not None and self._used_now() >= self._max_attempts:
            return False
        cap = self._max_per_effect.get(effect)
        return cap is None or self._used_by[effect] < cap

    def _used_now(self) -> int:
        """Units in use: those counted under the lock and the uncapped ones (lock held)."""
        if not self._tallied:
            return self._used
        return self._used + self._taken.value - self._given_back.value

    def __repr__(self) -> str:
        return f"Budget(max_attempts={self._max_attempts}, used={self.used})"
