"""The effects the policy asks for: the whole vocabulary between the steps and the drivers.

The policy (:mod:`agentkit.policy.steps`) is written as generators that *yield* these small
requests and receive each one's answer (or its exception, thrown in at the ``yield``); the
drivers (:mod:`agentkit.policy.drivers`) perform them, one for sync callers and one for async
callers. Nothing here does anything: each class only names a request (docs/design.md#drivers).
They are made on every step of every call, so they are plain slotted classes (a frozen
dataclass pays an ``object.__setattr__`` per field); nobody changes one after it is yielded.

Events (:mod:`agentkit.policy.events`) are not effects: nothing answers them, so a step tells
the runner's observers itself, at once, from the driver's frame (the caller's thread or task).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentkit.boundary.attempt import Attempt
from agentkit.boundary.registry import RegisteredTool

__all__ = [
    "PROTECT",
    "AskLookup",
    "Invoke",
    "LateSteps",
    "Pause",
    "Protect",
    "RunAttempt",
    "Steps",
    "StoreStep",
    "WhenDone",
]

T = TypeVar("T")

#: A generator of steps: yields effects, is sent each effect's answer, returns T.
Steps = Generator[Any, Any, T]


class RunAttempt:
    """One handler attempt through the boundary. Answer: ``(result dict, Attempt)``.

    The policy's own record of a call (:class:`agentkit.policy.calls.Call`) is one: a call
    asks for an attempt of itself, and no request object is made per attempt.

    ``attempt`` is the :class:`~agentkit.boundary.attempt.Attempt` the driver runs, made by
    the policy before it asks (None: the driver makes one). The steps keep it whatever
    happens at the ``yield``: when the caller goes away mid-attempt (an interrupt, a
    cancelled task, a loop that ends) the handler may still be running, and the policy must
    keep the key's claim live until it really returns (docs/design.md#drivers)."""

    __slots__ = ("arguments", "attempt", "call_id", "entry")

    def __init__(self, entry: RegisteredTool, arguments: dict[str, Any], call_id: str,
                 attempt: Attempt | None = None) -> None:
        self.entry = entry
        self.arguments = arguments
        self.call_id = call_id
        self.attempt = attempt

    def __repr__(self) -> str:
        return f"RunAttempt({self.entry.spec.name!r}, call_id={self.call_id!r})"


@dataclass(slots=True)
class AskLookup:
    """Run the tool's status lookup as one bounded attempt (``probe`` receives its value or
    error; ``finish`` renders a receipt). Answer: "finished", "timeout" or "busy"."""

    lookup: Callable[..., Any]
    arguments: dict[str, Any]
    timeout: float
    probe: Attempt
    finish: Callable[[Any], Any]


@dataclass(slots=True)
class Pause:
    """Wait ``seconds`` (the injected ``sleep``, or its async twin). Answer: None."""

    seconds: float


@dataclass(slots=True)
class StoreStep:
    """One atomic store step, ``store.<name>(*args, **kwargs)`` (or its async twin
    ``store.a<name>``). Answer: what the step returns; raises ``StoreError``."""

    name: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Invoke:
    """Call a plain function given from outside (``run_once``'s operation). Answer: its value."""

    function: Callable[[], Any]


#: Steps made once an attempt has returned, that ask only for store steps (``WhenDone``).
LateSteps = Callable[[], "Steps[Any]"]


@dataclass(slots=True)
class WhenDone:
    """Perform ``then`` once ``attempt``'s handler has really returned: now if it has;
    otherwise later, from wherever it returns, where a failing store is only logged.
    ``then`` is one store step, or a function that makes steps asking only for store steps
    (:data:`LateSteps`: what the attempt did decides them, so they are made when it has
    returned). Answer: None (a ``StoreError`` of a step done now is thrown in)."""

    attempt: Attempt
    then: StoreStep | LateSteps


class Protect:
    """From here on the call does bookkeeping (claims, results, approvals) that must reach its
    end even if the caller goes away: the async driver finishes the call in a task of its own
    that a cancelled caller cannot cancel. The sync driver has nothing to do."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PROTECT"


PROTECT = Protect()
