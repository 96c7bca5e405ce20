"""Approvals: an irreversible write waits for a person, and the person approves one exact call.

An approval names the tool and the exact arguments that asked for it, so approving it can
never run anything else. The same intent (the same idempotency key) asking twice gets the
same approval id; an approval is used once, expires after a set time, and keeps its settled
result so that approving again returns what happened instead of acting again. Records live in
the idempotency store: with the durable store they survive a restart, and a new process (a
restarted kernel, the CLI, another host) sees the approvals an earlier one opened.

States::

    pending ──approve──▶ running ──(the write ran, ok or not)──▶ settled
       │                    ├──(refused, or its approver left, before anything ran)──▶ pending
       │                    └──(its approver left, and it ended in doubt)──▶ running, due
       ├──deny / the call became invalid / its workflow ended──▶ settled (forbidden)
       └──time-to-live passed──▶ expired

A run whose approver went away (an interrupt, a loop that ended) stays ``running`` while its
attempt runs, and is settled when the attempt returns (:meth:`Approvals.after_run`); one left
"due" is recovered by the next approval through the store (the status lookup). A run whose
approver's process died is due at once: ``running`` records who runs it (host, pid, process
start time), and it is judged as a claim's owner is (:meth:`Approvals.runner_gone`), not only
by its lease.

An approval has an owner: the task that asked and, under an engine face, its workflow
(``workflow``: ``{"engine": "dbos"|"temporal", "id": …}``). Only that workflow's runner
decides it (:meth:`Approvals.owns`); when the workflow ends, what it left pending is settled
``forbidden`` (:meth:`Approvals.close_owned`).

Every move is a compare-and-swap on the record's state in the store, so two approvers (or an
approver and a denier) racing on one id cannot both win; opening is one atomic
insert-if-absent (``store.create_approval``). This module is the state machine only, written
as policy steps that ask for their store steps (:mod:`agentkit.policy.effects`): what runs,
and how its result is counted and traced, is the policy's business
(:mod:`agentkit.policy.irreversible`). Store steps may raise ``StoreError``; the policy turns that
into ``busy``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.policy.drivers import run_store_steps
from agentkit.policy.effects import Steps, StoreStep
from agentkit.policy.stores.audit import arguments_digest
from agentkit.policy.stores.owner import owner_gone, this_host, this_process

PENDING, RUNNING, SETTLED, EXPIRED = "pending", "running", "settled", "expired"

#: What :meth:`Approvals.begin` and :meth:`Approvals.deny` decide.
RUN = "run"  # the caller runs the call now (the record is ``running``)
ANSWER = "answer"  # answer ``result`` at once; nothing runs
REPLAY = "replay"  # the approval was settled before: ``result`` is what happened then
REFUSED = "refused"  # the call may not run any more (the tool or the caller's rights changed)
DENIED = "denied"  # this deny settled the approval
WAITING = "waiting"  # four eyes: this approval was counted (or not), another person must approve

#: A person's decision, kept in the record (``decision``, with ``decided_at``, the clock's
#: time, and ``decided_by``, the person when the channel named one) once it took effect: the
#: CLI refuses a second decision that contradicts it.
APPROVED_DECISION, DENIED_DECISION = "approved", "denied"

#: The longest name of a person a decision records (``approver``), in characters.
MAX_APPROVER_CHARS = 80

#: The fields of a record a person is shown (panels, the CLI, ``pending_approvals()``).
PUBLIC_FIELDS = ("approval_id", "tool", "arguments", "task_id", "principal")

#: ``prepare(record)`` is asked before an approved call runs: a failure dict if it may not
#: run (invalid now, forbidden now), else None and the lease (seconds) its run may take.
Prepare = Callable[[dict[str, Any]], "tuple[dict[str, Any] | None, float]"]


@dataclass(frozen=True)
class Step:
    """A decision of the state machine: ``action`` is one of RUN, ANSWER, REPLAY, REFUSED,
    DENIED; ``record`` the approval as it now stands (None if there is none); ``result`` the
    answer for every action but RUN."""

    action: str
    record: dict[str, Any] | None = None
    result: dict[str, Any] | None = None


def approval_id_for(key: str, generation: int = 1) -> str:
    """The id of an intent's approval: derived from its idempotency key, so asking twice
    gets the same id; an expired one is followed by ``-2``, ``-3`` …"""
    base = "apr-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return base if generation == 1 else f"{base}-{generation}"


class Approvals:
    """The approval records of one store, with their time-to-live and their state machine.

    Each method but :meth:`get` is a generator of policy steps (:mod:`agentkit.policy.effects`):
    it asks for its store steps and a driver performs them, so the sync and the async runner
    share this one state machine. :meth:`get` is a plain read for panels and people."""

    def __init__(self, store: Any, ttl_seconds: float, clock: Callable[[], float] = time.time):
        if not ttl_seconds > 0:
            raise ValueError("approval_ttl_seconds must be > 0")
        self.store = store
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        #: The engine workflow that owns the approvals this runner opens (``{"engine": "dbos"
        #: | "temporal", "id": workflow_id}``), set by an engine face on its workflow's
        #: runner; None for a runner of no workflow. A decision on an approval a workflow
        #: owns goes to that workflow: only its own runner may take it (:meth:`owns`).
        self.workflow: dict[str, str] | None = None
        self._host = this_host()

    # ---------------------------------------------------------------- opening and reading

    def open(
        self, key: str, fingerprint: str, tool: str, arguments: dict[str, Any], context: CallContext,
        budget_remaining: int | None = None,
    ) -> Steps[dict[str, Any]]:
        """The live record for this intent: the existing one, or a new ``pending`` one.

        One atomic insert-if-absent per id, so two processes asking at once share one
        record. An expired approval is not revived: the intent gets a new id, so an id once
        refused as expired stays refused. The caller compares ``fingerprint``: an existing
        record of the same key with other arguments is an idempotency conflict.
        """
        generation = 1
        budget = {} if budget_remaining is None else {"budget_remaining": budget_remaining}
        while True:
            approval_id = approval_id_for(key, generation)
            record = yield StoreStep("create_approval", (approval_id, {
                "approval_id": approval_id,
                "key": key,
                "fingerprint": fingerprint,
                "tool": tool,
                "arguments": arguments,
                "task_id": context.task_id,
                "workflow": self.workflow,
                "principal": context.principal,
                "state": PENDING,
                "expires_at": self.clock() + self.ttl_seconds,
                "result": None,
                **budget,
            }))
            record = yield from self._expire_if_due(record)
            if record["state"] != EXPIRED:
                return record
            generation += 1

    def find(self, key: str) -> Steps[dict[str, Any] | None]:
        """This intent's current record (its latest generation, see :meth:`open`) without
        opening one: None when it never asked."""
        generation = 1
        while True:
            record = yield from self.read(approval_id_for(key, generation))
            if record is None or record["state"] != EXPIRED:
                return record
            generation += 1

    def read(self, approval_id: Any) -> Steps[dict[str, Any] | None]:
        """The record, with a pending one past its time marked ``expired`` on the way."""
        if not isinstance(approval_id, str):
            return None
        record = yield StoreStep("get_approval", (str.__str__(approval_id),))  # exact copy
        return None if record is None else (yield from self._expire_if_due(record))

    def get(self, approval_id: Any) -> dict[str, Any] | None:
        """:meth:`read`, performed at once (a panel showing a record; raises ``StoreError``)."""
        return run_store_steps(self.store, self.read(approval_id))

    def pending(self) -> Steps[list[dict[str, Any]]]:
        """Every approval in the store that still waits for a decision, oldest first, opened
        by this process or any other."""
        found = []
        for record in (yield StoreStep("list_approvals", (PENDING,))):
            record = yield from self._expire_if_due(record)
            if record["state"] == PENDING:
                found.append(record)
        return found

    # ---------------------------------------------------------------- deciding

    def begin(self, approval_id: Any, prepare: Prepare, approver: str | None = None) -> Steps[Step]:
        """A person (``approver``, when the channel names one) approved: decide whether the
        call runs now.

        Only the approver that moves the record from ``pending`` to ``running`` gets RUN;
        the others get ``in_progress`` until it settles. A record left ``running`` whose
        approver died (its lease passed, or, as for a claim, its process is provably gone:
        same host, pid gone or reused) is RUN again by whoever asks: the caller runs it
        through the idempotency store, whose claim and status lookup make sure it never
        simply runs twice. An approval a workflow owns is decided by that workflow's runner
        only (:meth:`owns`): any other is REFUSED (``forbidden``) and it stays as it is.

        An approval that needs several people (``approvers_needed``, :meth:`require`) runs
        only once that many different named people approved: each earlier one is kept as a
        sign-off (WAITING, ``approval_required``: it stays pending); the same person again,
        or a person with no name, counts nothing. Every decision that moves the record is
        appended to the store's audit log with it (:meth:`_decide`).
        """
        record = yield from self.read(approval_id)
        while True:
            if record is None or record["state"] == EXPIRED:
                return Step(ANSWER, record, failure(ErrorCode.FORBIDDEN))
            if record["state"] == SETTLED:
                return Step(REPLAY, record, settled_result(record))
            if not self.owns(record):
                return Step(REFUSED, record, failure(ErrorCode.FORBIDDEN))
            refusal, lease = prepare(record)
            if refusal is not None and refusal.get("error") == ErrorCode.UNKNOWN_TOOL.value:
                # This runner's registry does not hold the tool (a CLI started without the
                # server's --registry): it cannot run the call, and that says nothing about
                # the call. The approval stays as it is, for a runner that can.
                return Step(REFUSED, record, refusal)
            if refusal is not None:
                settled = {**record, "state": SETTLED, "result": refusal,
                           **self._decided(APPROVED_DECISION, approver)}
                if record["state"] == PENDING and not (
                        yield from self._decide(record, settled, "approve", approver)):
                    record = yield from self.read(approval_id)  # moved by someone else meanwhile
                    continue
                return Step(REFUSED, record, refusal)
            needed = people_needed(record)
            if record["state"] == PENDING and needed > 1 and len(signers(record, approver)) < needed:
                signed = {**record, "signoffs": [*_signoffs(record),
                                                 {"who": approver, "at": self.clock()}]}
                if approver is None or approver in signers(record):
                    return Step(WAITING, record, self._waiting(record))  # counts nothing
                if (yield from self._decide(record, signed, "sign_off", approver)):
                    return Step(WAITING, signed, self._waiting(signed))
                record = yield from self.read(approval_id)  # somebody else moved it first
                continue
            if record["state"] == PENDING:
                running = {**record, "state": RUNNING, "running_until": self.clock() + lease,
                           "run_by": _this_runner(self._host),
                           **self._decided(APPROVED_DECISION, approver)}
                if (yield from self._decide(record, running, "approve", approver)):
                    return Step(RUN, running)
                record = yield from self.read(approval_id)  # somebody else moved it first
                continue
            if self.clock() < record.get("running_until", 0) and not self.runner_gone(record):
                return Step(ANSWER, record, failure(ErrorCode.IN_PROGRESS))
            return Step(RUN, record)  # its approver is gone: recover through the store

    def finish(self, record: dict[str, Any], result: dict[str, Any], *, ran: bool) -> Steps[bool]:
        """Record what the approved run did. A run refused before anything ran (no budget, no
        slot) leaves the approval ``pending``, not used up; another approver's live run
        (``in_progress``) settles it itself; anything else settles it with ``result``.
        Returns whether this settled the approval."""
        code = result.get("error")
        if code == ErrorCode.IN_PROGRESS.value:
            return False
        if not ran and code in (ErrorCode.BUDGET_EXHAUSTED.value, ErrorCode.BUSY.value):
            yield from self.move(record, PENDING)
            return False
        return (yield from self.move(record, SETTLED, result))

    def after_run(self, record: dict[str, Any], result: dict[str, Any] | None) -> Steps[bool]:
        """Record, from a ``running`` record, what a run whose approver went away did once its
        attempt returned (:meth:`finish` is for an approver that saw it end): nothing ran
        (None) → ``pending``, not used up; a doubt (``outcome_unknown``) → still ``running``
        but past its lease, so the next approver recovers it through the store (the status
        lookup, or ``outcome_unknown``); anything else → ``settled`` with ``result``.
        Returns whether the record moved."""
        if result is None:
            return (yield from self.move(record, PENDING))
        if result.get("error") == ErrorCode.OUTCOME_UNKNOWN.value:
            return (yield from self._swap(record, {**record, "running_until": 0.0}))
        return (yield from self.move(record, SETTLED, result))

    def deny(self, approval_id: Any, result: dict[str, Any],
             approver: str | None = None) -> Steps[Step]:
        """A person (``approver``, when the channel names one) refused: settle a pending
        approval with ``result`` (``forbidden``); one person's deny is enough, however many
        must approve. An approval a workflow owns is settled by that workflow's runner only:
        any other is REFUSED (``forbidden``) and the approval stays as it is."""
        record = yield from self.read(approval_id)
        if record is not None and record["state"] in (PENDING, RUNNING) and not self.owns(record):
            return Step(REFUSED, record, failure(ErrorCode.FORBIDDEN))
        while record is not None and record["state"] == PENDING:
            denied = {**record, "state": SETTLED, "result": result,
                      **self._decided(DENIED_DECISION, approver)}
            if (yield from self._decide(record, denied, "deny", approver)):
                return Step(DENIED, denied, result)
            record = yield from self.read(approval_id)
        if record is not None and record["state"] == SETTLED:
            return Step(REPLAY, record, settled_result(record))
        if record is not None and record["state"] == RUNNING:
            return Step(ANSWER, record, failure(ErrorCode.IN_PROGRESS))
        return Step(ANSWER, record, failure(ErrorCode.FORBIDDEN))

    def close_owned(self, workflow: dict[str, str], result: dict[str, Any]) -> Steps[list[str]]:
        """The workflow ``workflow`` ended (it returned or raised): settle every approval it
        owns that still waits for a decision with ``result`` (``forbidden``), so nothing is
        left pending that no one will ever act on. Returns the ids it settled."""
        closed = []
        for record in (yield StoreStep("list_approvals", (PENDING,))):
            while record is not None and record["state"] == PENDING and record.get("workflow") == workflow:
                if (yield from self.close(record, result)):
                    closed.append(record["approval_id"])
                    break
                record = yield from self.read(record["approval_id"])
        return closed

    def close(self, record: dict[str, Any], result: dict[str, Any]) -> Steps[bool]:
        """Settle one pending approval whose workflow ended with ``result`` (``forbidden``),
        marked ``closed``; a decision sent to the workflow was never acted on, so none is
        kept. Returns whether it moved (False: it was no longer pending)."""
        if record["state"] != PENDING:
            return False
        ended = {**record, "state": SETTLED, "result": result, "closed": "workflow ended"}
        for name in ("decision", "decided_at", "decided_by"):
            ended.pop(name, None)
        return (yield from self._swap(record, ended))

    def record_decision(self, record: dict[str, Any], decision: str,
                        approver: str | None = None) -> Steps[bool]:
        """Keep a person's decision (``decision``: ``approved`` or ``denied``, and
        ``decided_at``, ``decided_by``) on a pending approval whose workflow will act on it
        (the decision was routed to the workflow, which settles it by its own step): a second
        decision that contradicts it is then refused. Returns whether it was kept (False: the
        record moved meanwhile, or already holds a decision)."""
        if record["state"] != PENDING or record.get("decision") is not None:
            return False
        action = "approve" if decision == APPROVED_DECISION else "deny"
        return (yield from self._decide(record, {**record, **self._decided(decision, approver)},
                                        action, approver, routed_to=record.get("workflow")))

    def require(self, approval_id: Any, people: int) -> Steps[dict[str, Any] | None]:
        """Have a pending approval run only once ``people`` different named people approved
        it (four eyes: 2), unless it needs as many already; returns the record as it now
        stands (None: no such approval). Set where the desk is started, for the tools it
        names; from then on every channel (the desk, the CLI, a panel) counts sign-offs."""
        if isinstance(people, bool) or not isinstance(people, int) or people < 1:
            raise ValueError("people must be an int >= 1")
        record = yield from self.read(approval_id)
        while record is not None and record["state"] == PENDING and people_needed(record) < people:
            needed = {**record, "approvers_needed": people}
            if (yield StoreStep("decide_approval", (record["approval_id"], record, needed, None))):
                return needed
            record = yield from self.read(approval_id)
        return record

    def relooked(self, record: dict[str, Any], result: dict[str, Any],
                 approver: str | None) -> Steps[bool]:
        """Record what the status lookup said when a person asked it again about a settled
        approval that ended in doubt: its result becomes ``result`` (the receipt, or "not
        done") in the record and the audit log; a lookup that still cannot say changes
        nothing but the audit log. Returns whether the record moved."""
        outcome = "ok" if result.get("ok") else str(result.get("error"))
        if result.get("error") == ErrorCode.OUTCOME_UNKNOWN.value:
            yield StoreStep("append_audit", (audit_fields(record, "lookup", approver,
                                                          outcome=outcome),))
            return False
        return (yield from self._decide(record, {**record, "result": result}, "lookup", approver,
                                        outcome=outcome))

    def owns(self, record: dict[str, Any]) -> bool:
        """Whether this runner may decide ``record``: it has no workflow, or it is its
        workflow's runner (:attr:`workflow`). A decision on a workflow's approval goes to
        that workflow (``send_decision``, or the CLI), so a cancelled workflow's approval
        pays nothing unless the workflow is resumed and receives the decision."""
        owner = record.get("workflow")
        return owner is None or owner == self.workflow

    def runner_gone(self, record: dict[str, Any]) -> bool:
        """Whether the process that runs a ``running`` approval is provably gone, judged
        as a claim's owner is (same host, its pid gone or reused); any doubt is False, and
        the lease decides."""
        run_by = record.get("run_by")
        if not isinstance(run_by, dict):
            return False
        host, pid, start_time = run_by.get("host"), run_by.get("pid"), run_by.get("start_time")
        if not isinstance(host, str) or type(pid) is not int or not (
                start_time is None or type(start_time) is int):
            return False
        return owner_gone(host, pid, start_time, local_host=self._host)

    # ---------------------------------------------------------------- moves

    def move(self, record: dict[str, Any], state: str, result: dict[str, Any] | None = None) -> Steps[bool]:
        """Compare-and-swap the record from its current state to ``state``. Back to
        ``pending`` (nothing ran), the decision is dropped: the approval waits for one again."""
        new = {**record, "state": state}
        if result is not None:
            new["result"] = result
        if state == PENDING:
            for name in ("decision", "decided_at", "decided_by"):
                new.pop(name, None)
        return (yield from self._swap(record, new))

    def _decided(self, decision: str, approver: str | None = None) -> dict[str, Any]:
        """The fields a decision adds to the record: what it was, when, and by whom."""
        decided: dict[str, Any] = {"decision": decision, "decided_at": self.clock()}
        if approver is not None:
            decided["decided_by"] = approver
        return decided

    def _decide(self, record: dict[str, Any], new: dict[str, Any], action: str,
                approver: str | None, **more: Any) -> Steps[bool]:
        """A person's move: compare-and-swap the whole record and append its audit entry in
        the same store transaction (``StoreBase.decide_approval``)."""
        audit = audit_fields(record, action, approver, **more)
        swapped = yield StoreStep("decide_approval", (record["approval_id"], record, new, audit))
        return bool(swapped)

    def _waiting(self, record: dict[str, Any]) -> dict[str, Any]:
        """The answer to an approval counted (or not) while more people must approve."""
        return failure(ErrorCode.APPROVAL_REQUIRED, approval_id=record["approval_id"])

    def _swap(self, record: dict[str, Any], new: dict[str, Any]) -> Steps[bool]:
        swapped = yield StoreStep("update_approval", (record["approval_id"], record["state"], new))
        return bool(swapped)

    def _expire_if_due(self, record: dict[str, Any]) -> Steps[dict[str, Any]]:
        if record["state"] == PENDING and self.clock() >= record["expires_at"]:
            yield from self._swap(record, {**record, "state": EXPIRED})
            fresh: dict[str, Any] | None = yield StoreStep("get_approval", (record["approval_id"],))
            return fresh if fresh is not None else {**record, "state": EXPIRED}
        return record


def _this_runner(host: str) -> dict[str, Any]:
    """Who runs an approval that moves to ``running``: as a claim records its owner."""
    pid, start_time = this_process()
    return {"host": host, "pid": pid, "start_time": start_time}


def people_needed(record: dict[str, Any]) -> int:
    """How many different people must approve ``record`` before it runs (1, or what
    :meth:`Approvals.require` set)."""
    needed = record.get("approvers_needed", 1)
    return needed if isinstance(needed, int) and not isinstance(needed, bool) and needed > 1 else 1


def _signoffs(record: dict[str, Any]) -> list[dict[str, Any]]:
    found = record.get("signoffs")
    return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []


def signers(record: dict[str, Any], approver: str | None = None) -> set[str]:
    """The different named people who approved ``record`` so far (its sign-offs), with
    ``approver`` when given: one person approving twice counts once."""
    names = {str(s["who"]) for s in _signoffs(record) if isinstance(s.get("who"), str)}
    return names | ({approver} if approver is not None else set())


def audit_fields(record: dict[str, Any], action: str, approver: str | None,
                 **more: Any) -> dict[str, Any]:
    """What an audit entry says of a decision on ``record``: who, the action, and the call
    (tool, arguments' digest, key, its owner); the store adds the time, number and hashes."""
    return {
        "action": action,
        "who": approver,
        "approval_id": record.get("approval_id"),
        "tool": record.get("tool"),
        "arguments_digest": arguments_digest(record.get("arguments")),
        "key": record.get("key"),
        "task_id": record.get("task_id"),
        "workflow": record.get("workflow"),
        **more,
    }


def settled_result(record: dict[str, Any]) -> dict[str, Any]:
    """The result kept with a settled approval (a copy); ``forbidden`` if none was kept."""
    result = record.get("result")
    return dict(result) if isinstance(result, dict) else failure(ErrorCode.FORBIDDEN)


def public_view(record: dict[str, Any]) -> dict[str, Any]:
    """What a person is shown of an approval."""
    return {field: record.get(field) for field in PUBLIC_FIELDS}
