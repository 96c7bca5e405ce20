"""Exercises for ``06_exercises``, in the style of Kaggle's learntools.

    >>> from agentkit.faces.exercises import q1, q2, q3, q4, q5
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

``check`` never raises for a learner's answer: a placeholder (``None``, or a function that
still raises ``NotImplementedError``) prints "Not attempted yet", anything else that goes
wrong is an "Incorrect" with the reason. It returns True or False, so tests can use it.
Every printed line is deterministic: no times, no addresses, no randomness.

Runners made here get a ``sleep`` that returns at once, so a check never waits on backoff,
whether or not :func:`agentkit.set_testing` was called.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from typing import Any

from agentkit.demo import faults
from agentkit.boundary.context import CallContext
from agentkit.boundary.invoke import invoke_tool
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.redaction import render_value
from agentkit.policy.runner import ToolRunner
from agentkit.boundary.spec import Effect, ToolSpec

__all__ = [
    "EFFECT_CHOICES",
    "Exercise",
    "SERVICES",
    "TOOLS_TO_CLASSIFY",
    "connect_report",
    "q1",
    "q2",
    "q3",
    "q4",
    "q5",
    "report_registry",
    "save_draft",
]

EFFECT_CHOICES = tuple(e.value for e in Effect)


class _NotAttempted(Exception):
    """Raised inside a check when the answer is still the placeholder."""


class _Right(str):
    """Returned by ``_problem`` for a right answer whose message depends on the answer."""


class Exercise:
    """One exercise: ``check(answer)``, ``hint()`` and ``solution()``.

    Subclasses give ``title``, ``hint_text``, ``solution_code``, ``placeholder_text``,
    ``correct_text`` and ``_problem(answer)``, which returns None when the answer is right
    (or ``_Right(message)`` to say more than ``correct_text``), else the reason it is not (a
    str, possibly several lines), and raises ``_NotAttempted`` for a placeholder.
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
                raise _NotAttempted
            problem = self._problem(answer)
        except _NotAttempted:
            print(f"Not attempted yet: {self.placeholder_text}")
            return False
        except Exception as exc:  # the checker must never show a learner a traceback
            problem = f"checking your answer raised {_exc(exc)}"
        if problem is None or isinstance(problem, _Right):
            print(f"Correct: {problem or self.correct_text}")
            return True
        print(f"Incorrect: {problem}")
        return False

    def hint(self) -> None:
        """Print a nudge towards the answer."""
        print(f"Hint: {self.hint_text}")

    def solution(self) -> None:
        """Print one answer that passes ``check``, as code you could paste."""
        print("Solution:")
        print(self.solution_code.rstrip("\n"))

    def _problem(self, answer: Any) -> str | None:  # pragma: no cover - every exercise overrides
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<exercise q{self.number}: {self.title}>"


def _exc(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _no_wait(seconds: float) -> None:
    """The runner's backoff pause, made instant: checks test policy, not patience."""


def _call_placeholder(function: Callable[..., Any], *args: Any) -> Any:
    """Call the learner's function directly once: a stub that still raises
    ``NotImplementedError`` is a placeholder, not a wrong answer."""
    try:
        return function(*args)
    except NotImplementedError:
        raise _NotAttempted from None


# =============================================================================== q1


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
            probe = _call_placeholder(answer, {}, self.DRAFT_ID, self.TEXT)
        except _NotAttempted:
            raise
        except Exception as exc:
            return (
                f"with nothing saved, your lookup raised {_exc(exc)}. Answer None for "
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
            return run["error"]
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
                return run["error"]
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
        runner = ToolRunner(ToolRegistry([spec]), sleep=_no_wait)
        result = runner.call("save_draft", {"draft_id": self.DRAFT_ID, "text": self.TEXT})
        error = None
        if raised:
            error = (
                f"your lookup raised {_exc(raised[0])}, so the runner could not tell whether "
                f"the draft was saved and the model saw {result.get('error')}."
            )
        return {"result": result, "calls": fault.calls, "drafts": drafts, "error": error}


# =============================================================================== q2

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
            raise _NotAttempted
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
        seen = f"as {chosen.value}, after a dropped connection it happened {times} and {asked}"
        if truth is Effect.READ:
            why = ("a read changes nothing: it may simply be asked again, with no key, no "
                   "lookup and no approval")
        elif truth is Effect.REVERSIBLE_WRITE and chosen is Effect.READ:
            why = "a write is never retried blindly: it needs a key and a status lookup"
        elif truth is Effect.REVERSIBLE_WRITE:
            why = ("it can be overwritten or undone, so a key and a status lookup make it safe "
                   "without stopping for a person every time")
        else:
            why = "it cannot be taken back: it must wait for a person and never be retried"
        return f"{name}: {seen}; {why}."


def _play_effect(name: str, effect: Effect) -> dict[str, Any]:
    """Run tool ``name`` at level ``effect``: its connection drops once right after the action
    took effect. Returns how many times the action happened and whether approval was asked."""
    actions: list[str] = []

    def act(ref: str) -> dict[str, Any]:
        actions.append(ref)
        return {"ref": ref, "done": True}

    def status(ref: str) -> dict[str, Any] | None:
        return {"ref": ref, "done": True} if ref in actions else None

    act.__name__ = act.__qualname__ = name
    fault = faults.fail_times(act, 1, after_call=True)
    spec = ToolSpec(name, TOOLS_TO_CLASSIFY[name], effect, 2.0, 3, 2000, fault,
                    status_lookup=status if effect is Effect.REVERSIBLE_WRITE else None)
    runner = ToolRunner(ToolRegistry([spec]), sleep=_no_wait)
    result = runner.call(name, {"ref": "x-1"})
    asked = result.get("error") == "approval_required"
    if asked:
        runner.approve(result["approval_id"])
    return {"actions": len(actions), "asked": asked}


# =============================================================================== q3


class IdempotencyKeyExercise(Exercise):
    """Build ``save_brief``'s idempotency key: task id + path + hash of the content.

    Checked by behaviour: your function becomes the ``idempotency_key`` of a real save tool
    behind a ToolRunner, and five saves are made. The same save asked again must replay (1
    handler call); a new content, another path or another task is another intent and must
    run (a key that ignores one of them turns it into ``idempotency_conflict``). Finally a
    long brief with a secret in it: a key is stored and logged, so it must not copy the
    content, only its hash.
    """

    number = 3
    title = "an idempotency key for save_brief"
    hint_text = (
        "The intent is \"this task saves this content at this path\". Join "
        "arguments[\"task_id\"], arguments[\"path\"] and the sha256 hex digest of "
        "arguments[\"content\"] (hashlib.sha256(text.encode(\"utf-8\")).hexdigest()) with "
        "\":\". Nothing random, no clock: a retry must compute the same key again."
    )
    solution_code = '''\
import hashlib

def brief_key(context, arguments):
    """This task saves this content at this path: the content enters by its hash."""
    digest = hashlib.sha256(arguments["content"].encode("utf-8")).hexdigest()
    return f"{arguments['task_id']}:{arguments['path']}:{digest}"
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

    BRIEF = {"task_id": "task-7", "path": "briefs/retries.md",
             "content": "# Retries\n\nA timeout does not prove that a write failed.\n"}

    def _problem(self, answer: Any) -> str | None:
        if not callable(answer):
            return f"brief_key must be a function, not {type(answer).__name__}."
        context = CallContext(task_id=self.BRIEF["task_id"])
        try:
            key = _call_placeholder(answer, context, dict(self.BRIEF))
        except _NotAttempted:
            raise
        except Exception as exc:
            return f"your key function raised {_exc(exc)} for the sample brief {self.BRIEF['path']}."
        if not isinstance(key, str):
            return f"a key must be a str; yours returned {type(key).__name__}."

        files: dict[str, str] = {}
        keys: list[str] = []

        def save_brief(task_id: str, path: str, content: str) -> dict[str, Any]:
            """Save a brief."""
            files[path] = content
            return {"path": path, "chars": len(content)}

        def key_of(ctx: CallContext, arguments: dict[str, Any]) -> str:
            made = answer(ctx, arguments)
            keys.append(made)
            return made

        counter = faults.count_calls(save_brief)
        spec = ToolSpec("save_brief", "Save a brief.", Effect.REVERSIBLE_WRITE, 2.0, 3, 2000,
                        counter, idempotency_key=key_of)
        registry = ToolRegistry([spec])
        runners: dict[str, ToolRunner] = {}
        store = None

        def save(reorder: bool = False, **changes: str) -> dict[str, Any]:
            nonlocal store
            arguments = {**self.BRIEF, **changes}
            if reorder:  # the model may send the same arguments in another order
                arguments = dict(reversed(list(arguments.items())))
            task = arguments["task_id"]
            if task not in runners:
                runners[task] = ToolRunner(registry, store=store, context=CallContext(task_id=task),
                                           sleep=_no_wait)
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
                             ({"path": "briefs/other.md"}, "path"),
                             ({"task_id": "task-8"}, "task id")):
            before = counter.calls
            result = save(**change)
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
        secret = "password=hunter2-fake"
        long_brief = {**self.BRIEF, "content": (secret + "\n" + "lorem ipsum " * 900)[:10_000]}
        long_key = answer(CallContext(task_id=self.BRIEF["task_id"]), long_brief)
        if not isinstance(long_key, str):
            return f"a key must be a str; yours returned {type(long_key).__name__}."
        if "hunter2" in long_key or len(long_key) > 200:
            return (
                f"for a 10,000-character brief your key is {len(long_key):,} characters long"
                + (" and copies a secret from the text" if "hunter2" in long_key else "")
                + ": keys are stored and logged, so the content must enter by its sha256 hash."
            )
        return None


# =============================================================================== q4

#: The services exercise 4's tool reports on.
SERVICES = ("billing", "search", "mail")


def _session_id(service: str, n: int = 0) -> str:
    return "sess_" + hashlib.sha256(f"{service}:{n}".encode()).hexdigest()[:32]


def connect_report(service: str) -> str:
    """The leaky handler of exercise 4: a health report that also prints the session cookie
    its client used (``sess_`` and 32 hex digits), a format the default patterns do not know."""
    if service not in SERVICES:
        raise LookupError(service)
    lines = [
        f"service {service}: healthy (latency 41 ms)",
        f"connected with session {_session_id(service)}, expires in 30 min",
    ]
    if service == "mail":
        lines.append(f"retried once; old session {_session_id(service, 1)}")
    return "\n".join(lines)


def report_registry(patterns: Any = ()) -> ToolRegistry:
    """A registry holding ``connect_report`` with extra redaction ``patterns``."""
    spec = ToolSpec("connect_report", "Report a service's health.", Effect.READ, 2.0, 1, 2000,
                    connect_report)
    return ToolRegistry([spec], redact_patterns=patterns)


class RedactionExercise(Exercise):
    """Give the registry a redaction pattern for the session cookie ``connect_report`` leaks.

    Checked by behaviour: the pattern is installed in a real registry and every service's
    report is read back through ``invoke_tool``: no session id may reach the model, and the
    health facts around it (status, latency, expiry) must still be there. A pattern that is
    too narrow leaks; one that is too broad hides what the model needs.
    """

    number = 4
    title = "a redaction pattern for a leaked session cookie"
    hint_text = (
        "A session id is \"sess_\" followed by 32 lowercase hex digits: [0-9a-f]{32}. Match "
        "exactly that, so the words around it (\"expires in 30 min\") stay visible."
    )
    solution_code = '''\
session_pattern = r"\\bsess_[0-9a-f]{32}\\b"
'''
    placeholder_text = (
        "set `session_pattern` to a regular expression (a str), then run this cell again."
    )

    KEEP = ("healthy", "latency 41 ms", "expires in 30 min", "retried once")

    def _problem(self, answer: Any) -> str | None:
        if isinstance(answer, (list, tuple)):
            return "give one pattern (a str), not a list."
        if not isinstance(answer, (str, re.Pattern)):
            return f"session_pattern must be a str, not {type(answer).__name__}."
        try:
            registry = report_registry([answer])
        except re.error as exc:
            return f"that is not a valid regular expression: {exc}."
        leaked, hidden, redactions = [], [], 0
        for service in SERVICES:
            result = invoke_tool(registry, "connect_report", {"service": service})
            if not result.get("ok"):
                return f"the report for {service} failed with {result.get('error')}."
            data = result["data"]
            redactions += result.get("redactions", 0)
            for n in (0, 1) if service == "mail" else (0,):
                if _leaks(_session_id(service, n), data):
                    leaked.append(f"{service}: {_session_id(service, n)}")
            raw = connect_report(service)
            hidden += [f"{service}: {word!r}" for word in self.KEEP if word in raw and word not in data]
        if leaked:
            return (
                f"the model still sees {len(leaked)} session id(s), whole or in part, e.g. "
                f"{leaked[0]}: all 32 hex digits must go."
            )
        if hidden:
            return (
                "your pattern also hid what the model needs to read, e.g. "
                f"{hidden[0]}: match the session id only."
            )
        return _Right(
            f"no session id reached the model in any report ({redactions} span(s) redacted), "
            "and the status, latency and expiry are still visible."
        )


def _leaks(session: str, data: str, piece: int = 4) -> bool:
    """True when any ``piece`` hex digits of the session id still reach the model: half a
    secret is still a secret."""
    digits = session[len("sess_"):]
    return any(digits[i : i + piece] in data for i in range(len(digits) - piece + 1))


# =============================================================================== q5


class ReadLimitsExercise(Exercise):
    """Pick ``max_attempts`` and ``timeout_seconds`` for the read ``search_catalog``.

    The search answers within 0.8 s when healthy, its connection sometimes drops twice in a
    row, and a hung search must not hold the agent for more than 10 s. The retry count is
    checked by behaviour: the search is made to drop twice and then answer, and to fail for
    good, behind a real ToolRunner, and the handler's calls are counted. The two time rules
    are checked by arithmetic (``timeout_seconds`` against 0.8 s, ``max_attempts ×
    timeout_seconds`` against 10 s): waiting out a real hang would make this check take
    seconds, and the boundary's timeout is already tested in the package's own tests.
    """

    number = 5
    title = "max_attempts and timeout_seconds for a read"
    hint_text = (
        "Two drops then an answer need at least 3 attempts. The timeout must be longer than "
        "a healthy answer (0.8 s), and every attempt may wait that long: max_attempts × "
        "timeout_seconds ≤ 10."
    )
    solution_code = '''\
search_limits = {"max_attempts": 3, "timeout_seconds": 2.0}  # 3 × 2.0 s = 6 s at worst
'''
    placeholder_text = (
        "set `search_limits` to {\"max_attempts\": …, \"timeout_seconds\": …}, then run this "
        "cell again."
    )

    HEALTHY_SECONDS = 0.8
    WORST_SECONDS = 10.0

    def _problem(self, answer: Any) -> str | None:
        if not isinstance(answer, dict):
            return f"search_limits must be a dict, not {type(answer).__name__}."
        missing = [k for k in ("max_attempts", "timeout_seconds") if k not in answer]
        if missing:
            return f"search_limits needs {' and '.join(missing)}."
        attempts, timeout = answer["max_attempts"], answer["timeout_seconds"]
        if attempts is None and timeout is None:
            raise _NotAttempted
        try:
            spec = ToolSpec("search_catalog", "Search the product catalog.", Effect.READ,
                            timeout, attempts, 2000, _search_catalog)
        except ValueError as exc:
            return f"the ToolSpec refuses these limits: {exc}."
        if timeout <= self.HEALTHY_SECONDS:
            return (
                f"healthy searches take up to {self.HEALTHY_SECONDS} s; with timeout_seconds="
                f"{timeout:g} the boundary would give up on healthy calls and report "
                "outcome_unknown."
            )
        flaky = _play_read(spec, faults.fail_times(_search_catalog, 2))
        if not flaky["result"].get("ok"):
            return (
                f"two dropped connections in a row used up all {attempts} attempt(s): the "
                f"model saw {flaky['result'].get('error')} after {flaky['calls']} handler calls."
            )
        down = _play_read(spec, faults.fail_times(_search_catalog, 1_000))
        worst = attempts * timeout
        if worst > self.WORST_SECONDS:
            return (
                f"if the search hangs, each of the {attempts} attempts waits {timeout:g} s: "
                f"{worst:g} s in all, more than {self.WORST_SECONDS:g} s."
            )
        return _Right(
            f"two drops then an answer: ok after {flaky['calls']} handler calls; a search "
            f"that is down gives up after {down['calls']} calls; a hang holds the agent at "
            f"most {attempts} × {timeout:g} s = {worst:g} s."
        )


def _search_catalog(query: str) -> str:
    """Search the product catalog."""
    return f"3 products match {query!r}"


def _play_read(spec: ToolSpec, fault: faults.Fault) -> dict[str, Any]:
    spec = dataclasses.replace(spec, handler=fault)
    runner = ToolRunner(ToolRegistry([spec]), sleep=_no_wait)
    result = runner.call(spec.name, {"query": "usb-c cable"})
    return {"result": result, "calls": fault.calls}


# =============================================================================== the exercises

q1 = StatusLookupExercise()
q2 = EffectLevelExercise()
q3 = IdempotencyKeyExercise()
q4 = RedactionExercise()
q5 = ReadLimitsExercise()

