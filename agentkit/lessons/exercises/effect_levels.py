"""Exercise 2 (notebook 06): choose the side-effect level of six tools."""

from __future__ import annotations

from typing import Any

from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo import faults
from agentkit.lessons.exercises.framework import EFFECT_CHOICES, Exercise, NotAttempted
from agentkit.policy.backoff import no_wait
from agentkit.policy.runner import ToolRunner

__all__ = ["TOOLS_TO_CLASSIFY", "EffectLevelExercise", "q2"]


#: Exercise 2's tools: name → what the tool does. The right level is the harm a repeat does.
TOOLS_TO_CLASSIFY = {
    "search_flights": "Find flights between two airports on a date.",
    "get_invoice": "Fetch an invoice by its number.",
    "save_reply_draft": "Save (or overwrite) the draft reply to a customer's e-mail.",
    "move_meeting": "Move a calendar event to a new time; it can be moved back.",
    "send_sms": "Send a text message to a phone number.",
    "refund_payment": "Refund a customer's card payment.",
}

_TRUE_EFFECTS = {
    "search_flights": Effect.READ,
    "get_invoice": Effect.READ,
    "save_reply_draft": Effect.REVERSIBLE_WRITE,
    "move_meeting": Effect.REVERSIBLE_WRITE,
    "send_sms": Effect.IRREVERSIBLE_WRITE,
    "refund_payment": Effect.IRREVERSIBLE_WRITE,
}


class EffectLevelExercise(Exercise):
    """Choose the side-effect level of six tools.

    Checked by behaviour: each tool is registered with the level you chose, its connection
    drops once right after the action took effect, and the runner's policy for that level
    plays out (a person approves when asked). The message reports what that did: how many
    times the action really happened, and whether a person was asked first.
    """

    number = 2
    title = "choose the effect level of six tools"
    hint_text = (
        "Ask what a repeat would do. Nothing changes: read. It changes something that can be "
        "overwritten or moved back: reversible_write. It cannot be taken back (a message "
        "someone reads, money that moves): irreversible_write."
    )
    solution_code = '''\
effects = {
    "search_flights": "read",
    "get_invoice": "read",
    "save_reply_draft": "reversible_write",
    "move_meeting": "reversible_write",
    "send_sms": "irreversible_write",
    "refund_payment": "irreversible_write",
}
'''
    placeholder_text = (
        'give each tool one of "read", "reversible_write" or "irreversible_write" in '
        "`effects`, then run this cell again."
    )
    correct_text = (
        "after a dropped connection the reads were simply asked again, each reversible write "
        "took effect once (its status lookup found it), and each irreversible write waited "
        "for a person and ran once."
    )

    def _problem(self, answer: Any) -> str | None:
        if not isinstance(answer, dict):
            return f"effects must be a dict of tool name -> effect, not {type(answer).__name__}."
        missing = [name for name in TOOLS_TO_CLASSIFY if name not in answer]
        if missing:
            return f"no effect given for {', '.join(missing)}."
        unknown = [str(name) for name in answer if name not in TOOLS_TO_CLASSIFY]
        if unknown:
            return f"unknown tool(s) {', '.join(unknown)}; the tools are {', '.join(TOOLS_TO_CLASSIFY)}."
        if all(answer[name] is None for name in TOOLS_TO_CLASSIFY):
            raise NotAttempted
        undecided = [name for name in TOOLS_TO_CLASSIFY if answer[name] is None]
        if undecided:
            return f"still None: {', '.join(undecided)}."
        chosen: dict[str, Effect] = {}
        for name in TOOLS_TO_CLASSIFY:
            try:
                chosen[name] = Effect(answer[name])
            except ValueError:
                return (
                    f"{answer[name]!r} (for {name}) is not an effect; use one of "
                    f"{', '.join(EFFECT_CHOICES)}."
                )
        wrong = []
        for name, effect in chosen.items():
            truth = _TRUE_EFFECTS[name]
            if effect is not truth:
                wrong.append(self._consequence(name, effect, truth))
        if not wrong:
            return None
        lines = [f"{len(wrong)} of {len(chosen)} tools have another level:"]
        lines += [f"  - {line}" for line in wrong]
        return "\n".join(lines)

    @staticmethod
    def _consequence(name: str, chosen: Effect, truth: Effect) -> str:
        done = _play_effect(name, chosen)
        times = f"{done['actions']} time{'s' if done['actions'] != 1 else ''}"
        asked = "a person was asked first" if done["asked"] else "nobody was asked"
        seen = (f"as {chosen.value}, after a dropped connection it happened {times}, {asked}, "
                f"and the model read {done['seen']}")
        if _LEVELS.index(chosen) > _LEVELS.index(truth):  # more careful than the tool needs
            return f"{name}: {seen}; too cautious: {_TOO_CAUTIOUS[truth, chosen]}."
        if truth is Effect.REVERSIBLE_WRITE:
            why = "a write is never retried blindly: it needs a key and a status lookup"
        else:
            why = "it cannot be taken back: it must wait for a person and never be retried"
        return f"{name}: {seen}; {why}."


#: The levels from the least to the most careful policy.
_LEVELS = (Effect.READ, Effect.REVERSIBLE_WRITE, Effect.IRREVERSIBLE_WRITE)

#: Why a level above the tool's own costs something: (the tool's level, the level chosen).
_TOO_CAUTIOUS = {
    (Effect.READ, Effect.REVERSIBLE_WRITE): (
        "a read changes nothing, so it needs no idempotency key and no status lookup: it may "
        "simply be asked again"),
    (Effect.READ, Effect.IRREVERSIBLE_WRITE): (
        "a read changes nothing, yet every call now waits for a person and is never retried, "
        "so one dropped connection leaves the model without its answer"),
    (Effect.REVERSIBLE_WRITE, Effect.IRREVERSIBLE_WRITE): (
        "it can be overwritten or moved back, so a key and a status lookup make a repeat safe; "
        "as an irreversible write every change waits for a person and is never retried, and "
        "a dropped connection ends in outcome_unknown where the status lookup would have found "
        "it done"),
}


def _play_effect(name: str, effect: Effect) -> dict[str, Any]:
    """Run tool ``name`` at level ``effect``: its connection drops once right after the action
    took effect. Returns how many times the action happened, whether approval was asked and
    what the model read last (``ok`` or the error code)."""
    actions: list[str] = []

    def act(ref: str) -> dict[str, Any]:
        actions.append(ref)
        return {"ref": ref, "done": True}

    def status(ref: str) -> dict[str, Any] | None:
        return {"ref": ref, "done": True} if ref in actions else None

    act.__name__ = act.__qualname__ = name
    fault = faults.fail_times(act, 1, after_call=True)
    # An irreversible write is never retried (ToolSpec refuses max_attempts > 1 for one).
    attempts = 1 if effect is Effect.IRREVERSIBLE_WRITE else 3
    spec = ToolSpec(name, TOOLS_TO_CLASSIFY[name], effect, 2.0, attempts, 2000, fault,
                    status_lookup=status if effect is Effect.REVERSIBLE_WRITE else None)
    runner = ToolRunner(ToolRegistry([spec]), sleep=no_wait)
    result = runner.call(name, {"ref": "x-1"})
    asked = result.get("error") == "approval_required"
    if asked:
        result = runner.approve(result["approval_id"])
    seen = "ok" if result.get("ok") else str(result.get("error"))
    return {"actions": len(actions), "asked": asked, "seen": seen}


q2 = EffectLevelExercise()
