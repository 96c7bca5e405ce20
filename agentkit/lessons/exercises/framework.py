"""The checker framework every exercise shares, in the style of Kaggle's learntools.

An :class:`Exercise` has ``check(answer)``, ``hint()`` and ``solution()``. ``check`` never
raises for a learner's answer: a placeholder (``None``, or a function that still raises
``NotImplementedError``) prints "Not attempted yet", anything else that goes wrong is an
"Incorrect" with the reason. It returns True or False, so tests can use it. Every printed line
is deterministic: no times, no addresses, no randomness. In a notebook a verdict is displayed
(:func:`~agentkit.lessons.notebook.say`): wrapped between words, Correct in green and
Incorrect in red; its ``text/plain`` is the printed line.

A subclass gives the texts and ``_problem(answer)``: None (or :class:`Right` with a message)
when the answer is right, the reason when it is not, :class:`NotAttempted` for a placeholder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkit.boundary.spec import Effect
from agentkit.lessons.notebook import say

__all__ = ["EFFECT_CHOICES", "Exercise", "NotAttempted", "Right", "call_answer", "describe_exception"]

#: The three side-effect levels, as the strings a learner writes.
EFFECT_CHOICES = tuple(e.value for e in Effect)


class NotAttempted(Exception):
    """Raised inside a check when the answer is still the placeholder."""


class Right(str):
    """Returned by ``_problem`` for a right answer whose message depends on the answer."""


class Exercise:
    """One exercise: ``check(answer)``, ``hint()`` and ``solution()``.

    Subclasses give ``title``, ``hint_text``, ``solution_code``, ``placeholder_text``,
    ``correct_text`` and ``_problem(answer)``, which returns None when the answer is right
    (or ``Right(message)`` to say more than ``correct_text``), else the reason it is not (a
    str, possibly several lines), and raises ``NotAttempted`` for a placeholder.
    """

    number = 0
    title = ""
    hint_text = ""
    solution_code = ""
    placeholder_text = "replace the placeholder with your answer, then run this cell again."
    correct_text = ""

    def check(self, answer: Any = None) -> bool:
        """Print ``Correct: …``, ``Incorrect: …`` or ``Not attempted yet: …``; return True only
        when the answer is right."""
        try:
            if answer is None:
                raise NotAttempted
            problem = self._problem(answer)
        except NotAttempted:
            say(f"Not attempted yet: {self.placeholder_text}")
            return False
        except Exception as exc:
            problem = f"checking your answer raised {describe_exception(exc)}"
        if problem is None or isinstance(problem, Right):
            say(f"Correct: {problem or self.correct_text}")
            return True
        say(f"Incorrect: {problem}")
        return False

    def hint(self) -> None:
        """Print a nudge towards the answer."""
        say(f"Hint: {self.hint_text}")

    def solution(self) -> None:
        """Print one answer that passes ``check``, as code you could paste."""
        print("Solution:")
        print(self.solution_code.rstrip("\n"))

    def _problem(self, answer: Any) -> str | None:  # pragma: no cover - every exercise overrides
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<exercise q{self.number}: {self.title}>"


def describe_exception(exc: BaseException) -> str:
    """``TypeName: message`` (or just the type name): how a check reports an exception."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__



def call_answer(function: Callable[..., Any], *args: Any) -> Any:
    """Call the learner's function directly once: a stub that still raises
    ``NotImplementedError`` is a placeholder, not a wrong answer."""
    try:
        return function(*args)
    except NotImplementedError:
        raise NotAttempted from None
