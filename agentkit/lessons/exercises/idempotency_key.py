"""Exercise 3 (notebook 06): an idempotency key for ``save_brief``."""

from __future__ import annotations

from typing import Any, ClassVar

from agentkit.boundary.context import CallContext
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

__all__ = ["IdempotencyKeyExercise", "q3"]


class IdempotencyKeyExercise(Exercise):
    """Build ``save_brief``'s idempotency key: task id + path + hash of the content.

    The task id comes from the runner's ``context`` (``context.task_id``), never from the
    arguments: ``save_brief`` takes only ``path`` and ``content``, because a model that could
    choose the task could choose the namespace of its own keys.

    Checked by behaviour: your function becomes the ``idempotency_key`` of a real save tool
    behind a ToolRunner, and five saves are made. The same save asked again must replay (1
    handler call); a new content, another path or another task is another intent and must
    run (a key that ignores the content or the path turns it into ``idempotency_conflict``;
    one that ignores the task replays another task's save). Finally a long brief with a
    secret in it: a key is stored and logged, so it must not copy the content, only its hash.
    """

    number = 3
    title = "an idempotency key for save_brief"
    hint_text = (
        "The intent is \"this task saves this content at this path\". Join "
        "context.task_id (the runner's task: the model does not choose it), "
        "arguments[\"path\"] and the sha256 hex digest of arguments[\"content\"] "
        "(hashlib.sha256(text.encode(\"utf-8\")).hexdigest()) with \":\". Nothing random, "
        "no clock: a retry must compute the same key again."
    )
    solution_code = '''\
import hashlib

def brief_key(context, arguments):
    """This task saves this content at this path: the content enters by its hash.
    The task is the runner's context, never an argument the model could choose."""
    digest = hashlib.sha256(arguments["content"].encode("utf-8")).hexdigest()
    return f"{context.task_id}:{arguments['path']}:{digest}"
'''
    placeholder_text = (
        "replace the `raise NotImplementedError` line in `brief_key` with your key, then run "
        "this cell again."
    )
    correct_text = (
        "the same save asked twice ran once and replayed; new content, another path and "
        "another task each ran as a new intent; a 10,000-character brief gave a short key "
        "without its text."
    )

    TASK: ClassVar[str] = "task-7"
    BRIEF: ClassVar[dict[str, str]] = {"path": "briefs/retries.md",
             "content": "# Retries\n\nA timeout does not prove that a write failed.\n"}

    def _problem(self, answer: Any) -> str | None:
        if not callable(answer):
            return f"brief_key must be a function, not {type(answer).__name__}."
        context = CallContext(task_id=self.TASK)
        try:
            key = call_answer(answer, context, dict(self.BRIEF))
        except NotAttempted:
            raise
        except KeyError as exc:
            if exc.args and exc.args[0] == "task_id":
                return ("save_brief takes no task_id argument: the task is the runner's, not "
                        "the model's. Read it from context.task_id.")
            return f"your key function raised {describe_exception(exc)} for the sample brief {self.BRIEF['path']}."
        except Exception as exc:
            return f"your key function raised {describe_exception(exc)} for the sample brief {self.BRIEF['path']}."
        if not isinstance(key, str):
            return f"a key must be a str; yours returned {type(key).__name__}."

        files: dict[str, str] = {}
        keys: list[str] = []

        def save_brief(path: str, content: str) -> dict[str, Any]:
            """Save a brief."""
            files[path] = content
            return {"path": path, "chars": len(content)}

        def key_of(ctx: CallContext, arguments: dict[str, Any]) -> str:
            made: str = answer(ctx, arguments)
            keys.append(made)
            return made

        counter = faults.count_calls(save_brief)
        spec = ToolSpec("save_brief", "Save a brief.", Effect.REVERSIBLE_WRITE, 2.0, 3, 2000,
                        counter, idempotency_key=key_of)
        registry = ToolRegistry([spec])
        runners: dict[str, ToolRunner] = {}
        store = None

        def save(changes: dict[str, str] | None = None, *, reorder: bool = False,
                 task: str = self.TASK) -> dict[str, Any]:
            nonlocal store
            arguments = {**self.BRIEF, **(changes or {})}
            if reorder:  # the model may send the same arguments in another order
                arguments = dict(reversed(list(arguments.items())))
            if task not in runners:
                runners[task] = ToolRunner(registry, store=store, context=CallContext(task_id=task),
                                           sleep=no_wait)
                store = runners[task].store  # one store for every task, as in one deployment
            return runners[task].call("save_brief", arguments)

        first = save()
        if not first.get("ok"):
            return f"the first save failed with {first.get('error')}: does your key raise?"
        again = save(reorder=True)
        if counter.calls != 1 or not again.get("replayed"):
            return (
                f"the same save asked twice ran {counter.calls} times: your key changed between "
                f"two calls with the same arguments ({keys[0]!r}, then {keys[-1]!r}). Use "
                "nothing random and no clock."
            )
        for change, part in (({"content": "# Retries, revised\n"}, "content (by its hash)"),
                             ({"path": "briefs/other.md"}, "path")):
            before = counter.calls
            result = save(change)
            if result.get("error") == "idempotency_conflict":
                name = next(iter(change))
                return (
                    f"a save with another {name} got the same key as the first one, so the "
                    f"runner refused it as idempotency_conflict: put the {part} in the key."
                )
            if not result.get("ok") or counter.calls != before + 1:
                return (
                    f"a save with another {next(iter(change))} should run once as a new "
                    f"intent; the model saw {result.get('error') or 'ok'} after "
                    f"{counter.calls - before} handler call(s)."
                )
        before = counter.calls
        other_task = save(task="task-8")  # the same brief, saved for another task
        if other_task.get("replayed") or other_task.get("error") == "idempotency_conflict":
            return (
                "a save of the same brief for another task got the first task's key, so the "
                "runner " + ("replayed the first task's result instead of saving"
                             if other_task.get("replayed") else "refused it as idempotency_conflict")
                + ": put the task id (context.task_id) in the key."
            )
        if not other_task.get("ok") or counter.calls != before + 1:
            return (
                "a save for another task should run once as a new intent; the model saw "
                f"{other_task.get('error') or 'ok'} after {counter.calls - before} handler call(s)."
            )
        secret = "password=hunter2-fake"
        long_brief = {**self.BRIEF, "content": (secret + "\n" + "lorem ipsum " * 900)[:10_000]}
        long_key = answer(CallContext(task_id=self.TASK), long_brief)
        if not isinstance(long_key, str):
            return f"a key must be a str; yours returned {type(long_key).__name__}."
        if "hunter2" in long_key or len(long_key) > 200:
            return (
                f"for a 10,000-character brief your key is {len(long_key):,} characters long"
                + (" and copies a secret from the text" if "hunter2" in long_key else "")
                + ": keys are stored and logged, so the content must enter by its sha256 hash."
            )
        return None


q3 = IdempotencyKeyExercise()
