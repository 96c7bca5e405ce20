"""The failure matrix as a harness for *your* tool: :func:`audit` plays every failure of the
matrix for a tool's side-effect level and says, row by row, whether the tool holds up.

    table = audit(spec, {"note_id": "n-1", "text": "hello"},
                  other_arguments={"note_id": "n-1", "text": "something else"})
    table[~table["pass"]]        # the rows your tool fails, with why

Each cell runs on a fresh :class:`~agentkit.demo.scenarios.Bench`: your handler wrapped in the
same fault injectors as the demo tools (a dropped connection, a hang after the write, a
million-character output, …) behind a real :class:`~agentkit.ToolRunner`, and its real calls
counted. The expectations are the rows of ``data/failure_matrix.csv`` for the tool's effect
(but the payment rows, :data:`~agentkit.demo.scenarios.PAYMENT_FAILURES`, which play the
demo's payment service and its key); a reversible write also gets one row the demo table does
not need, ``disconnect_before_write`` (an older payload is saved under the same id or path,
then the request is lost before anything is written: the status lookup must say "not done",
so the runner writes), which catches a status lookup that only checks that the id exists.

A write's key follows one of two designs (docs/design.md#key-designs), and the audit grades
each by its own rule; :func:`key_design` says which one it detected, by computing the key of
``arguments`` and of ``other_arguments`` (the same id or path, another payload):

- **content-addressed** (the keys differ: the content is part of the key, as in the chapter's
  ``task_id + path + content_hash`` and the runner's default key): another payload is another
  intent, so ``same_key_other_payload`` expects it to *run* (``ok``, 2 handler calls);
- **id-addressed** (the keys are equal: the key names the business object, as payment APIs
  do): another payload under the same key is ``idempotency_conflict`` (1 handler call, the
  first), and a legitimate edit must take a new key (a revision);
- **unstable** (the same call gave two keys): neither design; the rows that send one intent
  twice fail, and ``same_key_other_payload`` is graded by the id-addressed rule.

Keys are compared as the runner compares them, by ``str(key)``, and the audit sends one intent
twice with its arguments in another order (``same_write_repeated``, and :func:`key_design`):
a model may send its fields in any order, so a key built from ``json.dumps(arguments)``
without ``sort_keys`` is unstable, and its write runs twice.

An irreversible write with a ``status_lookup`` is graded by what that lookup can settle: after
a disconnect or a timeout that followed the payment, a truthful lookup finds it and the model
reads the receipt (``ok``, 1 handler call), as notebooks 04 and 05 teach; without a lookup the
rows expect ``outcome_unknown``.

Authorization: a caller granted nothing is refused by ``required_scopes``; a tool that needs
no scope but is guarded by a registry policy (the demo's ``save_brief`` and its workspace) is
audited with ``policies=`` and ``forbidden_arguments=`` (a call those policies refuse).

Only the tool's *policy* is judged, not its limits: the timeout cells shorten
``timeout_seconds`` to 0.2 s and the read-retry cells use the matrix's ``max_attempts`` (3 and
2), so an audit takes about a second and says the same on every run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit.boundary.authorization import Policy
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo import faults
from agentkit.demo.matrix import CellResult, cell_result, load_matrix, play, scratch
from agentkit.demo.scenarios import PAYMENT_FAILURES, Bench, Subject

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for
    import pandas

__all__ = [
    "AUDIT_COLUMNS",
    "CONTENT_ADDRESSED",
    "DESIGNS",
    "EXTRA_CELLS",
    "ID_ADDRESSED",
    "UNSTABLE",
    "audit",
    "audit_records",
    "key_design",
]

log = logging.getLogger("agentkit")

#: The columns of :func:`audit`.
AUDIT_COLUMNS = [
    "failure", "expected", "observed", "handler_calls", "expected_calls", "attempts",
    "budget_used", "pass", "why",
]


CONTENT_ADDRESSED = "content-addressed"
ID_ADDRESSED = "id-addressed"
UNSTABLE = "unstable"
#: What each key design means, in one sentence (the audit and the notebooks say it).
DESIGNS = {
    CONTENT_ADDRESSED: ("content-addressed: the content is in the key (task + path + its "
                        "hash), so another payload is another intent and runs; the same "
                        "payload replays; a conflict cannot arise"),
    ID_ADDRESSED: ("id-addressed: the key names the object (an id), so another payload under "
                   "it is idempotency_conflict; a legitimate edit takes a new key (a revision)"),
    UNSTABLE: ("unstable: the same call gave two different keys (a clock, a counter or "
               "randomness in the key, or the order of the arguments), so the runner cannot "
               "recognise an intent"),
}


def disconnect_before_write(subject: Subject, workdir: Path) -> Bench:
    """An older payload is saved under the same id; then a request is lost before its write.
    The status lookup must say "not done" (the older payload is not this one), so the runner
    writes: 2 handler calls, the last one lands."""
    bench = subject.bench(fault=lambda fn: faults.fail_times(fn, 1))
    if subject.spec is not None:
        subject.spec.handler(**subject.payload_changed())  # the older write, not counted
    bench.ask(subject.arguments)
    return bench


#: Audit rows beyond the CSV: (failure, effect) → (expected, handler calls, scenario).
EXTRA_CELLS: dict[tuple[str, str], tuple[str, int, Callable[[Subject, Path], Bench]]] = {
    ("disconnect_before_write", Effect.REVERSIBLE_WRITE.value): ("ok", 2, disconnect_before_write),
}


def in_another_order(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The same arguments with every object's fields in reverse order (a model may send them
    in any order; one intent must give one key)."""
    def reverse(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: reverse(value[key]) for key in reversed(list(value))}
        if isinstance(value, list):
            return [reverse(item) for item in value]
        return value

    return dict(reverse(dict(arguments)))


def same_write_reordered(subject: Subject, workdir: Path) -> Bench:
    """The model sends the same write twice, its fields in another order the second time:
    one intent, so it runs once and the second call is a replay."""
    bench = subject.bench()
    bench.ask(subject.arguments)
    bench.ask(in_another_order(subject.arguments))
    return bench


#: Rows of the matrix the audit plays its own way: failure → scenario.
AUDIT_SCENARIOS: dict[str, Callable[[Subject, Path], Bench]] = {
    "same_write_repeated": same_write_reordered,
}

#: The doubt rows an irreversible write's status lookup settles: with a truthful lookup the
#: model reads the receipt (ok, 1 handler call) instead of ``outcome_unknown``.
_SETTLED_BY_LOOKUP = ("transient_disconnect", "timeout_outcome_unknown")


def audit_records(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    other_arguments: Mapping[str, Any] | None = None,
    *,
    reset: Callable[[], Any] | None = None,
    task_id: str = "audit",
    workdir: str | os.PathLike[str] | None = None,
    policies: Sequence[Policy] = (),
    forbidden_arguments: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """:func:`audit` without pandas: one dict per row, keys :data:`AUDIT_COLUMNS`."""
    if not isinstance(spec, ToolSpec):
        raise TypeError(f"audit needs a ToolSpec, not {type(spec).__name__}")
    if spec.effect.is_write and other_arguments is None:
        raise ValueError(
            "a write needs other_arguments: the same intent (the same idempotency key) with "
            "another payload (the same id or path), for the same_key_other_payload row"
        )
    subject = Subject.of(spec, arguments, other_arguments, task_id=task_id, reset=reset,
                         policies=policies, forbidden_arguments=forbidden_arguments)
    effect = spec.effect.value
    rows = [(r["failure"], r["expected"], r["handler_calls"]) for r in load_matrix()
            if r["effect"] == effect and r["failure"] not in PAYMENT_FAILURES]
    extras = [(f, exp, calls) for (f, e), (exp, calls, _) in EXTRA_CELLS.items() if e == effect]
    design = _design(subject)
    stable = design != UNSTABLE
    records = []
    for failure, expected, expected_calls in rows + extras:
        if failure == "same_key_other_payload" and design == CONTENT_ADDRESSED:
            expected, expected_calls = "ok", 2  # another content is another intent: it runs
        if (failure in _SETTLED_BY_LOOKUP and spec.effect is Effect.IRREVERSIBLE_WRITE
                and spec.status_lookup is not None):
            expected, expected_calls = "ok", 1  # the lookup finds the payment: the receipt
        record: dict[str, Any] = {"failure": failure, "expected": expected,
                                  "expected_calls": expected_calls}
        try:
            cell = _play(failure, subject, workdir)
        except Exception as exc:
            log.exception("audit of %s: %s could not be played", spec.name, failure)
            record.update(observed=f"error: {type(exc).__name__}", handler_calls=None,
                          attempts=None, budget_used=None, why=f"could not be played: {exc}")
        else:
            record.update(observed=cell.observed, handler_calls=cell.handler_calls,
                          attempts=cell.attempts, budget_used=cell.budget_used)
        record["pass"] = (record["observed"] == expected
                          and record["handler_calls"] == expected_calls)
        if "why" not in record:
            record["why"] = "" if record["pass"] else why(failure, spec, record, stable_key=stable,
                                                          design=design)
        records.append({column: record[column] for column in AUDIT_COLUMNS})
    return records


def audit(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    other_arguments: Mapping[str, Any] | None = None,
    *,
    reset: Callable[[], Any] | None = None,
    task_id: str = "audit",
    workdir: str | os.PathLike[str] | None = None,
    policies: Sequence[Policy] = (),
    forbidden_arguments: Mapping[str, Any] | None = None,
) -> pandas.DataFrame:
    """Play every failure of the matrix for ``spec``'s effect on ``spec`` itself; one row each.

    ``arguments`` are what the model sends; ``other_arguments`` (writes only) name the same
    object with another payload (the same note id or file path, another text). ``reset`` is
    called before each cell to empty what the tool wrote in the cell before (recommended: the
    rows are independent then). ``policies`` are registry policies the tool is called behind
    (as in its own registry), and ``forbidden_arguments`` a call they refuse (a path outside
    the workspace): the authorization row plays it when the tool requires no scope.
    ``pass`` is True when what the model saw last and the handler's real call count are both
    as the matrix expects for the tool's key design; ``why`` says what went wrong when not.
    The frame's ``attrs["key_design"]`` names the design the audit detected (:func:`key_design`).
    Raises only for a ``spec`` that is not a ToolSpec or a write without ``other_arguments``.
    """
    import pandas as pd

    frame: pandas.DataFrame = pd.DataFrame.from_records(
        audit_records(spec, arguments, other_arguments, reset=reset, task_id=task_id,
                      workdir=workdir, policies=policies, forbidden_arguments=forbidden_arguments),
        columns=AUDIT_COLUMNS,
    )
    if spec.effect.is_write and other_arguments is not None:
        frame.attrs["key_design"] = key_design(spec, arguments, other_arguments, task_id=task_id)
    return frame


def key_design(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    other_arguments: Mapping[str, Any],
    *,
    task_id: str = "audit",
) -> str:
    """Which key design ``spec`` follows: :data:`CONTENT_ADDRESSED`, :data:`ID_ADDRESSED` or
    :data:`UNSTABLE` (see :data:`DESIGNS`). ``other_arguments`` name the same object (id or
    path) with another payload: equal keys mean the key names the object; different keys mean
    the payload is part of the key. A tool with no ``idempotency_key`` gets the runner's
    default key (the arguments' hash): content-addressed."""
    return _design(Subject.of(spec, arguments, other_arguments, task_id=task_id))


def _play(failure: str, subject: Subject, workdir: str | os.PathLike[str] | None) -> CellResult:
    extra = EXTRA_CELLS.get((failure, subject.effect.value))
    scenario = extra[2] if extra is not None else AUDIT_SCENARIOS.get(failure)
    if scenario is None:
        return play(failure, subject.effect, workdir=workdir, subject=subject)
    with scratch(workdir, f"{failure}-") as work:
        bench = scenario(subject, work)
        try:
            return cell_result(failure, bench)
        finally:
            bench.close()


def _design(subject: Subject) -> str:
    key = subject.spec.idempotency_key if subject.spec is not None else None
    if key is None:
        return CONTENT_ADDRESSED  # the runner's default key hashes every argument
    context = subject.context

    def key_of(arguments: Mapping[str, Any]) -> str:
        return str(key(context, dict(arguments)))  # as the runner keys a call: by its text

    try:
        first = key_of(subject.arguments)
        if key_of(subject.arguments) != first or key_of(in_another_order(subject.arguments)) != first:
            return UNSTABLE
        if subject.other_arguments is None:
            return ID_ADDRESSED
        return ID_ADDRESSED if key_of(subject.other_arguments) == first else CONTENT_ADDRESSED
    except Exception:  # a key that raises: its rows say so; graded by the stricter rule
        log.exception("audit of %s: the idempotency key raised", subject.spec.name if subject.spec else "")
        return ID_ADDRESSED


def why(failure: str, spec: ToolSpec, record: Mapping[str, Any], *, stable_key: bool = True,
        design: str = ID_ADDRESSED) -> str:
    """One sentence on a failed row: what the tool did, and what it lacks."""
    observed, calls = record["observed"], record["handler_calls"]
    expected, expected_calls = record["expected"], record["expected_calls"]
    is_reversible = spec.effect is Effect.REVERSIBLE_WRITE
    if is_reversible and spec.status_lookup is None and observed.startswith(("outcome_unknown", "busy")):
        return ("no status lookup: after the doubt the runner cannot ask whether the write "
                f"landed, so it will not write again and the model is left with {observed}")
    if failure == "authorization_denial" and observed.startswith("ok"):
        return ("required_scopes is empty: a caller granted nothing ran the tool (a tool "
                "guarded by a registry policy instead: pass policies= and forbidden_arguments=)")
    if (not stable_key and calls is not None and calls > expected_calls
            and failure in ("same_write_repeated", "same_key_other_payload", "process_killed_mid_write")):
        return (f"the write ran {calls} times: the key changed between two calls of one intent "
                "(a clock, a counter or randomness in it, or the order of the arguments: "
                "json.dumps without sort_keys), so the runner never recognised the intent")
    if failure == "same_key_other_payload" and design == CONTENT_ADDRESSED:
        return (f"the key is content-addressed (the payload is in it), so another payload is "
                f"another intent and must run: 2 handler calls, ok; the model saw {observed} "
                f"after {calls}")
    if failure == "same_key_other_payload" and observed == "ok+replayed":
        return ("the other payload was answered with the first payload's result: the runner "
                "never saw that it changed")
    if failure == "disconnect_before_write" and calls == 1 and observed.startswith("ok"):
        return ("this payload was never written, but the status lookup said done: it must compare what "
                "is saved with what was asked, not only check that the id exists")
    doubt_rows = ("transient_disconnect", "timeout_outcome_unknown", "process_killed_mid_write")
    if failure in doubt_rows and calls is not None and calls > expected_calls:
        return (f"the write ran {calls} times: the status lookup did not find the write that "
                "had landed, so the runner wrote again")
    if failure in doubt_rows and is_reversible and observed.startswith("outcome_unknown"):
        return ("the status lookup did not find the write that had landed; with the first "
                "attempt perhaps still running, the runner may not write again")
    if (failure in _SETTLED_BY_LOOKUP and spec.effect is Effect.IRREVERSIBLE_WRITE
            and spec.status_lookup is not None and not observed.startswith("ok")):
        return (f"the status lookup did not find the payment that had landed, so the model "
                f"was told {observed} for a write that happened")
    if observed.startswith(("tool_failure", "outcome_unknown")):
        return (f"the model saw {observed}: the handler or the status lookup raised or hung "
                "(turn on the agentkit logger to see the exception)")
    return (f"expected {expected} after {expected_calls} handler call(s); the model saw "
            f"{observed} after {calls}")
