"""The timeline picture: the right artists, labelled, for a write that lands and then times out;
schematic by default, so the same trace always gives the same picture."""

from __future__ import annotations

import time

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt

import agentkit
from agentkit import matrix
from agentkit.lessons.timeline import plot_timeline
from agentkit.policy.trace import Trace


@pytest.fixture(autouse=True)
def instant_backoff():
    agentkit.set_testing(True)
    yield
    agentkit.set_testing(False)
    plt.close("all")


@pytest.fixture(scope="module")
def commit_then_timeout():
    """One play of the cell; waits until the released handler has really returned."""
    agentkit.set_testing(True)
    cell = matrix.play("timeout_outcome_unknown", "reversible_write")
    attempt = next(r for r in cell.runner.trace if r.step == "attempt")
    deadline = time.monotonic() + 5
    while attempt.landed_at is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert attempt.landed_at is not None
    return cell


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _legend(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_commit_then_timeout_shows_give_up_landing_and_lookup(commit_then_timeout):
    ax = plot_timeline(commit_then_timeout.runner)  # a ToolRunner is accepted
    assert isinstance(ax, matplotlib.axes.Axes)
    texts = _texts(ax)
    assert "caller gives up" in texts
    assert "write lands" in texts
    assert "done" in texts  # the status lookup's answer
    assert "attempt 1: outcome_unknown" in texts
    legend = _legend(ax)
    assert "handler attempt: outcome_unknown" in legend
    assert "caller gives up" in legend
    assert any(label.startswith("write lands") for label in legend)
    assert "status lookup" in legend
    assert [t.get_text() for t in ax.get_yticklabels()] == ["handler attempt", "status lookup"]
    # schematic: the label says order, never "seconds" (the axis carries no times)
    assert ax.get_xlabel() == "order of events (schematic: evenly spaced, not to scale in time)"
    assert "seconds" not in ax.get_xlabel() and ax.get_xticks().size == 0
    assert ax.get_title() == "The life of a call: save_draft"
    assert len(ax.patches) == 1  # one handler attempt, one bar


def test_schematic_places_events_evenly_in_real_order(commit_then_timeout):
    ax = plot_timeline(commit_then_timeout.runner.trace, title="commit, then timeout")
    assert ax.get_title() == "commit, then timeout"
    [bar] = ax.patches
    assert (bar.get_x(), bar.get_width()) == (0.0, 2.0)  # attempt: events 0 → 2
    give_up = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert give_up and list(give_up[0].get_xdata()) == [2.0, 2.0]
    lookup = next(line for line in ax.get_lines() if line.get_marker() == "D")
    star = next(line for line in ax.get_lines() if line.get_marker() == "*")
    assert list(star.get_xdata()) == [1.0]  # the write landed before the caller gave up
    assert list(lookup.get_xdata()) == [3.0]  # and the lookup found it afterwards
    again = plot_timeline(commit_then_timeout.runner.trace, title="commit, then timeout")
    assert [p.get_x() for p in again.patches] == [p.get_x() for p in ax.patches]


def test_real_times_are_seconds_from_the_first_step(commit_then_timeout):
    _fig, ax = plt.subplots()
    out = plot_timeline(commit_then_timeout.runner, ax=ax, schematic=False)
    assert out is ax
    [bar] = ax.patches
    assert bar.get_x() == pytest.approx(0.0, abs=0.05)
    assert bar.get_width() == pytest.approx(matrix.SHORT_TIMEOUT, abs=0.15)
    assert ax.get_xlabel() == "seconds since the call started"


def test_replays_and_approvals_are_labelled():
    cell = matrix.play("same_write_repeated", "irreversible_write")
    ax = plot_timeline(cell.runner)
    texts = _texts(ax)
    assert "replayed" in texts and "approval_required" in texts and "attempt 1: ok" in texts
    assert "caller gives up" not in texts and "write lands" not in texts
    assert [t.get_text() for t in ax.get_yticklabels()] == ["approval", "handler attempt", "replay"]


def test_an_empty_trace_still_draws(monkeypatch):
    ax = plot_timeline(Trace())
    assert "no steps recorded" in _texts(ax)
    with pytest.raises(TypeError):
        plot_timeline(object())
