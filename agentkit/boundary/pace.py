"""A tool's pace: whether its sync handler answers an async caller quickly enough to be
waited for on the event loop's own thread.

An async caller hands a sync handler to a worker thread; the handing is cheap, but waking the
event loop when the answer comes back is not: a write to the loop's self-pipe, a turn of the
loop, another step of the awaiting task. For a handler that runs in a few microseconds that
is most of the call (and under the GIL the loop could do little meanwhile: the handler's own
Python runs on the same lock). So while a tool is *quick* (its last attempt waited for ran,
handler and rendering, within :data:`QUICK_SECONDS`), the loop's thread waits for the answer
right where it is, for at most :data:`QUICK_WAIT_SECONDS`. Past that bound the wait goes on
as an ``await`` under the tool's deadline, holding neither the loop nor a thread, and the
tool is no longer quick, so its next calls are awaited from the start (and overlap) until an
attempt shows it quick again. The most one call ever holds the loop is that bound.

One registry entry has one :class:`Pace`. Threads and tasks may update it at once: it is one
plain attribute, and the last attempt to end wins (either answer is safe, only faster or
slower).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkit.boundary.attempt import Attempt

__all__ = ["QUICK_SECONDS", "QUICK_WAIT_SECONDS", "Pace"]

#: A tool is quick while its last attempt waited for ran (handler and rendering, on the
#: worker) within this many seconds.
QUICK_SECONDS = 0.0001
#: The longest the loop's thread waits for a quick tool's answer before it gives the loop back
#: (the wait then goes on as an await): the most one call holds the loop.
QUICK_WAIT_SECONDS = 0.0005


class Pace:
    """Whether a tool's sync handler answers quickly (see the module docstring). A new tool
    counts as quick until an attempt says otherwise."""

    __slots__ = ("quick",)

    def __init__(self) -> None:
        self.quick = True

    def note(self, attempt: Attempt) -> None:
        """Learn from an attempt that has been waited for: quick if it ran within
        :data:`QUICK_SECONDS`; not quick if it took longer, had not returned, or never ran."""
        started, finished = attempt.started_at, attempt.finished_at
        self.quick = (started is not None and finished is not None
                      and finished - started <= QUICK_SECONDS)

    def __repr__(self) -> str:
        return f"<Pace {'quick' if self.quick else 'slow'}>"
