"""Exercise 7 (notebook 07): read a tool, predict which rows of its audit fail.

``flawed_reminder_tool`` is ``set_reminder`` as a hurried colleague wrote it: its key carries a
call counter ("to make every key unique"), and its status lookup only checks that the reminder
id exists. You predict the rows that fail; ``check`` runs the real audit and compares, row by
row, and says what each row you got wrong really did.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo.harness import audit_records
from agentkit.lessons.exercises.framework import Exercise, Right
from agentkit.lessons.exercises.own_tool import REMINDER, REMINDER_CHANGED, reminder_tool

__all__ = ["FLAWED_SOURCE", "AuditReadingExercise", "flawed_reminder_tool", "q7"]

#: The two flawed parts, as the notebook prints them.
FLAWED_SOURCE = '''\
calls = itertools.count(1)

def hurried_key(context, arguments):
    """Every key unique, 'to be safe'."""
    return f"{context.task_id}:{arguments['reminder_id']}:{next(calls)}"

def hurried_status(reminders, reminder_id, when, text):
    """Set already? Then here is the receipt."""
    if reminder_id in reminders:
        return {"reminder_id": reminder_id, "when": when, "set": True}
    return None
'''


def flawed_reminder_tool(reminders: dict[str, dict[str, str]]) -> ToolSpec:
    """``set_reminder`` on ``reminders`` with the key and the lookup of :data:`FLAWED_SOURCE`."""
    calls = itertools.count(1)

    def hurried_key(context: CallContext, arguments: dict[str, Any]) -> str:
        return f"{context.task_id}:{arguments['reminder_id']}:{next(calls)}"

    def hurried_status(reminders: dict[str, dict[str, str]], reminder_id: str, when: str,
                       text: str) -> dict[str, Any] | None:
        if reminder_id in reminders:
            return {"reminder_id": reminder_id, "when": when, "set": True}
        return None

    return reminder_tool(reminders, Effect.REVERSIBLE_WRITE, hurried_key, hurried_status)


def flawed_audit() -> list[dict[str, Any]]:
    """The real audit of the flawed tool: what ``check`` compares a prediction with."""
    reminders: dict[str, dict[str, str]] = {}
    return audit_records(flawed_reminder_tool(reminders), REMINDER, REMINDER_CHANGED,
                         reset=reminders.clear)


class AuditReadingExercise(Exercise):
    """Predict the failing rows of the flawed tool's audit."""

    number = 7
    title = "predict which audit rows a flawed tool fails"
    hint_text = (
        "Take each flaw on its own. A key that changes on every call: which rows send the same "
        "intent twice and expect the runner to recognise it (a repeat, a changed payload, a "
        "restart that must find the dead process's claim)? A lookup that only checks the id: "
        "which row has an older reminder under the same id when the request is lost?"
    )
    solution_code = '''\
predicted_failures = {
    "same_write_repeated",        # the second call gets a new key: it runs again
    "same_key_other_payload",     # a new key: the changed text runs as a new intent
    "process_killed_mid_write",   # the restarted runner's key differs from the dead claim's
    "disconnect_before_write",    # an older reminder under the id: the lookup says done
}
'''
    placeholder_text = (
        "set `predicted_failures` to the set of row names you expect to fail, then run this "
        "cell again."
    )

    def _problem(self, answer: Any) -> str | None:
        if isinstance(answer, (str, bytes)) or not isinstance(answer, Iterable):
            return f"predicted_failures must be a set of row names, not {type(answer).__name__}."
        predicted = set(answer)
        rows = {row["failure"]: row for row in flawed_audit()}
        unknown = sorted(str(name) for name in predicted if name not in rows)
        if unknown:
            return f"no such row: {', '.join(unknown)}; the rows are {', '.join(rows)}."
        failing = {name for name, row in rows.items() if not row["pass"]}
        lines = []
        for name, row in rows.items():
            if name in failing and name not in predicted:
                lines.append(f"  - {name} fails too: the model saw {row['observed']} after "
                             f"{row['handler_calls']} handler call(s); {row['why']}.")
            elif name in predicted and name not in failing:
                lines.append(f"  - {name} passes: {row['observed']} after "
                             f"{row['handler_calls']} handler call(s), as the matrix expects.")
        if lines:
            right = len(rows) - len(lines)
            return "\n".join([f"{right} of {len(rows)} rows predicted right:", *lines])
        return Right(
            f"the audit fails exactly these {len(failing)} rows; the other "
            f"{len(rows) - len(failing)} pass. One flaw, a key that is not the intent, broke "
            "three rows; the other, a lookup that trusts an id, broke one."
        )


q7 = AuditReadingExercise()
