"""The failure matrix (docs/design.md#failure-matrix) as a table: expected beside observed.

The failures themselves are provoked for real in :mod:`agentkit.demo.scenarios`: every cell is
played on fresh tools (a new ledger, registry, runner and store, the tool's handler wrapped in
a fault that counts its real calls). This module loads the expectations, plays cells and
compares. The expectations live in one file, ``data/failure_matrix.csv``::

    failure,effect,expected,handler_calls,note

``expected`` is what the model saw last, in a few words: ``ok`` or the error code, then
``+retryable`` when the error says that asking again may help, ``+truncated`` when the output
was cut and ``+replayed`` when a stored result came back and nothing ran (for example
``outcome_unknown+retryable`` or ``ok+replayed``). ``handler_calls`` is the exact number of
times the tool's handler really ran, in every process, over the whole scenario.

What the played table adds beside them, ``writes``, is what those calls did: the writes that
landed, in every process (0 for a read). Handler calls and writes differ where the rows are
about that difference: the payment rows, where one handler call and a resend make one payment
when the key was forwarded and two when it was not (the CSV's note says which).

    play("timeout_outcome_unknown", "reversible_write")   # one cell, with its runner's trace
    run_matrix()                                          # every row, as a pandas DataFrame

Nothing here waits on backoff. Only the timeout cells wait, for their tool's short
``timeout_seconds``. :func:`agentkit.demo.harness.audit` plays the same cells on any tool.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkit.boundary.spec import Effect
from agentkit.demo.resources import data_path
from agentkit.demo.scenarios import (
    ARGUMENTS,
    CELLS,
    EFFECTS,
    FAILURES,
    OTHER_PAYLOAD,
    OUTPUT_LIMIT,
    PAYMENT_FAILURES,
    REVERSIBLE,
    SCENARIOS,
    SHORT_TIMEOUT,
    Bench,
    DiskLedger,
    Ledger,
    Subject,
    make_tool,
)
from agentkit.policy.runner import ToolRunner

if TYPE_CHECKING:  # pandas is imported only when a frame is asked for
    import pandas

__all__ = [
    "ARGUMENTS",
    "CELLS",
    "COLUMNS",
    "CSV_PATH",
    "EFFECTS",
    "FAILURES",
    "OTHER_PAYLOAD",
    "OUTPUT_LIMIT",
    "PAYMENT_FAILURES",
    "REVERSIBLE",
    "SCENARIOS",
    "SHORT_TIMEOUT",
    "Bench",
    "CellResult",
    "DiskLedger",
    "Ledger",
    "Subject",
    "cell_result",
    "check_row",
    "label",
    "load_matrix",
    "make_tool",
    "matrix_records",
    "observe",
    "play",
    "run_matrix",
    "scratch",
]

log = logging.getLogger("agentkit")

#: The single source of the expectations.
CSV_PATH = data_path("failure_matrix.csv")
CSV_COLUMNS = ["failure", "effect", "expected", "handler_calls", "note"]
#: The columns of :func:`run_matrix`.
COLUMNS = [
    "failure", "effect", "expected", "observed", "handler_calls", "expected_calls", "writes",
    "attempts", "budget_used", "pass",
]

def label(name: str | Effect) -> str:
    """A human label for a failure or effect id: ``"timeout_outcome_unknown"`` → ``"timeout outcome unknown"``."""
    return str(name).replace("_", " ")


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
    writes: int | None  # writes that landed, in every process: in the demo tool's ledger (0 for
    # a read), the payments of the payment rows; None for a tool of yours, whose writes land
    # where its handler puts them
    steps: list[tuple[str, dict[str, Any]]]  # (what was done, what the model saw)
    runner: ToolRunner = dataclasses.field(repr=False)  # for ``runner.trace.to_frame()``

    @property
    def text(self) -> str:
        """A short transcript: each step and its result, then the counts."""
        lines = []
        for action, result in self.steps:
            lines.append(action)
            lines.append(f"  -> {_summary(result)}")
        counts = (f"handler calls: {self.handler_calls}, attempts: {self.attempts}, "
                  f"budget used: {self.budget_used}")
        if self.writes is not None:
            counts += f", writes landed: {self.writes}"
        lines.append(counts)
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
    failure: str,
    effect: Effect | str,
    *,
    workdir: str | os.PathLike[str] | None = None,
    subject: Subject | None = None,
) -> CellResult:
    """Provoke one failure at one side-effect level on fresh tools, and count what happened.

    The tool is the synthetic one of ``effect`` unless ``subject`` names another
    (:class:`~agentkit.demo.scenarios.Subject`). ``workdir`` holds the crash cell's files (a
    temporary directory by default). Every fault is released before this returns, so no
    thread stays blocked; the returned runner is for its trace (its durable store, if any, is
    closed).
    """
    effect_value = Effect(effect).value
    if (failure, effect_value) not in CELLS:
        raise ValueError(f"{failure} × {effect_value} is not a cell of the matrix (docs/design.md: —)")
    if subject is None:
        subject = Subject.demo(effect_value)
    with scratch(workdir, f"{failure}-{effect_value}-") as work:
        bench = SCENARIOS[failure](subject, work)
        try:
            return cell_result(failure, bench)
        finally:
            bench.close()


def cell_result(failure: str, bench: Bench) -> CellResult:
    """What a played bench shows: the last result, in the matrix's words, and the counts."""
    result = bench.result
    return CellResult(
        failure=failure,
        effect=bench.effect.value,
        result=result,
        observed=observe(result),
        handler_calls=bench.handler_calls,
        attempts=int(result.get("attempts", 0)),
        budget_used=bench.runner.budget.used,
        writes=bench.writes,
        steps=list(bench.steps),
        runner=bench.runner,
    )


@contextlib.contextmanager
def scratch(workdir: str | os.PathLike[str] | None, prefix: str) -> Iterator[Path]:
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

    frame: pandas.DataFrame = pd.DataFrame.from_records(
        matrix_records(rows, workdir=workdir), columns=COLUMNS
    )
    return frame


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
                          writes=None, attempts=None, budget_used=None)
        else:
            record.update(observed=cell.observed, handler_calls=cell.handler_calls,
                          writes=cell.writes, attempts=cell.attempts,
                          budget_used=cell.budget_used)
        record["pass"] = (
            record["observed"] == row["expected"] and record["handler_calls"] == row["handler_calls"]
        )
        records.append({column: record[column] for column in COLUMNS})
    return records


# ------------------------------------------------------------------------- text helpers


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
