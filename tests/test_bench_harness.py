"""The benchmark harness's logic: interleaving, per-round ratios, calibration, goals.

No timing is asserted: a fake clock drives the runner, so every number here is exact.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_harness():
    spec = importlib.util.spec_from_file_location("bench_harness", ROOT / "benchmarks" / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_harness"] = module  # dataclasses look the module up while building
    spec.loader.exec_module(module)
    return module


h = _load_harness()


class FakeClock:
    """Each call of a path advances time by that path's cost times the current round's speed."""

    def __init__(self) -> None:
        self.now = 0.0
        self.speed = 1.0

    def __call__(self) -> float:
        return self.now

    def cost(self, seconds: float):
        def call() -> None:
            self.now += seconds * self.speed

        return call


def test_ratio_is_the_median_of_per_round_ratios_not_the_ratio_of_medians():
    a = [2.0, 4.0, 30.0]  # the machine slowed down in round 3 for both paths
    b = [1.0, 1.0, 10.0]
    assert h.per_round_ratios(a, b) == [2.0, 4.0, 3.0]
    assert h.median_ratio(a, b) == 3.0
    assert h.median_ratio(a, b) != pytest.approx(4.0 / 1.0)  # median(a) / median(b)


def test_ratio_skips_empty_rounds_and_gives_none_without_any():
    assert h.per_round_ratios([1.0, 2.0], [0.0, 1.0]) == [2.0]
    assert h.median_ratio([], []) is None
    assert h.median_ratio([1.0], [0.0]) is None


@pytest.mark.parametrize(
    ("target", "loops", "elapsed", "expected"),
    [(0.02, 1, 0.001, 20), (0.02, 4, 0.04, 2), (0.02, 1, 1.0, 1), (0.02, 3, 0.0, 30)],
)
def test_loop_count_makes_a_sample_last_about_the_target(target, loops, elapsed, expected):
    assert h.loops_for(target, loops, elapsed) == expected


def test_rounds_interleave_every_path_and_ratios_hold_while_speed_drifts():
    clock = FakeClock()
    order: list[str] = []

    def path(name: str, seconds: float) -> object:
        tick = clock.cost(seconds)

        def call() -> None:
            order.append(name)
            tick()

        return h.Path(name, fn=call)

    a, b = path("A", 0.002), path("B", 0.001)
    speeds = iter([1.0, 3.0, 0.5])
    collections = []

    def collect() -> None:  # runs before every sample: change the machine's speed per round
        collections.append(1)
        if len(collections) % 2 == 1:
            clock.speed = next(speeds)

    runner = h.Runner(rounds=3, target_seconds=0.01, warmup_seconds=0.0, clock=clock, collect=collect)
    runner.run([a, b])
    assert a.loops == 5 and b.loops == 10  # calibrated per path
    # After calibration (one probe call each), rounds go A B, A B, A B.
    timed = order[2:]
    assert timed == ["A"] * 5 + ["B"] * 10 + ["A"] * 5 + ["B"] * 10 + ["A"] * 5 + ["B"] * 10
    assert a.samples == pytest.approx([0.002, 0.006, 0.001])
    assert h.median_ratio(a.samples, b.samples) == pytest.approx(2.0)


def test_a_path_that_fails_to_build_or_run_is_missing_with_its_reason():
    def broken():
        raise ModuleNotFoundError("No module named 'agents'")

    gone = h.build("peer", broken)
    assert not gone.available and "ModuleNotFoundError" in gone.missing
    wrong = h.build("peer", lambda: lambda: 41, check=lambda r: r == 42)
    assert not wrong.available and "unexpected result: 41" in wrong.missing
    runner = h.Runner(rounds=2, clock=FakeClock())
    assert runner.run([gone, wrong]) == []
    rows = h.path_rows("g", [gone, wrong], None)
    assert [r.note.split(":")[0] for r in rows] == ["missing", "missing"]
    assert all(r.value is None for r in rows)


def test_async_paths_run_on_one_loop():
    loops: list[object] = []  # the loops themselves, so no id is reused

    async def call() -> int:
        import asyncio

        running = asyncio.get_running_loop()
        if all(running is not seen for seen in loops):
            loops.append(running)
        return 1

    path = h.build("async", lambda: call, is_async=True, check=lambda r: r == 1)
    runner = h.Runner(rounds=2, target_seconds=0.0, warmup_seconds=0.0)
    runner.run([path])
    runner.close()
    assert len(path.samples) == 2
    assert len(loops) == 2  # the check in build() ran on its own loop, every sample on one more


@pytest.mark.parametrize(
    ("value", "op", "limit", "error", "status"),
    [(1.2, "<=", 1.25, "", "PASS"), (1.3, "<=", 1.25, "", "MISS"), (50.0, "<", 50, "", "MISS"),
     (0.5, ">=", 0.4, "", "PASS"), (0.3, ">=", 0.4, "", "MISS"), (None, "<=", 1, "", "N/A"),
     (10.0, "<", 60, "exit 1", "MISS")],
)
def test_goal_status(value, op, limit, error, status):
    assert h.Goal("g", value, op, limit, error=error).status == status


def test_rows_carry_the_reference_ratio_and_tables_name_every_row():
    ref = h.Path("floor", fn=lambda: None, samples=[1e-6, 2e-6, 1e-6])
    fast = h.Path("kit", fn=lambda: None, samples=[2e-6, 4e-6, 3e-6])
    rows = h.path_rows("sync", [ref, fast, h.missing("peer", "not installed")], ref)
    assert rows[0].ratio is None and rows[0].value == pytest.approx(1.0)
    assert rows[1].ratio == pytest.approx(2.0) and rows[1].ratio_to == "floor"
    table = h.markdown_table(rows)
    assert "| sync | peer | — |" in table and "missing: not installed" in table
    goals = [h.Goal("kit ≤ 2.5× floor", rows[1].ratio, "<=", 2.5)]
    assert "| kit ≤ 2.5× floor | 2.00× | <= 2.50× | PASS |" in h.goals_table(goals)
    text = h.csv_text(rows, goals, {"cpu count": 2})
    assert "machine,,cpu count,2" in text and "goal,,kit ≤ 2.5× floor,2.0000" in text
