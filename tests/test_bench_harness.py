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


def test_best_ratio_is_the_ratio_of_each_paths_fastest_round():
    a = [3.0, 2.5, 9.0]  # its best round is the second
    b = [2.0, 2.2, 1.9]  # its best round is the third: not the same round
    assert h.best_ratio(a, b) == pytest.approx(2.5 / 1.9)
    assert h.median_ratio(a, b) == pytest.approx(1.5)  # the other reading of the same rounds
    assert h.best_ratio([], b) is None and h.best_ratio(a, [0.0]) is None


@pytest.mark.parametrize(
    ("value", "op", "limit", "margin", "shown"),
    [(1.0, "<=", 1.25, 0.2, "20%"), (1.5, "<=", 1.25, -0.2, "-20%"), (0.9, ">=", 0.45, 1.0, "100%"),
     (0.3, ">=", 0.6, -0.5, "-50%"), (None, "<=", 1.0, None, "—")],
)
def test_goal_margin_is_how_far_inside_its_limit(value, op, limit, margin, shown):
    goal = h.Goal("g", value, op, limit)
    assert goal.margin == (None if margin is None else pytest.approx(margin))
    row = h.goals_table([goal]).splitlines()[-1]
    assert row.endswith(f" | {shown} |")


@pytest.mark.parametrize(
    ("value", "op", "limit", "status", "shown"),
    [(1.0, "<=", 1.3, "PASS", "23% (needs 15%)"),
     (1.25, "<=", 1.3, "MISS (margin < 15%)", "4% (needs 15%)"),  # within its limit: not met
     (1.4, "<=", 1.3, "MISS", "-8% (needs 15%)"),
     (0.5, ">=", 0.45, "MISS (margin < 15%)", "11% (needs 15%)"),
     (None, "<=", 1.3, "N/A", "—")],
)
def test_a_goal_that_needs_a_margin_is_met_only_that_far_inside_its_limit(
    value, op, limit, status, shown
):
    goal = h.Goal("g", value, op, limit, margin_needed=0.15)
    assert goal.status == status
    assert h.goals_table([goal]).splitlines()[-1] == (
        f"| g | {h.fmt(value, 'x')} | {op} {limit:.2f}× | {status} | {shown} |"
        if value is not None else f"| g | — | {op} {limit:.2f}× | N/A | — |"
    )
    text = h.csv_text([], [goal], {})
    assert text.splitlines()[-1].endswith(f"{status}; margin {shown}" if value is not None
                                          else "N/A: ")


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
    assert "| kit ≤ 2.5× floor | 2.00× | <= 2.50× | PASS | 20% |" in h.goals_table(goals)
    text = h.csv_text(rows, goals, {"cpu count": 2})
    assert "machine,,cpu count,2" in text and "goal,,kit ≤ 2.5× floor,2.0000" in text
    assert text.splitlines()[-1].endswith("PASS; margin 20%")


def _load_run():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "benchmarks" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (puts the repository on sys.path, as a script run does)
    return module


def test_the_sync_floor_is_the_ping_pong_read_both_ways_and_the_old_floor_stays_a_goal(
    monkeypatch,
):
    run = _load_run()
    ping = h.Path("floor: two-lock ping-pong with a waiting thread", fn=print,
                  samples=[10.0, 20.0, 14.0])
    pool = h.Path("floor: ThreadPoolExecutor.submit().result(timeout)", fn=print,
                  samples=[12.0, 30.0, 16.0])
    invoke = h.Path("agentkit: invoke_tool (sync handler)", fn=print, samples=[15.0, 22.0, 20.0])
    read = h.Path("agentkit: ToolRunner.call, read", fn=print, samples=[16.0, 24.0, 30.0])
    monkeypatch.setattr(run.suites, "sync_paths", lambda: [ping, pool, invoke, read])
    pinned = [h.Path("floor: two-lock ping-pong with a waiting thread", fn=print)]
    monkeypatch.setattr(run.suites, "one_cpu_paths", lambda: pinned)
    references = []
    groups = []

    def group(title, paths, reference):
        references.append(reference)
        groups.append((title, paths))
        return paths

    goals: list = []
    run.sync_goals(group, goals)
    assert run.find([ping, pool], references[0]) is ping
    # then the same floor and paths with every thread on one CPU: rows, no goal of their own
    assert groups[1] == ("sync, every thread on one CPU", pinned) and references[1] == references[0]
    assert not any("one CPU" in goal.text for goal in goals)
    found = {goal.text: goal.value for goal in goals}
    assert found["sync: invoke_tool ≤ 1.25× two-lock ping-pong"] == pytest.approx(20 / 14)
    assert found["sync: invoke_tool ≤ 1.25× two-lock ping-pong (best rounds)"] == pytest.approx(1.5)
    assert found["sync: ToolRunner.call read ≤ 1.35× two-lock ping-pong"] == pytest.approx(1.6)
    assert found["sync: ToolRunner.call read ≤ 1.35× two-lock ping-pong (best rounds)"] == (
        pytest.approx(1.6))
    assert found["sync: invoke_tool ≤ 1.25× ThreadPoolExecutor"] == pytest.approx(1.25)
    assert found["sync: invoke_tool ≤ 1.35× ThreadPoolExecutor (issue 19)"] == pytest.approx(1.25)


def test_a_ratio_goal_that_needs_a_margin_says_so():
    run = _load_run()
    a = h.Path("agentkit: ainvoke_tool (sync handler)", fn=print, samples=[1.25, 1.2, 1.28])
    b = h.Path("agentkit: invoke_tool", fn=print, samples=[1.0, 1.0, 1.0])
    goal = run.ratio_goal("async: x ≤ 1.3× y", [a, b], "agentkit: ainvoke_tool (sync",
                          "agentkit: invoke_tool", "<=", 1.3, margin=run.MARGIN)
    assert goal.text == "async: x ≤ 1.3× y, margin ≥ 15%"
    assert goal.value == pytest.approx(1.25) and goal.status == "MISS (margin < 15%)"
    gone = run.ratio_goal("async: x ≤ 1.3× y", [b], "agentkit: ainvoke_tool (sync",
                          "agentkit: invoke_tool", "<=", 1.3, margin=run.MARGIN)
    assert gone.status == "N/A" and "not measured" in gone.why_missing


def test_on_one_cpu_pins_every_thread_and_gives_each_its_cpus_back():
    import os
    import threading

    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs Linux and two CPUs to tell a pinned thread from a free one")
    allowed = os.sched_getaffinity(0)
    go = threading.Event()
    ready = threading.Event()
    ids: dict[str, int] = {}

    def waiting(name: str) -> None:
        ids[name] = threading.get_native_id()
        ready.set()
        go.wait(30)

    before = threading.Thread(target=waiting, args=("before",), daemon=True)
    before.start()
    assert ready.wait(30)
    ready.clear()
    try:
        with h.on_one_cpu() as cpu:
            assert cpu == min(allowed)
            inside = threading.Thread(target=waiting, args=("inside",), daemon=True)
            inside.start()
            assert ready.wait(30)
            for name in ("before", "inside"):
                assert os.sched_getaffinity(ids[name]) == {cpu}
            assert os.sched_getaffinity(0) == {cpu}
        for name in ("before", "inside"):  # started inside the block: the process's CPUs
            assert os.sched_getaffinity(ids[name]) == allowed
        assert os.sched_getaffinity(0) == allowed
    finally:
        go.set()
        before.join(30)


def test_a_commands_log_is_named_relative_to_the_repository_or_as_given(tmp_path):
    """``--out`` may name any folder: a log outside the repository is named as it is (it
    crashed the slow rows once), one inside it without the machine's path."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.run import shown_path
    finally:
        sys.path.remove(str(ROOT))
    assert shown_path(ROOT / "benchmarks" / "results" / "nbval.log") == "benchmarks/results/nbval.log"
    outside = tmp_path / "bench" / "nbval.log"
    assert shown_path(outside) == str(outside.resolve())
