"""``python -m agentkit approvals list|approve ID|deny ID``: a person's decisions on the
approvals in a store (docs/design.md#command-line).

The command line (:mod:`agentkit.faces.cli`) opens the store and the registry and turns every
failure to open one into one line on stderr; this module decides on an open runner and prints
what happened: plain text for people, or one JSON document (``--json``) for scripts.

A person is told what the model is not: whether an id is unknown, expired, denied or settled
(and with what outcome), who owns it (its task, its workflow), and when it was decided. The
model still sees ``forbidden`` for all of those (docs/design.md#approvals). Two rules hold
here (docs/design.md#approvals):

- **Nothing is settled that cannot run.** A runner whose registry does not hold the
  approval's tool (a CLI started without the server's ``--registry``) refuses, exit status 2,
  and the approval stays pending for a runner that holds it.
- **A decision that contradicts the first is refused.** Deny after approve (or approve after
  deny): exit status 1, naming the first decision and its time; the same decision again
  replays its result.

Exit status: 0 the decision took effect or replays (for ``approve``: its run was ok, or it
was counted as one of the people an approval needs); 1 refused (unknown, expired,
contradicted, the same person approving twice) or the approved run did not succeed; 2 the
loaded registry cannot run it.

The decision itself is :func:`decision`, which the CLI prints (:func:`decide`) and the
approvals desk shows (:mod:`agentkit.faces.desk`): both are exactly the same decision.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any

from agentkit.boundary.canonical import approval_text, escape_invisible
from agentkit.boundary.errors import ErrorCode
from agentkit.policy.approvals import (
    APPROVED_DECISION,
    DENIED_DECISION,
    EXPIRED,
    PENDING,
    RUNNING,
    SETTLED,
    people_needed,
    settled_result,
    signers,
)
from agentkit.policy.drivers import run_store_steps

if TYPE_CHECKING:
    from agentkit.policy.runner import ToolRunner

__all__ = ["Decided", "approval_facts", "decide", "decision", "list_approvals", "status_of"]

#: How many different people approve a tool named with ``four_eyes``.
FOUR_EYES = 2


@dataclass(frozen=True)
class Decided:
    """What a person's decision did: the exit status (0, 1, 2: see the module docstring),
    the line a person is told (None when the result says it all), the runner's result
    (None when nothing was decided) and the approval's record as it now stands."""

    status: int
    line: str | None
    result: dict[str, Any] | None
    record: dict[str, Any] | None

#: What a person is told an approval is (``status`` in ``--json``).
UNKNOWN, DENIED, SETTLED_STATUS = "unknown", "denied", "settled"


def list_approvals(runner: ToolRunner, *, as_json: bool, out: IO[str]) -> int:
    """The approvals still waiting for a decision, oldest first, each with its owner;
    returns 0. Raises ``StoreError`` when the store cannot be read."""
    pending = run_store_steps(runner.store, runner.approvals.pending())
    if as_json:
        out.write(_json([approval_facts(record) for record in pending]) + "\n")
        return 0
    if not pending:
        out.write("no pending approvals\n")
    for record in pending:
        out.write(f"{escape_invisible(str(record['approval_id']))}  "
                  f"{escape_invisible(str(record['tool']))}  "
                  f"task {escape_invisible(str(record.get('task_id')))}  "
                  f"workflow {workflow_text(record.get('workflow'))}  "
                  f"{approval_text(record['arguments'])}\n")
    return 0


def decide(runner: ToolRunner, approval_id: str, action: str, *, as_json: bool, out: IO[str],
           err: IO[str], command: str, approver: str | None = None,
           four_eyes: Collection[str] = ()) -> int:
    """``approve`` or ``deny`` ``approval_id`` as a person, on ``runner``'s store and registry
    (:func:`decision`), and print it.

    The result of the decision (the runner's result dict, as the model will have it
    replayed) goes to ``out``; a line for the person on ``err`` says what else is so (a
    replay, an unknown or expired id, the first decision it contradicts, a tool this runner
    cannot run, a sign-off that waits for a second person). With ``as_json`` both are one
    document on ``out``. Raises ``StoreError`` when the store cannot be used."""
    done = decision(runner, approval_id, action, approver=approver, four_eyes=four_eyes)
    return _tell(approval_id, action, done.record, done.result, done.line, done.status,
                 as_json=as_json, out=out, err=err, command=command)


def decision(runner: ToolRunner, approval_id: str, action: str, *,
             approver: str | None = None, four_eyes: Collection[str] = ()) -> Decided:
    """A person's ``approve`` or ``deny`` of ``approval_id`` on ``runner``'s store and
    registry: the one decision the CLI and the desk both take.

    Refused, nothing decided: an unknown or expired id, a decision that contradicts the
    first, an approval a workflow owns (its decision goes to the workflow), a tool the
    registry lacks (it stays pending). ``approver`` names the person (kept with the decision
    and in the store's audit log). A tool named in ``four_eyes`` needs two different named
    people: the approval is marked so in the store (from then on every channel counts), the
    first approval is kept as a sign-off (status 0, still pending), the same person again
    counts nothing (status 1). Raises ``StoreError`` when the store cannot be used."""
    mine = APPROVED_DECISION if action == "approve" else DENIED_DECISION
    before = runner.approvals.get(approval_id)
    refused = _refusal(runner, approval_id, before, mine)
    if refused is not None:
        return Decided(refused[0], refused[1], None, before)
    if (action == "approve" and before is not None and before.get("state") == PENDING
            and before.get("tool") in four_eyes):
        before = run_store_steps(runner.store, runner.approvals.require(approval_id, FOUR_EYES))
    if action == "approve":
        result = runner.approve(approval_id, approver=approver)
    else:
        result = runner.deny(approval_id, approver=approver)
    after = runner.approvals.get(approval_id)
    refused = _refusal(runner, approval_id, after, mine) if _lost(result, after, mine) else None
    if refused is not None:  # another decision (or nobody's tool) won the race meanwhile
        return Decided(refused[0], refused[1], None, after)
    line = _replayed_line(approval_id, after, result) if result.get("replayed") else None
    if action == "approve":
        status = 0 if result.get("ok") else 1
        if result.get("error") == ErrorCode.IN_PROGRESS.value and after is not None:
            line = (f"{_shown(approval_id)}: approved at {when(after.get('decided_at'))}; its "
                    "run is under way (in_progress): ask again to see its result")
        if result.get("error") == ErrorCode.APPROVAL_REQUIRED.value and after is not None:
            status, line = _sign_off_line(approval_id, before, after, approver)
    else:
        status = 0 if result.get("error") == ErrorCode.FORBIDDEN.value else 1
    return Decided(status, line, dict(result), after)


def status_of(record: Mapping[str, Any] | None) -> str:
    """What a person is told an approval is: ``unknown`` (no such id in the store),
    ``pending``, ``running`` (approved, its run under way), ``expired``, ``denied``, or
    ``settled`` (approved and run, or refused when it was about to run: see ``outcome``)."""
    if record is None:
        return UNKNOWN
    state = str(record.get("state"))
    if state != SETTLED:
        return state
    return DENIED if decision_of(record) == DENIED_DECISION else SETTLED_STATUS


def decision_of(record: Mapping[str, Any]) -> str | None:
    """The person's decision the record keeps (``approved`` or ``denied``); for a record
    settled before decisions were kept, ``approved`` when its result is ok (it ran), else
    None (not known)."""
    decision = record.get("decision")
    if decision in (APPROVED_DECISION, DENIED_DECISION):
        return str(decision)
    if record.get("state") == RUNNING:
        return APPROVED_DECISION
    if record.get("state") == SETTLED and settled_result(dict(record)).get("ok"):
        return APPROVED_DECISION
    return None


def approval_facts(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a person (or a script, ``--json``) is shown of one approval: its call, its owner
    (``task_id``, ``workflow``: None, or ``{"engine": …, "id": …}``), its ``status``, the
    ``decision`` and ``decided_at`` (seconds since the epoch) once there is one, when it
    expires, and for a settled one its ``outcome`` (``ok`` or the error code)."""
    status = status_of(record)
    outcome = None
    if record.get("state") == SETTLED:
        result = settled_result(dict(record))
        outcome = "ok" if result.get("ok") else str(result.get("error"))
    return {
        "approval_id": record.get("approval_id"),
        "tool": record.get("tool"),
        "arguments": record.get("arguments"),
        "task_id": record.get("task_id"),
        "principal": record.get("principal"),
        "workflow": record.get("workflow"),
        "status": status,
        "decision": decision_of(record),
        "decided_at": record.get("decided_at"),
        "decided_by": record.get("decided_by"),
        "approved_by": approved_by(record),
        "approvers_needed": people_needed(dict(record)),
        "expires_at": record.get("expires_at"),
        "outcome": outcome,
    }


def approved_by(record: Mapping[str, Any]) -> list[str]:
    """The different named people who approved ``record``: its sign-offs and the person
    whose approval ran it."""
    decided_by = record.get("decided_by")
    last = decided_by if decision_of(record) == APPROVED_DECISION and isinstance(
        decided_by, str) else None
    return sorted(signers(dict(record), last))


def workflow_text(workflow: Any) -> str:
    """An approval's workflow as one word: ``dbos:ID``, ``temporal:ID``, or ``-`` (none)."""
    if not isinstance(workflow, Mapping):
        return "-"
    return escape_invisible(f"{workflow.get('engine', '?')}:{workflow.get('id', '?')}")


def when(seconds: Any) -> str:
    """A time the store keeps (seconds since the epoch) as UTC ISO 8601, or ``-``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return "-"
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g}"


# ---- helpers


def _refusal(runner: ToolRunner, approval_id: str, record: Mapping[str, Any] | None,
             mine: str) -> tuple[int, str] | None:
    """Why this decision may not be taken on ``record``, as (exit status, line), or None."""
    shown = _shown(approval_id)
    if record is None:
        return 1, f"{shown}: no such approval in this store (nothing was decided)"
    state = record.get("state")
    if state == EXPIRED:
        return 1, (f"{shown}: expired at {when(record.get('expires_at'))} before anyone decided;"
                   " nothing ran (the call asked again gets a new approval)")
    first = decision_of(record)
    if first is not None and first != mine:
        outcome = approval_facts(record)["outcome"]
        ran = f" (outcome: {outcome})" if first == APPROVED_DECISION and outcome else ""
        if state == RUNNING:
            ran = " (its run is under way)"
        return 1, (f"{shown}: already {first} at {when(record.get('decided_at'))}{ran}; "
                   f"a {'deny' if mine == DENIED_DECISION else 'approval'} now would contradict it")
    workflow = record.get("workflow")
    if state in (PENDING, RUNNING) and isinstance(workflow, Mapping):
        route = (f" (approvals {'approve' if mine == APPROVED_DECISION else 'deny'} {shown} "
                 f"--dbos-workflow {escape_invisible(str(workflow.get('id')))})"
                 if workflow.get("engine") == "dbos" else "")
        engine = {"dbos": "DBOS", "temporal": "Temporal"}.get(str(workflow.get("engine")),
                                                               str(workflow.get("engine")))
        owner = escape_invisible(f"{engine} workflow {workflow.get('id')}")
        return 2, (f"approval {shown} belongs to {owner}: its decision goes to that "
                   f"workflow{route}. Nothing was decided")
    if state in (PENDING, RUNNING) and runner.registry.get(str(record.get("tool"))) is None:
        return 2, (f"{escape_invisible(str(record.get('tool')))} is not in the loaded registry "
                   "(give --registry MODULE:ATTRIBUTE, the tools of the server that asked); "
                   f"{shown} stays {state}")
    return None


def _sign_off_line(approval_id: str, before: Mapping[str, Any] | None, after: Mapping[str, Any],
                   approver: str | None) -> tuple[int, str]:
    """What a person is told of an approval that still waits for more people: counted
    (0), or not (1: no name, or the same person again)."""
    shown, needed = _shown(approval_id), people_needed(dict(after))
    names = sorted(signers(dict(after)))
    who = ", ".join(escape_invisible(name) for name in names) or "nobody yet"
    if approver is None:
        return 1, (f"{shown} needs {needed} different people to approve it: give your name "
                   f"(--approver NAME); approved so far by {who}. Nothing ran")
    if before is not None and approver in signers(dict(before)):
        return 1, (f"{shown}: {escape_invisible(approver)} approved it already (one person "
                   f"approving twice counts once); {needed - len(names)} more person must "
                   f"approve before it runs. Nothing ran")
    return 0, (f"{shown}: approval by {escape_invisible(approver)} counted ({len(names)} of "
               f"{needed}: {who}); another person must approve before it runs. Nothing ran yet")


def _lost(result: Mapping[str, Any], after: Mapping[str, Any] | None, mine: str) -> bool:
    """Whether this decision did not take effect because of something else meanwhile: the
    record now holds the other decision, or still waits because this runner lacks the tool."""
    if after is None:
        return False
    first = decision_of(after)
    if first is not None and first != mine:
        return True
    return (result.get("error") == ErrorCode.UNKNOWN_TOOL.value
            and after.get("state") in (PENDING, RUNNING))


def _replayed_line(approval_id: str, record: Mapping[str, Any] | None,
                   result: Mapping[str, Any]) -> str:
    """The line for a decision that was taken before: nothing ran now."""
    outcome = "ok" if result.get("ok") else str(result.get("error"))
    if record is None:
        return f"{_shown(approval_id)}: settled before (outcome: {outcome}); nothing ran now"
    first = decision_of(record) or "settled"
    return (f"{_shown(approval_id)}: already {first} at {when(record.get('decided_at'))} "
            f"(outcome: {outcome}); its result again, nothing ran now")


def _tell(approval_id: str, action: str, record: Mapping[str, Any] | None,
          result: Mapping[str, Any] | None, line: str | None, status: int, *, as_json: bool,
          out: IO[str], err: IO[str], command: str) -> int:
    if as_json:
        out.write(_json({
            "approval_id": approval_id,
            "action": action,
            "status": status_of(record),
            "message": line,
            "result": None if result is None else dict(result),
            "approval": None if record is None else approval_facts(record),
        }) + "\n")
        return status
    if result is not None:
        out.write(escape_invisible(json.dumps(dict(result), ensure_ascii=False)) + "\n")
    if line is not None:
        err.write(f"{command}: {line}\n")
    return status


def _shown(approval_id: str) -> str:
    return escape_invisible(approval_id)


def _json(value: Any) -> str:
    return escape_invisible(json.dumps(value, ensure_ascii=False, sort_keys=True))
