"""Exercises for ``06_exercises`` and ``07_your_own_tool``, in the style of Kaggle's learntools.

    >>> from agentkit.lessons.exercises import q1, q2, q3, q4, q5      # notebook 06
    >>> from agentkit.lessons.exercises import q6, q7                  # notebook 07
    >>> q1.check(draft_status)      # prints "Correct: …", "Incorrect: …" or "Not attempted yet: …"
    >>> q1.hint()                   # a nudge
    >>> q1.solution()               # one answer that passes, as code

Every ``check`` tests what an answer **does**, never how its code is spelled: a status lookup
is put behind a real :class:`~agentkit.ToolRunner` and the handler's real calls are counted,
an idempotency key is used by a runner for real saves, a redaction pattern is installed in a
real registry and the tool's output is read back through :func:`~agentkit.invoke_tool`. Two
answers that behave the same pass or fail together, however differently they are written,
and the message says what happened ("the runner saved it a second time: 2 handler calls"),
because that is what the lesson is about.

The checker framework is :mod:`~agentkit.lessons.exercises.framework`; each exercise lives in
its own module beside it (:mod:`~agentkit.lessons.exercises.status_lookup`,
:mod:`~agentkit.lessons.exercises.effect_levels`, :mod:`~agentkit.lessons.exercises.idempotency_key`,
:mod:`~agentkit.lessons.exercises.redaction`, :mod:`~agentkit.lessons.exercises.read_limits`, and
for notebook 07 :mod:`~agentkit.lessons.exercises.own_tool` and
:mod:`~agentkit.lessons.exercises.audit_reading`, which judge with :func:`agentkit.demo.audit`).

Runners made here get a ``sleep`` that returns at once, so a check never waits on backoff,
whether or not :func:`agentkit.set_testing` was called.
"""

from __future__ import annotations

from agentkit.lessons.exercises.audit_reading import FLAWED_SOURCE, AuditReadingExercise, q7
from agentkit.lessons.exercises.effect_levels import TOOLS_TO_CLASSIFY, EffectLevelExercise, q2
from agentkit.lessons.exercises.framework import EFFECT_CHOICES, Exercise
from agentkit.lessons.exercises.idempotency_key import IdempotencyKeyExercise, q3
from agentkit.lessons.exercises.own_tool import (
    REMINDER,
    REMINDER_CHANGED,
    OwnToolExercise,
    q6,
    reminder_tool,
    set_reminder,
)
from agentkit.lessons.exercises.read_limits import ReadLimitsExercise, q5
from agentkit.lessons.exercises.redaction import (
    SERVICES,
    RedactionExercise,
    connect_report,
    q4,
    report_registry,
)
from agentkit.lessons.exercises.status_lookup import StatusLookupExercise, q1, save_draft

__all__ = [
    "EFFECT_CHOICES",
    "FLAWED_SOURCE",
    "REMINDER",
    "REMINDER_CHANGED",
    "SERVICES",
    "TOOLS_TO_CLASSIFY",
    "AuditReadingExercise",
    "EffectLevelExercise",
    "Exercise",
    "IdempotencyKeyExercise",
    "OwnToolExercise",
    "ReadLimitsExercise",
    "RedactionExercise",
    "StatusLookupExercise",
    "connect_report",
    "q1",
    "q2",
    "q3",
    "q4",
    "q5",
    "q6",
    "q7",
    "reminder_tool",
    "report_registry",
    "save_draft",
    "set_reminder",
]
