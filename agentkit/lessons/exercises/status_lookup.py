"""Exercise 1 (notebook 06): a status lookup for ``save_draft``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkit.boundary.redaction import render_value
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo import faults
from agentkit.lessons.exercises.framework import (
    Exercise,
    NotAttempted,
    call_answer,
    describe_exception,
)
from agentkit.policy.backoff import no_wait
from agentkit.policy.runner import ToolRunner

__all__ = ["StatusLookupExercise", "q1", "save_draft"]


def save_draft(drafts: dict[str, str], draft_id: str, text: str) -> dict[str, Any]:
    """The save tool of exercise 1: store ``text`` under ``draft_id`` (overwriting), return the
    receipt."""
    drafts[draft_id] = text
    return {"draft_id": draft_id, "chars": len(text)}


class StatusLookupExercise(Exercise):
    """Write the status lookup of ``save_draft``.

    Checked by behaviour: the lookup is installed on a real ``save_draft`` tool behind a
    ToolRunner, the connection is made to fail on purpose (after the write landed, before it
    landed, and with an older text already saved), and the handler's real calls are counted.
    A right lookup turns the first case into 1 handler call and the others into a safe
    second attempt; a lookup that only checks the id, or always says "not done", shows up
    as a write that never happened or a write made twice.
    """

    number = 1
    title = "a status lookup for save_draft"
    hint_text = (
        "The write took effect only if `drafts` holds exactly this `text` under this "
        "`draft_id` (an older text there does not count). Then return the receipt save_draft "
        "would have returned, `{\"draft_id\": draft_id, \"chars\": len(text)}`; otherwise "
        "return None. Never raise for a draft that is simply not there."
    )
    solution_code = '''\
def draft_status(drafts, draft_id, text):
    """The receipt if exactly this text is saved under draft_id, None if not."""
    if drafts.get(draft_id) != text:
        return None  # not done: nothing, or another text, is saved there
    return {"draft_id": draft_id, "chars": len(text)}  # done: the receipt save_draft returns
'''
    placeholder_text = (
        "replace the `raise NotImplementedError` line in `draft_status` with your lookup, "
        "then run this cell again."
    )
    correct_text = (
        "reply lost after the write: your lookup found it, 1 handler call, the receipt came "
        "back; request lost before the write: your lookup said not done, the runner tried "
        "again, 2 handler calls, the draft is saved; an older text was not mistaken for this one."
    )

    DRAFT_ID = "draft-7"
    TEXT = "Hello team, the report is ready."

    def _problem(self, answer: Any) -> str | None:
        if not callable(answer):
            return f"draft_status must be a function, not {type(answer).__name__}."
        try:
            probe = call_answer(answer, {}, self.DRAFT_ID, self.TEXT)
        except NotAttempted:
            raise
        except Exception as exc:
            return (
                f"with nothing saved, your lookup raised {describe_exception(exc)}. Answer None for "
                "\"not done\"; raising means \"cannot tell\", and the runner then gives up "
                "with outcome_unknown."
            )
        if probe is not None:
            return (
                f"with nothing saved at all, your lookup answered {probe!r}, i.e. \"done\": "
                "the runner would report a save that never happened."
            )
        receipt = save_draft({}, self.DRAFT_ID, self.TEXT)

        # 1. The write lands, then the connection drops: the lookup must say "done".
        run = self._play(answer, {}, after_call=True)
        if run["error"]:
            return str(run["error"])
        if run["calls"] > 1:
            return (
                "the draft was saved but the reply was lost; your lookup answered \"not "
                f"done\", so the runner saved it again: {run['calls']} handler calls."
            )
        if not run["result"].get("ok"):
            return (
                "the draft was saved but the reply was lost, and the model saw "
                f"{run['result'].get('error')}: your lookup should have found the saved draft."
            )
        if run["result"].get("data") != render_value(receipt):
            return (
                "your lookup's receipt differs from save_draft's: the model saw "
                f"{run['result'].get('data')} instead of {render_value(receipt)}."
            )

        # 2. The request is lost before anything is written: the lookup must say "not done".
        for before, where in (({}, "nothing was saved"),
                              ({self.DRAFT_ID: "An older draft."}, "only an older text was saved")):
            run = self._play(answer, before, after_call=False)
            if run["error"]:
                return str(run["error"])
            saved = run["drafts"].get(self.DRAFT_ID) == self.TEXT
            if not saved:
                return (
                    f"the request was lost before the write ({where}), but your lookup said "
                    f"\"done\": the model saw ok with {run['calls']} handler call, and the "
                    "draft is not saved. Compare the saved text, not just the id."
                )
            if not run["result"].get("ok"):
                return (
                    f"the request was lost before the write ({where}); the model saw "
                    f"{run['result'].get('error')} instead of a second, safe attempt."
                )
        return None

    def _play(self, lookup: Callable[..., Any], drafts: dict[str, str], *, after_call: bool) -> dict[str, Any]:
        drafts = dict(drafts)
        raised: list[BaseException] = []

        def save(draft_id: str, text: str) -> dict[str, Any]:
            """Save a draft."""
            return save_draft(drafts, draft_id, text)

        def status(draft_id: str, text: str) -> Any:
            try:
                return lookup(drafts, draft_id, text)
            except BaseException as exc:
                raised.append(exc)
                raise

        fault = faults.fail_times(save, 1, after_call=after_call)
        spec = ToolSpec("save_draft", "Save a draft.", Effect.REVERSIBLE_WRITE, 2.0, 3, 2000, fault,
                        status_lookup=status)
        runner = ToolRunner(ToolRegistry([spec]), sleep=no_wait)
        result = runner.call("save_draft", {"draft_id": self.DRAFT_ID, "text": self.TEXT})
        error = None
        if raised:
            error = (
                f"your lookup raised {describe_exception(raised[0])}, so the runner could not tell whether "
                f"the draft was saved and the model saw {result.get('error')}."
            )
        return {"result": result, "calls": fault.calls, "drafts": drafts, "error": error}


q1 = StatusLookupExercise()
