"""OpenTelemetry spans for every tool call, by the GenAI conventions (docs/design.md#tracing).

``instrument(runner)`` adds one observer to a :class:`~agentkit.ToolRunner`; from then on the
policy's events (:mod:`agentkit.policy.events`, docs/design.md#events) become spans:

- each ``call``/``acall`` is one span ``execute_tool {tool}``, kind INTERNAL, with
  ``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``
  (the call id: the host's own, or the runner's), ``gen_ai.tool.type = "function"``,
  ``agentkit.effect``, ``agentkit.attempts`` and ``agentkit.replayed``. A failed result sets
  ``error.type`` to its stable code and the status to ERROR; ``approval_required`` is not an
  error (the call did what it should: it asked). Its parent is the caller's current span, so a
  framework's or an MCP server's span contains the tool's;
- each handler attempt is a child span ``agentkit.attempt {tool}`` (``agentkit.attempt.number``,
  ``agentkit.outcome``, ``agentkit.handler_ran``, and ``agentkit.handler_still_running`` when
  the boundary gave up on a handler that is still running: a timed-out write that may land);
  a write's attempt whose handler marked the moment its write took effect
  (:func:`agentkit.boundary.concurrency.mark_landed`) before the attempt ended carries the
  event ``agentkit.write_landed`` at that moment: the write that landed although its caller
  never heard of it;
- each status lookup is a child span ``agentkit.status_lookup {tool}``
  (``agentkit.status_lookup.number``, ``agentkit.outcome`` = ``done``/``not_done``/``unknown``);
- what ran nothing shows as span events on the call's span: ``agentkit.replay`` (a stored result
  was returned), ``agentkit.refused`` (a refusal before anything ran: preflight, budget, a busy
  claim), ``agentkit.approval_asked`` and ``agentkit.approval_settled`` (with
  ``agentkit.approval.id``, also set on the span, so the asking call and the approving one can
  be joined);
- ``approve``/``aapprove`` make an ``execute_tool {tool}`` span too, with
  ``agentkit.operation = "approve"``: approving is when the irreversible write executes, so its
  attempt (and any status lookup) are that span's children; approving again shows the
  ``agentkit.replay`` event and no attempt. ``deny``/``adeny`` execute nothing: one span
  ``agentkit.deny {tool}`` (no ``gen_ai.operation.name``), whose status is ERROR only when the
  denial itself failed (an unknown id, a store that could not be used), not when it settled the
  approval as ``forbidden`` or found it already settled.

No argument value and no result text is recorded by default. With ``record_content=True`` the
call span gets ``gen_ai.tool.call.result``: the result's ``data`` exactly as the model saw it,
that is after redaction and truncation; for a tool registered with ``redact=False`` nothing is
recorded (its text was never scanned for secrets). Arguments are never recorded.

Span times are the policy's own event times (``time.monotonic()``, turned into wall-clock
nanoseconds once, when ``instrument`` is called). An observer never changes a result: the
runner logs and ignores one that raises, and this one ends its spans whatever the order of the
events it sees.

``instrument`` returns an :class:`Instrumentation`: ``uninstrument()`` (or leaving its ``with``
block) stops it; instrumenting the same runner again replaces it. :func:`span_tree`,
:func:`spans_frame` and :func:`plot_spans` read finished spans back (an SDK exporter's) as
text, a DataFrame and a timeline, with no ids or times, for notebooks and tests.

Needs the optional extra ``otel`` (``pip install 'agentkit[otel]'``: ``opentelemetry-api``).
Without an SDK configured the spans are OpenTelemetry's no-op spans and cost almost nothing.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from agentkit.policy.events import CallEvent
from agentkit.policy.runner import ToolRunner

__all__ = [
    "Instrumentation",
    "instrument",
    "plot_spans",
    "span_tree",
    "spans_frame",
]

# The conventions' attribute names, as plain strings: the semantic-conventions package marks
# its GenAI constants as moved, and a name on the wire must not depend on where a constant lives.
OPERATION_NAME = "gen_ai.operation.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"
EXECUTE_TOOL = "execute_tool"
FUNCTION = "function"
# agentkit's own: why a call ran as it did.
EFFECT = "agentkit.effect"
ATTEMPTS = "agentkit.attempts"
REPLAYED = "agentkit.replayed"
OPERATION = "agentkit.operation"
OUTCOME = "agentkit.outcome"
APPROVAL_ID = "agentkit.approval.id"
ATTEMPT_NUMBER = "agentkit.attempt.number"
LOOKUP_NUMBER = "agentkit.status_lookup.number"
HANDLER_RAN = "agentkit.handler_ran"
STILL_RUNNING = "agentkit.handler_still_running"
WRITE_LANDED = "agentkit.write_landed"  # an event on a write's attempt span

#: The instrumentation scope the spans are reported under.
SCOPE = "agentkit"

_LOOKUP_ANSWERS = frozenset({"done", "not_done"})
#: What a ``call_ended`` result may say without being an error.
_NOT_AN_ERROR = frozenset({"approval_required"})


@dataclass
class _Open:
    """The spans of one call that have not ended yet."""

    span: Span
    context: Context
    operation: str
    tool: str
    attempts: dict[int, Span] = field(default_factory=dict)
    lookups: dict[int, Span] = field(default_factory=dict)
    settled: bool = False  # deny: an approval_settled event was seen


@final
class Instrumentation:
    """The handle :func:`instrument` returns: ``uninstrument()`` takes the observer off the
    runner again (spans still open are ended, marked ``agentkit.outcome = "uninstrumented"``).
    Also a context manager: ``with instrument(runner): ...`` instruments for the block only.
    ``off`` is True for OpenTelemetry's own no-op tracer, which never records: then nothing is
    observed at all, so the runner builds no events for it."""

    def __init__(self, runner: ToolRunner, tracer: Tracer, record_content: bool) -> None:
        # A weak reference: the runner holds this observer, and one instrumentation per runner
        # is remembered (_CURRENT) only as long as the runner itself lives.
        self._runner = weakref.ref(runner)
        self._registry = runner.registry
        self.record_content = record_content
        self._tracer = tracer
        # OpenTelemetry's own no-op tracer never records: nothing is observed (see instrument).
        self.off = type(tracer) is trace.NoOpTracer
        # open calls by the runner's own identity of each (its serial, and the call id for
        # events that carry no serial): two calls a host gave one call_id never share spans
        self._open: dict[tuple[int, str], _Open] = {}
        self._lock = threading.Lock()
        # time.monotonic() -> wall-clock nanoseconds, fixed once.
        self._epoch_ns = time.time_ns() - time.monotonic_ns()
        self._remove: Callable[[], None] | None = None

    @property
    def runner(self) -> ToolRunner | None:
        """The instrumented runner (None once it has been garbage-collected)."""
        return self._runner()

    @property
    def active(self) -> bool:
        """True until :meth:`uninstrument` is called."""
        return self._remove is not None

    def uninstrument(self) -> None:
        """Stop making spans for this runner (again: nothing happens)."""
        remove, self._remove = self._remove, None
        if remove is None:
            return
        remove()
        runner = self._runner()
        if runner is not None and _CURRENT.get(runner) is self:
            del _CURRENT[runner]
        with self._lock:
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            entry.span.set_attribute(OUTCOME, "uninstrumented")
            self._close(entry, None)

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstrument()

    def _start(self, remove: Callable[[], None]) -> None:
        self._remove = remove

    # ------------------------------------------------------------------ the observer

    def __call__(self, event: CallEvent) -> None:
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event)

    def _ns(self, at: float) -> int:
        return self._epoch_ns + int(at * 1e9)

    def _current(self, event: CallEvent) -> _Open | None:
        if not self._open:  # no call of ours is open (each call's events come in order)
            return None
        entry = self._open.get((event.serial, event.call_id))
        if entry is not None:
            self._learn(entry, event)
        return entry

    @staticmethod
    def _learn(entry: _Open, event: CallEvent) -> None:
        """approve/deny learn the tool from the approval record, after they started."""
        if event.tool and event.tool != entry.tool:
            entry.tool = event.tool
            entry.span.update_name(span_name(entry.operation, event.tool))
            entry.span.set_attribute(TOOL_NAME, event.tool)
        if event.effect:
            entry.span.set_attribute(EFFECT, event.effect)

    def _call_started(self, event: CallEvent) -> None:
        parent = None  # the caller's current context: its span, if any, is the parent
        name = span_name(event.operation, event.tool)
        if event.operation == "deny":
            attributes: dict[str, Any] = {TOOL_NAME: event.tool}
        else:
            attributes = {OPERATION_NAME: EXECUTE_TOOL, TOOL_NAME: event.tool,
                          TOOL_TYPE: FUNCTION}
        attributes[TOOL_CALL_ID] = event.call_id
        attributes[OPERATION] = event.operation
        if event.effect:
            attributes[EFFECT] = event.effect
        span = self._tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL,
                                       attributes=attributes, start_time=self._ns(event.at))
        if not span.is_recording():  # a no-op tracer, or a sampler that dropped this call:
            return  # its attempts and lookups would not be recorded either
        entry = _Open(span, trace.set_span_in_context(span), event.operation, event.tool)
        with self._lock:
            earlier = self._open.get((event.serial, event.call_id))
            self._open[(event.serial, event.call_id)] = entry
        if earlier is not None:  # a call that never ended (events fed out of order)
            earlier.span.set_attribute(OUTCOME, "unfinished")
            self._close(earlier, None)

    def _call_ended(self, event: CallEvent) -> None:
        if not self._open:
            return
        with self._lock:
            entry = self._open.pop((event.serial, event.call_id), None)
        if entry is None:
            return
        span = entry.span
        self._learn(entry, event)
        result: Mapping[str, Any] = event.result if event.result is not None else {}
        ok = result.get("ok") is True
        code = "ok" if ok else str(result.get("error") or event.outcome or "unknown")
        attributes: dict[str, Any] = {ATTEMPTS: _int(result.get("attempts")),
                                      REPLAYED: result.get("replayed") is True, OUTCOME: code}
        status = None
        if not ok and code not in _NOT_AN_ERROR and not (entry.operation == "deny" and entry.settled):
            attributes[ERROR_TYPE] = code
            status = Status(StatusCode.ERROR, code)
        if ok and self.record_content and entry.operation != "deny":
            data = result.get("data")
            if isinstance(data, str) and self._redacted(entry.tool):
                attributes[TOOL_CALL_RESULT] = data
        span.set_attributes(attributes)
        self._close(entry, status, self._ns(event.at))

    def _redacted(self, tool: str) -> bool:
        """Content is recorded only for a tool whose output the boundary redacts."""
        spec = self._registry.get(tool)
        return spec is not None and spec.redact

    def _close(self, entry: _Open, status: Status | None, end: int | None = None) -> None:
        for child in [*entry.attempts.values(), *entry.lookups.values()]:
            child.set_attribute(OUTCOME, "unfinished")
            child.end(end_time=end)
        entry.attempts.clear()
        entry.lookups.clear()
        if status is not None:
            entry.span.set_status(status)
        entry.span.end(end_time=end)

    def _child_started(self, event: CallEvent) -> None:
        entry = self._current(event)
        if entry is None:
            return
        lookup = event.kind == "lookup_started"
        name = f"agentkit.status_lookup {entry.tool}" if lookup else f"agentkit.attempt {entry.tool}"
        attributes: dict[str, str | int] = {
            TOOL_NAME: entry.tool, LOOKUP_NUMBER if lookup else ATTEMPT_NUMBER: event.number}
        span = self._tracer.start_span(name, context=entry.context, kind=SpanKind.INTERNAL,
                                       attributes=attributes, start_time=self._ns(event.at))
        (entry.lookups if lookup else entry.attempts)[event.number] = span

    def _attempt_ended(self, event: CallEvent) -> None:
        entry = self._current(event)
        if entry is None:
            return
        span = entry.attempts.pop(event.number, None)
        if span is None:
            return
        attributes: dict[str, Any] = {OUTCOME: event.outcome, HANDLER_RAN: event.handler_ran}
        attempt = event.attempt  # read now, never kept
        if attempt is not None and attempt.running:
            attributes[STILL_RUNNING] = True
        landed = attempt.landed_at if attempt is not None else None
        if landed is not None and landed <= event.at and event.effect != "read":
            span.add_event(WRITE_LANDED, timestamp=self._ns(landed))
        if event.outcome != "ok":
            attributes[ERROR_TYPE] = event.outcome
            span.set_status(Status(StatusCode.ERROR, event.outcome))
        span.set_attributes(attributes)
        span.end(end_time=self._ns(event.at))

    def _lookup_ended(self, event: CallEvent) -> None:
        entry = self._current(event)
        if entry is None:
            return
        span = entry.lookups.pop(event.number, None)
        if span is None:
            return
        span.set_attribute(OUTCOME, event.outcome)
        if event.outcome not in _LOOKUP_ANSWERS:
            span.set_attribute(ERROR_TYPE, event.outcome or "unknown")
            span.set_status(Status(StatusCode.ERROR, event.outcome or "unknown"))
        span.end(end_time=self._ns(event.at))

    def _mark(self, event: CallEvent) -> None:
        """What ran nothing: an event on the call's span."""
        entry = self._current(event)
        if entry is None:
            return
        attributes: dict[str, Any] = {}
        if event.outcome:
            attributes[OUTCOME] = event.outcome
        if event.approval_id:
            attributes[APPROVAL_ID] = event.approval_id
            entry.span.set_attribute(APPROVAL_ID, event.approval_id)
        if event.kind in ("approval_settled", "replay"):  # a deny that settled, or found settled
            entry.settled = True
        entry.span.add_event(f"agentkit.{event.kind}", attributes, timestamp=self._ns(event.at))


_HANDLERS: dict[str, Callable[[Instrumentation, CallEvent], None]] = {
    "call_started": Instrumentation._call_started,
    "call_ended": Instrumentation._call_ended,
    "attempt_started": Instrumentation._child_started,
    "attempt_ended": Instrumentation._attempt_ended,
    "lookup_started": Instrumentation._child_started,
    "lookup_ended": Instrumentation._lookup_ended,
    "replay": Instrumentation._mark,
    "refused": Instrumentation._mark,
    "approval_asked": Instrumentation._mark,
    "approval_settled": Instrumentation._mark,
}

#: One instrumentation per runner: instrumenting again (a notebook cell run twice) replaces it.
_CURRENT: weakref.WeakKeyDictionary[ToolRunner, Instrumentation] = weakref.WeakKeyDictionary()


def span_name(operation: str, tool: str) -> str:
    """The name of the span an entry point makes: ``execute_tool {tool}``, or for a denial
    (which executes nothing) ``agentkit.deny {tool}``."""
    return f"agentkit.deny {tool}" if operation == "deny" else f"{EXECUTE_TOOL} {tool}"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def instrument(
    runner: ToolRunner,
    *,
    tracer_provider: TracerProvider | None = None,
    record_content: bool = False,
) -> Instrumentation:
    """Make OpenTelemetry spans for every call of ``runner`` (see this module's docstring).

    ``tracer_provider``: where the spans go (default: the global one, set by
    ``opentelemetry.trace.set_tracer_provider`` or by an auto-instrumentation agent).
    ``record_content``: also record the result's ``data`` the model saw (redacted, truncated);
    never the arguments. Returns an :class:`Instrumentation`; its ``uninstrument()`` stops it.
    Instrumenting a runner again replaces its earlier instrumentation, so a notebook cell run
    twice does not make every span twice.
    """
    if not isinstance(runner, ToolRunner):
        raise TypeError(f"instrument() takes a ToolRunner, not {type(runner).__name__}")
    if not isinstance(record_content, bool):
        raise TypeError("record_content must be True or False")
    tracer = trace.get_tracer(SCOPE, _version(), tracer_provider=tracer_provider)
    earlier = _CURRENT.get(runner)
    if earlier is not None:
        earlier.uninstrument()
    handle = Instrumentation(runner, tracer, record_content)
    # OpenTelemetry's own no-op tracer never records: the runner need not build events for it.
    handle._start(_nothing_to_remove if handle.off else runner.add_observer(handle))
    _CURRENT[runner] = handle
    return handle


def _nothing_to_remove() -> None:
    """The remover of an instrumentation that observes nothing (a no-op tracer)."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:  # the distribution's name, not the import name (PyPI's `agentkit` is another project)
        return version("agentkit-boundary")
    except PackageNotFoundError:  # a source checkout that was never installed
        return "0"


# ---------------------------------------------------------------------- reading spans back
# For the notebook and tests: finished spans (an SDK exporter's ReadableSpan objects, or
# anything with the same fields) shown without ids or times, so a stored output is stable.

#: The columns of :func:`spans_frame`: what a reader compares, never an id or a time.
FRAME_COLUMNS = ["call", "span", "parent", "kind", "status", "error.type", "outcome",
                 "attempts", "replayed", "events"]


def _order(spans: list[Any]) -> list[Any]:
    """By start; of spans that start together (a read's call and its first attempt), the one
    that lasts longer (the parent) first."""
    return sorted(spans, key=lambda s: (s.start_time or 0, -(s.end_time or 0)))


def _children(spans: list[Any]) -> tuple[list[Any], dict[Any, list[Any]]]:
    ids = {s.context.span_id for s in spans}
    roots: list[Any] = []
    children: dict[Any, list[Any]] = {}
    for span in _order(spans):
        parent = span.parent.span_id if span.parent is not None else None
        if parent in ids:
            children.setdefault(parent, []).append(span)
        else:
            roots.append(span)
    return roots, children


def _status(span: Any) -> str:
    return str(span.status.status_code.name)


def _label(span: Any) -> str:
    attributes = span.attributes or {}
    parts = [span.name, f"[{_status(span)}]"]
    for key in (ERROR_TYPE, OUTCOME, ATTEMPTS, REPLAYED, HANDLER_RAN, STILL_RUNNING):
        if key in attributes:
            parts.append(f"{key}={attributes[key]}")
    text = " ".join(parts)
    for event in span.events:
        outcome = (event.attributes or {}).get(OUTCOME)
        text += f"\n· event {event.name}" + (f" ({outcome})" if outcome else "")
    return text


def span_tree(spans: Any) -> str:
    """The spans as an indented text tree, parents first, siblings in the order they started;
    each line shows the name, the status and agentkit's attributes (no ids, no times)."""
    roots, children = _children(list(spans))
    lines: list[str] = []

    def walk(span: Any, prefix: str, branch: str, rest: str) -> None:
        first, *more = _label(span).splitlines()
        lines.append(prefix + branch + first)
        below = prefix + rest  # under this span: its events, then its children
        kids = children.get(span.context.span_id, [])
        lines.extend(below + ("│   " if kids else "    ") + line for line in more)
        for n, child in enumerate(kids):
            last = n == len(kids) - 1
            walk(child, below, "└── " if last else "├── ", "    " if last else "│   ")

    for root in roots:
        walk(root, "", "", "")
    return "\n".join(lines)


def spans_frame(spans: Any) -> Any:
    """The spans as a pandas DataFrame (:data:`FRAME_COLUMNS`), one row per span in the order
    they started; ``call`` numbers the calls (1, 2, ...) instead of showing their ids."""
    import pandas as pd

    ordered = _order(list(spans))
    by_id = {s.context.span_id: s for s in ordered}
    names = {span_id: s.name for span_id, s in by_id.items()}
    calls: dict[str, int] = {}
    rows = []
    for span in ordered:
        attributes = span.attributes or {}
        owner = span  # the call this span belongs to: itself, or its nearest call ancestor
        while TOOL_CALL_ID not in (owner.attributes or {}) and owner.parent is not None \
                and owner.parent.span_id in by_id:
            owner = by_id[owner.parent.span_id]
        call_id = (owner.attributes or {}).get(TOOL_CALL_ID)
        call = calls.setdefault(str(call_id), len(calls) + 1) if call_id is not None else ""
        parent = span.parent.span_id if span.parent is not None else None
        rows.append({
            "call": call,
            "span": span.name,
            "parent": names.get(parent, "") if parent is not None else "",
            "kind": span.kind.name,
            "status": _status(span),
            "error.type": attributes.get(ERROR_TYPE, ""),
            "outcome": attributes.get(OUTCOME, ""),
            "attempts": attributes.get(ATTEMPTS, ""),
            "replayed": attributes.get(REPLAYED, ""),
            "events": ", ".join(e.name.removeprefix("agentkit.") for e in span.events),
        })
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def plot_spans(spans: Any, *, ax: Any = None, title: str = "") -> Any:
    """The spans as a timeline: one row per span, in tree order (children indented under
    their call), a bar from its start to its end, red where its status is ERROR, ``…`` after
    an attempt whose handler was still running when the boundary gave up on it, and a star
    where a write **lands** (the attempt's ``agentkit.write_landed`` event), as in
    :func:`agentkit.lessons.timeline.plot_timeline`.

    Schematic, like :func:`agentkit.lessons.timeline.plot_timeline`: starts, ends and landings
    are placed at evenly spaced positions in the order they happened, so the picture is the
    same on every run; the x axis shows order, not duration. Returns the matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    roots, children = _children(list(spans))
    rows: list[tuple[Any, int]] = []

    def walk(span: Any, depth: int) -> None:
        rows.append((span, depth))
        for child in children.get(span.context.span_id, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    landings = [(y, event.timestamp) for y, (span, _) in enumerate(rows)
                for event in span.events if event.name == WRITE_LANDED]
    moments = sorted({t for span, _ in rows for t in (span.start_time, span.end_time)}
                     | {t for _, t in landings})
    place = {t: n for n, t in enumerate(moments)}
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.0))
    colours = {"call": "#1565c0", "step": "#2e7d32", "error": "#c62828"}
    for y, (span, depth) in enumerate(rows):
        start, end = place[span.start_time], place[span.end_time]
        kind = "error" if _status(span) == "ERROR" else ("call" if depth == 0 else "step")
        ax.barh(y, max(end - start, 0.3), left=start, height=0.5, color=colours[kind])
        if (span.attributes or {}).get(STILL_RUNNING):
            ax.text(end + 0.1, y, "… still running", va="center", fontsize=8)
    for y, at in landings:
        ax.plot([place[at]], [y], marker="*", markersize=14, color=_LANDS, linestyle="none",
                markeredgecolor="black", markeredgewidth=0.5)
        ax.annotate("write lands", (place[at], y), xytext=(0, -13), textcoords="offset points",
                    ha="center", va="top", fontsize=8)  # under the bar, not on it
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([("└ " * min(depth, 1)) + span.name for span, depth in rows])
    ax.invert_yaxis()
    ax.set_xticks([])
    ax.set_xlabel("order of events (schematic, not to scale)")
    ax.set_xlim(-0.5, len(moments) + 1.5)
    labels = {"call": "tool call", "step": "attempt / status lookup", "error": "status ERROR"}
    handles: list[Any] = [Patch(color=colours[k], label=labels[k]) for k in labels]
    if landings:
        handles.append(Line2D([], [], marker="*", markersize=12, color=_LANDS, linestyle="none",
                              markeredgecolor="black", markeredgewidth=0.5, label="write lands"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if title:
        ax.set_title(title)
    return ax


#: The colour of the "write lands" star: its shape and label are the timeline's
#: (agentkit.lessons.timeline), its colour not, because blue here is the call's bar.
_LANDS = "#f9a825"
