"""The measuring machinery of ``make bench``: interleaved rounds, per-round ratios, goals.

Why interleaved rounds and per-round ratios
    On a small shared machine the speed of everything drifts by 2x within a minute (other
    processes, frequency scaling). Timing path A for ten seconds and then path B compares A
    on a quiet machine with B on a busy one. Here every round times each path once, A B C …
    A B C …, each for about ``target_seconds``, so the paths of one round share the machine's
    state; the ratio A/B is computed *within* each round and the report gives the median of
    those ratios. The absolute µs swing with the load; the ratios hold.

Every path gets a warm-up and its own loop count, calibrated so one sample lasts about
``target_seconds`` (cheap calls are looped many times, slow ones a few). The garbage collector
stays on for every path alike (it is part of what a real call costs), and a collection runs
before each sample so no path pays for another's garbage.

Nothing here knows what is measured: :mod:`benchmarks.suites` builds the paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import gc
import io
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]


@dataclass
class Path:
    """One way of making one call. Exactly one of ``fn`` (sync) and ``afn`` (async) is set,
    unless the path is ``missing`` (its reason: not installed, not implemented yet, failed)."""

    name: str
    fn: Callable[[], Any] | None = None
    afn: Callable[[], Awaitable[Any]] | None = None
    missing: str | None = None
    note: str = ""
    loops: int = 0
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round

    @property
    def available(self) -> bool:
        return self.missing is None and (self.fn is not None or self.afn is not None)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


def missing(name: str, reason: str, note: str = "") -> Path:
    return Path(name, missing=reason, note=note)


def build(
    name: str,
    factory: Callable[[], Callable[[], Any]],
    *,
    is_async: bool = False,
    check: Callable[[Any], bool] | None = None,
    note: str = "",
) -> Path:
    """A path from ``factory()``, which returns the zero-argument call to time.

    The call is made once here (and its result checked by ``check``), so a path that fails to
    build or to run is reported missing with the reason instead of breaking the whole run.
    """
    try:
        call = factory()
        result = asyncio.run(_once(call)) if is_async else call()
        if check is not None and not check(result):
            return missing(name, f"unexpected result: {_short(result)}", note)
    except Exception as exc:  # any peer may break in any way; say how, never drop it
        return missing(name, f"{type(exc).__name__}: {_short(exc)}", note)
    if is_async:
        return Path(name, afn=call, note=note)
    return Path(name, fn=call, note=note)


async def _once(call: Callable[[], Awaitable[Any]]) -> Any:
    return await call()


def _short(value: Any, limit: int = 160) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- pure logic


def per_round_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """``numerator[i] / denominator[i]`` for every round both paths have (zeros skipped)."""
    return [a / b for a, b in zip(numerator, denominator, strict=False) if b > 0]


def median_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float | None:
    """The median of the per-round ratios, or None when the rounds give none."""
    ratios = per_round_ratios(numerator, denominator)
    return statistics.median(ratios) if ratios else None


def best_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float | None:
    """The ratio of the two paths' best (fastest) rounds, or None when either has none.

    A second reading of the same rounds for paths whose speed hangs on thread wake-ups: on a
    shared machine a round can be slowed for one path and not the other, and each path's best
    round is what it costs when nothing else is in the way."""
    if not numerator or not denominator or min(denominator) <= 0:
        return None
    return min(numerator) / min(denominator)


def loops_for(target_seconds: float, loops: int, elapsed: float) -> int:
    """How many calls make one sample last about ``target_seconds``, from a probe of
    ``loops`` calls that took ``elapsed`` seconds (at least 1)."""
    if elapsed <= 0:
        return max(1, loops * 10)
    return max(1, math.ceil(loops * target_seconds / elapsed))


# --------------------------------------------------------------------------- running


async def _abatch(afn: Callable[[], Awaitable[Any]], loops: int) -> None:
    for _ in range(loops):
        await afn()


class Runner:
    """Runs paths in interleaved rounds. One event loop serves every async path (created
    once, as a host application has one); sync paths run in the calling thread."""

    def __init__(
        self,
        *,
        rounds: int = 15,
        target_seconds: float = 0.02,
        warmup_seconds: float = 0.02,
        clock: Clock = time.perf_counter,
        collect: Callable[[], Any] = gc.collect,
    ) -> None:
        if rounds < 1:
            raise ValueError("rounds must be >= 1")
        self.rounds = rounds
        self.target_seconds = target_seconds
        self.warmup_seconds = warmup_seconds
        self._clock = clock
        self._collect = collect
        self._loop: asyncio.AbstractEventLoop | None = None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _time(self, path: Path, loops: int) -> float:
        """Seconds for ``loops`` calls of ``path``."""
        if path.afn is not None:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            start = self._clock()
            self._loop.run_until_complete(_abatch(path.afn, loops))
            return self._clock() - start
        fn = path.fn
        assert fn is not None
        start = self._clock()
        for _ in range(loops):
            fn()
        return self._clock() - start

    def calibrate(self, path: Path) -> int:
        """Warm up for ``warmup_seconds``, then choose the loop count for one sample."""
        loops, elapsed = 1, self._time(path, 1)
        spent = elapsed
        while elapsed < self.warmup_seconds / 4 and spent < self.warmup_seconds * 4:
            loops *= 4
            elapsed = self._time(path, loops)
            spent += elapsed
        if spent < self.warmup_seconds:
            self._time(path, loops_for(self.warmup_seconds - spent, loops, elapsed))
        return loops_for(self.target_seconds, loops, elapsed)

    def run(self, paths: Iterable[Path]) -> list[Path]:
        """Calibrate every available path, then time them round by round: A B C … A B C …"""
        chosen = [p for p in paths if p.available]
        for path in chosen:
            path.loops = self.calibrate(path)
            path.samples = []
        for _ in range(self.rounds):
            for path in chosen:
                self._collect()
                path.samples.append(self._time(path, path.loops) / path.loops)
        return chosen


# --------------------------------------------------------------------------- one CPU


def thread_ids() -> list[int]:
    """The kernel's ids of this process's threads (Linux), or none where it does not say."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


@contextlib.contextmanager
def on_one_cpu() -> Iterator[int | None]:
    """Every thread of this process on one CPU for the block; each thread's CPUs back after.

    On a machine with few CPUs a hand-off to a waiting thread costs what the scheduler makes
    of it: a thread that shares the caller's CPU is switched to at once, one on another CPU is
    woken across (on a 2-vCPU virtual machine, ~4x slower), and which of the two a thread gets
    holds for the life of the process. With every thread on one CPU each hand-off is a switch
    on that CPU, so a row times the software alone. Threads started inside the block inherit
    the pin; at its end they get the process's CPUs. Yields the CPU, or None where threads
    cannot be pinned (not Linux): then nothing changes.
    """
    tids = thread_ids()
    if not hasattr(os, "sched_setaffinity") or not tids:
        yield None
        return
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    before: dict[int, set[int]] = {}
    for tid in tids:
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
        except OSError:  # the thread ended meanwhile
            continue
    try:
        yield cpu
    finally:
        for tid in thread_ids():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, before.get(tid, allowed))


# --------------------------------------------------------------------------- reporting


@dataclass
class Row:
    """One line of the table: a value in its unit, and its ratio to the group's reference."""

    group: str
    name: str
    value: float | None
    unit: str
    ratio: float | None = None
    ratio_to: str = ""
    note: str = ""


@dataclass
class Goal:
    """``value op limit``: ``op`` is "<=", "<" or ">="; ``value`` None means not measured."""

    text: str
    value: float | None
    op: str
    limit: float
    unit: str = "x"
    why_missing: str = ""
    error: str = ""  # the measured thing failed (a test run that did not pass): a MISS
    #: The margin the goal must keep inside its limit to be met (0.15: 15 %), for a goal that
    #: a noisy machine must not flip; 0: within the limit is enough.
    margin_needed: float = 0.0

    @property
    def margin(self) -> float | None:
        """How far inside its limit the value is, as a fraction of the limit (0.15: 15 % to
        spare); negative when the limit is missed, None when not measured."""
        if self.value is None or not self.limit:
            return None
        if self.op == ">=":
            return self.value / self.limit - 1.0
        return 1.0 - self.value / self.limit

    @property
    def status(self) -> str:
        """PASS, MISS, or N/A (not measured). A value within its limit by less than the
        margin it needs is a MISS that says so: the goal is not met."""
        if self.value is None:
            return "N/A"
        if self.error:
            return "MISS"
        passed = {
            "<=": self.value <= self.limit,
            "<": self.value < self.limit,
            ">=": self.value >= self.limit,
        }[self.op]
        if not passed:
            return "MISS"
        margin = self.margin
        if self.margin_needed and margin is not None and margin < self.margin_needed:
            return f"MISS (margin < {self.margin_needed:.0%})"
        return "PASS"


def path_rows(group: str, paths: Sequence[Path], reference: Path | None) -> list[Row]:
    """Rows for measured or missing paths, each with its median µs per call and, when a
    reference ran, the median of its per-round ratios to it."""
    rows = []
    for path in paths:
        if not path.available or not path.samples:
            rows.append(Row(group, path.name, None, "", note=f"missing: {path.missing}"))
            continue
        ratio = None
        if reference is not None and reference.samples and path is not reference:
            ratio = median_ratio(path.samples, reference.samples)
        micros = statistics.median(path.samples) * 1e6
        rows.append(Row(
            group, path.name, micros, "µs/call", ratio,
            reference.name if ratio is not None and reference else "", path.note,
        ))
    return rows


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "x":
        return f"{value:.2f}×"
    digits = 1 if abs(value) < 1000 else 0
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip() if unit not in ("", "µs/call") else text


def markdown_table(rows: Sequence[Row]) -> str:
    lines = ["| group | path | µs/call or value | ratio | to | note |", "|---|---|---:|---:|---|---|"]
    for row in rows:
        value = fmt(row.value) if row.unit == "µs/call" else fmt(row.value, row.unit)
        lines.append(
            f"| {row.group} | {row.name} | {value} | {fmt(row.ratio, 'x')} | {row.ratio_to} "
            f"| {row.note} |"
        )
    return "\n".join(lines)


def margin_text(goal: Goal) -> str:
    """The goal's margin in %, with the margin it needs when it needs one: "19 %", "4 % (needs
    15 %)", "—" when not measured."""
    if goal.margin is None:
        return "—"
    text = f"{goal.margin:.0%}"
    return f"{text} (needs {goal.margin_needed:.0%})" if goal.margin_needed else text


def goals_table(goals: Sequence[Goal]) -> str:
    lines = ["| goal | measured | limit | status | margin |", "|---|---:|---:|---|---:|"]
    for goal in goals:
        measured = fmt(goal.value, goal.unit) if goal.value is not None else (goal.why_missing or "—")
        if goal.error:
            measured += f" ({goal.error})"
        lines.append(f"| {goal.text} | {measured} | {goal.op} {fmt(goal.limit, goal.unit)} | "
                     f"{goal.status} | {margin_text(goal)} |")
    return "\n".join(lines)


def csv_text(rows: Sequence[Row], goals: Sequence[Goal], machine: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["kind", "group", "name", "value", "unit", "ratio", "ratio_to", "note"])
    for key, value in machine.items():
        writer.writerow(["machine", "", key, value, "", "", "", ""])
    for row in rows:
        writer.writerow([
            "row", row.group, row.name, "" if row.value is None else f"{row.value:.3f}", row.unit,
            "" if row.ratio is None else f"{row.ratio:.4f}", row.ratio_to, row.note,
        ])
    for goal in goals:
        writer.writerow([
            "goal", "", goal.text, "" if goal.value is None else f"{goal.value:.4f}", goal.unit,
            "", f"{goal.op} {goal.limit:g}", f"{goal.status}; margin {margin_text(goal)}"
            if goal.value is not None else f"N/A: {goal.why_missing}",
        ])
    return out.getvalue()
