"""Fault injection: wrap a tool's handler so it fails on purpose, and count its real calls.

An error code alone cannot show that a write ran twice; a counter on the handler can. Every
wrapper here is a :class:`Fault`: it counts how often the boundary really called the handler
(``calls``), and how often the wrapped function itself ran (``inner_calls``). Blocking faults
wait on a ``threading.Event``, never on the wall clock's luck: ``release()`` lets them go, and
the result is the same on every run.

    >>> from agentkit import faults
    >>> flaky = faults.fail_times(search, 2)      # ConnectionError twice, then the real search
    >>> stuck = faults.hang(search)               # blocks until stuck.release()
    >>> faults.release_all()                      # end of a notebook or test: nothing stays hung

Each wrapper keeps the wrapped handler's name, docstring and signature (``functools``
wrapping, with ``__wrapped__``), so the registry derives the same JSON Schema for the faulty
tool as for the healthy one: the model cannot tell them apart, exactly as in production.

A blocked fault waits at most ``max_block`` seconds (30 by default) even if nobody releases
it, so a forgotten one can never hang a notebook or a test run for good.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentkit.boundary.concurrency import mark_landed
from agentkit.boundary.errors import NotApplied
from agentkit.boundary.redaction import render_value

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "FAKE_API_KEY",
    "FAKE_PASSWORD",
    "MAX_BLOCK_SECONDS",
    "CommitThenTimeout",
    "Denied",
    "Deny",
    "FailTimes",
    "Fault",
    "Hang",
    "HugeOutput",
    "LeakSecret",
    "SlowLookup",
    "commit_then_timeout",
    "count_calls",
    "deny",
    "fail_times",
    "hang",
    "huge_output",
    "leak_secret",
    "release_all",
    "slow_lookup",
]

log = logging.getLogger("agentkit")

#: The longest a blocking fault waits for ``release()`` before it carries on by itself.
MAX_BLOCK_SECONDS = 30.0

#: Fake secrets for :func:`leak_secret`: shaped like real ones, so the redactor must catch them.
FAKE_API_KEY = "sk-" + "x" * 24
FAKE_PASSWORD = "hunter2-fake"

_live: weakref.WeakSet[Fault] = weakref.WeakSet()
_live_lock = threading.Lock()


class Fault:
    """A handler wrapper that counts its calls; the base class just passes every call through.

    ``calls``        how many times the boundary called this handler (a failed call counts);
    ``inner_calls``  how many times the wrapped function itself was invoked;
    ``release()``    lets blocked calls go on (safe to call any number of times);
    ``wait_for_calls(n)`` waits, on an event, until ``n`` calls have come in.

    A fault is also a context manager that releases itself on exit.
    """

    kind = "count_calls"
    __name__: str  # the wrapped handler's, copied by functools.update_wrapper

    def __init__(self, fn: Callable[..., Any], *, max_block: float = MAX_BLOCK_SECONDS) -> None:
        if not callable(fn):
            raise TypeError("a fault wraps a callable handler")
        # updated=(): copy the name, docstring and __wrapped__, but not the wrapped object's
        # __dict__ (when fn is itself a Fault, its counters must not leak into this one).
        functools.update_wrapper(self, fn, updated=())
        self.fn = fn
        self.max_block = float(max_block)
        self._counted = threading.Condition(threading.Lock())
        self._calls = 0
        self._inner_calls = 0
        self._released = threading.Event()
        with _live_lock:
            _live.add(self)

    # ---- counting

    @property
    def calls(self) -> int:
        with self._counted:
            return self._calls

    @property
    def inner_calls(self) -> int:
        with self._counted:
            return self._inner_calls

    def wait_for_calls(self, n: int = 1, timeout: float = 10.0) -> bool:
        """Block until at least ``n`` calls came in; False if ``timeout`` passed first."""
        with self._counted:
            return self._counted.wait_for(lambda: self._calls >= n, timeout)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._counted:
            self._calls += 1
            number = self._calls
            self._counted.notify_all()
        return self._fault(number, args, kwargs)

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """What call number ``number`` (1-based) does; subclasses inject their failure here."""
        return self._inner(args, kwargs)

    def _inner(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self._counted:
            self._inner_calls += 1
        return self.fn(*args, **kwargs)

    # ---- blocking

    def release(self) -> None:
        """Let every blocked call (and every later one) go on. Idempotent."""
        self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def _block(self) -> None:
        if not self._released.wait(self.max_block):
            log.warning("%s(%s): not released within %ss; carrying on",
                        self.kind, self.__name__, self.max_block)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<{self.kind}({self.__name__}) calls={self.calls}>"


class FailTimes(Fault):
    """Raise for the first ``n`` calls, then pass through.

    ``after_call=True`` runs the wrapped function first and raises afterwards: the write took
    effect but its answer was lost on the way back, the case a blind retry turns into two writes.
    """

    kind = "fail_times"

    def __init__(
        self,
        fn: Callable[..., Any],
        n: int,
        exc: type[BaseException] | BaseException = ConnectionError,
        *,
        after_call: bool = False,
    ) -> None:
        super().__init__(fn)
        if not isinstance(n, int) or n < 0:
            raise ValueError("n must be an integer >= 0")
        self.n = n
        self.exc = exc
        self.after_call = after_call

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if number > self.n:
            return self._inner(args, kwargs)
        if self.after_call:
            self._inner(args, kwargs)
        if isinstance(self.exc, BaseException):
            raise self.exc
        raise self.exc(f"injected fault: call {number} of the first {self.n} fails")


class Denied(NotApplied, PermissionError):
    """The downstream service refused before it acted: ``forbidden``, and known to have done
    nothing (:class:`~agentkit.NotApplied`), so a write's key is freed without a lookup."""


class Deny(Fault):
    """Every call raises :class:`Denied`, a ``PermissionError`` (the downstream service said
    no) that is also ``NotApplied``; fn never runs."""

    kind = "deny"

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise Denied("injected fault: the downstream service denied the request")


class Hang(Fault):
    """Every call blocks until ``release()``, then runs the wrapped function."""

    kind = "hang"

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._block()
        return self._inner(args, kwargs)


class SlowLookup(Hang):
    """A status lookup that blocks until ``release()``: the caller's question goes unanswered."""

    kind = "slow_lookup"


class CommitThenTimeout(Fault):
    """Every call runs the wrapped function (the write lands), then blocks until ``release()``.

    The caller times out although the write has happened: the timeout proves nothing about a
    failure. ``committed`` is set once the first write has landed; ``commits`` counts them.
    """

    kind = "commit_then_timeout"

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__(fn)
        self.committed = threading.Event()
        self._commits = 0

    @property
    def commits(self) -> int:
        with self._counted:
            return self._commits

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        value = self._inner(args, kwargs)
        mark_landed()  # the trace learns when the write took effect, before the hang
        with self._counted:
            self._commits += 1
        self.committed.set()
        self._block()
        return value


class HugeOutput(Fault):
    """Runs the wrapped function, then returns its result padded to exactly ``chars`` characters."""

    kind = "huge_output"

    def __init__(self, fn: Callable[..., Any], chars: int = 1_000_000) -> None:
        super().__init__(fn)
        if not isinstance(chars, int) or chars < 1:
            raise ValueError("chars must be an integer >= 1")
        self.chars = chars

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        head = render_value(self._inner(args, kwargs)) + "\n"
        filler = "log: everything is fine\n"
        repeats = self.chars // len(filler) + 1
        return (head + filler * repeats)[: self.chars]


class LeakSecret(Fault):
    """Runs the wrapped function, then returns its result followed by two fake secrets."""

    kind = "leak_secret"

    def _fault(self, number: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        text = render_value(self._inner(args, kwargs))
        return f"{text}\ndebug: connected with key {FAKE_API_KEY} and password={FAKE_PASSWORD}"


# ---------------------------------------------------------------- the names tests and notebooks use

# Each lower-case name is its class (whose ``kind`` it is): ``faults.fail_times(search, 2)``
# builds a FailTimes, with the class's signature and docstring. One definition per fault.
count_calls = Fault
fail_times = FailTimes
deny = Deny
hang = Hang
slow_lookup = SlowLookup
commit_then_timeout = CommitThenTimeout
huge_output = HugeOutput
leak_secret = LeakSecret


def release_all() -> int:
    """Release every fault still alive in this process; returns how many there were."""
    with _live_lock:
        alive = list(_live)
    for fault in alive:
        fault.release()
    return len(alive)

