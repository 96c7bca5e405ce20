"""Run once per key: the store's claim → run → complete, with recovery, as policy steps.

A retry is only safe if the caller can tell "not done" from "done, but the answer was lost".
:func:`once` runs an operation at most once per idempotency key: it claims the key (one store
step), runs the operation under the claim, and completes the key with the result (another
store step); a completed key replays its result, and a stale claim (its owner died
mid-write) is settled by the status lookup before anything runs again. The decisions inside
each store step (replay, conflict, in progress, take over) are the store's
(:mod:`agentkit.policy.stores.algorithm`); what happens between the steps, and after a
failure, is the policy's, written here once.

Like every policy step it performs no I/O: it asks for store steps and for the operation
(:mod:`agentkit.policy.effects`), so the runner's writes run it on both drivers. A store sits
below the policy and imports none of it (docs/design.md#layers): a store's own
:meth:`~agentkit.policy.stores.algorithm.StoreBase.run_once` is :func:`run_once` below,
performed by the sync driver, which this module hands to the stores when it is imported
(:func:`~agentkit.policy.stores.algorithm.set_run_once`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from agentkit.boundary.errors import ErrorCode, failure
from agentkit.policy.drivers import run_store_steps
from agentkit.policy.effects import Invoke, Steps, StoreStep
from agentkit.policy.stores.algorithm import (
    TAKEN_OVER,
    Claim,
    Result,
    StoreBase,
    StoreError,
    hold,
    is_live,
    is_ok,
    let_go,
    set_run_once,
)

__all__ = ["invoke", "once", "run_once"]

store_log = logging.getLogger("agentkit.policy.stores")

_UNKNOWN = ErrorCode.OUTCOME_UNKNOWN.value


def once(
    store: Any,
    key: str,
    fingerprint: str | None,
    lease_seconds: float | None,
    *,
    run: Callable[[Claim], Steps[Result]],
    recover: Callable[[], Steps[Result | None]] | None = None,
    full_sync: bool = False,
    keep_unknown_live: bool = False,
    on_claim: Callable[[str], None] | None = None,
    interrupted: Callable[[Claim], Steps[bool]] | None = None,
    completes_itself: bool = False,
) -> Steps[Result]:
    """The store's claim → run → complete, with recovery (docs/design.md#stores): ``run`` at
    most once per key. Each store step is one atomic section of the store (interface B).

    A store that fails before the claim gives ``busy`` (nothing ran); one that fails after
    the run ``outcome_unknown``. ``run`` raising an ``Exception`` frees the key. Anything else
    (an interrupt, a cancellation, a loop that ends) means the caller went away mid-run:
    ``interrupted(claim)`` settles the claim, and says True when it stays live in this
    process until the run's attempt really returns (its handler may still be running: a
    claim held by a running attempt is never stale); without ``interrupted`` the claim is
    kept and marked stale for the lookup to settle. The exception then goes on. With
    ``keep_unknown_live`` an ``outcome_unknown`` run keeps its claim live in this process
    until its attempt hands it back (``store.abandon``). With ``completes_itself`` an ok run
    has completed the key already, in its own transaction (a transactional write): nothing
    more is written.
    """
    if not isinstance(key, str):
        raise TypeError("key must be a str")
    ttl = max(store.claim_ttl_seconds, lease_seconds or 0.0)
    try:
        options = {"may_take_over": recover is not None, "full_sync": full_sync}
        if completes_itself:  # its effect commits with its result: the claim needs no flush
            options["flush"] = False
        decision = yield StoreStep("claim", (key, fingerprint, ttl), options)
    except StoreError as exc:
        store_log.error("could not claim key %r, nothing ran (busy): %s", key, exc)
        return failure(ErrorCode.BUSY)
    if isinstance(decision, dict):
        return decision
    kind, mine = decision
    hold(mine.token)
    keep_live = False
    try:
        if on_claim is not None:
            try:
                yield Invoke(lambda: on_claim(mine.token))
            except GeneratorExit:
                raise
            except BaseException:
                yield from _quietly(StoreStep("drop", (key, mine)), key, "the claim stays until its lease")
                raise
        if kind == TAKEN_OVER:
            assert recover is not None
            outcome = yield from _recover(key, mine, recover, full_sync)
            if outcome is not None:
                return outcome
        try:
            result = yield from _run(key, mine, run, full_sync, completes_itself)
        except (GeneratorExit, Exception):
            raise
        except BaseException:  # the caller went away mid-run: the outcome is unknown
            if interrupted is None:
                yield from _quietly(StoreStep("abandon_claim", (key, mine)), key,
                                    "the claim keeps its lease")
            else:
                keep_live = yield from interrupted(mine)
            raise
        keep_live = keep_unknown_live and _is_unknown(result) and is_live(mine.token)
        return result
    finally:
        if not keep_live:
            let_go(mine.token)


def _recover(key: str, mine: Claim, recover: Callable[[], Steps[Result | None]],
             full_sync: bool) -> Steps[Result | None]:
    """Ask the status lookup: a result to return, or None when the operation should run."""
    abandon = StoreStep("abandon_claim", (key, mine))
    try:
        receipt = yield from recover()
    except GeneratorExit:
        raise
    except Exception:
        store_log.warning("status lookup for key %r raised; outcome unknown", key, exc_info=True)
        yield from _quietly(abandon, key, "the claim keeps its lease")
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
    except BaseException:
        yield from _quietly(abandon, key, "the claim keeps its lease")
        raise
    if receipt is None:
        return None  # not done: the caller runs the operation under this claim
    if not is_ok(receipt):
        yield from _quietly(abandon, key, "the claim keeps its lease")
        return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
    try:
        yield StoreStep("complete", (key, mine, receipt, full_sync))
    except StoreError as exc:
        # The lookup found the write done: say so; the next caller asks the lookup again.
        store_log.error("could not record the receipt of key %r: %s", key, exc)
    return receipt


def _run(key: str, mine: Claim, run: Callable[[Claim], Steps[Result]], full_sync: bool,
         completes_itself: bool = False) -> Steps[Result]:
    try:
        result = yield from run(mine)
    except GeneratorExit:
        raise
    except Exception:
        yield from _quietly(StoreStep("drop", (key, mine)), key, "the claim stays until its lease")
        raise
    if is_ok(result):
        if completes_itself:
            return result
        try:
            yield StoreStep("complete", (key, mine, result, full_sync))
        except StoreError as exc:
            store_log.error("key %r ran but its result could not be recorded, outcome unknown: %s",
                            key, exc)
            yield from _quietly(StoreStep("abandon_claim", (key, mine)), key, "the claim keeps its lease")
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
    elif _is_unknown(result):
        pass  # it may still be running: the claim stays until its lease or owner ends
    else:
        yield from _quietly(StoreStep("drop", (key, mine)), key, "the claim stays until its lease")
        if not isinstance(result, dict):
            raise TypeError(f"operation must return a dict, not {type(result).__name__}")
    return result


def _quietly(step: StoreStep, key: str, consequence: str) -> Steps[None]:
    """Tidy a claim after the operation; a failing store is logged, never raised."""
    try:
        yield step
    except StoreError as exc:
        store_log.error("could not update the claim on key %r (%s): %s", key, consequence, exc)


def _is_unknown(result: Any) -> bool:
    return isinstance(result, dict) and result.get("error") == _UNKNOWN


def invoke(function: Callable[[], Any]) -> Steps[Any]:
    """A plain function given from outside, as one step (``run_once``'s operation)."""
    return (yield Invoke(function))


# ---------------------------------------------------------------------- a store's run_once


def run_once(
    store: StoreBase,
    key: str,
    operation: Callable[[], Result],
    fingerprint: str | None = None,
    *,
    recover: Callable[[], Result | None] | None = None,
    lease_seconds: float | None = None,
    full_sync: bool = False,
    on_claim: Callable[[str], None] | None = None,
) -> Result:
    """``store.run_once(...)`` (:meth:`~agentkit.policy.stores.algorithm.StoreBase.run_once`):
    :func:`once` over plain functions, performed right here by the sync driver."""

    def run(mine: Claim) -> Steps[Any]:
        return invoke(operation)

    def ask() -> Steps[Any]:
        assert recover is not None
        return invoke(recover)

    return run_store_steps(store, once(
        store, key, fingerprint, lease_seconds, run=run,
        recover=None if recover is None else ask, full_sync=full_sync,
        keep_unknown_live=on_claim is not None, on_claim=on_claim,
    ))


set_run_once(run_once)
