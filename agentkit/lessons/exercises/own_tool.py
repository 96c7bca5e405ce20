"""Exercise 6 (notebook 07): your own write tool, ``set_reminder``, through the failure matrix.

The handler is given; you choose its side-effect level, write its idempotency key and its
status lookup. ``check`` builds the :class:`~agentkit.ToolSpec` from your three parts and runs
:func:`agentkit.demo.audit` on it: every row of the failure matrix for the level, with the
handler's real calls counted. Correct means every row passes; otherwise the message lists the
rows that failed and why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo.harness import DESIGNS, audit_records, key_design
from agentkit.lessons.exercises.framework import (
    EFFECT_CHOICES,
    Exercise,
    NotAttempted,
    Right,
    describe_exception,
)

__all__ = ["REMINDER", "REMINDER_CHANGED", "OwnToolExercise", "q6", "reminder_tool", "set_reminder"]

#: What the model sends in the audit: one reminder, and the same reminder with another text.
REMINDER = {"reminder_id": "rem-1", "when": "2030-01-07T09:00", "text": "Send the weekly report."}
REMINDER_CHANGED = {**REMINDER, "text": "Cancel the weekly report."}

PARTS = ("effect", "idempotency_key", "status_lookup")


def set_reminder(reminders: dict[str, dict[str, str]], reminder_id: str, when: str,
                 text: str) -> dict[str, Any]:
    """The handler of exercise 6: set (or overwrite) reminder ``reminder_id``, return the
    receipt. ``reminders`` is where the reminders live."""
    reminders[reminder_id] = {"when": when, "text": text}
    return {"reminder_id": reminder_id, "when": when, "set": True}


def reminder_tool(
    reminders: dict[str, dict[str, str]],
    effect: Effect | str,
    idempotency_key: Callable[[CallContext, dict[str, Any]], str] | None,
    status_lookup: Callable[..., Any] | None,
) -> ToolSpec:
    """The ``set_reminder`` tool on ``reminders``, with your three parts. Your status lookup
    is called as ``status_lookup(reminders, reminder_id, when, text)``."""

    def handler(reminder_id: str, when: str, text: str) -> dict[str, Any]:
        """Set a reminder."""
        return set_reminder(reminders, reminder_id, when, text)

    lookup = None
    if status_lookup is not None:
        answer = status_lookup

        def lookup(reminder_id: str, when: str, text: str) -> Any:
            return answer(reminders, reminder_id, when, text)

    return ToolSpec(
        "set_reminder", "Set (or overwrite) a reminder; setting the same one again changes nothing.",
        Effect(effect), 2.0, 3, 300, handler, required_scopes=frozenset({"reminders:write"}),
        idempotency_key=idempotency_key, status_lookup=lookup,
    )


class OwnToolExercise(Exercise):
    """Choose the level, the key and the status lookup of ``set_reminder``; the audit judges."""

    number = 6
    title = "your own write tool through the failure matrix"
    hint_text = (
        "A reminder can be overwritten or set back: reversible_write. A reminder is a record "
        "edited under a stable id, so the id-addressed key fits: task id + reminder_id, not "
        "the text (a changed text under the same key is then idempotency_conflict, and an edit "
        "would take a new revision key). A content-addressed key (task id + reminder_id + a "
        "hash of `when` and `text`) is also correct: another text is then another intent and "
        "runs. Either way, the lookup returns set_reminder's receipt only when reminders "
        "holds exactly this `when` and `text` under reminder_id, else None."
    )
    solution_code = '''\
def reminder_key(context, arguments):
    """Id-addressed: this task sets this reminder; the id names the intent, the text does
    not (another text under the same id is idempotency_conflict). A content-addressed key,
    f"...:{arguments['reminder_id']}:{sha256 of when and text}", passes too."""
    return f"{context.task_id}:set_reminder:{arguments['reminder_id']}"

def reminder_status(reminders, reminder_id, when, text):
    """The receipt if exactly this reminder is set, None if not."""
    if reminders.get(reminder_id) != {"when": when, "text": text}:
        return None
    return {"reminder_id": reminder_id, "when": when, "set": True}

reminder = {
    "effect": "reversible_write",
    "idempotency_key": reminder_key,
    "status_lookup": reminder_status,
}
'''
    placeholder_text = (
        "fill in the three parts of `reminder` (the effect, `reminder_key`, "
        "`reminder_status`), then run this cell again."
    )
    correct_text = (
        "every row of the audit passes: a dropped reply, a hang and a killed process each "
        "found the reminder set (1 handler call), a lost request was sent again (2), the same "
        "call replayed, and a changed text was graded by your key's own design."
    )

    def _problem(self, answer: Any) -> str | None:
        if not isinstance(answer, dict):
            return f"reminder must be a dict with {', '.join(PARTS)}, not {type(answer).__name__}."
        missing = [part for part in PARTS if part not in answer]
        if missing:
            return f"reminder needs {', '.join(missing)}."
        effect, key, lookup = (answer[part] for part in PARTS)
        if (effect is None and _stub(key, CallContext(task_id="audit"), dict(REMINDER))
                and _stub(lookup, {}, *REMINDER.values())):
            raise NotAttempted
        try:
            level = Effect(effect)
        except ValueError:
            return f"{effect!r} is not an effect; use one of {', '.join(EFFECT_CHOICES)}."
        if level is Effect.READ:
            return ("a reminder changes something: as a read it would be retried blindly, "
                    "with no key and no status lookup.")
        if level is Effect.IRREVERSIBLE_WRITE:
            return ("a reminder can be overwritten or set back: as irreversible_write every "
                    "call waits for a person, and a dropped reply is never checked.")
        for part, function in (("idempotency_key", key), ("status_lookup", lookup)):
            if not callable(function):
                return f"{part} must be a function, not {type(function).__name__}."
        try:
            key(CallContext(task_id="audit"), dict(REMINDER))
            lookup({}, *REMINDER.values())
        except NotImplementedError:
            raise NotAttempted from None
        except Exception as exc:
            return f"called once with nothing set, your key or lookup raised {describe_exception(exc)}."
        reminders: dict[str, dict[str, str]] = {}
        spec = reminder_tool(reminders, level, key, lookup)
        rows = audit_records(spec, REMINDER, REMINDER_CHANGED, reset=reminders.clear)
        design = key_design(spec, REMINDER, REMINDER_CHANGED)
        failed = [row for row in rows if not row["pass"]]
        if not failed:
            return Right(f"{self.correct_text} Your key is {DESIGNS[design]}.")
        heading = f"{len(failed)} of {len(rows)} rows of the audit fail (your key is {DESIGNS[design]}):"
        lines = [heading]
        lines += [f"  - {row['failure']}: the model saw {row['observed']} after "
                  f"{row['handler_calls']} handler call(s); {row['why']}." for row in failed]
        return "\n".join(lines)


def _stub(function: Any, *args: Any, **kwargs: Any) -> bool:
    """True for a learner's stub: a function that still raises NotImplementedError."""
    if not callable(function):
        return False
    try:
        function(*args, **kwargs)
    except NotImplementedError:
        return True
    except Exception:
        return False
    return False


q6 = OwnToolExercise()
