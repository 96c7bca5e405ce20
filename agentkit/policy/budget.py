"""The task budget: a hard cap on how much work one task may cause, however the model loops.

Every handler attempt and every status lookup spends one unit; refusals that run nothing
(invalid arguments, forbidden, busy) spend none. Optional caps per effect express rules like
"at most one irreversible write per task". Units are reserved before the work and given back
when it turned out nothing ran, so two threads can never both take the last unit.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from agentkit.boundary.spec import Effect


class Budget:
    """``Budget(max_attempts=None)`` is unlimited; ``remaining`` is then None."""

    def __init__(
        self,
        max_attempts: int | None = None,
        *,
        max_per_effect: Mapping[Effect | str, int] | None = None,
    ) -> None:
        if max_attempts is not None and (not isinstance(max_attempts, int) or max_attempts < 0):
            raise ValueError("max_attempts must be an integer >= 0 or None")
        self.max_attempts = max_attempts
        self.max_per_effect = {Effect(k): int(v) for k, v in (max_per_effect or {}).items()}
        self._lock = threading.Lock()
        self._used = 0
        self._used_by: dict[Effect, int] = {e: 0 for e in Effect}

    @property
    def used(self) -> int:
        return self._used

    @property
    def remaining(self) -> int | None:
        if self.max_attempts is None:
            return None
        return max(0, self.max_attempts - self._used)

    def spend(self, effect: Effect | str = Effect.READ) -> bool:
        """Take one unit for ``effect``; False (nothing taken) when a cap is reached."""
        if effect.__class__ is not Effect:  # the runner passes the member: no enum lookup
            effect = Effect(effect)
        lock = self._lock  # (no ``with``: its __enter__/__exit__ calls cost as much again)
        lock.acquire()
        try:
            if self.max_attempts is not None and self._used >= self.max_attempts:
                return False
            cap = self.max_per_effect.get(effect)
            if cap is not None and self._used_by[effect] >= cap:
                return False
            self._used += 1
            self._used_by[effect] += 1
            return True
        finally:
            lock.release()

    def can_spend(self, effect: Effect | str = Effect.READ) -> bool:
        """Whether a unit for ``effect`` is left now (nothing is taken): the runner asks before
        opening an approval, so that no person is asked for a call that could not run."""
        if effect.__class__ is not Effect:
            effect = Effect(effect)
        with self._lock:
            if self.max_attempts is not None and self._used >= self.max_attempts:
                return False
            cap = self.max_per_effect.get(effect)
            return cap is None or self._used_by[effect] < cap

    def refund(self, effect: Effect | str = Effect.READ) -> None:
        """Give back a unit taken for work that did not run (a ``busy`` attempt)."""
        if effect.__class__ is not Effect:
            effect = Effect(effect)
        with self._lock:
            self._used -= 1
            self._used_by[effect] -= 1

    def __repr__(self) -> str:
        return f"Budget(max_attempts={self.max_attempts}, used={self._used})"
