"""The failures of the failure matrix, provoked for real (the table is :mod:`agentkit.demo.matrix`).

Each failure is one function that plays it on a fresh :class:`Bench`: one tool, its handler
wrapped in a fault from :mod:`agentkit.demo.faults` that counts its real calls, a new registry,
runner and store. What the bench plays comes from a :class:`Subject`:

- ``Subject.demo(effect)``: the synthetic tool of one side-effect level (``search_notes``,
  ``save_draft``, ``send_payment``), whose writes land in a fresh :class:`Ledger`;
- ``Subject.of(spec, arguments, ...)``: any tool, for :func:`agentkit.demo.harness.audit`.

Two rows play a payment tool of their own instead (:func:`make_payment_tool`, on the demo's
:class:`~agentkit.demo.payments.PaymentService`, which deduplicates by key as payment APIs
do): a worker killed after the payment, with the runner's key forwarded to the service and
without it (:data:`PAYMENT_FAILURES`).

Nothing here waits on backoff: every runner gets :func:`~agentkit.policy.backoff.no_wait`.
Only the timeout cells wait, for their tool's short ``timeout_seconds``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agentkit.boundary.authorization import Policy
from agentkit.boundary.canonical import json_text
from agentkit.boundary.concurrency import current_call
from agentkit.boundary.context import CallContext
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo import faults
from agentkit.demo.payments import PaymentService
from agentkit.demo.tools import atomic_write_text
from agentkit.policy.backoff import no_wait
from agentkit.policy.budget import Budget
from agentkit.policy.runner import ToolRunner
from agentkit.policy.stores import SQLiteIdempotencyStore

__all__ = [
    "ARGUMENTS",
    "CELLS",
    "CRASH_EXIT_CODE",
    "EFFECTS",
    "FAILURES",
    "GUEST",
    "IRREVERSIBLE",
    "LEARNER",
    "OTHER_PAYLOAD",
    "OUTPUT_LIMIT",
    "PAYMENT_FAILURES",
    "READ",
    "REVERSIBLE",
    "SCENARIOS",
    "SHORT_TIMEOUT",
    "TIMEOUT",
    "Bench",
    "DiskLedger",
    "ExitAfterCall",
    "Ledger",
    "Subject",
    "Written",
    "claim_and_die",
    "compact",
    "crash_mid_write",
    "draft_key",
    "durable_bench",
    "make_payment_tool",
    "make_tool",
    "pay_and_die",
    "payment_key",
    "run_child",
]

FAILURES = (
    "missing_argument",
    "transient_disconnect",
    "authorization_denial",
    "timeout_outcome_unknown",
    "oversized_output",
    "same_write_repeated",
    "same_key_other_payload",
    "process_killed_mid_write",
    "budget_spent",
    "killed_after_payment_key_forwarded",
    "killed_after_payment_key_not_forwarded",
)
#: The rows about the demo's payment service (docs/design.md#current-call): a worker killed
#: after the payment, its key forwarded to the service or not. They play the demo's payment
#: tool only, so :func:`agentkit.demo.harness.audit` leaves them out.
PAYMENT_FAILURES = ("killed_after_payment_key_forwarded", "killed_after_payment_key_not_forwarded")
EFFECTS = tuple(e.value for e in Effect)

READ, REVERSIBLE, IRREVERSIBLE = Effect.READ, Effect.REVERSIBLE_WRITE, Effect.IRREVERSIBLE_WRITE

#: The cells the matrix fills in (the others are "—": that failure cannot happen at that level).
CELLS = tuple(
    (failure, effect)
    for failure in FAILURES
    for effect in EFFECTS
    if not (failure in ("same_write_repeated", "same_key_other_payload") and effect == "read")
    and not (failure == "process_killed_mid_write" and effect != "reversible_write")
    and not (failure in PAYMENT_FAILURES and effect != "irreversible_write")
)

TIMEOUT = 2.0  # tools that answer at once never come near it
SHORT_TIMEOUT = 0.2  # the timeout cells: their handler blocks, so this is what they wait
OUTPUT_LIMIT = 200

#: What the model sends, per level. ``draft_id`` and ``payment_id`` name the business intent:
#: they are the idempotency keys.
ARGUMENTS: dict[Effect, dict[str, Any]] = {
    READ: {"query": "timeout"},
    REVERSIBLE: {"draft_id": "draft-7", "text": "Hello team, the report is ready."},
    IRREVERSIBLE: {"payment_id": "pay-42", "to": "ACME Ltd", "amount": 120},
}
#: The same keys with another payload.
OTHER_PAYLOAD: dict[Effect, dict[str, Any]] = {
    REVERSIBLE: {"draft_id": "draft-7", "text": "Something else entirely."},
    IRREVERSIBLE: {"payment_id": "pay-42", "to": "ACME Ltd", "amount": 999},
}

SCOPES = {READ: "notes:read", REVERSIBLE: "drafts:write", IRREVERSIBLE: "payments:send"}
#: The caller in every cell but one: granted every tool's scope.
LEARNER = CallContext(task_id="matrix", principal="learner", scopes=frozenset(SCOPES.values()))
#: The caller of the authorization cells: granted nothing.
GUEST = CallContext(task_id="matrix", principal="guest")

NOTES = (
    "Retries: only reads are retried blindly.",
    "Timeouts: a timeout does not prove that a write failed.",
    "Budgets: every attempt and every status lookup spends one unit.",
)

CRASH_EXIT_CODE = 17  # the child process of the crash cell ends with this, mid-write


# ------------------------------------------------------------------------- the tools


class Ledger:
    """Where the synthetic tools' writes land, in memory; the status lookup reads it back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, Any] = {}
        self._writes = 0

    def put(self, ref: str, value: Any) -> None:
        with self._lock:
            self._entries[ref] = value
            self._writes += 1

    def get(self, ref: str) -> Any:
        with self._lock:
            return self._entries.get(ref)

    @property
    def writes(self) -> int:
        """Writes that landed."""
        with self._lock:
            return self._writes


class DiskLedger(Ledger):
    """The same on disk, for the crash cell: it outlives the process that wrote it.

    Each entry is one JSON file written with :func:`~agentkit.demo.tools.atomic_write_text`
    (temp file, fsync, rename, fsync the folder: the same write as ``save_brief``), so the
    status lookup can trust what it reads; every write also appends one line to
    ``writes.log``, so writes are counted across processes and across crashes.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path = self.directory / "writes.log"

    def put(self, ref: str, value: Any) -> None:
        atomic_write_text(self.directory / f"{ref}.json", json.dumps(value))
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(ref + "\n")

    def get(self, ref: str) -> Any:
        try:
            return json.loads((self.directory / f"{ref}.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    @property
    def writes(self) -> int:
        try:
            return len(self.log_path.read_text(encoding="utf-8").splitlines())
        except FileNotFoundError:
            return 0


def draft_key(context: CallContext, arguments: Mapping[str, Any]) -> str:
    """One draft per task: saving ``draft_id`` again is the same intent."""
    return f"{context.task_id}:save_draft:{arguments['draft_id']}"


def payment_key(context: CallContext, arguments: Mapping[str, Any]) -> str:
    """One payment per ``payment_id``, as payment APIs key them."""
    return f"{context.task_id}:send_payment:{arguments['payment_id']}"


def make_tool(effect: Effect | str, ledger: Ledger) -> ToolSpec:
    """The synthetic tool of one side-effect level; its writes land in ``ledger``."""
    effect = Effect(effect)
    if effect is READ:

        def search_notes(query: str) -> str:
            """Search the team's notes; one matching note per line."""
            hits = [note for note in NOTES if query.lower() in note.lower()]
            return "\n".join(hits) or "no match"

        return ToolSpec(
            "search_notes", "Search the team's notes.", effect, TIMEOUT, 3, OUTPUT_LIMIT,
            search_notes, required_scopes=frozenset({SCOPES[effect]}),
        )

    if effect is REVERSIBLE:

        def save_draft(draft_id: str, text: str) -> dict[str, Any]:
            """Save (or overwrite) a draft."""
            ledger.put(draft_id, text)
            return {"draft_id": draft_id, "chars": len(text), "saved": True}

        def draft_status(draft_id: str, text: str) -> dict[str, Any] | None:
            """The receipt when exactly this draft is saved, None when it is not."""
            if ledger.get(draft_id) != text:
                return None
            return {"draft_id": draft_id, "chars": len(text), "saved": True}

        return ToolSpec(
            "save_draft", "Save a draft; saving the same draft again changes nothing.", effect,
            TIMEOUT, 3, OUTPUT_LIMIT, save_draft, required_scopes=frozenset({SCOPES[effect]}),
            status_lookup=draft_status, idempotency_key=draft_key,
        )

    def send_payment(payment_id: str, to: str, amount: int) -> dict[str, Any]:
        """Send money. It cannot be taken back."""
        ledger.put(payment_id, {"to": to, "amount": amount})
        return {"payment_id": payment_id, "to": to, "amount": amount, "status": "sent"}

    return ToolSpec(
        "send_payment", "Send a payment; it cannot be undone.", effect, TIMEOUT, 1, OUTPUT_LIMIT,
        send_payment, required_scopes=frozenset({SCOPES[effect]}), idempotency_key=payment_key,
    )


def make_payment_tool(service: PaymentService, *, forward_key: bool = True) -> ToolSpec:
    """``send_payment`` through ``service``, which deduplicates by key as payment APIs do.

    With ``forward_key`` the handler sends the runner's key for its call
    (``current_call().idempotency_key``) as the request's idempotency key. Then sending the
    same request again *is* a truthful status lookup: the service answers the original charge
    and pays nothing, or, had nothing been paid, pays now (the one payment the person
    approved). So the tool's status lookup is that resend (``resend_payment``), with nothing
    of its own to look up. Without the key the same resend is a second payment.
    """

    def send_payment(payment_id: str, to: str, amount: int) -> dict[str, Any]:
        """Send money through the payment service. It cannot be undone."""
        call = current_call()
        key = call.idempotency_key if forward_key and call is not None else None
        return {"payment_id": payment_id, **service.charge(to, amount, idempotency_key=key)}

    def resend_payment(payment_id: str, to: str, amount: int) -> dict[str, Any]:
        """The status lookup: the same request again (with the same key, when forwarded)."""
        return send_payment(payment_id, to, amount)

    return ToolSpec(
        "send_payment", "Send a payment; it cannot be undone.", IRREVERSIBLE, TIMEOUT, 1,
        OUTPUT_LIMIT, send_payment, required_scopes=frozenset({SCOPES[IRREVERSIBLE]}),
        idempotency_key=payment_key, status_lookup=resend_payment,
    )


class Written(Protocol):
    """Anything that counts the writes that landed in it (a :class:`Ledger`, a
    :class:`~agentkit.demo.payments.PaymentService`)."""

    @property
    def writes(self) -> int: ...


class Bench:
    """One cell's fresh world: one tool with its handler wrapped in a fault, a registry, a runner.

    The tool is ``spec`` when given (its writes land wherever its handler puts them, counted
    when ``writes_in`` names that place), else the synthetic tool of ``effect`` on ``ledger``
    (a new :class:`Ledger` by default). ``spec_changes`` replace fields of the tool's spec
    (``timeout_seconds=0.2`` …).
    """

    def __init__(
        self,
        effect: Effect | str,
        *,
        spec: ToolSpec | None = None,
        fault: Callable[[Callable[..., Any]], faults.Fault] = faults.count_calls,
        ledger: Ledger | None = None,
        writes_in: Written | None = None,
        store: Any = None,
        budget: Budget | None = None,
        context: CallContext = LEARNER,
        policies: Sequence[Policy] = (),
        **spec_changes: Any,
    ) -> None:
        self.effect = Effect(effect)
        self.ledger = ledger if ledger is not None else Ledger()
        self.demo_tool = spec is None  # True: the synthetic tool, whose writes land in ledger
        self.writes_in: Written | None = self.ledger if spec is None else writes_in
        base = spec if spec is not None else make_tool(self.effect, self.ledger)
        self.fault = fault(base.handler)
        self.spec = dataclasses.replace(base, handler=self.fault, **spec_changes)
        self.registry = ToolRegistry([self.spec], policies=list(policies))
        self.runner = ToolRunner(
            self.registry, store=store, budget=budget, context=context, sleep=no_wait
        )
        self.steps: list[tuple[str, dict[str, Any]]] = []
        self.calls_elsewhere = 0  # handler calls made by another process (the crash cell)

    def ask(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The model calls the tool; when it asks for approval, a person approves."""
        result = self.runner.call(self.spec.name, dict(arguments))
        self.steps.append((f"call {self.spec.name} {compact(arguments)}", result))
        if result.get("error") == "approval_required":
            approval_id = result["approval_id"]
            result = self.runner.approve(approval_id)
            self.steps.append((f"approve {approval_id}", result))
        return result

    @property
    def result(self) -> dict[str, Any]:
        """What the model saw last."""
        return self.steps[-1][1]

    @property
    def handler_calls(self) -> int:
        return self.fault.calls + self.calls_elsewhere

    @property
    def writes(self) -> int | None:
        """Writes that landed, in every process (None: a tool whose writes are not counted)."""
        return None if self.writes_in is None else self.writes_in.writes

    def close(self) -> None:
        """Release the fault (no thread stays blocked) and the store's connections."""
        self.fault.release()
        close = getattr(self.runner.store, "close", None)
        if close is not None:
            close()


@dataclasses.dataclass(frozen=True)
class Subject:
    """What the scenarios play: a tool, what the model sends it, and who calls.

    ``spec`` None means the synthetic tool of ``effect``. ``other_arguments`` name the same
    object (the same id or path) with another payload. ``reset`` (optional) is called
    before each bench, to empty whatever a real tool wrote in the cell before. ``policies``
    are the registry policies the tool runs behind; ``forbidden_arguments`` a call they refuse
    (the authorization cell plays it when the tool requires no scope).
    """

    effect: Effect
    arguments: Mapping[str, Any]
    other_arguments: Mapping[str, Any] | None = None
    spec: ToolSpec | None = None
    context: CallContext = LEARNER
    guest: CallContext = GUEST
    reset: Callable[[], Any] | None = None
    policies: tuple[Policy, ...] = ()
    forbidden_arguments: Mapping[str, Any] | None = None

    @classmethod
    def demo(cls, effect: Effect | str) -> Subject:
        """The synthetic tool of one side-effect level, with the matrix's arguments."""
        effect = Effect(effect)
        return cls(effect, ARGUMENTS[effect], OTHER_PAYLOAD.get(effect))

    @classmethod
    def of(
        cls,
        spec: ToolSpec,
        arguments: Mapping[str, Any],
        other_arguments: Mapping[str, Any] | None = None,
        *,
        task_id: str = "audit",
        reset: Callable[[], Any] | None = None,
        policies: Sequence[Policy] = (),
        forbidden_arguments: Mapping[str, Any] | None = None,
    ) -> Subject:
        """Any tool: called by a principal granted exactly the tool's scopes."""
        context = CallContext(task_id=task_id, principal="learner", scopes=spec.required_scopes)
        guest = CallContext(task_id=task_id, principal="guest")
        return cls(spec.effect, dict(arguments), None if other_arguments is None else dict(other_arguments),
                   spec, context, guest, reset, tuple(policies),
                   None if forbidden_arguments is None else dict(forbidden_arguments))

    def bench(self, **options: Any) -> Bench:
        """A fresh bench for this subject; ``options`` go to :class:`Bench`."""
        if self.reset is not None:
            self.reset()
        options.setdefault("context", self.context)
        options.setdefault("policies", self.policies)
        return Bench(self.effect, spec=self.spec, **options)

    def without_a_required_argument(self) -> dict[str, Any]:
        """The arguments with the first required one left out."""
        arguments = dict(self.arguments)
        if self.spec is None:
            del arguments[next(iter(arguments))]
            return arguments
        schema = ToolRegistry([self.spec]).describe("mcp")[0]["inputSchema"]
        required = [name for name in schema.get("required", []) if name in arguments]
        if not required:
            raise ValueError(f"{self.spec.name} has no required argument to leave out")
        del arguments[required[0]]
        return arguments

    def payload_changed(self) -> dict[str, Any]:
        if self.other_arguments is None:
            raise ValueError("this cell needs other_arguments: the same intent with another payload")
        return dict(self.other_arguments)


# ------------------------------------------------------------------------- one function per failure


def missing_argument(subject: Subject, workdir: Path) -> Bench:
    """The model leaves out a required argument: the schema check refuses and nothing runs.
    An irreversible write is refused before any approval is asked for."""
    bench = subject.bench()
    bench.ask(subject.without_a_required_argument())
    return bench


def transient_disconnect(subject: Subject, workdir: Path) -> Bench:
    """The connection drops. A read is simply asked again (3 attempts). For a write, the drop
    comes after the write landed: the reversible write asks the status lookup, finds it done
    and returns the receipt instead of writing twice; the irreversible write is never retried,
    and since the payment may have landed it is not called failed: its status lookup decides,
    and without one (``send_payment`` has none) the answer is ``outcome_unknown``, not
    retryable (docs/design.md#irreversible-writes)."""
    if subject.effect is READ:  # answers on call 3 of 3
        bench = subject.bench(fault=lambda fn: faults.fail_times(fn, 2), max_attempts=3)
    else:
        bench = subject.bench(fault=lambda fn: faults.fail_times(fn, 1, after_call=True))
    bench.ask(subject.arguments)
    return bench


def authorization_denial(subject: Subject, workdir: Path) -> Bench:
    """A caller without the tool's scope is refused before anything runs; no retry. A tool
    that requires no scope but runs behind a registry policy (``save_brief`` and its
    workspace) is asked for what that policy refuses (``forbidden_arguments``) instead."""
    spec = subject.spec
    if spec is not None and not spec.required_scopes and subject.forbidden_arguments is not None:
        bench = subject.bench()
        bench.ask(subject.forbidden_arguments)
        return bench
    bench = subject.bench(context=subject.guest)
    bench.ask(subject.arguments)
    return bench


def timeout_outcome_unknown(subject: Subject, workdir: Path) -> Bench:
    """The handler runs past ``timeout_seconds``. A read hangs on both of its two attempts and
    may be asked again. A write lands and then hangs: the reversible write's status lookup
    finds it and returns the receipt; the irreversible write is ``outcome_unknown``."""
    if subject.effect is READ:
        bench = subject.bench(fault=faults.hang, timeout_seconds=SHORT_TIMEOUT, max_attempts=2)
    else:
        bench = subject.bench(fault=faults.commit_then_timeout, timeout_seconds=SHORT_TIMEOUT)
    bench.ask(subject.arguments)
    return bench


def oversized_output(subject: Subject, workdir: Path) -> Bench:
    """The handler returns a million characters: the model sees at most ``max_output_chars``,
    with ``truncated`` and the original size."""
    bench = subject.bench(fault=faults.huge_output)
    bench.ask(subject.arguments)
    return bench


def same_write_repeated(subject: Subject, workdir: Path) -> Bench:
    """The model sends the same write twice: it runs once, the second call is a replay."""
    bench = subject.bench()
    bench.ask(subject.arguments)
    bench.ask(subject.arguments)
    return bench


def same_key_other_payload(subject: Subject, workdir: Path) -> Bench:
    """The same idempotency key comes back with another payload: ``idempotency_conflict``.
    The first write ran once; the conflicting one runs nothing."""
    bench = subject.bench()
    bench.ask(subject.arguments)
    bench.ask(subject.payload_changed())
    return bench


def process_killed_mid_write(subject: Subject, workdir: Path) -> Bench:
    """A process saves and dies the moment the write has landed, before the store could record
    it. A new runner on the same durable store sees the dead owner's claim, asks the status
    lookup, and returns the receipt: no second write.

    The demo tool dies for real in a child process (:func:`crash_mid_write`). Any other tool
    cannot be rebuilt in a child, so its write lands here, once, and a child process takes the
    same claim in the same store and dies holding it.
    """
    if subject.spec is None:
        before = DiskLedger(workdir / "ledger").writes
        run_child("crash_mid_write", str(workdir))
        bench = durable_bench(workdir)
        bench.calls_elsewhere = bench.ledger.writes - before  # every save_draft call writes once
        bench.ask(subject.arguments)
        return bench
    bench = subject.bench(store=SQLiteIdempotencyStore(workdir / "store.sqlite"))
    bench.fault(**subject.arguments)  # the write of the process that dies
    key = None if bench.spec.idempotency_key is None else str(
        bench.spec.idempotency_key(subject.context, dict(subject.arguments)))
    claim = {"name": bench.spec.name, "effect": bench.spec.effect.value, "key": key,
             "task_id": subject.context.task_id, "arguments": dict(subject.arguments)}
    run_child("claim_and_die", str(workdir / "store.sqlite"), json.dumps(claim))
    bench.ask(subject.arguments)
    return bench


def budget_spent(subject: Subject, workdir: Path) -> Bench:
    """The task's budget is already spent: nothing runs, whatever the tool."""
    bench = subject.bench(budget=Budget(max_attempts=0))
    bench.ask(subject.arguments)
    return bench


def killed_after_payment_key_forwarded(subject: Subject, workdir: Path) -> Bench:
    """A worker asks, a person approves, the payment goes out and the worker is killed before
    the store records it. The handler forwarded the runner's key to the payment service, so a
    new runner on the same store recovers the dead approver's claim by resending the same
    request, its status lookup: the service answers the original charge. One payment, one
    handler call, and no status lookup of the tool's own to write."""
    return _killed_after_payment(subject, workdir, forward_key=True)


def killed_after_payment_key_not_forwarded(subject: Subject, workdir: Path) -> Bench:
    """The same tool, the same kill, but the handler sends no key: the resend cannot be
    recognised as the same request and pays again. Two payments from one handler call."""
    return _killed_after_payment(subject, workdir, forward_key=False)


def _killed_after_payment(subject: Subject, workdir: Path, *, forward_key: bool) -> Bench:
    if subject.spec is not None:
        raise ValueError("this row plays the demo's payment tool; a tool of yours is audited by "
                         "process_killed_mid_write")
    service = PaymentService(workdir / "payments.sqlite3")
    run_child("pay_and_die", str(workdir), "forward" if forward_key else "plain")
    tool = make_payment_tool(service, forward_key=forward_key)
    bench = dataclasses.replace(subject, spec=tool).bench(
        store=SQLiteIdempotencyStore(workdir / "store.sqlite"), writes_in=service)
    bench.calls_elsewhere = service.requests  # the dead worker's: every handler call sends one
    bench.ask(subject.arguments)
    return bench


SCENARIOS: dict[str, Callable[[Subject, Path], Bench]] = {
    "missing_argument": missing_argument,
    "transient_disconnect": transient_disconnect,
    "authorization_denial": authorization_denial,
    "timeout_outcome_unknown": timeout_outcome_unknown,
    "oversized_output": oversized_output,
    "same_write_repeated": same_write_repeated,
    "same_key_other_payload": same_key_other_payload,
    "process_killed_mid_write": process_killed_mid_write,
    "budget_spent": budget_spent,
    "killed_after_payment_key_forwarded": killed_after_payment_key_forwarded,
    "killed_after_payment_key_not_forwarded": killed_after_payment_key_not_forwarded,
}


# ------------------------------------------------------------------------- the crash cell's child


def durable_bench(workdir: Path, **options: Any) -> Bench:
    """The reversible tool on a ledger and a store that both live on disk in ``workdir``."""
    return Bench(
        REVERSIBLE,
        ledger=DiskLedger(workdir / "ledger"),
        store=SQLiteIdempotencyStore(workdir / "store.sqlite"),
        **options,
    )


class ExitAfterCall(faults.Fault):
    """Run the handler, then end the process at once: killed after the write, before the store
    records it. Only ever used in a child process."""

    kind = "exit_after_call"

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._inner(args, kwargs)
        os._exit(CRASH_EXIT_CODE)


def crash_mid_write(workdir: str) -> None:
    """A child process's whole life: save the demo draft, die as the write lands."""
    bench = durable_bench(Path(workdir), fault=ExitAfterCall)
    bench.ask(ARGUMENTS[REVERSIBLE])
    os._exit(3)  # not reached: the handler ended the process


def claim_and_die(store_path: str, claim_json: str) -> None:
    """A child process's whole life: take the claim a runner takes for this call of a tool
    (same name, key, task and arguments, in the same store), then die holding it."""
    claim = json.loads(claim_json)
    key = claim["key"]

    def die(**arguments: Any) -> None:
        os._exit(CRASH_EXIT_CODE)

    spec = ToolSpec(claim["name"], "the tool of the process that dies", claim["effect"], TIMEOUT, 1,
                    OUTPUT_LIMIT, die, parameters={"type": "object"},
                    idempotency_key=None if key is None else (lambda context, arguments: key))
    runner = ToolRunner(ToolRegistry([spec]), store=SQLiteIdempotencyStore(store_path),
                        context=CallContext(task_id=claim["task_id"]), sleep=no_wait)
    runner.call(claim["name"], claim["arguments"])
    os._exit(3)  # not reached: the handler ended the process


def pay_and_die(workdir: str, key: str) -> None:
    """A child process's whole life: ask for the payment tool's payment (``key`` is
    ``"forward"`` or ``"plain"``), a person approves, the payment goes out, the process dies
    before the store records it."""
    service = PaymentService(Path(workdir) / "payments.sqlite3")
    bench = Bench(IRREVERSIBLE, spec=make_payment_tool(service, forward_key=key == "forward"),
                  fault=ExitAfterCall, store=SQLiteIdempotencyStore(Path(workdir) / "store.sqlite"))
    bench.ask(ARGUMENTS[IRREVERSIBLE])
    os._exit(3)  # not reached: the handler ended the process


def run_child(function: str, *argv: str, module: str = __name__) -> None:
    """Run ``function(*argv)`` of ``module`` (this one by default) in a child process; check
    that it died mid-write."""
    code = f"import sys; from {module} import {function}; {function}(*sys.argv[1:])"
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, "-c", code, *argv],
        check=False, capture_output=True, text=True, timeout=60, env=env,
    )
    if child.returncode != CRASH_EXIT_CODE:
        raise RuntimeError(
            f"the child process did not die mid-write (exit code {child.returncode}): "
            f"{child.stderr[-1000:]}"
        )


def compact(value: Any) -> str:
    """``value`` as one line of JSON, as a step of a transcript shows it."""
    return json_text(value, compact=True)

