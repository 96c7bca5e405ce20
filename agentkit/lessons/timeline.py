"""A picture of one call's life, drawn from the runner's trace.

    plot_timeline(cell.runner);          # or plot_timeline(runner.trace, title="…");

One row per kind of step (handler attempts, status lookups, replays, approvals, refusals):

- each handler attempt is a horizontal bar from its start to the moment the caller stopped
  waiting for it, coloured by its outcome;
- where an attempt ended ``outcome_unknown`` (a timeout), a vertical line marks where the
  **caller gives up**;
- where a write's caller never heard of it (a timeout, a dropped connection), a star marks
  where the **write lands** (``landed_at``: when the handler marked its commit, else when it
  really returned), often before the caller gives up: a timeout proves nothing;
- status lookups are diamonds labelled ``done``/``not_done``/``unknown``, replays a marker
  labelled ``replayed``, approvals and refusals a marker labelled with their outcome.

**Schematic by default.** Real times in a demo are tiny (milliseconds) and jitter from run to
run, so by default (``schematic=True``) every event is placed at evenly spaced positions in
the order it really happened: the picture is the same on every run, which a lesson (and a
checked notebook) needs. The x axis then carries no numbers and its label says it is
schematic: positions show the order of events, not their durations. Pass
``schematic=False`` for real times, in seconds since the first step started.

matplotlib is imported inside the function: ``import agentkit.lessons.timeline`` costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from agentkit.policy.trace import TraceRecord

__all__ = ["ROWS", "plot_timeline"]

#: The rows, top to bottom: a step kind and its label on the y axis.
ROWS = (
    ("approval", "approval"),
    ("attempt", "handler attempt"),
    ("status_lookup", "status lookup"),
    ("replay", "replay"),
    ("refused", "refused"),
)

_OUTCOME_COLOURS = {"ok": "#2e7d32", "outcome_unknown": "#ef6c00"}
_FAILED_COLOUR = "#c62828"
_GIVE_UP_COLOUR = "#6a1b9a"
_LAND_COLOUR = "#1565c0"
_LOOKUP_COLOUR = "#00838f"
_REPLAY_COLOUR = "#5d4037"
_OTHER_COLOUR = "#616161"
_BAR_HEIGHT = 0.5


def plot_timeline(
    trace: Any,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    schematic: bool = True,
) -> Axes:
    """Draw the records of ``trace`` (a :class:`~agentkit.policy.trace.Trace`, or a ``ToolRunner``
    whose ``.trace`` is used) on ``ax`` (a new figure when None) and return the Axes.

    ``schematic=True`` (the default) places events evenly in their real order instead of at
    their real times: deterministic pictures for lessons. ``schematic=False`` uses real
    times, in seconds since the first record started.
    """
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    records = _records_of(trace)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.2))

    if not records:
        ax.text(0.5, 0.5, "no steps recorded", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        ax.set_xlabel(_xlabel(schematic))
        if title:
            ax.set_title(title)
        return ax

    x = _positions(records, schematic)
    kinds = [kind for kind, _ in ROWS if any(r.step == kind for r in records)]
    kinds += sorted({r.step for r in records} - set(kinds))  # a step kind this module predates
    row_of = {kind: len(kinds) - 1 - i for i, kind in enumerate(kinds)}  # first row on top
    labels = dict(ROWS)

    legend: dict[str, Any] = {}
    span = max(max(x.values()) - min(x.values()), 1e-9)
    nudge = span * 0.012

    for i, record in enumerate(records):
        y = row_of[record.step]
        if record.step == "attempt":
            start, end = x[(i, "start")], x[(i, "end")]
            colour = _OUTCOME_COLOURS.get(record.outcome, _FAILED_COLOUR)
            ax.barh(y, max(end - start, nudge), left=start, height=_BAR_HEIGHT, color=colour,
                    edgecolor="black", linewidth=0.6)
            ax.annotate(f"attempt {record.attempt}: {record.outcome}", (start, y + _BAR_HEIGHT / 2),
                        xytext=(0, 3), textcoords="offset points", fontsize=8, va="bottom")
            legend.setdefault(
                f"handler attempt: {record.outcome}",
                Patch(facecolor=colour, edgecolor="black", label=f"handler attempt: {record.outcome}"),
            )
            if record.outcome == "outcome_unknown":
                ax.axvline(end, color=_GIVE_UP_COLOUR, linestyle="--", linewidth=1.4)
                ax.annotate("caller gives up", (end, y - _BAR_HEIGHT / 2), xytext=(3, -10),
                            textcoords="offset points", fontsize=8, color=_GIVE_UP_COLOUR)
                legend.setdefault("caller gives up", Line2D(
                    [], [], color=_GIVE_UP_COLOUR, linestyle="--", label="caller gives up"))
            if (i, "land") in x:
                land = x[(i, "land")]
                ax.plot([end, land], [y, y], color=_LAND_COLOUR, linestyle=":", linewidth=1.2)
                ax.plot([land], [y], marker="*", markersize=14, color=_LAND_COLOUR, linestyle="none")
                ax.annotate("write lands", (land, y), xytext=(0, -16), textcoords="offset points",
                            fontsize=8, ha="center", color=_LAND_COLOUR)
                legend.setdefault("write lands", Line2D(
                    [], [], marker="*", markersize=12, color=_LAND_COLOUR, linestyle="none",
                    label="write lands"))
        else:
            at = x[(i, "point")]
            if record.step == "status_lookup":
                marker, colour, text = "D", _LOOKUP_COLOUR, record.outcome
                name = "status lookup"
            elif record.step == "replay":
                marker, colour, text = "o", _REPLAY_COLOUR, "replayed"
                name = "replayed (nothing ran)"
            else:
                marker, colour, text = "s", _OTHER_COLOUR, record.outcome
                name = f"{labels.get(record.step, record.step)} (nothing ran)"
            ax.plot([at], [y], marker=marker, markersize=9, color=colour, linestyle="none")
            ax.annotate(text, (at, y), xytext=(0, 8), textcoords="offset points", fontsize=8,
                        ha="center", color=colour)
            legend.setdefault(name, Line2D([], [], marker=marker, markersize=8, color=colour,
                                           linestyle="none", label=name))

    ax.set_yticks([row_of[k] for k in kinds], [labels.get(k, k) for k in kinds])
    ax.set_ylim(-0.8, len(kinds) - 0.05)
    low, high = min(x.values()), max(x.values())
    ax.set_xlim(low - span * 0.08, high + span * 0.12)
    ax.set_xlabel(_xlabel(schematic))
    if schematic:
        ax.set_xticks([])
    ax.grid(axis="x", linestyle=":", alpha=0.4)
    ax.legend(handles=list(legend.values()), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)
    ax.set_title(title if title is not None else _default_title(records))
    if isinstance(ax.figure, Figure):  # a subfigure's layout is its root figure's business
        ax.figure.tight_layout()
    return ax


def _records_of(trace: Any) -> list[TraceRecord]:
    inner = getattr(trace, "trace", None)
    if inner is not None and hasattr(inner, "records"):
        trace = inner  # a ToolRunner
    if not hasattr(trace, "records"):
        raise TypeError(f"plot_timeline needs a Trace or a ToolRunner, not {type(trace).__name__}")
    return list(trace.records)


def _xlabel(schematic: bool) -> str:
    if schematic:
        return "order of events (schematic: evenly spaced, not to scale in time)"
    return "seconds since the call started"


def _default_title(records: list[TraceRecord]) -> str:
    tools = list(dict.fromkeys(r.tool for r in records))
    return "The life of a call: " + ", ".join(tools)


def _positions(records: list[TraceRecord], schematic: bool) -> dict[tuple[int, str], float]:
    """The x of every event: ``(i, "start")``/``(i, "end")`` for attempt ``i``, ``(i, "land")``
    when its write landed after the caller stopped waiting, ``(i, "point")`` for other steps.

    Real: seconds since the first record started. Schematic: 0, 1, 2 … in real order (ties
    keep the order the trace recorded them in, so the picture never depends on jitter in a
    tie).
    """
    events: list[tuple[float, int, str]] = []
    for i, record in enumerate(records):
        if record.step == "attempt":
            events.append((record.started_at, i, "start"))
            events.append((record.ended_at, i, "end"))
            landed = record.landed_at
            if landed is not None and record.effect != "read" and (
                landed > record.ended_at or record.outcome != "ok"
            ):  # a write whose caller did not hear about it: show when it really landed
                events.append((landed, i, "land"))
        else:
            # A lookup or a replay is a moment for the reader: when its answer came.
            events.append((record.ended_at, i, "point"))
    origin = min(r.started_at for r in records)
    if not schematic:
        return {(i, what): t - origin for t, i, what in events}
    order = sorted(range(len(events)), key=lambda n: (events[n][0], n))
    return {(events[n][1], events[n][2]): float(rank) for rank, n in enumerate(order)}
