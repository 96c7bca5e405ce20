"""The failure matrix (DESIGN §8): each failure, at each side-effect level, provoked for real.

Every cell is played on fresh tools: a new ledger, registry, runner and store, and the tool's
handler wrapped in a fault from :mod:`agentkit.demo.faults` that counts its real calls. The
expectations live in one file, ``data/failure_matrix.csv``::

    failure,effect,expected,handler_calls,note

``expected`` is what the model saw last, in a few words: ``ok`` or the error code, then
``+retryable`` when the error says that asking again may help, ``+truncated`` when the output
was cut and ``+replayed`` when a stored result came back and nothing ran (for example
``outcome_unknown+retryable`` or ``ok+replayed``). ``handler_calls`` is the exact number of
times the tool's handler really ran, in every process, over the whole scenario.

    play("timeout_outcome_unknown", "reversible_write")   # one cell, with its runner's trace
    run_matrix()                                          # every row, as a pandas DataFrame

Nothing here waits on backoff: every runner gets a ``sleep`` that returns at once. Only the
timeout cells wait, for their tool's short ``timeout_seconds``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit.demo import faults
from agentkit.demo.resources import data_path
from agentkit.policy.budget import Budget
from agentkit.boundary.context import CallContext
from agentkit.boundary.registry import ToolRegistry
from agentkit.policy.runner import ToolRunner
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.policy.stores import SQLiteIdempotencyStore

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for
    import pandas

__all__ = [
    "CELLS",
    "COLUMNS",
    "CSV_PATH",
    "EFFECTS",
    "FAILURES",
    "Bench",
    "CellResult",
    "DiskLedger",
    "Ledger",
    "label",
    "load_matrix",
    "make_tool",
    "matrix_records",
    "observe",
    "play",
    "run_matrix",
]

log = logging.getLogger("agentkit")

#: The single source of the expectations.
CSV_PATH = data_path("failure_matrix.csv")
CSV_COLUMNS = ["failure", "effect", "expected", "handler_calls", "note"]
#: The columns of :func:`run_matrix`.
COLUMNS = [
    "failure", "effect", "expected", "observed", "handler_calls", "expected_calls",
    "attempts", "budget_used", "pass",
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
)
EFFECTS = tuple(e.value for e in Effect)

READ, REVERSIBLE, IRREVERSIBLE = Effect.READ, Effect.REVERSIBLE_WRITE, Effect.IRREVERSIBLE_WRITE

#: The cells DESIGN §8 fills in (the others are "—": that failure cannot happen at that level).
CELLS = tuple(
    (failure, effect)
    for failure in FAILURES
    for effect in EFFECTS
    if not (failure in ("same_write_repeated", "same_key_other_payload") and effect == "read")
    and not (failure == "process_killed_mid_write" and effect != "reversible_write")
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


def label(name: str | Effect) -> str:
    """A human label for a failure or effect id: ``"timeout_outcome_unknown"`` → ``"timeout outcome unknown"``."""
    return str(name).replace("_", " ")


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

    Each entry is one JSON file written atomically (temp file, fsync, rename), so the status
    lookup can trust what it reads; every write also appends one line to ``writes.log``, so
    writes are counted across processes and across crashes.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_path = self.directory / "writes.log"

    def put(self, ref: str, value: Any) -> None:
        path = self.directory / f"{ref}.json"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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
            search_notes, required_scopes={SCOPES[effect]},
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
            TIMEOUT, 3, OUTPUT_LIMIT, save_draft, required_scopes={SCOPES[effect]},
            status_lookup=draft_status, idempotency_key=draft_key,
        )

    def send_payment(payment_id: str, to: str, amount: int) -> dict[str, Any]:
        """Send money. It cannot be taken back."""
        ledger.put(payment_id, {"to": to, "amount": amount})
        return {"payment_id": payment_id, "to": to, "amount": amount, "status": "sent"}

    return ToolSpec(
        "send_payment", "Send a payment; it cannot be undone.", effect, TIMEOUT, 1, OUTPUT_LIMIT,
        send_payment, required_scopes={SCOPES[effect]}, idempotency_key=payment_key,
    )


def _no_wait(seconds: float) -> None:
    """The runner's backoff sleep, made instant: the cells test policy, not patience."""


class Bench:
    """One cell's fresh world: a ledger, one tool with its handler wrapped in a fault, a runner.

    ``spec_changes`` replace fields of the tool's spec (``timeout_seconds=0.2`` …).
    """

    def __init__(
        self,
        effect: Effect | str,
        *,
        fault: Callable[[Callable[..., Any]], faults.Fault] = faults.count_calls,
        ledger: Ledger | None = None,
        store: Any = None,
        budget: Budget | None = None,
        context: CallContext = LEARNER,
        **spec_changes: Any,
    ) -> None:
        self.effect = Effect(effect)
        self.ledger = ledger if ledger is not None else Ledger()
        spec = make_tool(self.effect, self.ledger)
        self.fault = fault(spec.handler)
        self.spec = dataclasses.replace(spec, handler=self.fault, **spec_changes)
        self.registry = ToolRegistry([self.spec])
        self.runner = ToolRunner(
            self.registry, store=store, budget=budget, context=context, sleep=_no_wait
        )
        self.steps: list[tuple[str, dict[str, Any]]] = []
        self.calls_elsewhere = 0  # handler calls made by another process (the crash cell)

    def ask(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The model calls the tool; when it asks for approval, a person approves."""
        result = self.runner.call(self.spec.name, arguments)
        self.steps.append((f"call {self.spec.name} {_compact(arguments)}", result))
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

    def close(self) -> None:
        """Release the fault (no thread stays blocked) and the store's connections."""
        self.fault.release()
        close = getattr(self.runner.store, "close", None)
        if close is not None:
            close()


# ------------------------------------------------------------------------- one function per failure


def missing_argument(effect: Effect, workdir: Path) -> Bench:
    """The model leaves out a required argument: the schema check refuses and nothing runs.
    An irreversible write is refused before any approval is asked for."""
    bench = Bench(effect)
    arguments = dict(ARGUMENTS[effect])
    del arguments[next(iter(arguments))]
    bench.ask(arguments)
    return bench


def transient_disconnect(effect: Effect, workdir: Path) -> Bench:
    """The connection drops. A read is simply asked again. For a write, the drop comes after
    the write landed: the reversible write asks the status lookup, finds it done and returns
    the receipt instead of writing twice; the irreversible write is never retried."""
    if effect is READ:
        bench = Bench(effect, fault=lambda fn: faults.fail_times(fn, 2))  # answers on call 3 of 3
    else:
        bench = Bench(effect, fault=lambda fn: faults.fail_times(fn, 1, after_call=True))
    bench.ask(ARGUMENTS[effect])
    return bench


def authorization_denial(effect: Effect, workdir: Path) -> Bench:
    """A caller without the tool's scope is refused before anything runs; no retry."""
    bench = Bench(effect, context=GUEST)
    bench.ask(ARGUMENTS[effect])
    return bench


def timeout_outcome_unknown(effect: Effect, workdir: Path) -> Bench:
    """The handler runs past ``timeout_seconds``. A read hangs on both of its two attempts and
    may be asked again. A write lands and then hangs: the reversible write's status lookup
    finds it and returns the receipt; the irreversible write is ``outcome_unknown``."""
    if effect is READ:
        bench = Bench(effect, fault=faults.hang, timeout_seconds=SHORT_TIMEOUT, max_attempts=2)
    else:
        bench = Bench(effect, fault=faults.commit_then_timeout, timeout_seconds=SHORT_TIMEOUT)
    bench.ask(ARGUMENTS[effect])
    return bench


def oversized_output(effect: Effect, workdir: Path) -> Bench:
    """The handler returns a million characters: the model sees at most ``max_output_chars``,
    with ``truncated`` and the original size."""
    bench = Bench(effect, fault=faults.huge_output)
    bench.ask(ARGUMENTS[effect])
    return bench


def same_write_repeated(effect: Effect, workdir: Path) -> Bench:
    """The model sends the same write twice: it runs once, the second call is a replay."""
    bench = Bench(effect)
    bench.ask(ARGUMENTS[effect])
    bench.ask(ARGUMENTS[effect])
    return bench


def same_key_other_payload(effect: Effect, workdir: Path) -> Bench:
    """The same idempotency key comes back with another payload: ``idempotency_conflict``.
    The first write ran once; the conflicting one runs nothing."""
    bench = Bench(effect)
    bench.ask(ARGUMENTS[effect])
    bench.ask(OTHER_PAYLOAD[effect])
    return bench


def process_killed_mid_write(effect: Effect, workdir: Path) -> Bench:
    """A child process saves the draft and dies the moment the write has landed, before the
    store could record it. A new runner on the same durable store sees the dead owner's claim,
    asks the status lookup, and returns the receipt: no second write."""
    before = DiskLedger(workdir / "ledger").writes
    _run_crashing_child(workdir)
    bench = _durable_bench(workdir)
    bench.calls_elsewhere = bench.ledger.writes - before  # every save_draft call writes once
    bench.ask(ARGUMENTS[effect])
    return bench


def budget_spent(effect: Effect, workdir: Path) -> Bench:
    """The task's budget is already spent: nothing runs, whatever the tool."""
    bench = Bench(effect, budget=Budget(max_attempts=0))
    bench.ask(ARGUMENTS[effect])
    return bench


SCENARIOS: dict[str, Callable[[Effect, Path], Bench]] = {
    "missing_argument": missing_argument,
    "transient_disconnect": transient_disconnect,
    "authorization_denial": authorization_denial,
    "timeout_outcome_unknown": timeout_outcome_unknown,
    "oversized_output": oversized_output,
    "same_write_repeated": same_write_repeated,
    "same_key_other_payload": same_key_other_payload,
    "process_killed_mid_write": process_killed_mid_write,
    "budget_spent": budget_spent,
}


# ------------------------------------------------------------------------- the crash cell's child


def _durable_bench(workdir: Path, **options: Any) -> Bench:
    """The reversible tool on a ledger and a store that both live on disk in ``workdir``."""
    return Bench(
        REVERSIBLE,
        ledger=DiskLedger(workdir / "ledger"),
        store=SQLiteIdempotencyStore(workdir / "store.sqlite"),
        **options,
    )


class _ExitAfterCall(faults.Fault):
    """Run the handler, then end the process at once: killed after the write, before the store
    records it. Only ever used in a child process."""

    kind = "exit_after_call"

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._inner(args, kwargs)
        os._exit(CRASH_EXIT_CODE)


def _crash_mid_write(workdir: str) -> None:
    """The child process's whole life: save the draft, die as the write lands."""
    bench = _durable_bench(Path(workdir), fault=_ExitAfterCall)
    bench.ask(ARGUMENTS[REVERSIBLE])
    os._exit(3)  # not reached: the handler ended the process


def _run_crashing_child(workdir: Path) -> None:
    code = "import sys; from agentkit.demo.matrix import _crash_mid_write; _crash_mid_write(sys.argv[1])"
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    child = subprocess.run(
        [sys.executable, "-c", code, str(workdir)],
        capture_output=True, text=True, timeout=60, env=env,
    )
    if child.returncode != CRASH_EXIT_CODE:
        raise RuntimeError(
            f"the child process did not die mid-write (exit code {child.returncode}): "
            f"{child.stderr[-1000:]}"
        )


# ------------------------------------------------------------------------- playing cells


@dataclasses.dataclass
class CellResult:
    """One cell, played: what the model saw, and what really happened."""

    failure: str
    effect: str
    result: dict[str, Any]  # the last model-visible result
    observed: str  # ``result`` in the matrix's words, see :func:`observe`
    handler_calls: int  # real handler calls, in every process
    attempts: int  # the ``attempts`` of the last result
    budget_used: int  # units the runner's budget spent
    writes: int  # writes that landed in the tool's ledger (0 for a read)
    steps: list[tuple[str, dict[str, Any]]]  # (what was done, what the model saw)
    runner: ToolRunner = dataclasses.field(repr=False)  # for ``runner.trace.to_frame()``

    @property
    def text(self) -> str:
        """A short transcript: each step and its result, then the counts."""
        lines = []
        for action, result in self.steps:
            lines.append(action)
            lines.append(f"  -> {_summary(result)}")
        lines.append(
            f"handler calls: {self.handler_calls}, attempts: {self.attempts}, "
            f"budget used: {self.budget_used}, writes landed: {self.writes}"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text


def observe(result: Mapping[str, Any]) -> str:
    """A result in the matrix's words: ``ok`` or the error code, then ``+retryable``,
    ``+truncated``, ``+replayed`` (in that order) where they apply."""
    words = ["ok" if result.get("ok") else str(result.get("error"))]
    if not result.get("ok") and result.get("retryable"):
        words.append("retryable")
    if result.get("truncated"):
        words.append("truncated")
    if result.get("replayed"):
        words.append("replayed")
    return "+".join(words)


def play(
    failure: str, effect: Effect | str, *, workdir: str | os.PathLike[str] | None = None
) -> CellResult:
    """Provoke one failure at one side-effect level on fresh tools, and count what happened.

    ``workdir`` holds the crash cell's files (a temporary directory by default). Every fault
    is released before this returns, so no thread stays blocked; the returned runner is for
    its trace (its durable store, if any, is closed).
    """
    effect_value = Effect(effect).value
    if (failure, effect_value) not in CELLS:
        raise ValueError(f"{failure} × {effect_value} is not a cell of the matrix (DESIGN §8: —)")
    with _scratch(workdir, f"{failure}-{effect_value}-") as work:
        bench = SCENARIOS[failure](Effect(effect_value), work)
        try:
            result = bench.result
            return CellResult(
                failure=failure,
                effect=effect_value,
                result=result,
                observed=observe(result),
                handler_calls=bench.handler_calls,
                attempts=int(result.get("attempts", 0)),
                budget_used=bench.runner.budget.used,
                writes=bench.ledger.writes,
                steps=list(bench.steps),
                runner=bench.runner,
            )
        finally:
            bench.close()


@contextlib.contextmanager
def _scratch(workdir: str | os.PathLike[str] | None, prefix: str) -> Iterator[Path]:
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="agentkit-" + prefix) as tmp:
            yield Path(tmp)
    else:
        os.makedirs(workdir, exist_ok=True)
        yield Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))


# ------------------------------------------------------------------------- the whole matrix


def load_matrix(path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The rows of the matrix CSV (``data/failure_matrix.csv`` by default), checked.

    Raises ``ValueError`` naming the line for a wrong header, an unknown failure or effect,
    a "—" cell, a duplicate, or a ``handler_calls`` that is not a count.
    """
    path = CSV_PATH if path is None else Path(path)
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != CSV_COLUMNS:
            raise ValueError(f"{path}: the header must be {','.join(CSV_COLUMNS)}")
        rows = []
        seen = set()
        for row in reader:
            where = f"{path}, line {reader.line_num}"
            checked = check_row(row, where)
            cell = (checked["failure"], checked["effect"])
            if cell in seen:
                raise ValueError(f"{where}: {cell[0]} × {cell[1]} appears twice")
            seen.add(cell)
            rows.append(checked)
    return rows


def check_row(row: Mapping[str, Any], where: str = "row") -> dict[str, Any]:
    """One matrix row with ``handler_calls`` as an int; ``ValueError`` when it cannot be played."""
    missing = [c for c in CSV_COLUMNS[:4] if row.get(c) in (None, "")]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    failure, effect = str(row["failure"]).strip(), str(row["effect"]).strip()
    if failure not in FAILURES:
        raise ValueError(f"{where}: unknown failure {failure!r}; known: {', '.join(FAILURES)}")
    if effect not in EFFECTS:
        raise ValueError(f"{where}: unknown effect {effect!r}; known: {', '.join(EFFECTS)}")
    if (failure, effect) not in CELLS:
        raise ValueError(f"{where}: {failure} × {effect} is not a cell of the matrix")
    try:
        calls = int(str(row["handler_calls"]).strip())
    except ValueError:
        raise ValueError(f"{where}: handler_calls must be a whole number") from None
    if calls < 0:
        raise ValueError(f"{where}: handler_calls must be >= 0")
    return {
        "failure": failure,
        "effect": effect,
        "expected": str(row["expected"]).strip(),
        "handler_calls": calls,
        "note": str(row.get("note") or ""),
    }


def run_matrix(
    rows: Iterable[Mapping[str, Any]] | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
) -> pandas.DataFrame:
    """Play every row (the CSV's by default) and compare: one DataFrame row per cell.

    ``pass`` is True when the last result and the real handler call count are both as
    expected. A cell that could not be played at all is reported, not raised: ``observed``
    names the exception (its traceback goes to the ``agentkit`` logger) and ``pass`` is False.
    """
    import pandas as pd

    return pd.DataFrame.from_records(matrix_records(rows, workdir=workdir), columns=COLUMNS)


def matrix_records(
    rows: Iterable[Mapping[str, Any]] | None = None,
    *,
    workdir: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """:func:`run_matrix` without pandas: one dict per cell, keys :data:`COLUMNS`, in order.

    ``python -m agentkit matrix`` uses this, so a plain ``pip install agentkit`` (no notebook
    extras) can still play the whole matrix.
    """
    checked = load_matrix() if rows is None else [check_row(r) for r in rows]
    order = {cell: i for i, cell in enumerate(CELLS)}
    checked.sort(key=lambda r: order[(r["failure"], r["effect"])])
    records: list[dict[str, Any]] = []
    for row in checked:
        record: dict[str, Any] = {
            "failure": row["failure"],
            "effect": row["effect"],
            "expected": row["expected"],
            "expected_calls": row["handler_calls"],
        }
        try:
            cell = play(row["failure"], row["effect"], workdir=workdir)
        except Exception as exc:
            log.exception("failure matrix: %s × %s could not be played", row["failure"], row["effect"])
            record.update(observed=f"error: {type(exc).__name__}", handler_calls=None,
                          attempts=None, budget_used=None)
        else:
            record.update(observed=cell.observed, handler_calls=cell.handler_calls,
                          attempts=cell.attempts, budget_used=cell.budget_used)
        record["pass"] = (
            record["observed"] == row["expected"] and record["handler_calls"] == row["handler_calls"]
        )
        records.append({column: record[column] for column in COLUMNS})
    return records


# ------------------------------------------------------------------------- text helpers


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _summary(result: Mapping[str, Any], width: int = 60) -> str:
    words = observe(result)
    if result.get("ok"):
        data = str(result.get("data", "")).replace("\n", " ")
        if len(data) > width:
            data = data[: width - 1] + "…"
        extra = f" (original_chars {result['original_chars']})" if result.get("truncated") else ""
        return f"{words}{extra}: {data}"
    if result.get("approval_id"):
        return f"{words} ({result['approval_id']})"
    return words
